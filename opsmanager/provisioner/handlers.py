"""The provisioner's kopf handlers on ``etcds.opsmanager.dev`` — thin: they call :mod:`.applying`,
:mod:`.observe` and write status through :func:`opsmanager.cluster.etcdstatus.write` with :mod:`.status`'s changes.

- **create / resume / update** → one reconcile pass; "not yet" (certificates still being issued) becomes
  ``kopf.TemporaryError(delay=...)``, a foreign object or an invalid spec a slower retry, so no handler sleeps.
- **timer** (every ``interval`` seconds) → the level-based loop: reconcile again (this is what repairs a deleted
  StatefulSet, and what picks up the end of a pause) and report the phase from real member health. A steady
  cluster writes nothing: the status transaction skips a no-op.
- **sources** (a daemon per Etcd) → woken by the operator's Certificate cache when cert-manager (re-)issues one of
  its Certificates: a renewal is gated and released at once, not at the next timer tick;
- after each pass that looked at TLS: a renewed CA (a held ``UntrustedCA`` source's, or a CA Issuer's new one) files
  the CA-rollover request (:mod:`.rollover`);
- **delete** → :func:`applying.finalize` by ``spec.deletionPolicy``; ``DoNotTerminate`` keeps the finalizer, sets
  ``DeletionBlocked`` and records a Warning event.

While the Etcd carries ``Paused=True`` (an ops request owns it) the reconcile changes nothing; status is still
reported. Reconcile passes of one Etcd never overlap (a lock in kopf's per-object memo), so a handler and the
timer cannot both create the same object.

Register with :func:`register` (the operator does it in :mod:`opsmanager.operator`); the Kubernetes client is
taken from the operator memo (``memo.kube``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from opsmanager import kube, metrics
from opsmanager.api import conditions, constants, pause
from opsmanager.cluster import etcdstatus, naming
from opsmanager.etcd import errors as etcd_errors
from opsmanager.kube import cache
from opsmanager.provisioner import applying, observe, status
from opsmanager.tls import gate, rollover

Logger = logging.Logger | logging.LoggerAdapter[Any]
RESOURCE = (constants.ETCD_GROUP, constants.ETCD_VERSION, constants.ETCD_PLURAL)
DEFAULT_INTERVAL = 5.0


def _kube(memo: Any) -> kube.Kube:
    client = getattr(memo, "kube", None)
    if not isinstance(client, kube.Kube):
        raise kopf.PermanentError("operator memo has no Kubernetes client (memo.kube); start it via opsmanager run")
    return client


def _lock(memo: Any) -> asyncio.Lock:
    lock = getattr(memo, "provisioner_lock", None)
    if lock is None:
        lock = asyncio.Lock()
        memo.provisioner_lock = lock
    return lock


def _ident(body: Mapping[str, Any]) -> tuple[str, str, int | None]:
    meta = body.get("metadata") or {}
    return meta.get("namespace") or "default", meta["name"], meta.get("generation")


async def _record(k: kube.Kube, body: Mapping[str, Any], outcome: applying.Outcome, logger: Logger) -> None:
    """Write the outcome as the Reconciled condition; an event when the reason changes (not on every pass)."""
    ns, name, generation = _ident(body)
    if outcome.reason == applying.REASON_PAUSED and pause.held_by_request(body.get("status")) is not None:
        # An ops request holds the Etcd: its Paused condition and the engine's Paused/Resumed Events on the Etcd
        # say so; a Reconciled=False/Paused and back would be two more writes and two more Events per request.
        return
    previous = conditions.get_condition((body.get("status") or {}).get("conditions"), status.COND_RECONCILED)
    await etcdstatus.write(k, ns, name, status.ProvisioningStarted(generation),
                           status.Reconciled(outcome.ok, outcome.reason, outcome.message, generation))
    if outcome.changed:
        logger.info("reconcile %s/%s: %s", ns, name, ", ".join(outcome.changed))
    if outcome.held is not None:
        await _report_held(k, body, outcome.held, logger)
        await rollover.file_if_renewed(k, body, outcome.held)  # a renewed CA: file the CA-rollover request
    if previous is None or previous.get("reason") != outcome.reason:
        warning = outcome.state == applying.BLOCKED or outcome.reason in applying.WARNING_REASONS
        (logger.warning if warning else logger.info)("Etcd %s/%s: %s", ns, name, outcome.message)
        await k.event(dict(body), reason=outcome.reason, message=outcome.message,
                      type_="Warning" if warning else "Normal")


async def _report_held(k: kube.Kube, body: Mapping[str, Any], held: tuple[gate.Problem, ...],
                       logger: Logger) -> None:
    """``TLSMaterialReady`` and one Warning Event per (source, reason) the gate holds back — not one per pass:
    the pairs announced are recorded in the Etcd's ``status.materialAnnounced``, in the same write as the
    condition and before the Events are posted, and forgotten once the source passes (so the same failure coming
    back is announced again). A source cert-manager has not written yet (``SourceMissing``) is waiting, not a
    warning."""
    ns, name, generation = _ident(body)
    announced, legacy = _announced(body)
    current = {(p.secret, p.code): p for p in held if p.code != gate.SOURCE_MISSING}
    new = [p for key, p in current.items() if key not in announced]
    await etcdstatus.write(k, ns, name, status.MaterialReady(tuple((p.code, p.message) for p in held), generation),
                           status.MaterialAnnounced(tuple(current)))
    if legacy:  # the record now lives in status: drop the annotation, so a stale copy is never read again
        await k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns, name,
                      {"metadata": {"annotations": {naming.ANNOTATION_MATERIAL_ANNOUNCED: None}}})
    for p in new:
        logger.warning("Etcd %s/%s: %s", ns, name, p.message)
        await k.event(dict(body), reason=p.code, message=p.message, type_="Warning")


def _announced(body: Mapping[str, Any]) -> tuple[set[tuple[str, str]], bool]:
    """The (source, reason) pairs already announced, and whether the Etcd still carries the legacy annotation.

    ``status.materialAnnounced`` when the status has it; else the annotation ``opsmanager.dev/tls-material-announced``
    (a JSON list of pairs) that older operators kept the same record in. The legacy reader can go once no Etcd
    carries that annotation (the first report of an Etcd that has one removes it)."""
    legacy = ((body.get("metadata") or {}).get("annotations") or {}).get(naming.ANNOTATION_MATERIAL_ANNOUNCED)
    recorded = status.announced(body)
    if recorded is not None or not legacy:
        return recorded or set(), legacy is not None
    try:
        return {(str(secret), str(reason)) for secret, reason in json.loads(legacy)}, True
    except (ValueError, TypeError):
        return set(), True


async def reconcile_once(k: kube.Kube, namespace: str, name: str, memo: Any,
                         logger: Logger) -> tuple[applying.Outcome, dict[str, Any] | None]:
    """One reconcile pass on a fresh read of the Etcd, under the object's lock, with its outcome recorded in status.
    Returns the outcome and the object as read (None when it is gone)."""
    async with _lock(memo):
        fresh = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, name)
        if fresh is None or (fresh.get("metadata") or {}).get("deletionTimestamp"):
            return applying.Outcome(applying.DONE, "Gone", "the Etcd is gone or being deleted"), None
        try:
            outcome = await applying.reconcile(k, fresh)
            await _record(k, fresh, outcome, logger)
        except (kube.KubeError, etcd_errors.EtcdError) as err:  # kopf retries the handler; counted here
            metrics.reconcile_error(err)
            raise
        metrics.reconciled(namespace, name)
        return outcome, fresh


async def report_status(k: kube.Kube, obj: Mapping[str, Any], *,
                        quorum_loss_after: float = status.DEFAULT_QUORUM_LOSS_AFTER) -> None:
    """Observe the members and write the phase and conditions."""
    ns, name, generation = _ident(obj)
    db = applying.parse(obj)
    verdict = await observe.observe(k, db)
    await etcdstatus.write(k, ns, name, status.Observed(verdict, halted=db.spec.halted, generation=generation,
                                                        quorum_loss_after=quorum_loss_after))


def _reissued(etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """A Certificate whose issuance changed (``status.revision`` or ``status.notAfter``)."""
    if obj.get("kind") != "Certificate" or etype == "DELETED":
        return False

    def issued(o: dict[str, Any] | None) -> Any:
        st = (o or {}).get("status") or {}
        return st.get("revision"), st.get("notAfter")
    return old is None or issued(obj) != issued(old)


def register(registry: kopf.OperatorRegistry, *, interval: float = DEFAULT_INTERVAL,
             quorum_loss_after: float = status.DEFAULT_QUORUM_LOSS_AFTER) -> None:
    """Register the provisioner's handlers in ``registry``; the timer runs every ``interval`` seconds;
    ``QuorumLost`` turns True after ``quorum_loss_after`` seconds without a quorum."""
    _register_provision(registry)
    _register_timer(registry, interval, quorum_loss_after)
    _register_sources(registry)
    _register_finalize(registry, interval)


def _register_provision(registry: kopf.OperatorRegistry) -> None:
    """create / resume / update: one reconcile pass."""

    @kopf.on.resume(*RESOURCE, registry=registry, id="provision")
    @kopf.on.create(*RESOURCE, registry=registry, id="provision")
    @kopf.on.update(*RESOURCE, registry=registry, id="provision", field="spec")
    async def provision(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
        ns, name, _generation = _ident(body)
        outcome, _obj = await reconcile_once(_kube(memo), ns, name, memo, logger)
        if outcome.state in (applying.WAITING, applying.BLOCKED):
            raise kopf.TemporaryError(outcome.message, delay=outcome.delay)


def _register_timer(registry: kopf.OperatorRegistry, interval: float, quorum_loss_after: float) -> None:
    """The timer: reconcile again and report the phase from the members' health."""

    @kopf.timer(*RESOURCE, registry=registry, id="status", interval=interval)
    async def keep(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
        k = _kube(memo)
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            return
        ns, name, _generation = _ident(body)
        outcome, fresh = await reconcile_once(k, ns, name, memo, logger)
        if fresh is None or outcome.reason == applying.REASON_INVALID_SPEC:
            return
        if outcome.reason == applying.REASON_PAUSED and pause.held_by_request(fresh.get("status")) is not None:
            # The request restarts the members and checks them itself: asking each member for its status every
            # pass meanwhile would cost etcd calls (a Status call to every member of every paused Etcd)
            # for a phase nobody may write. The next pass after the resume (within the interval) reports it.
            return
        await report_status(k, fresh, quorum_loss_after=quorum_loss_after)


def _register_sources(registry: kopf.OperatorRegistry) -> None:
    """The daemon that reconciles when cert-manager (re-)issues one of the Etcd's Certificates."""

    @kopf.daemon(*RESOURCE, registry=registry, id="sources", cancellation_timeout=2.0)
    async def sources(body: kopf.Body, memo: Any, logger: Logger, stopped: kopf.DaemonStopped, **_: Any) -> None:
        """Reconcile as soon as cert-manager (re-)issues a source of this Etcd, so the gate releases a renewal
        promptly. cert-manager bumps a Certificate's ``status.revision`` after writing its Secret, and the
        operator's Certificate cache (:mod:`opsmanager.kube.cache`) wakes this loop when that happens to one of this
        Etcd's Certificates. The timer stays the backstop (and is all there is without watch caches)."""
        k = _kube(memo)
        if (wakeups := cache.wakeups_of(k)) is None:
            return
        ns, name, _generation = _ident(body)
        with wakeups.subscribe(ns, name, _reissued) as changed:
            while not stopped:
                if not await cache.wait(changed, 1.0):  # 1 s: how soon a stopped daemon notices
                    continue
                changed.clear()
                await reconcile_once(k, ns, name, memo, logger)


def _register_finalize(registry: kopf.OperatorRegistry, interval: float) -> None:
    """delete: finalize by ``spec.deletionPolicy``."""

    @kopf.on.delete(*RESOURCE, registry=registry, id="finalize")
    async def finalize(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
        k = _kube(memo)
        async with _lock(memo):
            outcome = await applying.finalize(k, body)
        ns, name, generation = _ident(body)
        if outcome.state == applying.BLOCKED:
            already = conditions.is_true((body.get("status") or {}).get("conditions"), status.COND_DELETION_BLOCKED)
            await etcdstatus.write(k, ns, name, status.DeletionBlocked(outcome.message, generation))
            if not already:
                logger.warning("Etcd %s/%s: %s", ns, name, outcome.message)
                await k.event(dict(body), reason=outcome.reason, message=outcome.message, type_="Warning")
            # Look again soon: the user's fix is a change of spec.deletionPolicy, which kopf does not announce to
            # the deletion handler of an object already being deleted.
            raise kopf.TemporaryError(outcome.message, delay=min(outcome.delay, 2 * interval))
        if outcome.changed:
            logger.info("delete %s/%s: %s", ns, name, ", ".join(outcome.changed))
        if outcome.state == applying.WAITING:
            raise kopf.TemporaryError(outcome.message, delay=outcome.delay)
