"""The plan of an EtcdOpsRequest: which steps, in which order, each with its condition type — pure data.

A plan is computed from the request and the Etcd as it was *before* the request changed anything (``spec.tls``
on the Etcd is written back only by the ``UpdateDatabase`` step, near the end), so recomputing it on every
reconcile gives the same list. The engine runs the first step whose condition is not ``True``; that is how an
operator killed at any point resumes where it was.

This module is the vocabulary every plan is written in: the kinds of step (:class:`StepKind`, one
:class:`Step` subclass each, carrying only the fields its step module reads) and :class:`Plan`, which knows no
operation type. Which steps a type has is its own module's business
(:mod:`opsmanager.ops.operations`: one module per type, found by the registry there); the TLS plans, and why
each is ordered as it is, are in :mod:`opsmanager.ops.operations.reconfigure_tls.plans`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import ClassVar

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import render


class StepKind(enum.Enum):
    PAUSE = "Pause"  # pause the Etcd (the provisioner keeps off)
    ISSUE = "Issue"  # rotate: set Issuing=True on every Certificate, wait for a new revision
    SYNC_CERTIFICATES = "SyncCertificates"  # apply the desired Certificates, wait for complete material
    APPLY_STATEFULSET = "ApplyStatefulSet"  # re-render the StatefulSet for the step's wiring
    ROLL = "Roll"  # leader-aware rolling restart onto the StatefulSet's update revision
    RESTART = "Restart"  # the Restart request: stamp the template, then the rolling restart, as one step
    ROLL_PASS = "RollPass"  # trust bundle + StatefulSet + roll, as one intermediate pass
    UPDATE_PEER_URLS = "UpdatePeerURLs"  # member update of each peer URL to the step's scheme
    MOVE_LEADER = "MoveLeader"  # standalone MoveLeader request
    COMPACT = "Compact"  # the Compact request: compact the history below a revision, physically
    DEFRAGMENT = "Defragment"  # every member, one at a time, followers first, the leader last after MoveLeader
    SCALE_MEMBERS = "ScaleMembers"  # one member at a time toward the target count: learner → voter, or removed
    ENABLE_DOWNGRADE = "EnableDowngrade"  # etcd's downgrade protocol: validate, enable, storage version down
    VERIFY_VERSION = "VerifyVersion"  # every member runs the target etcd, the cluster version is its minor
    VERIFY_CONFIGURATION = "VerifyConfiguration"  # every member's own command line carries the new flags
    RESIZE_IN_PLACE = "ResizeInPlace"  # each member's pod resized through pods/resize, one at a time, no restart
    CLEAR_ALARMS = "ClearAlarms"  # disarm NOSPACE once the space is back
    VERIFY_SERVED = "VerifyServed"  # rotate: every member serves its new leaf (hot reload), else restart it alone
    RESCUE_CHOSEN = "RescueChosen"  # rescue: record why the rescue plan was chosen (from the persisted observation)
    RESTART_ALL = "RestartAll"  # rescue CA: restart every member at once (each once), wait for quorum (bounded)
    UPLOAD_SNAPSHOT = "UploadSnapshot"  # Backup: a snapshot from a follower, checked, uploaded with its SHA-256
    PRUNE_SNAPSHOTS = "PruneSnapshots"  # Backup: the store pruned to the retention, status.backup written
    VERIFY_SNAPSHOT = "VerifySnapshot"  # Restore: find, download and check the snapshot before anything changes
    RESTORE_MEMBERS = "RestoreMembers"  # Restore: the plan for the init containers, every member replaced together
    VERIFY_RESTORE = "VerifyRestore"  # Restore: HashKV at the snapshot's revision on every member, as recorded
    CONFIRM_QUORUM_LOSS = "ConfirmQuorumLoss"  # RecoverFromQuorumLoss: still lost, and the survivor still the one
    FORCE_NEW_CLUSTER = "ForceNewCluster"  # the survivor alone, restarted with --force-new-cluster, then without
    REJOIN_MEMBERS = "RejoinMembers"  # the others wiped and re-added one at a time as learners, then promoted
    UPDATE_CREDENTIAL = "UpdateCredential"  # RotateAuth: stage the new root password in the auth Secret
    APPLY_CREDENTIAL = "ApplyCredential"  # RotateAuth: UserChangePassword (or turn auth on), verified by a login
    EXPAND_VOLUMES = "ExpandVolumes"  # VolumeExpansion: each member's claim asks for the new size; the volume grew
    VERIFY_VOLUMES = "VerifyVolumes"  # VolumeExpansion: each member's filesystem has the size (the kubelet's statfs)
    REPLACE_CLAIM_TEMPLATES = "ReplaceClaimTemplates"  # the StatefulSet recreated (orphan) with new claim templates
    SURGE_MEMBER = "SurgeMember"  # StorageMigration: ordinal N added on the new class (learner → voter)
    MIGRATE_MEMBERS = "MigrateMembers"  # StorageMigration: each member replaced on a claim of the new class
    REMOVE_SURGE = "RemoveSurge"  # StorageMigration: ordinal N removed again, the StatefulSet back to N
    UPDATE_DATABASE = "UpdateDatabase"  # write spec.tls back to the Etcd, clean up what is no longer used


class Trust(enum.Enum):
    """What the trust bundle holds during a pass."""

    KEEP = "Keep"  # whatever it holds now
    CURRENT_AND_DESIRED = "CurrentAndDesired"  # old CA + new CA (widen)
    DESIRED = "Desired"  # the CA(s) of the desired certificates only (narrow / a fresh TLS setup)
    CURRENT_AND_RENEWED = "CurrentAndRenewed"  # CA rollover widen: + the sources' CAs and the CA Issuers' CAs
    IN_USE = "InUse"  # CA rollover narrow: the bundle's CAs that sign a mounted leaf or are an issuer's CA now



@dataclasses.dataclass(frozen=True)
class Step:
    """What every step has: the condition it sets and its message once done. One subclass per :class:`StepKind`,
    each carrying only its own fields; the engine runs it with the step module its ``kind`` names."""

    kind: ClassVar[StepKind]
    condition: str
    message: str


@dataclasses.dataclass(frozen=True)
class Pause(Step):
    kind: ClassVar[StepKind] = StepKind.PAUSE


@dataclasses.dataclass(frozen=True)
class Issue(Step):
    kind: ClassVar[StepKind] = StepKind.ISSUE
    tls: etcd_api.TLSConfig | None  # whose Certificates are re-issued


@dataclasses.dataclass(frozen=True)
class SyncCertificates(Step):
    kind: ClassVar[StepKind] = StepKind.SYNC_CERTIFICATES
    tls: etcd_api.TLSConfig | None  # the Certificates applied and their Secrets released
    trust: Trust = Trust.KEEP  # the bundle written once the material is complete (a fresh setup: DESIRED)
    # CA rollover: release through the gate against the CAs every member has loaded, not the bundle
    release_loaded: bool = False


@dataclasses.dataclass(frozen=True)
class ApplyStatefulSet(Step):
    kind: ClassVar[StepKind] = StepKind.APPLY_STATEFULSET
    wiring: render.Wiring
    tls: etcd_api.TLSConfig | None


@dataclasses.dataclass(frozen=True)
class Roll(Step):
    """The rolling restart onto the template the step before applied."""

    kind: ClassVar[StepKind] = StepKind.ROLL
    wiring: render.Wiring
    tls: etcd_api.TLSConfig | None
    verify_served_certificates: bool = False  # after each member's restart, by handshake


@dataclasses.dataclass(frozen=True)
class Restart(Step):
    """The Restart request: stamp the template, then the rolling restart, as one step."""

    kind: ClassVar[StepKind] = StepKind.RESTART
    verify_served_certificates: ClassVar[bool] = False
    wiring: render.Wiring
    tls: etcd_api.TLSConfig | None


@dataclasses.dataclass(frozen=True)
class RollPass(Step):
    """An intermediate pass: the trust bundle it needs, the template for its wiring, the rolling restart."""

    kind: ClassVar[StepKind] = StepKind.ROLL_PASS
    verify_served_certificates: ClassVar[bool] = False
    wiring: render.Wiring
    tls: etcd_api.TLSConfig | None
    trust: Trust = Trust.KEEP
    # Handover: the user-provided TLS being handed over. A pass with it is skipped (no bundle write, no
    # roll) when the new issuer's CA is the CA of the user's Secrets — a fact that survives an operator crash.
    handover_from: etcd_api.TLSConfig | None = None
    # CA rollover: on every reconcile, release the sources through the gate against the CAs every member has
    # loaded, so leaves cert-manager renews during the run still reach the members
    release_loaded: bool = False


@dataclasses.dataclass(frozen=True)
class UpdatePeerURLs(Step):
    kind: ClassVar[StepKind] = StepKind.UPDATE_PEER_URLS
    peer_scheme: str


@dataclasses.dataclass(frozen=True)
class MoveLeader(Step):
    kind: ClassVar[StepKind] = StepKind.MOVE_LEADER


@dataclasses.dataclass(frozen=True)
class Defragment(Step):
    kind: ClassVar[StepKind] = StepKind.DEFRAGMENT


@dataclasses.dataclass(frozen=True)
class ScaleMembers(Step):
    kind: ClassVar[StepKind] = StepKind.SCALE_MEMBERS
    replicas: int  # the member count to end with
    wiring: render.Wiring  # the peer scheme a new member is added with


@dataclasses.dataclass(frozen=True)
class EnableDowngrade(Step):
    kind: ClassVar[StepKind] = StepKind.ENABLE_DOWNGRADE
    version: str  # the target major.minor


@dataclasses.dataclass(frozen=True)
class VerifyVersion(Step):
    kind: ClassVar[StepKind] = StepKind.VERIFY_VERSION
    version: str  # the etcd version every member must run


@dataclasses.dataclass(frozen=True)
class VerifyConfiguration(Step):
    kind: ClassVar[StepKind] = StepKind.VERIFY_CONFIGURATION
    flags: tuple[str, ...]  # ``--name=value`` each member must have started with


@dataclasses.dataclass(frozen=True)
class ResizeInPlace(Step):
    kind: ClassVar[StepKind] = StepKind.RESIZE_IN_PLACE
    resources: etcd_api.ResourceRequirements  # the etcd container's, on every member


@dataclasses.dataclass(frozen=True)
class ClearAlarms(Step):
    kind: ClassVar[StepKind] = StepKind.CLEAR_ALARMS


@dataclasses.dataclass(frozen=True)
class Compact(Step):
    kind: ClassVar[StepKind] = StepKind.COMPACT
    revision: int | None  # None: the current revision when the step runs


@dataclasses.dataclass(frozen=True)
class VerifyServed(Step):
    kind: ClassVar[StepKind] = StepKind.VERIFY_SERVED
    verify_served_certificates: ClassVar[bool] = True  # a member it restarts alone is verified like the rest
    tls: etcd_api.TLSConfig | None


@dataclasses.dataclass(frozen=True)
class RescueChosen(Step):
    kind: ClassVar[StepKind] = StepKind.RESCUE_CHOSEN


@dataclasses.dataclass(frozen=True)
class RestartAll(Step):
    kind: ClassVar[StepKind] = StepKind.RESTART_ALL


@dataclasses.dataclass(frozen=True)
class UploadSnapshot(Step):
    kind: ClassVar[StepKind] = StepKind.UPLOAD_SNAPSHOT


@dataclasses.dataclass(frozen=True)
class PruneSnapshots(Step):
    kind: ClassVar[StepKind] = StepKind.PRUNE_SNAPSHOTS


@dataclasses.dataclass(frozen=True)
class VerifySnapshot(Step):
    kind: ClassVar[StepKind] = StepKind.VERIFY_SNAPSHOT
    source: str  # an object key, or "latest"


@dataclasses.dataclass(frozen=True)
class RestoreMembers(Step):
    kind: ClassVar[StepKind] = StepKind.RESTORE_MEMBERS


@dataclasses.dataclass(frozen=True)
class VerifyRestore(Step):
    kind: ClassVar[StepKind] = StepKind.VERIFY_RESTORE


@dataclasses.dataclass(frozen=True)
class ConfirmQuorumLoss(Step):
    kind: ClassVar[StepKind] = StepKind.CONFIRM_QUORUM_LOSS
    survivor: str


@dataclasses.dataclass(frozen=True)
class ForceNewCluster(Step):
    kind: ClassVar[StepKind] = StepKind.FORCE_NEW_CLUSTER
    survivor: str


@dataclasses.dataclass(frozen=True)
class RejoinMembers(Step):
    kind: ClassVar[StepKind] = StepKind.REJOIN_MEMBERS
    survivor: str


@dataclasses.dataclass(frozen=True)
class UpdateCredential(Step):
    kind: ClassVar[StepKind] = StepKind.UPDATE_CREDENTIAL
    staging_secret: str  # the auth Secret clients read: the new password goes there as password.next
    source_secret: str | None  # the request's secretRef (the new password is its password); None: generate one


@dataclasses.dataclass(frozen=True)
class ApplyCredential(Step):
    kind: ClassVar[StepKind] = StepKind.APPLY_CREDENTIAL
    staging_secret: str
    source_secret: str | None


@dataclasses.dataclass(frozen=True)
class ExpandVolumes(Step):
    kind: ClassVar[StepKind] = StepKind.EXPAND_VOLUMES
    size: str  # the quantity every member's claim asks for
    online: bool  # True: done once each filesystem grew too; False: once each volume grew (the roll grows the rest)


@dataclasses.dataclass(frozen=True)
class VerifyVolumes(Step):
    kind: ClassVar[StepKind] = StepKind.VERIFY_VOLUMES
    size: str  # every member's filesystem must have (nearly) this size


@dataclasses.dataclass(frozen=True)
class ReplaceClaimTemplates(Step):
    kind: ClassVar[StepKind] = StepKind.REPLACE_CLAIM_TEMPLATES
    storage: etcd_api.PersistentVolumeClaimSpec  # the claim template the StatefulSet is recreated with
    wiring: render.Wiring  # the template it is recreated with: the one the members run


@dataclasses.dataclass(frozen=True)
class SurgeMember(Step):
    kind: ClassVar[StepKind] = StepKind.SURGE_MEMBER
    replicas: int  # the Etcd's member count N: the extra member is ordinal N


@dataclasses.dataclass(frozen=True)
class MigrateMembers(Step):
    kind: ClassVar[StepKind] = StepKind.MIGRATE_MEMBERS
    replicas: int  # ordinals 0..N-1 are replaced, in order
    storage_class: str  # the class every replaced member's claim must have
    retain_old: bool  # oldPVReclaimPolicy Retain: each old volume set to Retain before its claim is deleted


@dataclasses.dataclass(frozen=True)
class RemoveSurge(Step):
    kind: ClassVar[StepKind] = StepKind.REMOVE_SURGE
    replicas: int


@dataclasses.dataclass(frozen=True)
class UpdateDatabase(Step):
    kind: ClassVar[StepKind] = StepKind.UPDATE_DATABASE


# The steps that restart members through :mod:`opsmanager.ops.restart` (and verify_served, which restarts a stale
# member alone with the same machinery).
Restarting = Roll | Restart | RollPass | VerifyServed


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the engine needs of any plan. ``change``: which of its plans a type chose, when it has several
    (``ReconfigureTLS``: add, remove, rotate, …), None when it has one; ``desired_tls``: the TLS the cluster ends
    with (the operator's client identity trusts its CAs beside the current ones); ``pauses``: the Etcd is paused
    while the plan runs. What a type writes back to the Etcd when it succeeds travels in a subclass of its own
    module (:mod:`opsmanager.ops.operations`), never in a field here."""

    request_type: str
    change: enum.Enum | None
    desired_tls: etcd_api.TLSConfig | None
    steps: tuple[Step, ...]
    pauses: bool = True

    @property
    def summary(self) -> str:
        """What the plan does, in one word: the chosen change, else the request's type."""
        return str(self.change.value) if self.change is not None else self.request_type

    @property
    def credential_secrets(self) -> tuple[str, ...]:
        """Secrets the root credentials may also be read from while the plan runs, beside ``spec.authSecret``."""
        return ()


# --- the steps every type's plan shares ----------------------------------------------------------------------


def running(message: str) -> Step:
    """The first step of a plan that pauses the Etcd: ``Running``, its message what the request does."""
    return Pause(constants.COND_RUNNING, message)


def update_database(message: str) -> Step:
    """The last step of a plan that changes the Etcd's spec: the type's write-back (``UpdateDatabase``)."""
    return UpdateDatabase(constants.COND_UPDATE_DATABASE, message)
