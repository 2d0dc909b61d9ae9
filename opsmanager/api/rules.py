"""The rules an ``EtcdOpsRequest`` must meet, written once: the admission webhook builds its field errors from them
and the plan builders refuse with them, so a request created without the webhook fails with the words the webhook
would have refused it with.

Each rule takes the request's typed options (the webhook checks the schema first, so it has them too) and, where it
reads the Etcd, :class:`EtcdFacts`: the few facts of it the rules need, which the engine reads from its typed Etcd
and the webhook from the raw object it looked up. A rule returns a :class:`Violation` (the field the webhook names,
and the message) or None; :func:`enforce` is how a plan builder refuses with one.

The texts are KubeDB's verbatim where KubeDB has the rule (``shared/reference/kubedb-etcd-ops.md``), ours
otherwise; :mod:`opsmanager.webhook.validation.messages` names them beside the webhook's other texts.

Not here: what needs the live cluster (the members a recovery can keep, TLS being on at all when it runs) is the
plan builder's own, and the version catalog (``EtcdVersion`` objects) is the webhook's alone; the list, and why each
stays, is in ``docs/architecture.md`` ("The rules of a request"). The Etcd-status rules of a recovery (quorum lost,
the member that would be kept) read the Etcd's raw status and are the webhook's alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from opsmanager.api import common, constants, versions
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.api import tuning as tuning_api

# ReconfigureTLS (KubeDB's)
MSG_TLS_NIL: Final = "spec.tls is nil, not supported in ReconfigureTLS type"
MSG_TLS_NONE: Final = "at least one of Remove, RotateCertificates, IssuerRef, or Certificates must be specified"
MSG_TLS_MANY: Final = "only one TLS reconfiguration operation is allowed at a time"
MSG_TLS_ROTATE_NO_ISSUER: Final = "rotateCertificates requires TLS to already be enabled with issuerRef on Etcd"
MSG_TLS_ISSUER_REQUIRED: Final = "tls.issuerRef is required for Etcd ReconfigureTLS"
# ReconfigureTLS, ours: bring-your-own Secrets (spec.tls.externalSecrets on the Etcd)
MSG_TLS_ROTATE_EXTERNAL: Final = (
    "rotateCertificates does not apply to Etcd {db}: it runs on spec.tls.externalSecrets, which you rotate yourself "
    "by updating tls.crt and tls.key in your Secrets; to have cert-manager rotate them, hand the Etcd over with "
    "tls.issuerRef"
)
MSG_TLS_ISSUER_REQUIRED_EXTERNAL: Final = (
    MSG_TLS_ISSUER_REQUIRED + ": Etcd {db} runs on spec.tls.externalSecrets, whose certificates cert-manager does not "
    "issue; set tls.issuerRef to hand it over to cert-manager (tls.certificates may come with it)"
)
# VerticalScaling, Reconfigure, UpdateVersion, HorizontalScaling, Compact, RotateAuth (KubeDB's)
MSG_VERTICAL_NIL: Final = "spec.verticalScaling is nil, not supported in VerticalScaling type"
MSG_VERTICAL_EMPTY: Final = "at least one of spec.verticalScaling.etcd or spec.verticalScaling.exporter must be specified"
MSG_CONFIGURATION_NIL: Final = "spec.configuration is nil, not supported in Reconfigure type"
MSG_CONFIGURATION_TUNING: Final = (
    "spec.configuration.tuning must be specified, since Etcd does not support a mounted custom config file "
    "(--config-file is mutually exclusive with etcd command-line flags)"
)
MSG_CONFIGURATION_NOT_SUPPORTED: Final = (
    "spec.configuration.applyConfig and spec.configuration.configSecret are not supported for Etcd, use "
    "spec.configuration.tuning instead"
)
MSG_UPDATE_VERSION_NIL: Final = "spec.updateVersion is nil, not supported in UpdateVersion type"
MSG_UPDATE_VERSION_EMPTY: Final = "spec.updateVersion.targetVersion can not be empty"
MSG_HORIZONTAL_NIL: Final = "spec.horizontalScaling is nil, not supported in HorizontalScaling type"
MSG_HORIZONTAL_REPLICAS_EMPTY: Final = "spec.horizontalScaling.replicas can not be empty"
MSG_HORIZONTAL_REPLICAS_TOO_FEW: Final = "spec.horizontalScaling.replicas must be at least 1"
MSG_COMPACT_NIL: Final = "spec.compact is nil, not supported in Compact type"
MSG_COMPACT_NEGATIVE: Final = "spec.compact.revision can not be negative"
MSG_AUTH_SECRET_NAME_EMPTY: Final = "spec.authentication.secretRef.name can not be empty"
# Backup and Restore (ours; KubeDB's Restore reads KubeStash): the Etcd's spec.backup is where snapshots live.
MSG_NO_BACKUP_POLICY: Final = (
    "Etcd {namespace}/{name} has no spec.backup: set spec.backup.destination (endpoint, bucket, credentialsSecret) "
    "on the Etcd first"
)
MSG_RESTORE_NIL: Final = "spec.restore is nil, not supported in Restore type"
MSG_RESTORE_SOURCE_EMPTY: Final = 'spec.restore.source can not be empty: give a snapshot\'s key or "latest"'
MSG_RESTORE_TIMEOUT: Final = (
    "spec.timeout is required for Restore ops request, adjust timeout according to the size of your database"
)
# RecoverFromQuorumLoss (KubeDB's rules: timeout required, confirmMember required)
MSG_RECOVER_NIL: Final = "spec.recoverFromQuorumLoss is nil, not supported in RecoverFromQuorumLoss type"
MSG_RECOVER_CONFIRM_EMPTY: Final = (
    "spec.recoverFromQuorumLoss.confirmMember can not be empty: type the name of the member to keep"
)
MSG_RECOVER_TIMEOUT: Final = (
    "spec.timeout is required for RecoverFromQuorumLoss ops request, adjust timeout according to the size of your "
    "database"
)
# VolumeExpansion: KubeDB's (its webhook and ValidateStorageExpansion), the class rule in Kubernetes' own words (the
# API server's PersistentVolumeClaimResize admission refuses such a claim's resize with them)
MSG_VOLUME_NIL: Final = "spec.volumeExpansion is nil, not supported in VolumeExpansion type"
MSG_VOLUME_SIZE_EMPTY: Final = "spec.volumeExpansion.etcd can not be empty"
MSG_VOLUME_MODE_EMPTY: Final = "spec.volumeExpansion.mode can not be empty: Online or Offline"
MSG_VOLUME_NOT_CONFIGURED: Final = "storage not configured for etcd"
MSG_VOLUME_NOT_LARGER: Final = (
    "desired etcd storage size must be greater than current storage. Current storage: {current}"
)
MSG_STORAGE_CLASS_NOT_FOUND: Final = "storage class {name} not found"
MSG_STORAGE_CLASS_NOT_EXPANDABLE: Final = (
    "storage class {name} does not allow volume expansion: only dynamically provisioned pvc can be resized and the "
    "storageclass that provisions the pvc must support resize"
)

# StorageMigration: KubeDB's (its webhook), and ours: the class must differ from the one the volumes are on.
MSG_MIGRATION_NIL: Final = "spec.migration is required for StorageMigration type"
MSG_MIGRATION_CLASS_EMPTY: Final = "spec.migration.storageClassName is required"
MSG_MIGRATION_TIMEOUT: Final = (
    "spec.timeout is required for Storage Migration ops request, adjust timeout according to the size of your "
    "database"
)
MSG_MIGRATION_BINDING_MODE: Final = "volume binding mode should be WaitForFirstConsumer for {name} storageClass"
MSG_MIGRATION_SAME_CLASS: Final = (
    "spec.migration.storageClassName {name} is the StorageClass the members' volumes already use: nothing to migrate"
)


@dataclasses.dataclass(frozen=True)
class Violation:
    """A rule the request breaks: the field the webhook's error names, and the message (the webhook's, and the
    request's failure message when the engine refuses it)."""

    field: str
    message: str


