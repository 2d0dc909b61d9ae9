"""What one reconcile of one EtcdOpsRequest works with: the request, its Etcd, the plan, and the I/O doors.

Every step module receives an :class:`OpsContext`. Status is changed through it only (``set_condition``,
``set_pod_condition``, ``set_phase``): a change applies to the in-memory request at once — later code of the same
reconcile sees it — and is queued; :meth:`OpsContext.flush` writes everything queued in **one** status PATCH
(``kube.transact_status``: re-read, optimistic lock, no write when nothing changed). Only the final state of a
condition is written: set False then True before a flush, it is written True once, its ``lastTransitionTime``
that of the last change of status — or the live one when the live status is already the final one.

When the record is written (each rule for the failure it prevents):

- **before each disruptive action** — an eviction or a pod deletion (``restart.restart``, ``restart_pods``): the step
  marked in flight (``EvictPod--<pod>`` False) is on the request first, so an operator killed between the write
  and the action finds it and re-derives what is left from what it observes, never restarting a member twice;
- **before a StatefulSet template is written** (``update_statefulset``): the template's restart token is the
  roll's record of which members still need a restart, so every step before it must be on record — else an
  operator killed right after the write would re-run an earlier pass, re-apply that pass's template and restart
  every member again;
- **before the Etcd is paused** (``pause``): the request's ``Progressing`` phase first, or a request killed in
  between would find the Etcd paused while it is still ``Pending`` and wait for itself;
- **at the end of every reconcile** (the engine), and with the terminal phase.

Events and metrics ride on the flush: :meth:`OpsContext.announce` (an Event on the request),
:meth:`OpsContext.announce_step` (a step done) and :meth:`OpsContext.on_written` (a metric observation) are queued
and go out right **after** the write that records what they announce (or at the next flush when nothing is dirty),
never before it. An operator killed between the write and the Event loses the Event (a re-run finds the transition
recorded and does not repeat it); one killed before the write repeats the work and announces it then — never twice
for one recorded transition. The steps one write records done are one transition of the request: they are
announced in **one** Event (reason the last of them, the message naming each), and those the terminal write
records are folded into the ``Successful``/``Failed`` Event (:meth:`OpsContext.take_steps`) — the API budget of
the API request budget counts every Event.

Everything else a step does is idempotent and observed again on the next reconcile, so losing the queued record of
it (an operator killed before the flush) only repeats work: the step, and any step before it in the same
reconcile, runs again and finds it done.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable
from typing import Any

from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.backup import store
from opsmanager.cluster import backups, credentials, members, naming
from opsmanager.etcd import access, admin, pool
from opsmanager.ops import plan as plan_mod
from opsmanager.tls import identity as tls_identity
from opsmanager.tls import trust

log = logging.getLogger("opsmanager.ops")


@dataclasses.dataclass(frozen=True)
class Done:
    message: str | None = None


@dataclasses.dataclass(frozen=True)
class Progress:
    """Not finished; look again after ``delay`` seconds. ``message`` (if any) updates the in-flight condition."""

    message: str | None = None
    delay: float = 0.5


@dataclasses.dataclass(frozen=True)
class Fail:
    message: str
    reason: str = "Failed"


StepResult = Done | Progress | Fail


def from_tls(answer: trust.Waiting | trust.Refused) -> Progress | Fail:
    """A step's result from the TLS layer's "not yet" or "cannot work"."""
    if isinstance(answer, trust.Waiting):
        return Progress(answer.message, delay=answer.delay)
    return Fail(answer.message, reason=answer.reason)

# The longest a wait for a watched change (:meth:`OpsContext.until_watched`) lasts without an event. Polling
# instead (0.2–0.5 s) would make the passes over a request grow with the wall time of its restarts (tens of
# seconds each), passes that find nothing new; the watch event brings the pass when there is something to see.
WATCHED_BOUND = 15.0

# The ops engine's etcd clients in the pool (:mod:`opsmanager.etcd.pool`); the engine closes them when a request ends.
ENGINE_USER = "engine"


def steps_event(steps: list[tuple[str, str, str]]) -> tuple[str, str, str]:
    """One Event for the steps one write records done: reason the last step, the message naming each (one step:
    its own message), Warning if any is."""
    reason = steps[-1][0]
    type_ = "Warning" if any(t == "Warning" for _, _, t in steps) else "Normal"
    if len(steps) == 1:
        return reason, steps[0][1], type_
    return reason, "; ".join(f"{cond}: {message}" for cond, message, _ in steps), type_


def steps_suffix(steps: list[tuple[str, str, str]]) -> str:
    """The steps a terminal write records done, for the terminal Event's message."""
    return "".join(f"; {cond}: {message}" for cond, message, _ in steps)


