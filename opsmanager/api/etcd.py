"""The ``Etcd`` kind (``opsmanager.dev/v1alpha1``): a desired etcd cluster, in KubeDB's spirit.

This model is the one source of truth for the ``etcds.opsmanager.dev`` CRD (``opsmanager crds``), for the
webhook's schema checks, for the provisioner's renderer and for the ops engine. ``spec.tls`` is what turns TLS on:
there is no separate switch (as in KubeDB). ``spec.tls`` on the Etcd changes only at the very end of a
``ReconfigureTLS`` request, so during a roll it still describes the old state.

Usage::

    db = etcd.Etcd.model_validate(obj)          # a full object dict from the API
    db.spec.tls.certificate("server")           # CertificateSpec | None
    obj = db.to_dict()                           # back to camelCase, no None fields
"""

from __future__ import annotations

from typing import Any, Final, Literal

import pydantic

from opsmanager.api import backup as backup_api
from opsmanager.api import common, constants, lifecycle
from opsmanager.api import tuning as tuning_api


class VolumeResourceRequirements(common.Model):
    """Storage requests and limits of a PersistentVolumeClaim."""

    requests: dict[str, common.Quantity] | None = pydantic.Field(
        default=None, description="Minimum resources, e.g. `{storage: 1Gi}`."
    )
    limits: dict[str, common.Quantity] | None = pydantic.Field(default=None, description="Maximum resources.")


class PersistentVolumeClaimSpec(common.Model):
    """The subset of a PersistentVolumeClaim spec used for each member's data volume."""

    access_modes: list[Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]] | None = (
        pydantic.Field(default=None, description="Access modes of the volume, usually `[ReadWriteOnce]`.")
    )
    storage_class_name: str | None = pydantic.Field(
        default=None, description="StorageClass of the volume; the cluster default when omitted."
    )
    resources: VolumeResourceRequirements | None = pydantic.Field(
        default=None, description="Requested size, e.g. `{requests: {storage: 1Gi}}`."
    )


class ResourceRequirements(common.Model):
    """CPU and memory of the etcd container."""

    requests: dict[str, common.Quantity] | None = pydantic.Field(
        default=None, description="Guaranteed resources, e.g. `{cpu: 100m, memory: 256Mi}`."
    )
    limits: dict[str, common.Quantity] | None = pydantic.Field(default=None, description="Resource limits.")


class PodTemplateMetadata(common.Model):
    """Labels and annotations added to every member pod."""

    labels: dict[str, str] | None = pydantic.Field(
        default=None, description="Extra pod labels; the operator's own labels win on conflict."
    )
    annotations: dict[str, str] | None = pydantic.Field(default=None, description="Extra pod annotations.")


class PodTemplatePodSpec(common.Model):
    """The pod settings a user may change."""

    resources: ResourceRequirements | None = pydantic.Field(
        default=None, description="Resources of the etcd container."
    )
    termination_grace_period_seconds: int | None = pydantic.Field(
        default=None, ge=0, description="Seconds a member gets to stop after SIGTERM before SIGKILL."
    )
    affinity: dict[str, Any] | None = pydantic.Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="The member pods' affinity (a core/v1 Affinity), used as given. Unset: a preferred pod "
                    "anti-affinity on `kubernetes.io/hostname`, so the scheduler spreads the members over nodes.",
    )
    node_selector: dict[str, str] | None = pydantic.Field(
        default=None, description="Node labels a member pod's node must have."
    )
    tolerations: list[dict[str, Any]] | None = pydantic.Field(
        default=None, json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        description="The member pods' tolerations (core/v1 Tolerations), used as given.",
    )


class PodTemplate(common.Model):
    """What the user may add to the member pods."""

    metadata: PodTemplateMetadata | None = pydantic.Field(
        default=None, description="Labels and annotations of the member pods."
    )
    spec: PodTemplatePodSpec | None = pydantic.Field(
        default=None, description="Resources and grace period of the member pods."
    )


# What the CRD's CEL rules and the admission webhook say about spec.tls (one text for both).
MSG_TLS_ISSUER_AND_EXTERNAL: Final = (
    "spec.tls.issuerRef and spec.tls.externalSecrets are mutually exclusive: use issuerRef for cert-manager, "
    "externalSecrets for your own Secrets"
)
MSG_TLS_EXTERNAL_CERTIFICATES: Final = (
    "spec.tls.certificates cannot be used with spec.tls.externalSecrets: your own Secrets carry the certificates; "
    "remove spec.tls.certificates, or use spec.tls.issuerRef to have cert-manager issue them"
)