class Refused(ValueError):
    """A plan builder's refusal with a rule's message (a ValueError: the engine fails the request with its text)."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.message)
        self.violation = violation


def enforce(violation: Violation | None) -> None:
    """Refuse (:class:`Refused`) when a rule is broken; nothing when it holds."""
    if violation is not None:
        raise Refused(violation)


@dataclasses.dataclass(frozen=True)
class EtcdFacts:
    """What the rules read of the Etcd a request names."""

    namespace: str
    name: str
    tls_issuer: bool  # spec.tls.issuerRef is set
    external_secrets: bool  # spec.tls.externalSecrets is set (the user's own Secrets)
    backup: bool  # spec.backup is set (where snapshots live)
    durable: bool = True  # spec.storageType is Durable (the members have data volumes)
    storage_size: str = constants.DEFAULT_STORAGE_SIZE  # each data volume's requested size
    storage_class: str | None = None  # spec.storage.storageClassName (None: the cluster's default class)

    @classmethod
    def of(cls, db: etcd_api.Etcd) -> EtcdFacts:
        tls = db.spec.tls
        return cls(namespace=db.metadata.namespace or "default", name=db.metadata.name or "",
                   tls_issuer=tls is not None and tls.issuer_ref is not None,
                   external_secrets=tls is not None and tls.external_secrets is not None,
                   backup=db.spec.backup is not None, durable=db.spec.storage_type == constants.STORAGE_DURABLE,
                   storage_size=storage_size(db.spec.storage), storage_class=(
                       db.spec.storage.storage_class_name if db.spec.storage is not None else None))


def storage_size(storage: etcd_api.PersistentVolumeClaimSpec | None) -> str:
    """The size each member's data volume asks for: ``spec.storage.resources.requests.storage``, else the
    render's default."""
    requests = storage.resources.requests if storage is not None and storage.resources is not None else None
    return str((requests or {}).get("storage") or constants.DEFAULT_STORAGE_SIZE)


