"""The provisioner's changes of an Etcd's status: typed values for :func:`opsmanager.cluster.etcdstatus.write`.

The Etcd's status is shared: the provisioner writes ``phase``, ``observedGeneration``, ``quorumLoss``,
``materialAnnounced`` and its own conditions, the ops engine writes ``Paused`` (and nothing of ours). Every write
goes through the one writer (re-read, apply these changes, skip a no-op, optimistic lock, retry on 409), and these
changes only ever set the condition types listed in :data:`OWNED_CONDITIONS` — never ``Paused`` — so neither side
overwrites the other. Each change's ``apply`` is pure: it returns a new status and leaves its argument alone.

Messages carry no timings or counters that change while nothing happens, so a steady cluster writes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from opsmanager.api import conditions, constants, pause
from opsmanager.cluster import health

Status = dict[str, Any]

# Our own condition types (besides KubeDB's database conditions in api.constants):
# Reconciled: did the last reconcile finish (False: waiting for certificates, blocked by a foreign object, paused)?
COND_RECONCILED = "Reconciled"
# DeletionBlocked: deletion was requested but spec.deletionPolicy is DoNotTerminate.
COND_DELETION_BLOCKED = "DeletionBlocked"

OWNED_CONDITIONS = (
    constants.COND_PROVISIONING_STARTED,
    constants.COND_REPLICA_READY,
    constants.COND_ACCEPTING_CONNECTION,
    constants.COND_READY,
    constants.COND_PROVISIONED,
    constants.COND_HALTED,
    COND_RECONCILED,
    COND_DELETION_BLOCKED,
    constants.COND_TLS_MATERIAL_READY,
    constants.COND_QUORUM_LOST,
)

# Reasons (KubeDB's where it has one).
REASON_PROVISIONING_STARTED = "DatabaseProvisioningStartedSuccessfully"
REASON_ALL_REPLICAS_READY = "AllReplicasAreReady"
REASON_REPLICAS_NOT_READY = "SomeReplicasAreNotReady"
REASON_ACCEPTING = "DatabaseAcceptingConnectionRequest"
REASON_NOT_ACCEPTING = "DatabaseNotAcceptingConnectionRequest"
REASON_READY = "ReadinessCheckSucceeded"
REASON_NOT_READY = "ReadinessCheckFailed"
REASON_PROVISIONED = "DatabaseSuccessfullyProvisioned"
REASON_HALTED = "DatabaseHalted"
REASON_RESUMED = "DatabaseResumed"


def _set(status: Status, type_: str, value: str, reason: str, message: str, generation: int | None,
         now: datetime.datetime | None) -> None:
    if type_ not in OWNED_CONDITIONS:  # a guard for future edits: the engine's conditions are not ours to write
        raise ValueError(f"the provisioner does not own condition {type_!r}")
    status["conditions"] = conditions.set_condition(
        status.get("conditions"), type_, value, reason=reason, message=message,
        observed_generation=generation, now=now,
    )


def is_provisioned(status: Status | None) -> bool:
    return conditions.is_true((status or {}).get("conditions"), constants.COND_PROVISIONED)


@dataclasses.dataclass(frozen=True)
class ProvisioningStarted:
    """First contact: ``ProvisioningStarted=True`` and ``phase: Provisioning`` unless a phase is already there."""

    generation: int | None
    now: datetime.datetime | None = None

    def apply(self, status: Status) -> Status:
        status = dict(status)
        if not conditions.is_true(status.get("conditions"), constants.COND_PROVISIONING_STARTED):
            _set(status, constants.COND_PROVISIONING_STARTED, constants.TRUE, REASON_PROVISIONING_STARTED,
                 "The operator started provisioning the cluster", self.generation, self.now)
        status.setdefault("phase", constants.DB_PHASE_PROVISIONING)
        return status


@dataclasses.dataclass(frozen=True)
class Reconciled:
    """The outcome of a reconcile as ``Reconciled``; a finished one also sets ``observedGeneration``."""

    ok: bool
    reason: str
    message: str
    generation: int | None
    now: datetime.datetime | None = None

    def apply(self, status: Status) -> Status:
        status = dict(status)
        _set(status, COND_RECONCILED, constants.TRUE if self.ok else constants.FALSE, self.reason, self.message,
             self.generation, self.now)
        if self.ok and self.generation is not None:
            status["observedGeneration"] = self.generation
        return status


REASON_MATERIAL_RELEASED = "Released"


@dataclasses.dataclass(frozen=True)
class MaterialReady:
    """``TLSMaterialReady`` from the gate: True when nothing is held back, else False with the first problem's
    code as the reason and every problem's message (``problems``: (code, message) pairs; no Secret data)."""

    problems: tuple[tuple[str, str], ...]
    generation: int | None
    now: datetime.datetime | None = None

    def apply(self, status: Status) -> Status:
        status = dict(status)
        if not self.problems:
            _set(status, constants.COND_TLS_MATERIAL_READY, constants.TRUE, REASON_MATERIAL_RELEASED,
                 "every mounted Secret holds the material its source passed the gate with", self.generation,
                 self.now)
        else:
            _set(status, constants.COND_TLS_MATERIAL_READY, constants.FALSE, self.problems[0][0],
                 "held back: " + "; ".join(m for _c, m in self.problems), self.generation, self.now)
        return status


