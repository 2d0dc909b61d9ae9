"""The ``EtcdOpsRequest`` kind (``ops.opsmanager.dev/v1alpha1``): one day-2 operation on one Etcd.

Shaped after KubeDB's ``EtcdOpsRequest`` (``shared/reference/kubedb-etcd-ops.md`` §1): ``spec`` says what to do
and is immutable once created (a CEL rule in the CRD and the webhook both enforce it); ``status`` is a phase from
a closed set plus one condition per step, written only by the ops engine.

Types run: ``constants.OPS_TYPES``; the schema admits all of KubeDB's. ``ReconfigureTLS`` does exactly one of:
remove TLS (``tls.remove``), rotate the certificates (``tls.rotateCertificates``), or add TLS / change the issuer /
change certificate fields (``tls.issuerRef`` and/or ``tls.certificates``).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

import pydantic

from opsmanager.api import backup as backup_api
from opsmanager.api import common, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import tuning as tuning_api

TLSOperation = Literal["remove", "rotate", "update"]


class ReconfigureTLSSpec(common.Model):
    """What a `ReconfigureTLS` request changes; exactly one operation per request."""

    issuer_ref: common.IssuerRef | None = pydantic.Field(
        default=None,
        description="New issuer (add TLS or change issuer). Required when the Etcd has no issuer yet.",
    )
    certificates: list[common.CertificateSpec] | None = pydantic.Field(
        default=None,
        description="Certificate fields to change, merged into the Etcd's `spec.tls.certificates` by `alias`.",
        max_length=3,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["alias"]},
    )
    rotate_certificates: bool = pydantic.Field(
        default=False,
        description="Re-issue every certificate from the current issuer; the members hot-reload the new leaves "
                    "(no restart unless one still serves its old leaf after the kubelet's delivery bound).",
    )
    remove: bool = pydantic.Field(default=False, description="Turn TLS off (back to plain HTTP) on every member.")

    def operations(self) -> list[TLSOperation]:
        """The operations this spec asks for, in KubeDB's counting order (valid requests have exactly one)."""
        ops: list[TLSOperation] = []
        if self.remove:
            ops.append("remove")
        if self.rotate_certificates:
            ops.append("rotate")
        if self.issuer_ref is not None or self.certificates:
            ops.append("update")
        return ops

    @property
    def operation(self) -> TLSOperation | None:
        """The single operation, or None when there is not exactly one."""
        ops = self.operations()
        return ops[0] if len(ops) == 1 else None


class UpdateVersionSpec(common.Model):
    """Move every member to another etcd version: up by at most one minor (3.5 → 3.6, 3.6 → 3.7), or down by one
    minor through etcd's own downgrade protocol (3.7 → 3.6, 3.6 → 3.5); any patch version within a minor."""

    target_version: str | None = pydantic.Field(default=None, description="The etcd version to run: the name of an "
                                                                         "EtcdVersion the current one's "
                                                                         "updateConstraints allow.")


class ContainerResources(common.Model):
    """New resources of one container."""

    resources: etcd_api.ResourceRequirements | None = pydantic.Field(
        default=None, description="Requests and limits (cpu, memory)."
    )


class VerticalScalingSpec(common.Model):
    """New CPU and memory for the etcd container: by the leader-aware rolling restart (``Restart``), or in place
    through each pod's ``resize`` subresource with no restart (``InPlace``)."""

    etcd: ContainerResources | None = pydantic.Field(default=None, description="The etcd container's resources.")
    exporter: ContainerResources | None = pydantic.Field(
        default=None, description="Accepted for KubeDB compatibility; there is no exporter container (inert).")
    mode: Literal["Restart", "InPlace"] | None = pydantic.Field(
        default=None, description="`Restart` (default): roll the members; `InPlace`: resize the running pods.")


class ReconfigureSpec(common.Model):
    """New etcd flags (``tuning``), applied by the leader-aware rolling restart and read back from every member.
    KubeDB's generic fields are accepted only to be refused with its words: etcd takes flags, not a config file."""

    tuning: tuning_api.TuningConfig | None = pydantic.Field(
        default=None, description="The flags to change; those not given keep their value."
    )
    config_secret: dict[str, Any] | None = pydantic.Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Not supported for Etcd (refused): use `tuning`.")
    apply_config: dict[str, str] | None = pydantic.Field(
        default=None, description="Not supported for Etcd (refused): use `tuning`.")
    remove_custom_config: bool | None = pydantic.Field(
        default=None, description="Not supported for Etcd: a flag keeps its last value until it is set again.")
    restart: Literal["auto", "true", "false"] | None = pydantic.Field(
        default=None, description="`auto` (default) and `true` roll the members onto the new flags; `false` only "
                                  "records them: each member takes them at its next restart.")


