"""Every text an admission denial or warning can carry: KubeDB's verbatim, so that a client sees what KubeDB
would say (only the lists of types, aliases and versions are ours), and ours for the rules KubeDB does not have.

The texts are constants so that the rules and the tests that check them quote the same string; ``{...}`` fields
are filled with ``str.format``. The ones shared with the CRD's own validation live in the model
(:mod:`opsmanager.api.etcd`), and those of the request rules the engine enforces too in :mod:`opsmanager.api.rules`;
both are only named here.
"""

from __future__ import annotations

from typing import Final

from opsmanager.api import constants, etcd, rules

# EtcdOpsRequest (KubeDB's)
MSG_TYPE_NOT_SUPPORTED: Final = "defined OpsRequestType {type} is not supported, supported types for Etcd are {types}"
MSG_DATABASE_NOT_FOUND: Final = "spec.databaseRef {namespace}/{name} is invalid or not found"
MSG_TLS_NIL: Final = rules.MSG_TLS_NIL
MSG_TLS_NONE: Final = rules.MSG_TLS_NONE
MSG_TLS_MANY: Final = rules.MSG_TLS_MANY
MSG_TLS_ROTATE_NO_ISSUER: Final = rules.MSG_TLS_ROTATE_NO_ISSUER
MSG_TLS_ISSUER_REQUIRED: Final = rules.MSG_TLS_ISSUER_REQUIRED
MSG_PRECONDITION: Final = "precondition failed for: {patch}.At least one of the following was changed:\n\t{keys}"

# Etcd (KubeDB's)
MSG_VERSION_MISSING: Final = "spec.version is missing"
# The catalog (KubeDB's words: its client's NotFound and its StrictValidation deprecation check; ours in brackets).
MSG_VERSION_UNKNOWN: Final = (
    'etcdversions.catalog.opsmanager.dev "{version}" not found (kubectl get etcdversions lists the versions)'
)
MSG_VERSION_DEPRECATED: Final = "etcd {namespace}/{name} is using deprecated version {version}. Skipped processing"
# Ours: an EtcdVersion of a minor the operator has no flags, probes or downgrade rules for.
MSG_VERSION_NOT_RUN: Final = (
    "EtcdVersion {version} is etcd {minor}, which this operator does not run (it runs etcd {minors})"
)
MSG_VERSION_BROKEN: Final = "EtcdVersion {version} is not a valid catalog object: {error}"
# UpdateVersion against the catalog: KubeDB's refusal of an update the current version's constraints do not allow,
# ours for a deprecated target (KubeDB's engine refuses it when the request runs).
MSG_UPDATE_NOT_SUPPORTED: Final = (
    "update version from {current} to {target} is not supported (the updateConstraints of EtcdVersion {current} "
    "do not allow it)"
)
MSG_UPDATE_TARGET_DEPRECATED: Final = (
    "spec.updateVersion.targetVersion {target} is a deprecated EtcdVersion: choose another one "
    "(kubectl get etcdversions)"
)
MSG_REPLICAS_MISSING: Final = "spec.replicas has to be defined"
MSG_REPLICAS_TOO_FEW: Final = "number of replicas can not be less than 1"
MSG_STORAGE_TYPE_EMPTY: Final = "spec.storageType can not be empty"
MSG_STORAGE_TYPE_BAD: Final = "spec.storageType should be either Durable or Ephemeral"
MSG_DELETION_POLICY_MISSING: Final = "spec.deletionPolicy is missing"
MSG_TLS_ISSUER_MISSING: Final = "spec.tls.issuerRef is missing"
MSG_ALIASES: Final = "supported aliases are " + ", ".join(f'"{a}"' for a in constants.CERT_ALIASES[:-1]) + \
    f' and "{constants.CERT_ALIASES[-1]}"'