@dataclasses.dataclass(frozen=True)
class MaterialAnnounced:
    """``status.materialAnnounced``: the (source Secret, gate reason) pairs whose Warning Event was posted, so a
    held source is announced once, not at every pass; written before the Events, and emptied (removed) once nothing
    is held, so the same failure coming back is announced again."""

    pairs: tuple[tuple[str, str], ...]

    def apply(self, status: Status) -> Status:
        status = dict(status)
        status.pop("materialAnnounced", None)
        if self.pairs:
            status["materialAnnounced"] = [{"secret": secret, "reason": reason}
                                           for secret, reason in sorted(self.pairs)]
        return status


def announced(obj: Mapping[str, Any]) -> set[tuple[str, str]] | None:
    """The pairs ``status.materialAnnounced`` records, or None when the status holds no such record."""
    record = (obj.get("status") or {}).get("materialAnnounced")
    if not isinstance(record, list):
        return None
    return {(str(x.get("secret")), str(x.get("reason"))) for x in record if isinstance(x, Mapping)}


@dataclasses.dataclass(frozen=True)
class DeletionBlocked:
    """``DeletionBlocked=True``: deletion was requested but ``spec.deletionPolicy`` is ``DoNotTerminate``."""

    message: str
    generation: int | None
    now: datetime.datetime | None = None

    def apply(self, status: Status) -> Status:
        status = dict(status)
        _set(status, COND_DELETION_BLOCKED, constants.TRUE, constants.DELETION_DO_NOT_TERMINATE, self.message,
             self.generation, self.now)
        return status


REASON_QUORUM_LOST = "QuorumLost"
REASON_QUORUM_AT_RISK = "QuorumAtRisk"
REASON_QUORUM_BACK = "QuorumRestored"
# How long a majority must be silent before QuorumLost turns True (`opsmanager run --quorum-loss-after`): a rolling
# restart or a node reboot loses quorum for seconds, and a recovery from quorum loss wipes members.
DEFAULT_QUORUM_LOSS_AFTER = 60.0


def _quorum(status: Status, verdict: health.Verdict, generation: int | None, now: datetime.datetime,
            after: float) -> None:
    """``status.quorumLoss`` and ``QuorumLost``: since when a majority does not answer, who answers (with its
    committed index) and the survivor a recovery would keep; True once that lasted ``after`` seconds."""
    if verdict.has_quorum or verdict.blocked or not is_provisioned(status):
        if status.pop("quorumLoss", None) is not None or conditions.is_true(status.get("conditions"),
                                                                            constants.COND_QUORUM_LOST):
            _set(status, constants.COND_QUORUM_LOST, constants.FALSE, REASON_QUORUM_BACK,
                 f"a quorum of members answers again ({len(verdict.healthy)}/{verdict.replicas})", generation, now)
        return
    since = (status.get("quorumLoss") or {}).get("since") or conditions.rfc3339(now)
    answering = dict(verdict.committed)
    survivor = health.survivor(verdict.committed)
    status["quorumLoss"] = {"since": since, "answering": answering, **({"survivor": survivor} if survivor else {})}
    age = int((now - conditions.parse_rfc3339(since)).total_seconds())
    who = (f"a RecoverFromQuorumLoss would keep {survivor} (raft committed index {answering[survivor]}, the "
           f"highest of {', '.join(f'{n} {i}' for n, i in sorted(answering.items()))}): file one with "
           f"recoverFromQuorumLoss.confirmMember: {survivor}" if survivor
           else "no member answers, so there is nothing to recover from: bring a member with its data back")
    if age >= after:
        _set(status, constants.COND_QUORUM_LOST, constants.TRUE, REASON_QUORUM_LOST,
             f"{len(verdict.healthy)}/{verdict.replicas} members healthy for {age}s ({'; '.join(verdict.problems)}); {who}",
             generation, now)
    else:
        _set(status, constants.COND_QUORUM_LOST, constants.FALSE, REASON_QUORUM_AT_RISK,
             f"{len(verdict.healthy)}/{verdict.replicas} members healthy for {age}s; QuorumLost after {int(after)}s",
             generation, now)