class HorizontalScalingSpec(common.Model):
    """Grow or shrink the cluster to ``replicas`` members, one at a time: a new member joins as a learner and is
    promoted once it has caught up; a member leaves highest ordinal first (leadership moved off it first)."""

    replicas: int | None = pydantic.Field(
        default=None,
        description="The number of members to end with, at least 1. An even count is accepted, with a warning.",
    )


class VolumeExpansionSpec(common.Model):
    """Grow every member's data volume to ``etcd`` (KubeDB's fields): ``Online`` resizes each claim under the running
    member (the filesystem grows while mounted); ``Offline`` resizes the volumes, then restarts the members one at
    a time behind the health gate so each filesystem grows as it is mounted again. Never a shrink."""

    etcd: common.Quantity | None = pydantic.Field(
        default=None, description="The new size of each member's data volume, e.g. `2Gi`; larger than the current.")
    mode: Literal["Online", "Offline"] | None = pydantic.Field(
        default=None, description="`Online`: resize under the running members; `Offline`: resize, then restart "
                                  "the members one at a time. Required.")


class StorageMigrationSpec(common.Model):
    """Move every member's data volume to another StorageClass (KubeDB's fields), member by member: one extra member
    on the new class joins first, then each member is replaced by a new one on a new claim (joined as a learner,
    promoted once caught up), then the extra member leaves; never fewer voters than the Etcd has. `spec.timeout`
    is required (each member's data is copied)."""

    storage_class_name: str | None = pydantic.Field(
        default=None, description="The StorageClass the members' volumes move to (it must exist, bind "
                                  "`WaitForFirstConsumer`, and differ from the current one). Required.")
    old_pv_reclaim_policy: Literal["Delete", "Retain"] | None = pydantic.Field(
        default=None, alias="oldPVReclaimPolicy", description="What becomes of each old volume when its claim is deleted: `Delete` (the "
                                  "default: the volume's own reclaim policy decides) or `Retain` (the volume is set "
                                  "to `persistentVolumeReclaimPolicy: Retain` first and kept, `Released`).")


class SecretReference(common.Model):
    """A Secret in the request's namespace (KubeDB's `TypedLocalObjectReference`)."""

    api_group: str | None = pydantic.Field(default=None, description="Empty for a core Secret.")
    kind: str | None = pydantic.Field(default=None, description="`Secret`.")
    name: str | None = pydantic.Field(default=None, description="The Secret's name.")


class AuthenticationSpec(common.Model):
    """The new `root` password: from ``secretRef`` (a Secret with `username: root` and a non-empty `password`, which
    the Etcd uses from then on), or generated into the Etcd's own auth Secret when ``secretRef`` is absent."""

    secret_ref: SecretReference | None = pydantic.Field(
        default=None, description="The Secret holding the new password; absent: a random one is generated."
    )


class BackupSpec(common.Model):
    """An on-demand backup: one full snapshot to the Etcd's `spec.backup.destination`, like a scheduled one."""


class RestoreSpec(common.Model):
    """Restore the Etcd from one of its snapshots: every member's data replaced by it (a new cluster ID)."""

    source: str | None = pydantic.Field(
        default=None,
        description="The snapshot: its object key (as in `status.backup.lastSuccess.key`) or `latest`.")


class RecoverFromQuorumLossSpec(common.Model):
    """Rebuild a cluster that lost quorum from one surviving member (destructive: the others are wiped and re-added).
    Only while the Etcd reports ``QuorumLost=True``; ``confirmMember`` must name the member the operator would keep
    (the Etcd's ``status.quorumLoss.survivor``, shown in the condition's message), or ``member`` when given."""

    member: str | None = pydantic.Field(
        default=None, description="The member to keep, if not the operator's choice (one that answers).")
    confirm_member: str | None = pydantic.Field(
        default=None, description="The member that will be kept, typed again: required, and it must match.")


class RestartSpec(common.Model):
    """A leader-aware rolling restart: followers one at a time, the leader last after moving leadership."""