class ExternalSecrets(common.Model):
    """Bring-your-own TLS: one Secret per alias in the Etcd's namespace, each with `tls.crt`, `tls.key` and
    `ca.crt`. The operator never edits or deletes them (not even with `WipeOut`)."""

    server: str = pydantic.Field(
        min_length=1, description="Secret of the server certificate (client API, port 2379)."
    )
    peer: str = pydantic.Field(min_length=1, description="Secret of the peer certificate (port 2380).")
    client: str = pydantic.Field(
        min_length=1, description="Secret of the client certificate the operator presents to the members."
    )

    def secret(self, alias: str) -> str:
        """The Secret name given for ``alias`` (``server``, ``peer`` or ``client``)."""
        names = {"server": self.server, "peer": self.peer, "client": self.client}
        return names[alias]


TLS_ISSUER_OR_EXTERNAL_RULE = "has(self.issuerRef) || has(self.externalSecrets)"
TLS_EXCLUSIVE_RULE = "!(has(self.issuerRef) && has(self.externalSecrets))"
TLS_EXTERNAL_NO_CERTIFICATES_RULE = "!has(self.externalSecrets) || !has(self.certificates)"


class TLSConfig(common.Model):
    """TLS of the cluster (`kmapi.TLSConfig`): one issuer plus per-alias overrides, or the user's own Secrets
    (`externalSecrets`). Setting it enables TLS."""

    model_config = pydantic.ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": TLS_ISSUER_OR_EXTERNAL_RULE, "message": "spec.tls.issuerRef is missing"},
                {"rule": TLS_EXCLUSIVE_RULE, "message": MSG_TLS_ISSUER_AND_EXTERNAL},
                {"rule": TLS_EXTERNAL_NO_CERTIFICATES_RULE, "message": MSG_TLS_EXTERNAL_CERTIFICATES},
            ]
        }
    )

    issuer_ref: common.IssuerRef | None = pydantic.Field(
        default=None,
        description="Issuer of all certificates (cert-manager). Exactly one of `issuerRef` and `externalSecrets`.",
    )
    external_secrets: ExternalSecrets | None = pydantic.Field(
        default=None,
        description=(
            "Your own Secrets, one per alias (`server`, `peer`, `client`; keys `tls.crt`, `tls.key`, `ca.crt`), "
            "instead of cert-manager. Exactly one of `issuerRef` and `externalSecrets`; no `certificates` with it. "
            "Move to cert-manager with a `ReconfigureTLS` request that sets `tls.issuerRef`."
        ),
    )
    certificates: list[common.CertificateSpec] | None = pydantic.Field(
        default=None,
        description="Per-alias overrides (`server`, `client`, `peer`), at most one entry per alias (with `issuerRef`).",
        max_length=3,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["alias"]},
    )

    def certificate(self, alias: str) -> common.CertificateSpec | None:
        """The entry for ``alias``, or None."""
        for cert in self.certificates or ():
            if cert.alias == alias:
                return cert
        return None


class AuthSecret(common.Model):
    """The Secret of etcd's own authentication: `username` (always `root`) and `password`."""

    name: str = pydantic.Field(
        min_length=1,
        description="Secret in the Etcd's namespace with `username: root` and `password`; generated (a random "
                    "password) when it does not exist. Rotate the password with a `RotateAuth` request.",
    )


class ConfigurationSpec(common.Model):
    """How etcd is configured beyond what the operator decides itself (listeners, TLS, membership)."""

    tuning: tuning_api.TuningConfig | None = pydantic.Field(
        default=None, description="etcd flags set on every member; changed on a live cluster by a Reconfigure request."
    )