# --- ReconfigureTLS ---------------------------------------------------------------------------------------------


def tls_given(tls: ops_api.ReconfigureTLSSpec | None) -> Violation | None:
    """KubeDB's first check: ``spec.tls`` is there."""
    return Violation("spec.tls", MSG_TLS_NIL) if tls is None else None


def reconfigure_tls(tls: ops_api.ReconfigureTLSSpec | None, db: EtcdFacts) -> Violation | None:
    """KubeDB's ``validateEtcdReconfigureTLSOpsRequest``: exactly one of remove, rotate and a certificate update;
    rotate needs the Etcd's issuer, a certificate update an issuer (the request's or the Etcd's). Ours: rotate does
    not apply to the user's own Secrets, and an issuerRef on them is the handover to cert-manager (allowed)."""
    if tls is None:
        return tls_given(tls)
    cert_update = tls.issuer_ref is not None or bool(tls.certificates)
    count = int(tls.remove) + int(tls.rotate_certificates) + int(cert_update)
    message: str | None = None
    if count == 0:
        message = MSG_TLS_NONE
    elif count > 1:
        message = MSG_TLS_MANY
    elif tls.remove:
        message = None
    elif tls.rotate_certificates:
        if db.external_secrets:
            message = MSG_TLS_ROTATE_EXTERNAL.format(db=db.name)
        elif not db.tls_issuer:
            message = MSG_TLS_ROTATE_NO_ISSUER
    elif tls.issuer_ref is None and not db.tls_issuer:
        message = (MSG_TLS_ISSUER_REQUIRED_EXTERNAL.format(db=db.name) if db.external_secrets
                   else MSG_TLS_ISSUER_REQUIRED)
    return Violation("spec.tls", message) if message is not None else None


# --- the other types, each on its own options -------------------------------------------------------------------


def update_version(update: ops_api.UpdateVersionSpec | None) -> Violation | None:
    """KubeDB's: the options given, with a target (the upgrade path is checked when the request runs)."""
    if update is None:
        return Violation("spec.updateVersion", MSG_UPDATE_VERSION_NIL)
    if not update.target_version:
        return Violation("spec.updateVersion", MSG_UPDATE_VERSION_EMPTY)
    return None


def update_path(start: str, target: str) -> Violation | None:
    """etcd's path for an UpdateVersion from ``start`` (the version the Etcd ran when the request started; the
    webhook: its version now) to ``target`` (:func:`opsmanager.api.versions.path_problem`): one minor up (3.5 → 3.7
    goes through 3.6), one down through the downgrade protocol from 3.6 on."""
    problem = versions.path_problem(start, target)
    return Violation("spec.updateVersion.targetVersion", problem) if problem is not None else None


def vertical_scaling(scaling: ops_api.VerticalScalingSpec | None) -> Violation | None:
    """KubeDB's: the options given, naming the etcd container or the exporter."""
    if scaling is None:
        return Violation("spec.verticalScaling", MSG_VERTICAL_NIL)
    if scaling.etcd is None and scaling.exporter is None:
        return Violation("spec.verticalScaling", MSG_VERTICAL_EMPTY)
    return None


def configuration_tuning(configuration: ops_api.ReconfigureSpec | None) -> Violation | None:
    """KubeDB's first two Reconfigure checks: the options given, with ``tuning`` (etcd takes flags, not a file)."""
    if configuration is None:
        return Violation("spec.configuration", MSG_CONFIGURATION_NIL)
    if configuration.tuning is None:
        return Violation("spec.configuration", MSG_CONFIGURATION_TUNING)
    return None