class CompactSpec(common.Model):
    """Compact etcd's key-value history: every revision below ``revision`` is dropped (physically: each member
    applies it before the request ends), so a defragmentation can give the space back."""

    revision: int | None = pydantic.Field(
        default=None,
        description="Compact the history below this revision; absent: below the current revision. Never negative.",
    )


class DefragmentSpec(common.Model):
    """Defragment every member, one at a time, followers first and the leader last after moving leadership."""


class MoveLeaderSpec(common.Model):
    """Hand etcd leadership to another voting member."""

    new_leader: str | None = pydantic.Field(
        default=None,
        description="Pod name of the member to become leader; the operator picks an up-to-date one when omitted.",
    )


class EtcdOpsRequestSpec(common.Model):
    """What to do, to which Etcd. Immutable after creation."""

    model_config = pydantic.ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "spec is immutable"}],
        }
    )

    database_ref: common.LocalObjectReference = pydantic.Field(
        description="The Etcd to operate on, in the same namespace."
    )
    type: Literal["UpdateVersion", "HorizontalScaling", "VerticalScaling", "VolumeExpansion", "Restart",
                  "Reconfigure", "ReconfigureTLS", "RotateAuth", "StorageMigration", "MoveLeader", "Defragment",
                  "Compact", "RecoverFromQuorumLoss", "Restore", "Backup"] = pydantic.Field(
        description="The operation: `UpdateVersion`, `HorizontalScaling`, `VerticalScaling`, `VolumeExpansion`, "
                    "`Restart`, `Reconfigure`, `ReconfigureTLS`, `RotateAuth`, `MoveLeader`, `Compact`, "
                    "`Defragment`, `RecoverFromQuorumLoss`, `StorageMigration`, `Backup` (ours) or `Restore`."
    )
    vertical_scaling: VerticalScalingSpec | None = pydantic.Field(
        default=None, description="Required for `VerticalScaling`: the etcd container's new resources."
    )
    configuration: ReconfigureSpec | None = pydantic.Field(
        default=None, description="Required for `Reconfigure`: the etcd flags to change."
    )
    update_version: UpdateVersionSpec | None = pydantic.Field(
        default=None, description="Required for `UpdateVersion`: the etcd version to move to."
    )
    horizontal_scaling: HorizontalScalingSpec | None = pydantic.Field(
        default=None, description="Required for `HorizontalScaling`: the member count to end with."
    )
    volume_expansion: VolumeExpansionSpec | None = pydantic.Field(
        default=None, description="Required for `VolumeExpansion`: the new size and the mode."
    )
    migration: StorageMigrationSpec | None = pydantic.Field(
        default=None, description="Required for `StorageMigration`: the StorageClass to move to."
    )
    tls: ReconfigureTLSSpec | None = pydantic.Field(
        default=None, description="Required for `ReconfigureTLS`: what to change."
    )
    authentication: AuthenticationSpec | None = pydantic.Field(
        default=None, description="Options of `RotateAuth`: where the new password comes from."
    )
    backup: BackupSpec | None = pydantic.Field(default=None, description="Options of `Backup` (none yet).")
    recover_from_quorum_loss: RecoverFromQuorumLossSpec | None = pydantic.Field(
        default=None, description="Required for `RecoverFromQuorumLoss`: the member to keep, confirmed.")
    restore: RestoreSpec | None = pydantic.Field(
        default=None, description="Required for `Restore`: the snapshot to restore (`timeout` is required too).")
    restart: RestartSpec | None = pydantic.Field(default=None, description="Options of `Restart` (none yet).")
    move_leader: MoveLeaderSpec | None = pydantic.Field(default=None, description="Options of `MoveLeader`.")
    compact: CompactSpec | None = pydantic.Field(default=None, description="Required for `Compact`: the revision.")
    defragment: DefragmentSpec | None = pydantic.Field(default=None, description="Options of `Defragment` (none yet).")
    timeout: common.PositiveDuration = pydantic.Field(
        default=constants.DEFAULT_OPS_TIMEOUT,
        description=(
            "Time budget of each step, a Go duration (`10m`, `1h30m`). A step that does not finish within it "
            "fails the request. Counted from the step's persisted `lastTransitionTime`."
        ),
    )
    apply: Literal["IfReady", "Always"] = pydantic.Field(
        default=constants.APPLY_IF_READY,
        description="`IfReady`: wait until the Etcd is `Ready` before starting. `Always`: start regardless.",
    )

    @property
    def timeout_delta(self) -> datetime.timedelta:
        """``timeout`` as a timedelta."""
        return common.parse_duration(self.timeout)


