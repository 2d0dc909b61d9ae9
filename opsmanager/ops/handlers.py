"""kopf wiring of the ops engine: one daemon per EtcdOpsRequest drives its reconciles; deletion resumes.

Why a daemon: a request runs for a minute or more and must patch its status as it goes (kopf applies a
handler's ``patch`` only when the handler returns). The daemon calls :meth:`Engine.reconcile` — which runs
one step and persists it — then waits the delay it asked for, until the request is finished. kopf starts a
daemon for every existing request when the operator starts, so a restarted operator picks up where it was,
and it cancels the daemon (and runs the delete handler) when the request is deleted.

Nothing registers at import: :func:`register` adds the handlers to the registry the operator builds
(:func:`opsmanager.operator.build_registry`), closed over the one Kubernetes client the operator process holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import kopf

from opsmanager import kube, metrics
from opsmanager.api import constants
from opsmanager.api import pause as pause_api
from opsmanager.kube import cache
from opsmanager.ops import engine
from opsmanager.ops.steps import pause

log = logging.getLogger("opsmanager.ops")

# The shortest time between the starts of two passes over one request that a watch event asked for (a step's own
# delay is not shortened nor lengthened by it). See drive_ops_request.
REWAKE_INTERVAL = 0.25


def _wakeups(client: kube.Kube, namespace: str, db_name: str, *,
             request: str) -> contextlib.AbstractContextManager[asyncio.Event]:
    """A subscription to changes of the Etcd's objects, when the client has watch caches; else an event nobody
    sets (each wait then lasts its whole delay). The request's own changes do not wake it: it made them (a status
    write per reconcile), and waking on them would turn a step that rewrites its message into a busy loop."""
    if (wakeups := cache.wakeups_of(client)) is not None:
        def accept(_etype: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> bool:
            return not (obj.get("kind") == constants.OPS_KIND and (obj.get("metadata") or {}).get("name") == request)
        return wakeups.subscribe(namespace, db_name, accept)
    return contextlib.nullcontext(asyncio.Event())


async def drive(reconcile: Callable[[], Awaitable[engine.Outcome]], changed: asyncio.Event, *,
                logger: logging.Logger | logging.LoggerAdapter[Any], what: str,
                rewake_interval: float = REWAKE_INTERVAL) -> None:
    """Reconcile until the request is finished. The next pass comes when ``changed`` is set (a watch event about the
    request's Etcd or its objects), or after the delay the step asked for (for what only etcd shows).

    A member restart is a burst of events (the pod going, coming, starting, Ready; the StatefulSet's status after
    each), so a pass that a change asked for starts no sooner than ``rewake_interval`` after the previous pass
    started: one pass takes in the burst, and a lone change still gets a pass at once. A change is never lost:
    ``changed`` is cleared before each pass looks at the world."""
    loop = asyncio.get_running_loop()
    while True:
        changed.clear()  # a change from here on wakes the wait below
        started = loop.time()
        metrics.OPS_RECONCILES.inc()
        try:
            outcome = await reconcile()
        except kube.KubeError as err:
            logger.info("reconcile of %s: %s; retrying", what, err)
            metrics.reconcile_error(err)
            await asyncio.sleep(1.0)  # back-off after an API error, not a synchronisation
            continue
        if outcome.finished:
            return
        if await cache.wait(changed, outcome.delay):
            rest = started + rewake_interval - loop.time()
            if rest > 0:
                await asyncio.sleep(rest)  # a rate limit, not a synchronisation


def _paused(status: Any, **_: Any) -> bool:
    return pause_api.held_by_request(status) is not None


def register(registry: kopf.OperatorRegistry, client: kube.Kube, *, eng: engine.Engine | None = None,
             delivery_timeout: float = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT,
             namespaces: Collection[str] = ()) -> None:
    """Register the ops engine's handlers in ``registry``; they use ``client`` (and ``eng``, default: an
    :class:`~opsmanager.ops.engine.Engine` over ``client`` that allows ``delivery_timeout`` seconds for the kubelet
    to deliver a changed Secret). ``namespaces``: the operator's (``--namespace``); the start-up self-heal looks
    only there (its RBAC may be a Role there), else in every namespace."""
    the_engine = eng if eng is not None else engine.Engine(client, delivery_timeout=delivery_timeout)
    scopes: list[str | None] = [*namespaces] or [None]

    @kopf.on.startup(registry=registry, id="heal_leaked_pauses")
    async def heal_leaked_pauses(logger: kopf.Logger, **_: Any) -> None:
        """A pause whose request is gone or finished is removed at start-up (KubeDB's leaked-pause bug)."""
        try:
            healed = [name for ns in scopes for name in await pause.heal(client, ns)]
        except kube.KubeError as err:
            logger.warning("pause self-heal skipped: %s", err)
            return
        for name in healed:
            logger.info("resumed Etcd %s: its pausing request is no longer active", name)

    @kopf.daemon(constants.OPS_GROUP, constants.OPS_VERSION, constants.OPS_PLURAL, registry=registry,
                 id="drive_ops_request", cancellation_timeout=10.0, initial_delay=0.0)
    async def drive_ops_request(name: str, namespace: str | None, spec: kopf.Spec, logger: kopf.Logger,
                                **_: Any) -> None:
        assert namespace is not None  # EtcdOpsRequest is namespaced
        db_name = str((dict(spec).get("databaseRef") or {}).get("name") or "")
        with _wakeups(client, namespace, db_name, request=name) as changed:
            await drive(lambda: the_engine.reconcile(namespace, name), changed, logger=logger,
                        what=f"{namespace}/{name}")

    @kopf.timer(constants.ETCD_GROUP, constants.ETCD_VERSION, constants.ETCD_PLURAL, registry=registry,
                id="heal-pause", interval=3.0, when=_paused)
    async def heal_pause(namespace: str | None, name: str, logger: kopf.Logger, **_: Any) -> None:
        """While an Etcd is paused, check every few seconds that the request holding the pause still exists and
        is active. A request deleted before kopf could put its finalizer on it (so no delete handler runs) would
        otherwise leave the Etcd paused for good."""
        healed = await pause.heal(client, namespace, only=name)
        if healed:
            logger.info("resumed Etcd %s/%s: its pausing request is no longer active", namespace, name)

    @kopf.on.delete(constants.OPS_GROUP, constants.OPS_VERSION, constants.OPS_PLURAL, registry=registry,
                    id="release_on_delete", optional=True)
    async def release_on_delete(name: str, namespace: str | None, spec: kopf.Spec, **_: Any) -> None:
        """A request deleted mid-flight releases its pause (never leave an Etcd paused)."""
        ref: dict[str, Any] = dict(spec).get("databaseRef") or {}
        db_name = ref.get("name")
        if namespace is not None and db_name and await pause.resume(client, namespace, db_name, name):
            log.info("EtcdOpsRequest %s/%s deleted while in flight: resumed Etcd %s", namespace, name, db_name)