def configuration(configuration: ops_api.ReconfigureSpec | None) -> Violation | None:
    """KubeDB's Reconfigure checks: :func:`configuration_tuning`, then neither ``applyConfig`` nor
    ``configSecret`` (the engine ignores both, so only the webhook refuses them)."""
    if (violation := configuration_tuning(configuration)) is not None or configuration is None:
        return violation
    if configuration.apply_config is not None or configuration.config_secret is not None:
        return Violation("spec.configuration", MSG_CONFIGURATION_NOT_SUPPORTED)
    return None


def tuning(merged: tuning_api.TuningConfig, field: str, *, largest_db_bytes: int) -> Violation | None:
    """etcd's own rules (:func:`opsmanager.api.tuning.problems`) on the flags the members will run with, as one
    violation naming each flag (the webhook gives one field error per flag from the same function)."""
    problems = tuning_api.problems(merged, field, largest_db_bytes=largest_db_bytes)
    if not problems:
        return None
    return Violation(field, "; ".join(f"{where}: {message}" for where, _value, message in problems))


def horizontal_scaling(scaling: ops_api.HorizontalScalingSpec | None) -> Violation | None:
    """KubeDB's: the options given, with a member count of at least 1 (an even one is a warning only)."""
    if scaling is None:
        return Violation("spec.horizontalScaling", MSG_HORIZONTAL_NIL)
    if scaling.replicas is None:
        return Violation("spec.horizontalScaling", MSG_HORIZONTAL_REPLICAS_EMPTY)
    if scaling.replicas < 1:
        return Violation("spec.horizontalScaling", MSG_HORIZONTAL_REPLICAS_TOO_FEW)
    return None


def compact(options: ops_api.CompactSpec | None) -> Violation | None:
    """The options given, with no negative revision (absent: below the current revision)."""
    if options is None:
        return Violation("spec.compact", MSG_COMPACT_NIL)
    if options.revision is not None and options.revision < 0:
        return Violation("spec.compact", MSG_COMPACT_NEGATIVE)
    return None


def rotate_auth(authentication: ops_api.AuthenticationSpec | None) -> Violation | None:
    """KubeDB's first RotateAuth check: a ``secretRef`` needs a name. Its other three (the Secret exists, has a
    non-empty ``password``, and ``username`` ``root``) read the Secret, which no rule here does: the request's
    first step makes them, with KubeDB's words, before anything changes (docs/decisions.md D27.3)."""
    ref = authentication.secret_ref if authentication is not None else None
    if ref is not None and not ref.name:
        return Violation("spec.authentication", MSG_AUTH_SECRET_NAME_EMPTY)
    return None


def timeout_given(spec: ops_api.EtcdOpsRequestSpec, message: str) -> Violation | None:
    """KubeDB's rule for the types whose time depends on the data: ``spec.timeout`` written, not defaulted."""
    return None if "timeout" in spec.model_fields_set else Violation("spec.timeout", message)


def confirm_member(recover: ops_api.RecoverFromQuorumLossSpec | None) -> Violation | None:
    """A recovery names the member it keeps, typed again (``confirmMember``)."""
    if recover is None or not recover.confirm_member:
        return Violation("spec.recoverFromQuorumLoss", MSG_RECOVER_CONFIRM_EMPTY)
    return None


def recovery(spec: ops_api.EtcdOpsRequestSpec) -> list[Violation]:
    """RecoverFromQuorumLoss, on the request alone: the options given, ``confirmMember``, and ``spec.timeout``."""
    if spec.recover_from_quorum_loss is None:
        return [Violation("spec.recoverFromQuorumLoss", MSG_RECOVER_NIL)]
    found = (confirm_member(spec.recover_from_quorum_loss), timeout_given(spec, MSG_RECOVER_TIMEOUT))
    return [v for v in found if v is not None]


def backup_policy(db: EtcdFacts, field: str) -> Violation | None:
    """A Backup or a Restore needs the Etcd's ``spec.backup`` (where the snapshots live); ``field``: the request's
    field the webhook names (``spec.backup``, ``spec.restore``)."""
    if db.backup:
        return None
    return Violation(field, MSG_NO_BACKUP_POLICY.format(namespace=db.namespace, name=db.name))


def restore_source(restore: ops_api.RestoreSpec | None) -> Violation | None:
    """A Restore names its snapshot: a key, or ``latest``."""
    if restore is None:
        return Violation("spec.restore", MSG_RESTORE_NIL)
    if not restore.source:
        return Violation("spec.restore", MSG_RESTORE_SOURCE_EMPTY)
    return None