class RequestOrigin(common.OpenModel):
    """What the engine saw when the request started. Written once and never changed, so the plan cannot change
    mid-run — not even when the request's own last step writes the new TLS into the Etcd — and an operator
    restarted mid-run chooses what the first one chose."""

    observed_at: str | None = pydantic.Field(
        default=None, description="When the engine recorded it (RFC 3339): the request started then."
    )
    tls: dict[str, Any] | None = pydantic.Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description=(
            "The Etcd's `spec.tls` when the request started (absent: TLS was off). The request is folded into "
            "this, and the admission webhook lets exactly the result through while the request holds the pause."
        ),
    )
    plan: str | None = pydantic.Field(
        default=None,
        description=(
            "A rotate's plan variant, observed once when it starts: `Rotate` (hot reload), `CARollover`, "
            "`RescueLeaves` or `RescueCA` (absent for other requests)."
        ),
    )
    rescue_reason: str | None = pydantic.Field(
        default=None,
        description="Why a rescue plan was chosen: the expired served leaves (member, port, notAfter) or loaded CAs.",
    )
    replicas: int | None = pydantic.Field(
        default=None,
        description="The Etcd's `spec.replicas` when the request started: a HorizontalScaling grows or shrinks from it.",
    )
    version: str | None = pydantic.Field(
        default=None,
        description="The Etcd's `spec.version` when the request started: an UpdateVersion upgrades or downgrades "
                    "from it.",
    )
    auth_secret: str | None = pydantic.Field(
        default=None,
        description="RotateAuth: the auth Secret the Etcd used when the request started (absent: authentication "
                    "was off); the new password is staged there as `password.next`.",
    )
    storage: str | None = pydantic.Field(
        default=None,
        description="The size of each member's data volume when the request started: a VolumeExpansion grows "
                    "from it.",
    )
    storage_class: str | None = pydantic.Field(
        default=None,
        description="The StorageClass of each member's data volume when the request started (empty: the cluster's "
                    "default): a StorageMigration moves from it.",
    )


class StaleMember(common.OpenModel):
    """A member restarted alone because it still served its previous certificate after the delivery bound."""

    uid: str = pydantic.Field(description="The UID of the pod that was evicted: a pod with another UID is its "
                                          "replacement, never restarted again.")
    after_seconds: int = pydantic.Field(
        default=0, description="Seconds after `CertificateSynced` the member was found still serving the old leaf."
    )


class Restarts(common.OpenModel):
    """The members a request restarted, recorded before each disruption so a crash never restarts one twice."""

    all_together: dict[str, str] | None = pydantic.Field(
        default=None,
        description="The CA rescue's restart of every member together: pod name → the UID it had before. A pod is "
                    "deleted only with its recorded UID as a precondition.",
    )
    stale_members: dict[str, StaleMember] | None = pydantic.Field(
        default=None, description="A rotate's lone restarts, by pod name."
    )


class DatabaseSize(common.OpenModel):
    """A member's backend before and after a defragmentation, as etcd's ``Status`` reports it."""

    before_bytes: int = pydantic.Field(description="The database file's size before (`dbSize`).")
    before_in_use_bytes: int = pydantic.Field(default=0, description="The part of it in use before (`dbSizeInUse`).")
    after_bytes: int | None = pydantic.Field(default=None, description="The file's size after; absent until done.")


class RestoreProgress(common.OpenModel):
    """What a Restore recorded before replacing the members."""

    cluster_ids_before: list[str] | None = pydantic.Field(
        default=None, description="The cluster ID(s) the members reported before (hex): the restored one differs.")
    logins_forgotten: bool | None = pydantic.Field(
        default=None, description="The operator's etcd clients of this Etcd dropped their tokens once every member "
                                  "ran the restored data (a token of the old cluster stalls every call).")


class RecoveryProgress(common.OpenModel):
    """What a RecoverFromQuorumLoss recorded before each restart of the survivor (so a crash restarts it once)."""

    forced_from: str | None = pydantic.Field(
        default=None, description="The survivor pod's UID before its restart with --force-new-cluster.")
    forced: bool | None = pydantic.Field(
        default=None, description="True once the survivor led a cluster of one after --force-new-cluster.")
    unforced_from: str | None = pydantic.Field(
        default=None, description="Its UID before the restart without --force-new-cluster.")