MSG_DO_NOT_TERMINATE: Final = 'can not delete as deletionPolicy is set to "DoNotTerminate"'
MSG_EVEN_REPLICAS: Final = (
    "even replica count buys no extra fault tolerance for a Raft quorum; an odd number is recommended"
)
# Ours: the certificate-lifecycle policy, spec.tlsLifecycle.
MSG_DURATION_INVALID: Final = (
    'not a duration: write a Go duration such as "90s", "10m", "1h30m" or "720h" (units ns, us, ms, s, m, h)'
)
MSG_DURATION_NOT_POSITIVE: Final = 'must be greater than zero: write a positive Go duration such as "24h"'
MSG_ALERT_DUPLICATE: Final = "the same duration as {other} ({value}); list each threshold once"
# Ours: bring-your-own Secrets, spec.tls.externalSecrets (the texts shared with the CRD live in the model).
MSG_TLS_ISSUER_AND_EXTERNAL: Final = etcd.MSG_TLS_ISSUER_AND_EXTERNAL
MSG_TLS_EXTERNAL_CERTIFICATES: Final = etcd.MSG_TLS_EXTERNAL_CERTIFICATES
MSG_TLS_EXTERNAL_ALIAS_MISSING: Final = (
    "name the Secret of the {alias} certificate (keys tls.crt, tls.key and ca.crt, in the Etcd's namespace); "
    "externalSecrets needs all three of server, peer and client"
)
MSG_TLS_EXTERNAL_BAD_NAME: Final = (
    "not a Secret name: use a lowercase RFC 1123 subdomain (letters, digits, '-' and '.'; at most 253 characters)"
)
MSG_TLS_EXTERNAL_OPERATOR_NAME: Final = (
    "names a Secret the operator writes (<db>-<alias>-cert, <db>-<alias>-issued, <db>-ca-bundle); "
    "give your own Secrets other names"
)
MSG_TLS_ROTATE_EXTERNAL: Final = rules.MSG_TLS_ROTATE_EXTERNAL
MSG_TLS_ISSUER_REQUIRED_EXTERNAL: Final = rules.MSG_TLS_ISSUER_REQUIRED_EXTERNAL
# Ours: spec.tls of an Etcd that an EtcdOpsRequest holds paused belongs to that request.
MSG_TLS_PAUSED: Final = (
    "Etcd {etcd} is paused by EtcdOpsRequest {request}; spec.tls can change only through an EtcdOpsRequest "
    "once {request} has finished"
)

# Defaulting (KubeDB's Default, returned bare)
MSG_DEFAULT_VERSION_MISSING: Final = "'spec.version' is missing"
MSG_DEFAULT_CANT_HALT: Final = "can't halt, since deletion policy is 'DoNotTerminate'"
MSG_DEFAULT_VERSION_UNKNOWN: Final = 'failed to get EtcdVersion "{version}": ' + MSG_VERSION_UNKNOWN

# Compact (KubeDB's words).
MSG_VERTICAL_NIL: Final = rules.MSG_VERTICAL_NIL
MSG_VERTICAL_EMPTY: Final = rules.MSG_VERTICAL_EMPTY
MSG_CONFIGURATION_NIL: Final = rules.MSG_CONFIGURATION_NIL
MSG_CONFIGURATION_TUNING: Final = rules.MSG_CONFIGURATION_TUNING
MSG_CONFIGURATION_NOT_SUPPORTED: Final = rules.MSG_CONFIGURATION_NOT_SUPPORTED
MSG_UPDATE_VERSION_NIL: Final = rules.MSG_UPDATE_VERSION_NIL
MSG_UPDATE_VERSION_EMPTY: Final = rules.MSG_UPDATE_VERSION_EMPTY
# Ours: the member count of a running Etcd changes through a HorizontalScaling request only.
MSG_REPLICAS_BY_REQUEST: Final = (
    "the member count of a running Etcd is changed by an EtcdOpsRequest of type HorizontalScaling, which adds and "
    "removes etcd members one at a time (a new member joins as a learner): file one with "
    "horizontalScaling.replicas: {replicas} instead of editing spec.replicas"
)
MSG_HORIZONTAL_NIL: Final = rules.MSG_HORIZONTAL_NIL
MSG_HORIZONTAL_REPLICAS_EMPTY: Final = rules.MSG_HORIZONTAL_REPLICAS_EMPTY
MSG_HORIZONTAL_REPLICAS_TOO_FEW: Final = rules.MSG_HORIZONTAL_REPLICAS_TOO_FEW
# Ours (KubeDB only logs it): a warning, the request is accepted.
MSG_HORIZONTAL_EVEN: Final = ("spec.horizontalScaling.replicas is even ({replicas}): it tolerates no more member "
                              "failures than {below} members, and every write needs one more acknowledgement")