def restore(spec: ops_api.EtcdOpsRequestSpec, db: EtcdFacts) -> list[Violation]:
    """Restore: its snapshot named, ``spec.timeout`` given (KubeDB's rule: a restore takes as long as the data),
    and the Etcd's ``spec.backup``; nothing more once the options are missing."""
    source = restore_source(spec.restore)
    if spec.restore is None:
        return [source] if source is not None else []
    found = (source, timeout_given(spec, MSG_RESTORE_TIMEOUT), backup_policy(db, "spec.restore"))
    return [v for v in found if v is not None]


# --- VolumeExpansion ----------------------------------------------------------------------------------------------


def volume_expansion(options: ops_api.VolumeExpansionSpec | None, db: EtcdFacts,
                     current: str | None = None) -> Violation | None:
    """KubeDB's: the options given, with a size and a mode, on durable storage, and larger than the volumes are
    (``current``: the size to compare with, the Etcd's own by default — a plan passes the size the Etcd had when
    the request started, since its write-back changes the Etcd's)."""
    field = "spec.volumeExpansion"
    if options is None:
        return Violation(field, MSG_VOLUME_NIL)
    if options.etcd is None or str(options.etcd) == "":
        return Violation(field, MSG_VOLUME_SIZE_EMPTY)
    if options.mode is None:
        return Violation(field, MSG_VOLUME_MODE_EMPTY)
    if not db.durable:
        return Violation(field, MSG_VOLUME_NOT_CONFIGURED)
    have = current if current is not None else db.storage_size
    if common.quantity_value(have) >= common.quantity_value(options.etcd):
        return Violation(field, MSG_VOLUME_NOT_LARGER.format(current=have))
    return None


def storage_class_expandable(name: str, storage_class: Mapping[str, Any] | None) -> Violation | None:
    """The Etcd's StorageClass exists and says ``allowVolumeExpansion: true`` (the webhook reads the class)."""
    field = "spec.volumeExpansion"
    if storage_class is None:
        return Violation(field, MSG_STORAGE_CLASS_NOT_FOUND.format(name=name))
    if storage_class.get("allowVolumeExpansion") is not True:
        return Violation(field, MSG_STORAGE_CLASS_NOT_EXPANDABLE.format(name=name))
    return None


# --- StorageMigration ---------------------------------------------------------------------------------------------


def storage_migration(options: ops_api.StorageMigrationSpec | None, db: EtcdFacts,
                      current: str | None = None) -> Violation | None:
    """KubeDB's: the options given, with a class; ours: on durable storage, and a class other than the one the
    volumes use (``current``: the class to compare with, the Etcd's own by default — a plan passes the class the
    Etcd had when the request started, since its write-back changes the Etcd's; "" or None: the cluster's default,
    which only the claims name, so any class named is taken as another)."""
    field = "spec.migration"
    if options is None:
        return Violation(field, MSG_MIGRATION_NIL)
    if not options.storage_class_name:
        return Violation(field, MSG_MIGRATION_CLASS_EMPTY)
    if not db.durable:
        return Violation(field, MSG_VOLUME_NOT_CONFIGURED)
    have = current if current is not None else db.storage_class
    if have and have == options.storage_class_name:
        return Violation(field, MSG_MIGRATION_SAME_CLASS.format(name=have))
    return None


def storage_migration_request(spec: ops_api.EtcdOpsRequestSpec, db: EtcdFacts) -> list[Violation]:
    """StorageMigration on the request and the Etcd (the webhook's): :func:`storage_migration`, then KubeDB's
    ``spec.timeout`` rule (a member's data is copied: the time depends on its size)."""
    first = storage_migration(spec.migration, db)
    if first is not None and spec.migration is None:
        return [first]
    found = (first, timeout_given(spec, MSG_MIGRATION_TIMEOUT))
    return [v for v in found if v is not None]


def storage_class_bindable(name: str, storage_class: Mapping[str, Any] | None) -> Violation | None:
    """KubeDB's: the target StorageClass exists and binds ``WaitForFirstConsumer`` (a volume made where the
    member's pod is scheduled, not before; the webhook reads the class)."""
    field = "spec.migration"
    if storage_class is None:
        return Violation(field, MSG_STORAGE_CLASS_NOT_FOUND.format(name=name))
    if storage_class.get("volumeBindingMode") != "WaitForFirstConsumer":
        return Violation(field, MSG_MIGRATION_BINDING_MODE.format(name=name))
    return None