class MigrationProgress(common.OpenModel):
    """What a StorageMigration recorded before replacing each member (so a crash replaces it once)."""

    replaced_from: dict[str, str] | None = pydantic.Field(
        default=None, description="Pod name → the UID of the pod on the old claim, recorded before that pod and "
                                  "its claim are deleted: a pod with another UID is the member's replacement.")


class EtcdOpsRequestStatus(common.OpenModel):
    """Progress of the request, written only by the ops engine."""

    phase: Literal["Pending", "Progressing", "Successful", "Failed", "Skipped"] | None = pydantic.Field(
        default=None,
        description=(
            "`Pending` (queued), `Progressing`, `Successful`, `Failed` or `Skipped` (a newer request of the "
            "same type replaced it before it started)."
        ),
    )
    observed_generation: int | None = pydantic.Field(
        default=None, description="The `metadata.generation` the status describes."
    )
    conditions: list[common.Condition] | None = pydantic.Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description=(
            "One condition per step in first-insertion order (`Running`, `CertificateSynced`, ..., `Successful` "
            "or `Failed`), per-pod steps as `<Step>--<pod>`."
        ),
    )
    origin: RequestOrigin | None = pydantic.Field(
        default=None, description="What the engine saw when the request started; decides the plan for the whole run."
    )
    restarts: Restarts | None = pydantic.Field(
        default=None, description="The members restarted so far, recorded before each restart."
    )
    database_sizes: dict[str, DatabaseSize] | None = pydantic.Field(
        default=None, description="`Defragment`: each member's database size before and after, by pod name."
    )
    warnings: list[str] | None = pydantic.Field(
        default=None, description="What the request was accepted with but should know (an even member count)."
    )
    snapshot: backup_api.SnapshotRecord | None = pydantic.Field(
        default=None, description="`Backup`: the snapshot it wrote; `Restore`: the snapshot it restores.")
    restore: RestoreProgress | None = pydantic.Field(
        default=None, description="`Restore`: what it saw before it replaced the members.")
    recovery: RecoveryProgress | None = pydantic.Field(
        default=None, description="`RecoverFromQuorumLoss`: the survivor's restarts, recorded before each.")
    migration: MigrationProgress | None = pydantic.Field(
        default=None, description="`StorageMigration`: the members replaced on the new class, recorded before each.")
    certificate_revisions: dict[str, int] | None = pydantic.Field(
        default=None,
        description="`ReconfigureTLS` rotate: each Certificate's `status.revision` before the request asked "
                    "cert-manager to re-issue it, by Certificate name; recorded before the ask, so it is asked once "
                    "and the old certificate is never taken for the new one.")


class EtcdOpsRequest(common.Model):
    """A day-2 operation on an Etcd."""

    api_version: Literal["ops.opsmanager.dev/v1alpha1"] = pydantic.Field(
        default=constants.OPS_API_VERSION, description="`ops.opsmanager.dev/v1alpha1`."
    )
    kind: Literal["EtcdOpsRequest"] = pydantic.Field(default=constants.OPS_KIND, description="`EtcdOpsRequest`.")
    metadata: common.ObjectMeta = pydantic.Field(
        default_factory=common.ObjectMeta, description="Standard object metadata."
    )
    spec: EtcdOpsRequestSpec = pydantic.Field(description="What to do.")
    status: EtcdOpsRequestStatus | None = pydantic.Field(default=None, description="How far it got.")


def filed_request(*, etcd: str, namespace: str | None, etcd_uid: str | None, name: str, trigger: str,
                  spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """An EtcdOpsRequest the operator files by itself for Etcd ``etcd``: labelled with its ``trigger``
    (``ops.opsmanager.dev/trigger``) and owned by the Etcd (garbage-collected with it); ``spec`` is the request's
    spec without ``databaseRef``."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {constants.LABEL_OPS_TRIGGER: trigger}}
    if annotations:
        meta["annotations"] = dict(annotations)
    if etcd_uid:
        meta["ownerReferences"] = [{"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                                    "name": etcd, "uid": etcd_uid}]
    return {"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND, "metadata": meta,
            "spec": {"type": spec["type"], "databaseRef": {"name": etcd},
                     **{k: v for k, v in spec.items() if k != "type"}}}