MSG_COMPACT_NIL: Final = rules.MSG_COMPACT_NIL
MSG_COMPACT_NEGATIVE: Final = rules.MSG_COMPACT_NEGATIVE
MSG_AUTH_SECRET_NAME_EMPTY: Final = rules.MSG_AUTH_SECRET_NAME_EMPTY
# Ours: etcd's authentication is turned on by spec.authSecret or a RotateAuth, and never off or over by an edit.
MSG_AUTH_SECRET_REMOVED: Final = (
    "spec.authSecret can not be removed: etcd's authentication stays on once it is on (clients log in as root)"
)
MSG_AUTH_SECRET_RENAMED: Final = (
    "spec.authSecret.name can not be changed by an edit ({old} → {new}): file a RotateAuth EtcdOpsRequest with "
    "spec.authentication.secretRef.name: {new}, which moves etcd's root password to it"
)
# Backup and Restore (ours; KubeDB's Restore reads KubeStash): the Etcd's spec.backup is where snapshots live.
MSG_NO_BACKUP_POLICY: Final = rules.MSG_NO_BACKUP_POLICY
MSG_RESTORE_NIL: Final = rules.MSG_RESTORE_NIL
MSG_RESTORE_SOURCE_EMPTY: Final = rules.MSG_RESTORE_SOURCE_EMPTY
MSG_RESTORE_TIMEOUT: Final = rules.MSG_RESTORE_TIMEOUT
# RecoverFromQuorumLoss (KubeDB's rules: timeout required, only with QuorumLost=True, confirmMember must match).
MSG_RECOVER_NIL: Final = rules.MSG_RECOVER_NIL
MSG_RECOVER_CONFIRM_EMPTY: Final = rules.MSG_RECOVER_CONFIRM_EMPTY
MSG_RECOVER_TIMEOUT: Final = rules.MSG_RECOVER_TIMEOUT
MSG_RECOVER_NOT_LOST: Final = (
    "Etcd {namespace}/{name} does not report QuorumLost=True: a RecoverFromQuorumLoss rebuilds the cluster from one "
    "member and is only for a cluster whose majority has been gone longer than the operator's bound"
)
MSG_RECOVER_CONFIRM_MISMATCH: Final = (
    "spec.recoverFromQuorumLoss.confirmMember {confirm} is not the member that would be kept: {survivor} ({why}); "
    "set confirmMember: {survivor}"
)
MSG_RECOVER_MEMBER_SILENT: Final = (
    "spec.recoverFromQuorumLoss.member {member} does not answer (answering: {answering}): only a member whose data "
    "is there can be kept"
)

# VolumeExpansion (KubeDB's; the class rule in the words of Kubernetes' PersistentVolumeClaimResize admission).
MSG_VOLUME_NIL: Final = rules.MSG_VOLUME_NIL
MSG_VOLUME_SIZE_EMPTY: Final = rules.MSG_VOLUME_SIZE_EMPTY
MSG_VOLUME_MODE_EMPTY: Final = rules.MSG_VOLUME_MODE_EMPTY
MSG_VOLUME_NOT_CONFIGURED: Final = rules.MSG_VOLUME_NOT_CONFIGURED
MSG_VOLUME_NOT_LARGER: Final = rules.MSG_VOLUME_NOT_LARGER
MSG_STORAGE_CLASS_NOT_FOUND: Final = rules.MSG_STORAGE_CLASS_NOT_FOUND
MSG_STORAGE_CLASS_NOT_EXPANDABLE: Final = rules.MSG_STORAGE_CLASS_NOT_EXPANDABLE

# StorageMigration (KubeDB's; ours: the class must differ from the current one).
MSG_MIGRATION_NIL: Final = rules.MSG_MIGRATION_NIL
MSG_MIGRATION_CLASS_EMPTY: Final = rules.MSG_MIGRATION_CLASS_EMPTY
MSG_MIGRATION_TIMEOUT: Final = rules.MSG_MIGRATION_TIMEOUT
MSG_MIGRATION_BINDING_MODE: Final = rules.MSG_MIGRATION_BINDING_MODE
MSG_MIGRATION_SAME_CLASS: Final = rules.MSG_MIGRATION_SAME_CLASS