def per_pod_message(step: str, status: str, pod: str) -> str:
    """KubeDB's per-pod message: ``"check pod ready; ConditionStatus:True; PodName:etcd-0"``."""
    words = {
        constants.STEP_EVICT_POD: "evict pod",
        constants.STEP_CHECK_POD_READY: "check pod ready",
        constants.STEP_ETCD_CLUSTER_HEALTHY: "etcd cluster healthy",
        constants.STEP_MOVE_LEADER: "move leader",
        constants.STEP_DEFRAGMENT: "defragment",
        constants.STEP_UPDATE_PEER_URL: "update peer url",
        constants.STEP_VERIFY_SERVED_CERTIFICATE: "verify served certificate",
    }.get(step, step)
    return f"{words}; ConditionStatus:{status}; PodName:{pod}"


@dataclasses.dataclass
class OpsContext:
    kube: kube.Kube
    request: dict[str, Any]
    db_obj: dict[str, Any]
    plan: plan_mod.Plan
    now: datetime.datetime
    # The Etcd's spec.tls when the request started: what ``db`` renders from, whatever spec.tls says now.
    tls_before: dict[str, Any] | None = None
    # How this reconcile reaches etcd: the engine's one seam to etcd (tests inject a fake).
    admin_factory: admin.AdminFactory = admin.connect
    # Seconds the kubelet may take to deliver a changed Secret into a running pod (``Engine.delivery_timeout``).
    delivery_timeout: float = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT
    # The operator's etcd clients, reused across reconciles (:mod:`opsmanager.etcd.pool`); None: ``admin_factory``
    # makes a client per call (tests' fakes).
    etcd_pool: pool.ClientPool | None = None
    # What changed in ``request["status"]`` since the last flush: condition types (in the order of the in-memory
    # list) and top-level status fields (phase, observedGeneration).
    _dirty_conditions: set[str] = dataclasses.field(default_factory=set)
    _dirty_fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Events and metric observations that go out after the next flush's write: (reason, message, type).
    _events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    _steps: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # steps done: (condition, …)
    _written: list[Callable[[], None]] = dataclasses.field(default_factory=list)
    # Does a watch event about the Etcd's objects wake the next reconcile (the operator's watch caches and wakeups)?
    # Then a step that waits for something the caches see (a pod Ready, a StatefulSet revision, a Certificate) asks
    # only for a long bound (:meth:`until_watched`): the event brings the next pass, not a poll.
    watched: bool = False
    # ``db`` and ``spec`` parsed once per object they come from (the properties are read dozens of times a pass
    # and validating the Etcd is costly): (source, source, model).
    _db_memo: tuple[Any, Any, etcd_api.Etcd] | None = dataclasses.field(default=None, repr=False, compare=False)
    _spec_memo: tuple[Any, ops_api.EtcdOpsRequestSpec] | None = dataclasses.field(default=None, repr=False,
                                                                                    compare=False)

    @property
    def name(self) -> str:
        return str(self.request["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.request["metadata"]["namespace"])

    @property
    def generation(self) -> int | None:
        gen = self.request["metadata"].get("generation")
        return int(gen) if gen is not None else None

    @property
    def db(self) -> etcd_api.Etcd:
        """The Etcd as it is now (replicas, pod template, uid), with ``spec.tls`` as it was when the request
        started — ``UpdateDatabase`` writes the new TLS near the end, and the plan must not change under it."""
        memo = self._db_memo
        if memo is not None and memo[0] is self.db_obj and memo[1] is self.tls_before:
            return memo[2]
        spec = {k: v for k, v in (self.db_obj.get("spec") or {}).items() if k != "tls"}
        if self.tls_before is not None:
            spec["tls"] = self.tls_before
        db = etcd_api.Etcd.model_validate({**self.db_obj, "spec": spec})
        self._db_memo = (self.db_obj, self.tls_before, db)
        return db

    @property
    def db_name(self) -> str:
        return str(self.db_obj["metadata"]["name"])

    @property
    def spec(self) -> ops_api.EtcdOpsRequestSpec:
        """The request's spec (the object is replaced, never edited, when a write returns a newer one; the status
        edits made in place do not touch the spec)."""
        memo = self._spec_memo
        if memo is not None and memo[0] is self.request:
            return memo[1]
        spec = ops_api.EtcdOpsRequest.model_validate(self.request).spec
        self._spec_memo = (self.request, spec)
        return spec

    def until_watched(self, delay: float) -> float:
        """The delay of a wait for a change the watch caches see: ``delay`` without watches (each wait lasts its
        whole delay), else :data:`WATCHED_BOUND` — the change's event wakes the next pass at once, and the bound
        only covers an event the operator could have missed."""
        return WATCHED_BOUND if self.watched else delay

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return list((self.request.get("status") or {}).get("conditions") or [])

    # --- status ---------------------------------------------------------------------------------------------

    def set_condition(self, type_: str, status: str, message: str | None = None, *,
                      reason: str | None = None) -> None:
        """Set one condition on the request: in memory at once, written by the next :meth:`flush`."""
        if reason is None and constants.PER_POD_SEPARATOR not in type_:
            reason = type_
        st = self.request.setdefault("status", {}) or {}
        before = st.get("conditions") or []
        after = conditions.set_condition(before, type_, status, reason=reason, message=message,
                                         observed_generation=self.generation)
        if after != before:
            st["conditions"] = after
            self.request["status"] = st
            self._dirty_conditions.add(type_)

    def set_pod_condition(self, step: str, pod: str, status: str) -> None:
        self.set_condition(constants.per_pod_type(step, pod), status, per_pod_message(step, status, pod))

    def set_phase(self, phase: str) -> None:
        """The request's phase (and ``observedGeneration``), written by the next :meth:`flush`."""
        st = self.request.setdefault("status", {}) or {}
        for key, value in (("phase", phase), ("observedGeneration", self.generation)):
            if st.get(key) != value:
                st[key] = value
                self._dirty_fields[key] = value
        self.request["status"] = st

    def record(self, field: str, value: dict[str, Any] | list[Any]) -> None:
        """A top-level ``status`` field of the engine's durable record (``origin``, ``restarts``), replaced whole,
        written by the next :meth:`flush` — which a step flushes before the action the record is for."""
        st = self.request.setdefault("status", {}) or {}
        if st.get(field) != value:
            st[field] = value
            self._dirty_fields[field] = value
        self.request["status"] = st

    def recorded(self, field: str) -> dict[str, Any]:
        """The engine's durable record ``status.<field>`` (empty when there is none yet)."""
        value = (self.request.get("status") or {}).get(field)
        return dict(value) if isinstance(value, dict) else {}

    def legacy_annotation(self, name: str) -> str | None:
        """An annotation an older engine kept its record in (read on the requests it started, never written)."""
        value = (self.request["metadata"].get("annotations") or {}).get(name)
        return value if isinstance(value, str) else None

    @property
    def dirty(self) -> bool:
        """Is anything queued that :meth:`flush` would write?"""
        return bool(self._dirty_conditions or self._dirty_fields)

    async def flush(self) -> None:
        """Write every queued status change in one ``transact_status`` (one PATCH; no I/O when nothing is queued).
        A condition whose live status already is the final one keeps its live ``lastTransitionTime``. Then post the
        queued Events and run the queued metric observations (:meth:`announce`, :meth:`on_written`)."""
        if self.dirty:
            await self._write()
        observations, self._written = self._written, []
        for observe in observations:
            observe()
        events, self._events = self._events, []
        if self._steps:
            events.insert(0, steps_event(self.take_steps()))
        for reason, message, type_ in events:
            await self.kube.event(self.request, reason=reason, message=message, type_=type_)

    async def _write(self) -> None:
        final = [c for c in self.conditions if c.get("type") in self._dirty_conditions]
        fields = dict(self._dirty_fields)

        def mutate(st: dict[str, Any]) -> dict[str, Any]:
            st = {**st, **fields}
            if final:  # merge_conditions keeps the live lastTransitionTime when the live status is the final one
                st["conditions"] = conditions.merge_conditions(st.get("conditions"), final)
            return st

        updated = await self.kube.transact_status(
            constants.OPS_API_VERSION, constants.OPS_KIND, self.namespace, self.name, mutate)
        self._dirty_conditions.clear()
        self._dirty_fields.clear()
        if updated is not None:
            self.request = updated

    def condition(self, type_: str) -> dict[str, Any] | None:
        return conditions.get_condition(self.conditions, type_)

    def is_true(self, type_: str) -> bool:
        return conditions.is_true(self.conditions, type_)

    def announce(self, reason: str, message: str, type_: str = "Normal") -> None:
        """An Event on the request, posted after the next flush's write (the record of what it announces). Never
        Secret data or key material in ``message``."""
        self._events.append((reason, message, type_))

    def announce_step(self, condition: str, message: str, type_: str = "Normal") -> None:
        """A step done, announced after the next flush's write together with the other steps it records."""
        self._steps.append((condition, message, type_))

    def take_steps(self) -> list[tuple[str, str, str]]:
        """The steps done and not yet announced (the terminal Event folds them into its own)."""
        steps, self._steps = self._steps, []
        return steps

    def on_written(self, observe: Callable[[], None]) -> None:
        """A metric observation made after the next flush's write: counted only once the transition is recorded."""
        self._written.append(observe)

    async def event(self, reason: str, message: str, type_: str = "Normal") -> None:
        """An Event on the request now (a terminal one, after the terminal write)."""
        await self.kube.event(self.request, reason=reason, message=message, type_=type_)

    async def etcd_event(self, reason: str, message: str, type_: str = "Normal") -> None:
        """An Event on the Etcd now (pause and resume, after the Etcd's status write that does them)."""
        await self.kube.event(self.db_obj, reason=reason, message=message, type_=type_)

    # --- objects of the cluster -----------------------------------------------------------------------------

    async def secret(self, name: str) -> dict[str, Any] | None:
        return await self.kube.get("v1", "Secret", self.namespace, name)

    async def statefulset(self) -> dict[str, Any] | None:
        return await self.kube.get("apps/v1", "StatefulSet", self.namespace, naming.statefulset(self.db_name))

    async def pods(self) -> dict[str, dict[str, Any]]:
        return await members.pods(self.kube, self.namespace, self.db_name)

    def pod_names(self) -> list[str]:
        return naming.pods(self.db_name, self.db.spec.replicas)

    def fqdn(self, pod: str) -> str:
        return naming.pod_fqdn(self.db_name, self.namespace, pod)

    # --- etcd ------------------------------------------------------------------------------------------

    async def identity(self) -> access.TLSIdentity | None:
        """The operator's own client identity for this cluster (the one policy of :mod:`opsmanager.tls.identity`),
        trusting every CA of the TLS the cluster had and the TLS it moves to; None without TLS on either side."""
        tls_configs = [t for t in (self.plan.desired_tls, self.db.spec.tls) if t is not None]
        if not tls_configs:
            return None
        identity, _ = await tls_identity.client_identity(self.kube, self.namespace, self.db_name, tls_configs)
        return identity

    async def etcd(self, pods: dict[str, dict[str, Any]] | None = None, *,
                   peer_scheme: str = "https") -> admin.EtcdAdmin:
        """An etcd admin over every member pod that has an address, trying https then http ("dual view")."""
        pods = pods if pods is not None else await self.pods()
        identity = await self.identity()
        schemes = ("https", "http") if identity is not None else ("http",)
        eps = members.endpoints(self.db_name, self.namespace, pods, self.pod_names(), schemes=schemes,
                                peer_scheme=peer_scheme, metrics=True)
        if self.etcd_pool is None or not eps:  # no endpoint: the factory raises MemberUnreachable
            made = self.admin_factory(eps, identity)
        else:
            made = await self.etcd_pool.lease(self.namespace, self.db_name, eps, identity, timeout=admin.TIMEOUT,
                                              user=ENGINE_USER)
        creds = await self.credentials()
        if creds != made.credentials:
            made.set_credentials(creds)
        return made

    async def joins_existing(self) -> None:
        """From now on a member started on an empty data directory joins the running cluster (recorded on the Etcd,
        ``status.initialClusterState: existing``, before a member is added or the others wiped)."""
        from opsmanager.cluster import etcdstatus, render

        if ((self.db_obj.get("status") or {}).get("initialClusterState")) == "existing":
            return
        updated = await etcdstatus.write(self.kube, self.namespace, self.db_name, render.JoinExisting())
        if updated is not None:
            self.db_obj = updated

    async def backup_store(self) -> store.ObjectStore | Fail:
        """The object store of the Etcd's backups (close it after use), or the failure naming the field when the
        destination cannot be used (no spec.backup, a missing credentials or CA Secret)."""
        try:
            return await backups.open_store(self.kube, self.db)
        except backups.DestinationError as err:
            return Fail(str(err), reason="DestinationInvalid")

    async def credentials(self) -> access.Credentials | None:
        """The root credentials of this cluster (etcd's authentication): from ``spec.authSecret``, and during a
        RotateAuth from the Secrets it stages in and moves to; None on a cluster without authentication."""
        also = tuple(s for s in self.plan.credential_secrets if s)
        auth = self.spec.authentication
        if auth is not None and auth.secret_ref is not None and auth.secret_ref.name:
            also += (auth.secret_ref.name,)
        return await credentials.for_etcd(self.kube, self.db, also=also)
