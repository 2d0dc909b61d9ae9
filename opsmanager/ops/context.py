"""What one reconcile of one EtcdOpsRequest works with: the request, its Etcd, the plan, and the I/O doors.

Every step module receives an :class:`OpsContext`, the engine core's status buffer
(:class:`~opsmanager.ops.core.status.RequestStatus`: every status change applies in memory at once and is written
by the next flush, in one status PATCH, with the Events and metric observations that ride on it) with the Etcd, its
plan and the doors to its members and to etcd added. Status is changed through it only (``set_condition``,
``set_pod_condition``, ``set_phase``, ``record``).

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

Events ride on the flush (:mod:`opsmanager.ops.core.status`): a step's Event goes out after the write that
records it, never before; the steps one write records done are one Event, and the terminal write's are folded into
the ``Successful``/``Failed`` Event — the API request budget counts every Event.

Everything else a step does is idempotent and observed again on the next reconcile, so losing the queued record of
it (an operator killed before the flush) only repeats work: the step, and any step before it in the same
reconcile, runs again and finds it done.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import Any

from opsmanager.api import backup as backup_api
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.backup import store
from opsmanager.cluster import backups, credentials, etcdstatus, members, naming, render
from opsmanager.etcd import access, admin, pool
from opsmanager.ops import plan as plan_mod
from opsmanager.ops.core import results
from opsmanager.ops.core import status as core_status
from opsmanager.tls import identity as tls_identity
from opsmanager.tls import trust

log = logging.getLogger("opsmanager.ops")


# What a step answers (the engine core's; every step module names them through this module).
Done = results.Done
Progress = results.Progress
Fail = results.Fail
StepResult = results.StepResult


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


# The status fields :meth:`OpsContext.records` reads: every field of the request's status but the buffer's own.
_RECORD_KEYS = frozenset(f.alias or name for name, f in ops_api.EtcdOpsRequestStatus.model_fields.items()) - {
    "phase", "observedGeneration", "conditions"}


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
class OpsContext(core_status.RequestStatus):
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

    # --- status ---------------------------------------------------------------------------------------------

    def set_pod_condition(self, step: str, pod: str, status: str) -> None:
        self.set_condition(constants.per_pod_type(step, pod), status, per_pod_message(step, status, pod))

    def record(self, *, origin: ops_api.RequestOrigin | None = None, restarts: ops_api.Restarts | None = None,
               database_sizes: dict[str, ops_api.DatabaseSize] | None = None, warnings: list[str] | None = None,
               snapshot: backup_api.SnapshotRecord | None = None, restore: ops_api.RestoreProgress | None = None,
               recovery: ops_api.RecoveryProgress | None = None,
               certificate_revisions: dict[str, int] | None = None,
               migration: ops_api.MigrationProgress | None = None) -> None:
        """The engine's durable records in the request's status (each a typed field of
        :class:`~opsmanager.api.opsrequest.EtcdOpsRequestStatus`, replaced whole), written by the next
        :meth:`flush` — which a step flushes before the action the record is for."""
        given = {name: value for name, value in (
            ("origin", origin), ("restarts", restarts), ("database_sizes", database_sizes), ("warnings", warnings),
            ("snapshot", snapshot), ("restore", restore), ("recovery", recovery),
            ("certificate_revisions", certificate_revisions), ("migration", migration)) if value is not None}
        dumped = ops_api.EtcdOpsRequestStatus.model_validate(given).model_dump(
            by_alias=True, exclude_none=True, mode="json", include=set(given))
        for key, value in dumped.items():
            self.set_field(key, value)

    @property
    def records(self) -> ops_api.EtcdOpsRequestStatus:
        """The engine's durable records as they are in memory, typed (the conditions and phase are read through
        the status buffer, not here)."""
        st = self.request.get("status") or {}
        return ops_api.EtcdOpsRequestStatus.model_validate(
            {k: v for k, v in st.items() if k in _RECORD_KEYS})

    @property
    def restarts(self) -> ops_api.Restarts:
        """The members restarted so far (``status.restarts``; empty before the first)."""
        return self.records.restarts or ops_api.Restarts()

    @property
    def snapshot(self) -> backup_api.SnapshotRecord:
        """The snapshot a Backup wrote or a Restore restores (``status.snapshot``): only the steps after the one
        that records it read it."""
        snapshot = self.records.snapshot
        if snapshot is None:
            raise LookupError(f"EtcdOpsRequest {self.namespace}/{self.name}: no snapshot recorded yet")
        return snapshot

    def legacy_annotation(self, name: str) -> str | None:
        """An annotation an older engine kept its record in (read on the requests it started, never written)."""
        value = (self.request["metadata"].get("annotations") or {}).get(name)
        return value if isinstance(value, str) else None

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

    async def etcd(self, pods: dict[str, dict[str, Any]] | None = None, *, peer_scheme: str = "https",
                   names: list[str] | None = None) -> admin.EtcdAdmin:
        """An etcd admin over every member pod that has an address, trying https then http ("dual view");
        ``names``: the member pods to reach, when not the Etcd's replicas (a StorageMigration's extra member)."""
        pods = pods if pods is not None else await self.pods()
        identity = await self.identity()
        schemes = ("https", "http") if identity is not None else ("http",)
        expected = names if names is not None else self.pod_names()
        eps = members.endpoints(self.db_name, self.namespace, pods, expected, schemes=schemes,
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
