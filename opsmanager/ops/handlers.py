"""kopf wiring of the ops engine: one daemon per EtcdOpsRequest drives its reconciles; deletion resumes.

Why a daemon: a request runs for a minute or more and must patch its status as it goes (kopf applies a
handler's ``patch`` only when the handler returns). The daemon calls :meth:`Engine.reconcile` — which runs
one step and persists it — then waits the delay it asked for, until the request is finished. kopf starts a
daemon for every existing request when the operator starts, so a restarted operator picks up where it was,
and it cancels the daemon (and runs the delete handler) when the request is deleted.

Importing this module registers the handlers (kopf's registry is global); ``opsmanager run`` imports it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import kopf

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.ops import database, engine

log = logging.getLogger("opsmanager.ops")

_engine: engine.Engine | None = None


def get_engine() -> engine.Engine:
    global _engine
    if _engine is None:
        _engine = engine.Engine(kube.Kube.from_kubeconfig(os.environ.get("KUBECONFIG") or None))
    return _engine


@kopf.on.startup()
async def heal_leaked_pauses(logger: logging.Logger, **_: Any) -> None:
    """A pause whose request is gone or finished is removed at start-up (KubeDB's leaked-pause bug)."""
    try:
        healed = await database.heal(get_engine().kube)
    except kube.KubeError as err:
        logger.warning("pause self-heal skipped: %s", err)
        return
    for name in healed:
        logger.info("resumed Etcd %s: its pausing request is no longer active", name)


@kopf.daemon(constants.OPS_GROUP, constants.OPS_VERSION, constants.OPS_PLURAL,
             cancellation_timeout=10.0, initial_delay=0.0)
async def drive_ops_request(name: str, namespace: str, logger: logging.Logger, **_: Any) -> None:
    eng = get_engine()
    while True:
        try:
            outcome = await eng.reconcile(namespace, name)
        except kube.KubeError as err:
            logger.info("reconcile of %s/%s: %s; retrying", namespace, name, err)
            await asyncio.sleep(1.0)
            continue
        if outcome.finished:
            return
        await asyncio.sleep(outcome.delay)


def _paused(status: Any, **_: Any) -> bool:
    return database.paused_by({"status": status or {}}) is not None


@kopf.timer(constants.ETCD_GROUP, constants.ETCD_VERSION, constants.ETCD_PLURAL, id="heal-pause", interval=3.0,
            when=_paused)
async def heal_pause(namespace: str, name: str, status: Any, logger: logging.Logger, **_: Any) -> None:
    """While an Etcd is paused, check every few seconds that the request holding the pause still exists and is
    active. A request deleted before kopf could put its finalizer on it (so no delete handler runs) would
    otherwise leave the Etcd paused for good."""
    healed = await database.heal(get_engine().kube, namespace, only=name)
    if healed:
        logger.info("resumed Etcd %s/%s: its pausing request is no longer active", namespace, name)


@kopf.on.delete(constants.OPS_GROUP, constants.OPS_VERSION, constants.OPS_PLURAL, optional=True)
async def release_on_delete(name: str, namespace: str, spec: Any, **_: Any) -> None:
    """A request deleted mid-flight releases its pause (never leave an Etcd paused)."""
    db_name = (spec or {}).get("databaseRef", {}).get("name")
    if db_name and await database.resume(get_engine().kube, namespace, db_name, name):
        log.info("EtcdOpsRequest %s/%s deleted while in flight: resumed Etcd %s", namespace, name, db_name)