class EtcdSpec(common.Model):
    """The desired cluster."""

    version: str = pydantic.Field(
        min_length=1,
        description="etcd version: the name of an EtcdVersion object (`kubectl get etcdversions` lists them).",
    )
    replicas: int = pydantic.Field(
        default=constants.DEFAULT_REPLICAS,
        description="Number of members. An odd number (3, 5) is what a Raft quorum wants; 1 has no redundancy.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self >= 1", "message": "number of replicas can not be less than 1"},
            ]
        },
    )
    storage_type: Literal["Durable", "Ephemeral"] = pydantic.Field(
        default=constants.STORAGE_DURABLE,
        description="`Durable` (a PersistentVolumeClaim per member) or `Ephemeral` (emptyDir). Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec.storageType is immutable"},
            ]
        },
    )
    storage: PersistentVolumeClaimSpec | None = pydantic.Field(
        default=None, description="Volume claim template of each member (`Durable` storage only)."
    )
    tls: TLSConfig | None = pydantic.Field(
        default=None,
        description=(
            "TLS for client (2379) and peer (2380) traffic. Change it on a live cluster with an "
            "`EtcdOpsRequest` of type `ReconfigureTLS`, not by editing this field."
        ),
    )
    auth_secret: AuthSecret | None = pydantic.Field(
        default=None,
        description=(
            "Turns etcd's own authentication on: the `root` user's password lives in this Secret, and every client "
            "(the operator's too) logs in with it. Absent: no authentication (a first `RotateAuth` request turns "
            "it on). It cannot be removed or renamed by an edit: a `RotateAuth` request names another Secret."
        ),
    )
    backup: backup_api.BackupPolicy | None = pydantic.Field(
        default=None,
        description="Scheduled snapshots to S3-compatible storage, and where a `Restore` request reads them from.",
    )
    storage_lifecycle: lifecycle.StorageLifecycle | None = pydantic.Field(
        default=None, description="Storage-lifecycle policy: size scans, metrics and automatic defragmentation."
    )
    tls_lifecycle: lifecycle.TLSLifecycle | None = pydantic.Field(
        default=None,
        description=(
            "Certificate-lifecycle policy (with `tls` only): scan interval, expiry alert thresholds, auto-renew. "
            "Unset: every default."
        ),
    )
    configuration: ConfigurationSpec | None = pydantic.Field(
        default=None, description="etcd's tunable flags (`configuration.tuning`)."
    )
    pod_template: PodTemplate | None = pydantic.Field(
        default=None, description="Labels, annotations, resources and grace period of the member pods."
    )
    deletion_policy: Literal["Delete", "WipeOut", "DoNotTerminate"] = pydantic.Field(
        default=constants.DELETION_DELETE,
        description=(
            "What deleting the Etcd does (as in KubeDB): `Delete` removes the members and their volumes but keeps "
            "the Secrets, `WipeOut` also deletes the Secrets, `DoNotTerminate` makes the webhook refuse the deletion."
        ),
    )
    halted: bool = pydantic.Field(
        default=False,
        description="Stop the cluster: every member pod is deleted, volumes are kept. Set false to resume.",
    )

    @pydantic.field_validator("replicas")
    @classmethod
    def _replicas_at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("number of replicas can not be less than 1")
        return value


class QuorumLoss(common.OpenModel):
    """A majority of the members not answering (the provisioner's status pass)."""

    since: str = pydantic.Field(description="When the status pass first saw too few members answer (RFC 3339).")
    answering: dict[str, int] | None = pydantic.Field(
        default=None, description="The members that answer, each with its raft committed index.")
    survivor: str | None = pydantic.Field(
        default=None, description="The member a RecoverFromQuorumLoss would keep: the highest committed index "
                                  "among those that answer (their data is there); ties to the lowest ordinal.")


class AnnouncedMaterial(common.OpenModel):
    """A TLS source the provisioner's gate holds back, whose Warning Event was posted (once per pair)."""

    secret: str = pydantic.Field(description="The source Secret cert-manager (or the user) wrote.")
    reason: str = pydantic.Field(description="The gate's problem code, e.g. `UntrustedCA` or `Expired`.")


class ScaledBy(common.OpenModel):
    """The member count a HorizontalScaling request writes into ``spec.replicas`` next (on record before it does)."""

    request: str = pydantic.Field(description="The HorizontalScaling EtcdOpsRequest that changes `spec.replicas`.")
    replicas: int = pydantic.Field(description="The count it writes next, one member from the current one.")