@dataclasses.dataclass(frozen=True)
class Observed:
    """Phase and the database conditions from one health verdict.

    While an EtcdOpsRequest holds the Etcd paused nothing is written: the request's own conditions and Events
    report each member it restarts and moves leadership from, and rewriting the Etcd's phase and messages ("2/3 pods
    ready", which member is down) at every pass of a planned roll would cost the API server writes the request
    already made. The status is brought up to date at the first pass after the request resumes the Etcd."""

    verdict: health.Verdict
    halted: bool
    generation: int | None
    now: datetime.datetime | None = None
    quorum_loss_after: float = DEFAULT_QUORUM_LOSS_AFTER

    def apply(self, status: Status) -> Status:
        if pause.held_by_request(status) is not None:
            return status
        status = dict(status)
        verdict, generation, now = self.verdict, self.generation, self.now
        provisioned = is_provisioned(status)
        phase = health.phase_of(verdict, halted=self.halted, provisioned=provisioned)
        status["phase"] = phase
        if self.halted:
            _set(status, constants.COND_HALTED, constants.TRUE, REASON_HALTED,
                 "spec.halted is true: members stopped, data volumes kept", generation, now)
        elif conditions.get_condition(status.get("conditions"), constants.COND_HALTED) is not None:
            _set(status, constants.COND_HALTED, constants.FALSE, REASON_RESUMED,
                 "spec.halted is false: members running", generation, now)
        self._members(status)
        if phase == constants.DB_PHASE_READY:
            _set(status, constants.COND_READY, constants.TRUE, REASON_READY, verdict.summary(), generation, now)
        else:
            _set(status, constants.COND_READY, constants.FALSE, REASON_NOT_READY,
                 f"phase {phase}: {verdict.summary()}", generation, now)
        if phase == constants.DB_PHASE_READY and not provisioned:
            # Set once, the first time the cluster is Ready, and never cleared (KubeDB's meaning).
            _set(status, constants.COND_PROVISIONED, constants.TRUE, REASON_PROVISIONED,
                 "The cluster reached Ready for the first time", generation, now)
        if not self.halted:
            _quorum(status, verdict, generation, now or datetime.datetime.now(datetime.UTC), self.quorum_loss_after)
        return status

    def _members(self, status: Status) -> None:
        """``ReplicaReady`` and ``AcceptingConnection``: how many pods are ready, how many members answer."""
        verdict, generation, now = self.verdict, self.generation, self.now
        ready_pods = len(verdict.pods_ready)
        if verdict.replicas and ready_pods == verdict.replicas:
            _set(status, constants.COND_REPLICA_READY, constants.TRUE, REASON_ALL_REPLICAS_READY,
                 f"All desired replicas are ready ({ready_pods}/{verdict.replicas})", generation, now)
        else:
            _set(status, constants.COND_REPLICA_READY, constants.FALSE, REASON_REPLICAS_NOT_READY,
                 f"{ready_pods}/{verdict.replicas} pods ready", generation, now)
        if verdict.accepting_connections:
            _set(status, constants.COND_ACCEPTING_CONNECTION, constants.TRUE, REASON_ACCEPTING,
                 f"{len(verdict.healthy)}/{verdict.replicas} members answer a linearizable read", generation, now)
        else:
            _set(status, constants.COND_ACCEPTING_CONNECTION, constants.FALSE, REASON_NOT_ACCEPTING,
                 verdict.summary(), generation, now)
