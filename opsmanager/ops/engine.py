"""The EtcdOpsRequest engine: one reconcile = re-read everything, run the current step while it answers at once,
persist once, return.

It builds on the engine core (:mod:`opsmanager.ops.core`), which knows nothing of etcd: the phase machine
(``Pending → Progressing → Successful | Failed``, ``Pending → Skipped``, rebuilt from the persisted phase on every
call, so no state lives in memory), the queue, the status buffer and the step loop (the first step of the
:mod:`plan <opsmanager.ops.plan>` whose condition is not ``True`` runs; its ``False`` condition's
``lastTransitionTime`` is its timeout clock, ``spec.timeout``, default 10m). What this module adds is the Etcd: it
reads the request and its Etcd, asks the queue with the Etcd's state, records the request's origin, plans by type,
runs the loop over the etcd steps (:data:`STEPS`) and, when the plan ends, resumes the Etcd and writes the terminal
phase. An operator killed at any point starts again with the same phase, the same plan, the same current step, and
steps that re-derive their progress from what they observe.

The engine knows no request type: what differs per type (its plan, what it observes and records when it starts,
its success message, its apply policy) comes from the type's module through :mod:`opsmanager.ops.operations`.

Round trips and writes: a reconcile goes on with the next step (or the same step again) while the result is
immediate — ``Done``, or ``Progress`` with no delay — on the same in-memory context, at most
:data:`~opsmanager.ops.core.loop.MAX_ITERATIONS` times; it stops at a ``Progress`` with a delay, a ``Fail`` or the end. Status changes are
queued on the context and written in one PATCH at the end (and at the context's flush points, before anything a
crash must find recorded: :mod:`opsmanager.ops.context`), so a reconcile makes one status write, or none.

Errors: a transient failure (etcd unreachable, API conflict) is retried on the next reconcile, within the step's
timeout (and counted: ``opsmanager_reconcile_errors_total{kind}``); a step's own ``Fail`` ends the request. Either
way the Etcd is resumed.

Events and metrics (the table is in docs/operations.md): a step's condition going ``True`` is announced
by an Event on the request, reason the condition, message the condition's (what was done), after the write that
records it — one Event for the steps one write records, the terminal write's folded into ``Successful``/``Failed``
(:meth:`~opsmanager.ops.core.status.RequestStatus.announce_step`); ``Running``'s Event is the Etcd's ``Paused`` — and
observes
``opsmanager_step_duration_seconds{step}`` (the condition's ``lastTransitionTime`` False → True). A terminal phase
this process writes posts ``Successful`` / ``Failed`` / ``Skipped`` and counts ``opsmanager_opsrequests_total`` and
``opsmanager_opsrequest_duration_seconds`` (from the request's ``creationTimestamp``): a request already terminal
when this process first reads it is never counted again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from opsmanager import kube, metrics
from opsmanager.api import conditions, constants, tlschange
from opsmanager.api import opsrequest as ops_api
from opsmanager.api import pause as pause_api
from opsmanager.etcd import admin, pool
from opsmanager.etcd import errors as etcd_errors
from opsmanager.kube import cache as kube_cache
from opsmanager.ops import context, operations, plan
from opsmanager.ops.core import failpoints, loop, queue
from opsmanager.ops.core import status as core_status
from opsmanager.ops.core.lifecycle import Lifecycle
from opsmanager.ops.steps import (
    apply_credential,
    clear_alarms,
    compact,
    defragment,
    enable_downgrade,
    expand_volumes,
    issue,
    migrate_storage,
    move_leader,
    pause,
    prune_snapshots,
    recover_quorum,
    replace_claim_templates,
    rescue_chosen,
    resize_in_place,
    restart_pods,
    restore_members,
    roll_pass,
    scale_members,
    sync_certificates,
    update_credential,
    update_database,
    update_peer_urls,
    update_statefulset,
    upload_snapshot,
    verify_configuration,
    verify_restore,
    verify_served,
    verify_snapshot,
    verify_version,
    verify_volumes,
)

log = logging.getLogger("opsmanager.ops")


Executor = Callable[[context.OpsContext, plan.Step], Awaitable[context.StepResult]]

# The step table: each kind of step is the ``run`` of the module named after the condition it owns
# (see :mod:`opsmanager.ops.steps`).
STEPS: dict[plan.StepKind, Executor] = {
    plan.StepKind.PAUSE: pause.run,
    plan.StepKind.ISSUE: issue.run,
    plan.StepKind.SYNC_CERTIFICATES: sync_certificates.run,
    plan.StepKind.APPLY_STATEFULSET: update_statefulset.run,
    plan.StepKind.ROLL: restart_pods.run,
    plan.StepKind.RESTART: restart_pods.run,
    plan.StepKind.ROLL_PASS: roll_pass.run,
    plan.StepKind.UPDATE_PEER_URLS: update_peer_urls.run,
    plan.StepKind.MOVE_LEADER: move_leader.run,
    plan.StepKind.COMPACT: compact.run,
    plan.StepKind.DEFRAGMENT: defragment.run,
    plan.StepKind.SCALE_MEMBERS: scale_members.run,
    plan.StepKind.ENABLE_DOWNGRADE: enable_downgrade.run,
    plan.StepKind.VERIFY_VERSION: verify_version.run,
    plan.StepKind.VERIFY_CONFIGURATION: verify_configuration.run,
    plan.StepKind.RESIZE_IN_PLACE: resize_in_place.run,
    plan.StepKind.CLEAR_ALARMS: clear_alarms.run,
    plan.StepKind.VERIFY_SERVED: verify_served.run,
    plan.StepKind.UPLOAD_SNAPSHOT: upload_snapshot.run,
    plan.StepKind.PRUNE_SNAPSHOTS: prune_snapshots.run,
    plan.StepKind.VERIFY_SNAPSHOT: verify_snapshot.run,
    plan.StepKind.RESTORE_MEMBERS: restore_members.run,
    plan.StepKind.VERIFY_RESTORE: verify_restore.run,
    plan.StepKind.CONFIRM_QUORUM_LOSS: recover_quorum.run,
    plan.StepKind.FORCE_NEW_CLUSTER: recover_quorum.run,
    plan.StepKind.REJOIN_MEMBERS: recover_quorum.run,
    plan.StepKind.UPDATE_CREDENTIAL: update_credential.run,
    plan.StepKind.APPLY_CREDENTIAL: apply_credential.run,
    plan.StepKind.EXPAND_VOLUMES: expand_volumes.run,
    plan.StepKind.VERIFY_VOLUMES: verify_volumes.run,
    plan.StepKind.REPLACE_CLAIM_TEMPLATES: replace_claim_templates.run,
    plan.StepKind.SURGE_MEMBER: migrate_storage.run,
    plan.StepKind.MIGRATE_MEMBERS: migrate_storage.run,
    plan.StepKind.REMOVE_SURGE: migrate_storage.run,
    plan.StepKind.UPDATE_DATABASE: update_database.run,
    plan.StepKind.RESCUE_CHOSEN: rescue_chosen.run,
    plan.StepKind.RESTART_ALL: restart_pods.run,
}


# How long the engine remembers what it observed of an Etcd's expiry while a request waits (seconds): the
# observation costs a handshake with every member, and a waiting request is looked at every second.
EXPIRY_TTL = 5.0

@dataclasses.dataclass(frozen=True)
class Outcome:
    finished: bool
    delay: float = 0.0
    phase: str | None = None


class Engine:
    """Runs EtcdOpsRequests. ``client``: the operator's Kubernetes client; ``clock``: what "now" is (timeouts);
    ``etcd``: how a reconcile reaches etcd (default: the gRPC client; tests pass a fake's factory)."""

    def __init__(self, client: kube.Kube, *, clock: Callable[[], datetime.datetime] | None = None,
                 etcd: admin.AdminFactory = admin.connect,
                 delivery_timeout: float = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT,
                 etcd_pool: pool.ClientPool | None = None) -> None:
        self.kube = client
        # The real clients are pooled (one per Etcd and identity, :mod:`opsmanager.etcd.pool`); an injected factory
        # (a test's fake) is called as it is.
        self.etcd_pool = etcd_pool if etcd_pool is not None else (pool.shared if etcd is admin.connect else None)
        self.delivery_timeout = delivery_timeout  # seconds the kubelet may take to deliver a changed Secret
        self.clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self.etcd = etcd
        self._expiry_seen: dict[tuple[str, str, str], tuple[datetime.datetime, str]] = {}
        # One queue decision at a time per Etcd, held until the request that starts has written Progressing:
        # between a start decision and that write lie seconds of observation (handshakes), and a sibling deciding
        # meanwhile would still see it queued and could start as well.
        self._queue_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.crash_after = failpoints.armed()
        self.holds = failpoints.armed_holds()

    # --- status writes --------------------------------------------------------------------------------------

    async def _set_phase(self, req: dict[str, Any], phase: str, *extra: tuple[str, str, str, str]) -> dict[str, Any]:
        generation = req["metadata"].get("generation")

        def mutate(st: dict[str, Any]) -> dict[str, Any]:
            st = dict(st)
            st["phase"] = phase
            st["observedGeneration"] = generation
            conds = st.get("conditions")
            for type_, status, reason, message in extra:
                conds = conditions.set_condition(conds, type_, status, reason=reason, message=message,
                                                 observed_generation=generation)
            if conds is not None:
                st["conditions"] = conds
            return st

        meta = req["metadata"]
        updated = await self.kube.transact_status(constants.OPS_API_VERSION, constants.OPS_KIND, meta["namespace"],
                                                  meta["name"], mutate)
        return updated or req

    async def _finish(self, ctx: context.OpsContext, lifecycle: Lifecycle, *, ok: bool, message: str,
                      reason: str) -> Outcome:
        """Resume the Etcd, then write the terminal phase with everything still queued (one write)."""
        if not ok:
            message += await enable_downgrade.cancel_after_failure(ctx)
            message += await restore_members.withdraw_after_failure(ctx)
        if self.etcd_pool is not None:
            # The engine's clients of this Etcd (one per identity the request went through) would hold their
            # channels until the next request of the Etcd: memory for nothing. Closed before the
            # resume, while no other request of the Etcd can run (the queue starts the next one after this one's
            # terminal write).
            await self.etcd_pool.forget(ctx.namespace, ctx.db_name, user=context.ENGINE_USER)
        # What this request found expired is history once it ends (a rescue's end most of all).
        for key in [k for k in self._expiry_seen if k[:2] == (ctx.namespace, ctx.db_name)]:
            del self._expiry_seen[key]
        if ctx.plan.pauses:
            if await pause.resume(self.kube, ctx.namespace, ctx.db_name, ctx.name):
                await ctx.etcd_event(pause.EVENT_RESUMED, f"Resumed by EtcdOpsRequest {ctx.name} "
                                                          f"({'Successful' if ok else 'Failed'})")
        if ok:
            lifecycle.succeed()
            ctx.set_condition(constants.COND_SUCCESSFUL, constants.TRUE, message, reason=constants.COND_SUCCESSFUL)
        else:
            lifecycle.fail()
            ctx.set_condition(constants.COND_FAILED, constants.TRUE, message, reason=reason)
        ctx.set_phase(lifecycle.state)
        steps = core_status.steps_suffix(ctx.take_steps())  # the steps this write records done: in the one Event
        await ctx.flush()
        _count_finished(ctx.request, lifecycle.state, self.clock())
        if ok:
            await ctx.event("Successful", message + steps)
        else:
            await ctx.event("Failed", message + steps, type_="Warning")
        log.info("EtcdOpsRequest %s/%s %s: %s", ctx.namespace, ctx.name, lifecycle.state, message)
        return Outcome(finished=True, phase=lifecycle.state)

    @property
    def watched(self) -> bool:
        """Do watch events about an Etcd's objects wake its requests' reconciles (:func:`ops.handlers.drive`)?"""
        return kube_cache.wakeups_of(self.kube) is not None

    # --- the reconcile ----------------------------------------------------------------------------------------

    async def reconcile(self, namespace: str, name: str) -> Outcome:
        req = await self.kube.get(constants.OPS_API_VERSION, constants.OPS_KIND, namespace, name)
        if req is None:  # deleted (perhaps before kopf's finalizer was on it): release any pause it held
            await pause.heal(self.kube, namespace)
            return Outcome(finished=True)
        phase = (req.get("status") or {}).get("phase")
        lifecycle = Lifecycle(phase)
        spec = ops_api.EtcdOpsRequest.model_validate(req).spec
        db_name = spec.database_ref.name
        if phase in constants.TERMINAL_OPS_PHASES:
            await pause.heal(self.kube, namespace)
            return Outcome(finished=True, phase=phase)
        db_obj = await self.kube.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, db_name)
        if db_obj is None:
            lifecycle.fail()
            message = f"spec.databaseRef {namespace}/{db_name} is invalid or not found"
            req = await self._set_phase(req, lifecycle.state, (constants.COND_FAILED, constants.TRUE,
                                                               "DatabaseNotFound", message))
            _count_finished(req, lifecycle.state, self.clock())
            await self.kube.event(req, reason="Failed", message=message, type_="Warning")
            return Outcome(finished=True, phase=lifecycle.state)
        if lifecycle.state == "New":  # queued; written only if it has to wait (one that starts goes Progressing)
            lifecycle.enqueue()
        if lifecycle.state == constants.PHASE_PENDING:
            lock = self._queue_locks.setdefault((namespace, db_name), asyncio.Lock())
            async with lock:
                fresh = await self.kube.get(constants.OPS_API_VERSION, constants.OPS_KIND, namespace, name)
                if fresh is None or (fresh.get("status") or {}).get("phase") != phase:
                    return Outcome(finished=False, delay=0.0, phase=phase)  # decided meanwhile: look again
                verdict = await self._pending(req, db_obj, spec, lifecycle)
                if isinstance(verdict, Outcome):
                    return verdict
                return await self._progress(req, db_obj, lifecycle, started=verdict)
        return await self._progress(req, db_obj, lifecycle)

    async def _pending(self, req: dict[str, Any], db_obj: dict[str, Any], spec: ops_api.EtcdOpsRequestSpec,
                       lifecycle: Lifecycle) -> Outcome | queue.Decision:
        """The queue's verdict: an :class:`Outcome` when the request is skipped or waits (its ``Pending`` condition
        then says why), else the start's :class:`~opsmanager.ops.core.queue.Decision` (``lifecycle`` is then
        ``Progressing``, written with the first step's record). A request new to the engine is written ``Pending``
        when it waits (a queued request that has not started is new or ``Pending`` alike for the queue:
        :attr:`queue.Queued.active`)."""
        ns = req["metadata"]["namespace"]
        siblings = []
        for other in await self.kube.list(constants.OPS_API_VERSION, constants.OPS_KIND, ns):
            if (other.get("spec") or {}).get("databaseRef", {}).get("name") != spec.database_ref.name:
                continue
            siblings.append(_queued(other))
        me = _queued(req)
        etcd = _etcd_state(db_obj)
        if queue.needs_expiry(me, siblings, etcd):
            etcd = dataclasses.replace(etcd, expired=await self._expiry(req, db_obj))
        decision = queue.decide(me, siblings, etcd)
        if decision.verdict is queue.Verdict.SKIP:
            lifecycle.skip()
            req = await self._set_phase(req, lifecycle.state, (constants.COND_SKIPPED, constants.TRUE,
                                                               constants.COND_SKIPPED, decision.message))
            _count_finished(req, lifecycle.state, self.clock())
            await self.kube.event(req, reason=constants.COND_SKIPPED, message=decision.message)
            return Outcome(finished=True, phase=lifecycle.state)
        if decision.verdict is queue.Verdict.WAIT:
            status = req.get("status") or {}
            current = conditions.get_condition(status.get("conditions"), constants.COND_PENDING) or {}
            if (status.get("phase") != lifecycle.state or current.get("status") != constants.TRUE
                    or current.get("reason") != decision.reason or current.get("message") != decision.message):
                req = await self._set_phase(req, lifecycle.state, (constants.COND_PENDING, constants.TRUE,
                                                                   decision.reason, decision.message))
                if current.get("reason") != decision.reason or current.get("status") != constants.TRUE:
                    await self.kube.event(req, reason=decision.reason, message=decision.message)
            return Outcome(finished=False, delay=1.0, phase=lifecycle.state)
        lifecycle.start()
        return decision

    async def _expiry(self, req: dict[str, Any], db_obj: dict[str, Any]) -> str:
        """What expired, when the Etcd's certificates expired and nothing else keeps it from Ready; ``""``
        otherwise, and for a type that rescues nothing. Asked of the request's type (its ``rescue_reason``: for the
        TLS family, by expiry as the rescue is decided); remembered for :data:`EXPIRY_TTL` seconds per Etcd, as it
        costs a handshake with every member."""
        op = operations.get(str((req.get("spec") or {}).get("type", "")))
        if op is None or op.rescue_reason is None:
            return ""
        meta = db_obj["metadata"]
        key = (meta.get("namespace") or "default", meta["name"], meta.get("uid") or "")
        now = self.clock()
        cached = self._expiry_seen.get(key)
        if cached is not None and (now - cached[0]).total_seconds() < EXPIRY_TTL:
            return cached[1]
        ctx = context.OpsContext(self.kube, req, db_obj, plan.Plan(op.type, None, None, ()),
                                 now, tls_before=(db_obj.get("spec") or {}).get("tls"), admin_factory=self.etcd,
                                 etcd_pool=self.etcd_pool,
                                 delivery_timeout=self.delivery_timeout, watched=self.watched)
        found = await op.rescue_reason(ctx)
        self._expiry_seen[key] = (now, found)
        return found

    async def _snapshot(self, req: dict[str, Any], db_obj: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """The Etcd's ``spec.tls`` (and ``spec.replicas``) as it was when the request started, recorded in the request's
        ``status.origin`` before any step acts, so the plan does not change when ``UpdateDatabase`` writes the new
        TLS. A request an older engine started keeps the record it has (an annotation)."""
        recorded, tls = tlschange.recorded_tls(req)
        if recorded:
            return req, tls
        before = (db_obj.get("spec") or {}).get("tls")
        typed = operations.origin(db_obj.get("spec") or {}).model_copy(update={  # what the types read back
            "observed_at": conditions.rfc3339(self.clock()), "tls": before if isinstance(before, dict) else None})
        origin = typed.model_dump(by_alias=True, exclude_none=True, mode="json")

        def record(st: dict[str, Any]) -> dict[str, Any]:
            return st if isinstance(st.get("origin"), dict) else {**st, "origin": origin}

        updated = await self.kube.transact_status(constants.OPS_API_VERSION, constants.OPS_KIND,
                                                  req["metadata"]["namespace"], req["metadata"]["name"], record)
        if updated is None:  # deleted meanwhile: nothing to run (its delete handler releases the pause)
            raise kube.NotFound(f"EtcdOpsRequest {req['metadata']['namespace']}/{req['metadata']['name']} is gone")
        return updated, tlschange.tls_before(updated)

    async def _progress(self, req: dict[str, Any], db_obj: dict[str, Any], lifecycle: Lifecycle, *,
                        started: queue.Decision | None = None) -> Outcome:
        req, tls_before = await self._snapshot(req, db_obj)
        request = ops_api.EtcdOpsRequest.model_validate(req)
        ctx = context.OpsContext(self.kube, req, db_obj, plan.Plan(request.spec.type, None, None, ()), self.clock(),
                                 tls_before=tls_before, admin_factory=self.etcd, etcd_pool=self.etcd_pool,
                                 delivery_timeout=self.delivery_timeout, watched=self.watched)
        ctx.set_phase(lifecycle.state)  # Progressing (queued: a request that just started writes it with its steps)
        if started is not None:
            _mark_started(ctx, started)
        op = operations.get(request.spec.type)
        try:
            variant = await op.observe(ctx) if op is not None and op.observe is not None else None
        except (kube.Unavailable, kube.Conflict) as err:
            log.info("EtcdOpsRequest %s/%s: observing the plan: transient: %s", ctx.namespace, ctx.name, err)
            metrics.reconcile_error(err)
            await ctx.flush()
            return Outcome(finished=False, delay=1.0, phase=lifecycle.state)
        try:
            ctx.plan = operations.plan_for(ctx.db, request, variant)
        except ValueError as err:
            return await self._finish(ctx, lifecycle, ok=False, message=str(err), reason="InvalidRequest")
        ended = await self._loop.run(ctx, ctx.plan.steps, request.spec.timeout_delta)
        if isinstance(ended, loop.Again):
            return Outcome(finished=False, delay=ended.delay, phase=lifecycle.state)
        if ended.ok:
            done = operations.of(ctx.plan.request_type).success_message(ctx.plan)
            return await self._finish(ctx, lifecycle, ok=True, message=done, reason=constants.COND_SUCCESSFUL)
        return await self._finish(ctx, lifecycle, ok=False, message=ended.message, reason=ended.reason)

    @property
    def _loop(self) -> loop.Loop[context.OpsContext, plan.Step]:
        return loop.Loop(self._execute, self.clock, transient=TRANSIENT, on_transient=metrics.reconcile_error,
                         on_step_finished=metrics.step_finished, crash_after=self.crash_after, holds=self.holds,
                         warning_steps=WARNING_STEPS, quiet_steps=QUIET_STEPS)

    async def _execute(self, ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
        ctx.now = self.clock()
        return await STEPS[step.kind](ctx, step)


metrics.declare_requests(constants.OPS_TYPES, constants.TERMINAL_OPS_PHASES)

# Steps whose transition is a warning (the rescue plan runs because certificates expired); the rest are Normal.
WARNING_STEPS = frozenset({constants.COND_RESCUE_PLAN_CHOSEN})
# Steps announced by something else: the pause's Event is the Etcd's Paused, naming the request.
QUIET_STEPS = frozenset({constants.COND_RUNNING})
# Errors a later pass retries (within the step's timeout): etcd unreachable, the API server busy or conflicting.
TRANSIENT: tuple[type[BaseException], ...] = (etcd_errors.EtcdError, kube.Unavailable, kube.Conflict)


def _mark_started(ctx: context.OpsContext, started: queue.Decision) -> None:
    """A request the queue just started: its ``Pending`` goes False when it waited or started as a rescue (a
    rescue also announced, as a warning)."""
    rescue = started.reason == queue.REASON_STARTED_AS_RESCUE
    if rescue or ctx.condition(constants.COND_PENDING) is not None:  # it waited, or started as a rescue
        ctx.set_condition(constants.COND_PENDING, constants.FALSE, started.message, reason=started.reason)
    if rescue:
        ctx.announce(constants.EVENT_STARTED_AS_RESCUE, started.message, "Warning")


def _count_finished(req: dict[str, Any], phase: str, now: datetime.datetime) -> None:
    """Count a terminal phase this process wrote: ``opsmanager_opsrequests_total`` and the request's duration from
    its ``creationTimestamp`` (queueing included)."""
    created = req["metadata"].get("creationTimestamp")
    seconds = (now - conditions.parse_rfc3339(created)).total_seconds() if created else None
    metrics.request_finished(str((req.get("spec") or {}).get("type") or "Unknown"), phase, seconds)


def _queued(obj: dict[str, Any]) -> queue.Queued:
    spec = obj.get("spec") or {}
    return queue.Queued(
        name=obj["metadata"]["name"], type=spec.get("type", ""),
        phase=(obj.get("status") or {}).get("phase") or "",
        created=obj["metadata"].get("creationTimestamp") or "", apply=operations.apply_policy(spec),
        rescues=operations.rescues(spec),
    )


def _etcd_state(db_obj: dict[str, Any]) -> queue.EtcdState:
    """The queue's view of the Etcd: its phase, why it is not Ready (its ``Ready`` condition's message, without the
    phase it repeats), and who holds a pause."""
    status = db_obj.get("status") or {}
    ready = conditions.get_condition(status.get("conditions"), constants.COND_READY) or {}
    not_ready = "" if ready.get("status") == constants.TRUE else str(ready.get("message") or "")
    phase = status.get("phase")
    if phase and not_ready.startswith(f"phase {phase}: "):
        not_ready = not_ready[len(f"phase {phase}: "):]
    paused_by = ""
    if pause_api.is_paused(status):
        by_request = pause_api.held_by_request(status)
        paused_by = f"EtcdOpsRequest {by_request}" if by_request else (pause_api.holder(status) or "someone")
    return queue.EtcdState(phase=phase, not_ready=not_ready, paused_by=paused_by)