class EtcdStatus(common.OpenModel):
    """What the provisioner observed."""

    phase: Literal["Provisioning", "DataRestoring", "Ready", "Critical", "NotReady", "Halted", "Unknown"] | None = (
        pydantic.Field(default=None, description="Overall state of the cluster.")
    )
    observed_generation: int | None = pydantic.Field(
        default=None, description="The `metadata.generation` the status describes."
    )
    conditions: list[common.Condition] | None = pydantic.Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Conditions such as `Ready`, `Provisioned` and `Paused` (set while an ops request runs).",
    )
    tls: lifecycle.TLSStatus | None = pydantic.Field(
        default=None, description="The last certificate scan of a TLS cluster: what each member really serves."
    )
    version: str | None = pydantic.Field(
        default=None,
        description="The etcd version the members report (each one's own Status), read by the storage scan and "
                    "written by UpdateVersion; several, comma-separated, while they differ.",
    )
    storage: lifecycle.StorageStatus | None = pydantic.Field(
        default=None, description="The last storage scan: every member's database size, in-use size and quota."
    )
    backup: backup_api.BackupStatus | None = pydantic.Field(
        default=None, description="The last good backup (key, SHA-256, revision) and the last failure.")
    lifecycle_memory: lifecycle.LifecycleMemory | None = pydantic.Field(
        default=None, alias="lifecycle",
        description="What the operator's automatic filers (CA rollover, auto-renew, auto-defragment, scheduled "
                    "backups) and the certificate scan remember: the requests filed per episode, the Events "
                    "announced, the scan requested.")
    quorum_loss: QuorumLoss | None = pydantic.Field(
        default=None, description="Set while a majority of the members does not answer; `QuorumLost` is True once "
                                  "that lasted longer than the operator's bound.")
    auth_enabled: bool | None = pydantic.Field(
        default=None,
        description="True once etcd's authentication is on (the `root` user exists with the password of "
                    "`spec.authSecret`); set by the provisioner or a `RotateAuth` request.",
    )
    material_announced: list[AnnouncedMaterial] | None = pydantic.Field(
        default=None,
        description="The TLS sources the gate holds back whose Warning Event was posted, so each (Secret, reason) "
                    "is announced once; a pair is dropped when its source passes, so the same failure coming back "
                    "is announced again.",
    )
    initial_cluster_state: Literal["new", "existing"] | None = pydantic.Field(
        default=None,
        description=(
            "What a member started on an empty data directory does (etcd's `--initial-cluster-state`): `new` "
            "(absent) bootstraps the cluster; `existing` joins the running cluster, where a HorizontalScaling "
            "request has added it as a learner first. Set by the first HorizontalScaling; a member with data "
            "ignores it."
        ),
    )
    scaled_by: ScaledBy | None = pydantic.Field(
        default=None,
        description=(
            "The HorizontalScaling request that changes the member count and the count it writes next, recorded "
            "before each write of `spec.replicas`: the webhook admits a running Etcd's new count only when that "
            "request is active, holds this Etcd and names that very count."
        ),
    )


class Etcd(common.Model):
    """An etcd cluster managed by the operator."""

    api_version: Literal["opsmanager.dev/v1alpha1"] = pydantic.Field(
        default=constants.ETCD_API_VERSION, description="`opsmanager.dev/v1alpha1`."
    )
    kind: Literal["Etcd"] = pydantic.Field(default=constants.ETCD_KIND, description="`Etcd`.")
    metadata: common.ObjectMeta = pydantic.Field(
        default_factory=common.ObjectMeta, description="Standard object metadata."
    )
    spec: EtcdSpec = pydantic.Field(description="The desired cluster.")
    status: EtcdStatus | None = pydantic.Field(default=None, description="The observed cluster.")

    @property
    def tls_enabled(self) -> bool:
        """True when ``spec.tls`` is set (that is what turns TLS on)."""
        return self.spec.tls is not None

    @property
    def storage_lifecycle(self) -> lifecycle.StorageLifecycle:
        """``spec.storageLifecycle``, or the all-defaults policy when it is unset."""
        return self.spec.storage_lifecycle if self.spec.storage_lifecycle is not None else lifecycle.StorageLifecycle()

    @property
    def tls_lifecycle(self) -> lifecycle.TLSLifecycle:
        """``spec.tlsLifecycle``, or the all-defaults policy when it is unset."""
        return self.spec.tls_lifecycle if self.spec.tls_lifecycle is not None else lifecycle.TLSLifecycle()


def default_secret_name(etcd_name: str, alias: str) -> str:
    """The Secret a certificate goes into when ``secretName`` is not given: ``<etcd>-<alias>-cert``."""
    return f"{etcd_name}-{alias}-cert"
