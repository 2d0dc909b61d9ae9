"""The plan of an EtcdOpsRequest: which steps, in which order, each with its condition type — pure data.

A plan is computed from the request and the Etcd as it was *before* the request changed anything (``spec.tls``
on the Etcd is written back only by the ``UpdateDatabase`` step, near the end), so recomputing it on every
reconcile gives the same list. The engine runs the first step whose condition is not ``True``; that is how an
operator killed at any point resumes where it was.

The TLS plans are the product. Each exists because the naive order fails on a live cluster (measured on etcd
3.5.1, ``shared/reference/etcd-measured-3.5.1.md``):

- **add TLS** — restarting members straight onto https-only URLs breaks a 3-member cluster for good once the
  third member restarts: the registered peer URLs stay ``http://``. So: issue certificates; pass 1 listens on
  both schemes (client http+https on 2379, peer http 2380 + https 2382) with TLS files loaded; then
  ``member update`` each peer URL to https, one member at a time; pass 2 removes the http listeners.
- **remove TLS** — the same in reverse; then the Certificates and Secrets this operator created are deleted.
- **issuer (CA) change** — etcd reads CA files only at start, so a roll onto the new CA alone leaves old- and
  new-CA members unable to talk (quorum lost, 3–8 s write stalls, measured). So: pass 1 trusts old+new; then the
  leaves come from the new issuer (hot-reloaded, and rolled to force fresh connections); pass 3 drops the old CA.
- **rotate** (the CA never changes: same issuer) — re-issue every certificate (cert-manager's ``Issuing=True``),
  wait for a higher revision and complete material, then *no roll*: etcd re-reads its leaf and key on every new
  handshake, so once the kubelet has delivered the new files each member serves them. ``ServedCertificatesVerified``
  checks that with fresh handshakes on the client and the peer port of every member; a member still serving the
  previous leaf after the delivery bound (``--certificate-delivery-timeout``) is restarted alone, leader-aware, and
  only then does ``RestartPods`` appear. A roll here would cost an election-free but needless restart of every
  member (and, done naively, write stalls and elections — measured in ``docs/benchmarks.md``).
- **CA rollover** (a rotate whose sources chain to a CA not every member has loaded — cert-manager renewed the
  CA behind the Issuer, or a user replaced the CA Secret; :func:`rotate_variant`) — a hot reload would partition
  the cluster (etcd loads CA files only at start), so: widen the bundle to old + new CA with a leader-aware roll
  (the leaves released meanwhile only when every member has loaded their CA); re-issue and release the leaves
  through the gate with the CAs every member has now loaded (no restart: etcd re-reads leaves per handshake);
  verify by handshake that every member serves them; then narrow the bundle to the CAs still in use and roll.
  The provisioner files such a request itself (``ops.opsmanager.dev/trigger: ca-rollover``).
- **certificate fields under the same issuer** — one pass.
- **handover** (user-provided Secrets → cert-manager) — the issuer change's widen / new leaves / narrow,
  without the roll in the middle; widen and narrow are skipped when the issuer's CA is the user's CA (no restart).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import ClassVar

from opsmanager.api import common, constants, tlschange, versions
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.api import tuning as tuning_api
from opsmanager.cluster import naming, render


class TLSChange(enum.Enum):
    ADD = "AddTLS"
    REMOVE = "RemoveTLS"
    ROTATE = "RotateCertificates"
    UPDATE = "UpdateCertificates"  # certificate fields change, same issuer(s)
    ISSUER = "ChangeIssuer"  # a different issuer for at least one certificate
    HANDOVER = "HandoverToIssuer"  # user-provided Secrets (externalSecrets) → cert-manager


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
    UPDATE_DATABASE = "UpdateDatabase"  # write spec.tls back to the Etcd, clean up what is no longer used


class Trust(enum.Enum):
    """What the trust bundle holds during a pass."""

    KEEP = "Keep"  # whatever it holds now
    CURRENT_AND_DESIRED = "CurrentAndDesired"  # old CA + new CA (widen)
    DESIRED = "Desired"  # the CA(s) of the desired certificates only (narrow / a fresh TLS setup)
    CURRENT_AND_RENEWED = "CurrentAndRenewed"  # CA rollover widen: + the sources' CAs and the CA Issuers' CAs
    IN_USE = "InUse"  # CA rollover narrow: the bundle's CAs that sign a mounted leaf or are an issuer's CA now


class RotateVariant(enum.Enum):
    """Which plan a ``rotateCertificates`` request runs (observed once, persisted as ``status.origin.plan``)."""

    HOT_RELOAD = "Rotate"  # same CA: re-issue, release, verify served; no restart
    CA_ROLLOVER = "CARollover"  # a source chains to a CA not every member has loaded: widen, release, narrow
    RESCUE_LEAVES = "RescueLeaves"  # served leaves expired, loaded CA valid: re-issue, release all, verify; no restart
    RESCUE_CA = "RescueCA"  # the members' CA expired: new bundle + leaves, restart every member together, quorum


RESCUE_VARIANTS = (RotateVariant.RESCUE_LEAVES, RotateVariant.RESCUE_CA)


@dataclasses.dataclass(frozen=True)
class RotateObservation:
    """What the engine saw when a rotate request started. ``untrusted``: the sources (``ns/name``) the gate holds
    as ``UntrustedCA`` against the CAs every member has loaded; ``issuer_ca_unloaded``: a CA Issuer of the Etcd
    signs with a CA not every member has loaded (its leaves would be held)."""

    untrusted: tuple[str, ...] = ()
    issuer_ca_unloaded: bool = False
    # Rescue — EXPIRY, never reachability: ``expired_leaves``: the leaves members serve whose notAfter is
    # past ("<member> <port> notAfter <time>", read by a handshake that does not verify, or from status.tls when a
    # member does not answer); ``expired_cas``: the CAs every member has loaded whose notAfter is past, when *all*
    # of them are (the members then trust nothing valid).
    expired_leaves: tuple[str, ...] = ()
    expired_cas: tuple[str, ...] = ()


def rotate_variant(seen: RotateObservation) -> RotateVariant:
    """The plan of a rotate request, from what was observed when it started — the one place the rotate variants
    are chosen. Decided by expiry, never by reachability (an unreachable member adds nothing here):

    - the members' loaded CA has expired → ``RESCUE_CA`` (whatever the issuer signs with now);
    - a served leaf has expired and the issuer's CA is not loaded → ``RESCUE_CA`` too (a rollover's leader-aware
      rolls need health checks that cannot handshake with an expired leaf);
    - a served leaf has expired, the CA is valid and loaded → ``RESCUE_LEAVES``;
    - a source or the issuer on a CA not loaded by every member → ``CA_ROLLOVER``; otherwise ``HOT_RELOAD``."""
    if seen.expired_cas:
        return RotateVariant.RESCUE_CA
    if seen.expired_leaves:
        return RotateVariant.RESCUE_CA if seen.issuer_ca_unloaded else RotateVariant.RESCUE_LEAVES
    if seen.untrusted or seen.issuer_ca_unloaded:
        return RotateVariant.CA_ROLLOVER
    return RotateVariant.HOT_RELOAD


def rescue_reason(seen: RotateObservation) -> str:
    """Why the rescue plan was chosen (the ``RescuePlanChosen`` message): what expired, naming member, port and
    notAfter; empty when :func:`rotate_variant` chooses no rescue."""
    variant = rotate_variant(seen)
    if variant not in RESCUE_VARIANTS:
        return ""
    parts = []
    if seen.expired_cas:
        parts.append(f"the CA every member loaded has expired ({'; '.join(seen.expired_cas)})")
    if seen.expired_leaves:
        shown = "; ".join(seen.expired_leaves[:4]) + (f"; and {len(seen.expired_leaves) - 4} more"
                                                        if len(seen.expired_leaves) > 4 else "")
        parts.append(f"served certificates have expired ({shown})")
    if seen.issuer_ca_unloaded:
        parts.append("the issuer signs with a CA the members have not loaded")
    how = ("re-issue and release every certificate at once, no restart" if variant is RotateVariant.RESCUE_LEAVES
           else "new trust bundle and certificates, then every member restarted together")
    return f"{variant.value}: {', '.join(parts)}; {how}"


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
class UpdateDatabase(Step):
    kind: ClassVar[StepKind] = StepKind.UPDATE_DATABASE


# The steps that restart members through :mod:`opsmanager.ops.restart` (and verify_served, which restarts a stale
# member alone with the same machinery).
Restarting = Roll | Restart | RollPass | VerifyServed


@dataclasses.dataclass(frozen=True)
class Plan:
    request_type: str
    change: TLSChange | None
    desired_tls: etcd_api.TLSConfig | None
    steps: tuple[Step, ...]
    pauses: bool = True
    variant: RotateVariant | None = None  # rotate only: which of the rotate plans
    desired_version: str | None = None  # UpdateVersion: the spec.version UpdateDatabase writes
    desired_tuning: tuning_api.TuningConfig | None = None  # Reconfigure: the spec.configuration.tuning it writes
    pending_restart: bool = False  # Reconfigure with restart "false": the members take the flags when they restart
    desired_resources: etcd_api.ResourceRequirements | None = None  # VerticalScaling: the resources it writes
    # RotateAuth: (the Secret the new password was staged in, the Secret spec.authSecret names from now on)
    auth_secrets: tuple[str, str] | None = None
    restores: bool = False  # Restore: UpdateDatabase removes the restore plan and records the restore
    recovers: bool = False  # RecoverFromQuorumLoss: UpdateDatabase puts the StatefulSet back to every replica

    @property
    def summary(self) -> str:
        if self.variant in (RotateVariant.CA_ROLLOVER, *RESCUE_VARIANTS):
            return str(self.variant.value)
        return self.change.value if self.change is not None else self.request_type


# --- folding the request into the Etcd (KubeDB's altDB) --------------------------------------------------------


def _issuer_key(ref: common.IssuerRef | None) -> tuple[str, str, str] | None:
    return None if ref is None else (ref.api_group, ref.kind, ref.name)


def effective_issuer(tls: etcd_api.TLSConfig, alias: str) -> tuple[str, str, str] | None:
    """The issuer of an alias as a comparable key (the renderer's rule: certificate's issuerRef, else the TLS's)."""
    return _issuer_key(render.issuer_of(tls, alias))


# The fold itself is the API's one rule (the webhook needs it too, and may not import the engine).
desired_tls = tlschange.desired_tls


def classify(current: etcd_api.TLSConfig | None, req: ops_api.ReconfigureTLSSpec) -> TLSChange:
    """Which of the TLS operations a (valid) request is, given the Etcd's current ``spec.tls``."""
    if req.remove:
        return TLSChange.REMOVE
    if req.rotate_certificates:
        return TLSChange.ROTATE
    if current is None:
        return TLSChange.ADD
    desired = desired_tls(current, req)
    assert desired is not None
    if current.external_secrets is not None and desired.external_secrets is None:
        return TLSChange.HANDOVER
    for alias in constants.CERT_ALIASES:
        if effective_issuer(current, alias) != effective_issuer(desired, alias):
            return TLSChange.ISSUER
    return TLSChange.UPDATE


# --- plans ---------------------------------------------------------------------------------------------------


def _running(message: str) -> Step:
    return Pause(constants.COND_RUNNING, message)


def _final_roll(tls: etcd_api.TLSConfig | None, *, verify: bool, what: str) -> tuple[Step, Step]:
    wiring = render.Wiring.steady(tls)
    return (
        ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET,
                         f"Successfully re-rendered the StatefulSet {what}",
                         wiring=wiring, tls=tls),
        Roll(constants.COND_RESTART_PODS, f"Successfully restarted the etcd members {what}", wiring=wiring,
             verify_served_certificates=verify, tls=tls),
    )


def _sync_certificates(tls: etcd_api.TLSConfig | None, *, source: str = "", trust: Trust = Trust.KEEP) -> Step:
    return SyncCertificates(constants.COND_CERTIFICATE_SYNCED, f"Successfully synced all the etcd certificates{source}", trust=trust, tls=tls)


def _update_database(message: str) -> Step:
    return UpdateDatabase(constants.COND_UPDATE_DATABASE, message)


def _ca_rollover_steps(current: etcd_api.TLSConfig) -> list[Step]:
    wiring = render.Wiring.steady(current)
    return [
        _running("Etcd ops request is rolling the etcd CA over"),
        RollPass(constants.COND_TRUST_BUNDLE_WIDENED, "Every member trusts the old and the renewed CA",
                 wiring=wiring, trust=Trust.CURRENT_AND_RENEWED,
                 tls=current, release_loaded=True),
        Issue(constants.COND_ISSUE_CERTIFICATES_SUCCEEDED,
              "Successfully re-issued every certificate from the renewed CA",
              tls=current),
        SyncCertificates(constants.COND_CERTIFICATE_SYNCED,
                         "Released the certificates of the renewed CA (every member has loaded it)",
                         tls=current,
                         release_loaded=True),
        VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                     "Every member serves its certificate of the renewed CA on the client and the peer port",
                     tls=current),
        RollPass(constants.COND_TRUST_BUNDLE_NARROWED, "Every member trusts only the CAs still in use",
                 wiring=wiring, trust=Trust.IN_USE, tls=current,
                 release_loaded=True),
        _update_database("Successfully rolled the etcd CA over"),
    ]


def _rescue_steps(current: etcd_api.TLSConfig, variant: RotateVariant) -> list[Step]:
    """The rescue plans. Leaves: every certificate re-issued at once, every leaf released at once
    through the gate against the trust bundle (the gate judges the *source*: a fresh valid leaf passes whatever
    the mounted one is), verified by handshake on both ports; etcd re-reads leaves per handshake, so no restart.
    CA: the leaves released against any CA and the bundle rewritten from the released CAs, then every member
    restarted together (members cannot talk across CAs: a rolling restart only loses members), quorum awaited
    (bounded by the step timeout), the served leaves verified."""
    chosen = RescueChosen(constants.COND_RESCUE_PLAN_CHOSEN, "The certificates have expired: the rescue plan runs")
    issue = Issue(constants.COND_ISSUE_CERTIFICATES_SUCCEEDED, "Successfully re-issued every certificate",
                  tls=current)
    verify = VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                          "Every member serves a valid certificate on the client and the peer port",
                          tls=current)
    if variant is RotateVariant.RESCUE_LEAVES:
        return [
            _running("Etcd ops request is rescuing expired certificates (no restart)"),
            chosen, issue,
            _sync_certificates(current, source=" (every leaf released at once)"),
            verify,
            _update_database("Successfully rescued the expired etcd certificates"),
        ]
    return [
        _running("Etcd ops request is rescuing an expired etcd CA"),
        chosen, issue,
        _sync_certificates(current, source=" and wrote the new trust bundle", trust=Trust.DESIRED),
        RestartAll(constants.COND_RESTART_PODS, "Restarted every member together onto the new CA; quorum is back"),
        verify,
        _update_database("Successfully rescued the etcd cluster from an expired CA"),
    ]


def reconfigure_tls_plan(db: etcd_api.Etcd, req: ops_api.ReconfigureTLSSpec,
                         variant: RotateVariant = RotateVariant.HOT_RELOAD) -> Plan:
    current = db.spec.tls
    change = classify(current, req)
    if change in (TLSChange.REMOVE, TLSChange.ROTATE) and current is None:
        what = "remove" if change is TLSChange.REMOVE else "rotateCertificates"
        raise ValueError(f"tls.{what} needs TLS enabled on Etcd {db.metadata.name}, and spec.tls is not set")
    desired = desired_tls(current, req)
    steps: list[Step]
    if change is TLSChange.ADD:
        assert desired is not None
        steps = [
            _running("Etcd ops request is adding TLS"),
            _sync_certificates(desired, trust=Trust.DESIRED),
            RollPass(constants.COND_TLS_LISTENERS_ADDED, "Every member listens on http and https (peer https on 2382); peer URLs still http",
                     wiring=render.Wiring.dual(desired, advertised_peer_scheme="http"), trust=Trust.DESIRED,
                     tls=desired),
            UpdatePeerURLs(constants.COND_PEER_URLS_UPDATED, "Every member's peer URL is registered as https",
                           peer_scheme="https"),
            *_final_roll(desired, verify=True, what="with TLS only"),
            _update_database("Successfully updated the Etcd TLS configuration"),
        ]
    elif change is TLSChange.REMOVE:
        assert current is not None
        steps = [
            _running("Etcd ops request is removing TLS"),
            RollPass(constants.COND_PLAINTEXT_LISTENERS_ADDED, "Every member listens on https and http (peer http on 2380); peer URLs still https",
                     wiring=render.Wiring.dual(current, advertised_peer_scheme="https"), tls=current),
            UpdatePeerURLs(constants.COND_PEER_URLS_UPDATED, "Every member's peer URL is registered as http",
                           peer_scheme="http"),
            *_final_roll(None, verify=False, what="without TLS"),
            _update_database("Successfully removed TLS from the Etcd and deleted its certificates"),
        ]
    elif change is TLSChange.ROTATE and variant in RESCUE_VARIANTS:
        assert current is not None
        steps = _rescue_steps(current, variant)
    elif change is TLSChange.ROTATE and variant is RotateVariant.CA_ROLLOVER:
        assert current is not None
        steps = _ca_rollover_steps(current)
    elif change is TLSChange.ROTATE:
        steps = [
            _running("Etcd ops request is rotating the certificates"),
            Issue(constants.COND_ISSUE_CERTIFICATES_SUCCEEDED, "Successfully re-issued every certificate",
                  tls=current),
            _sync_certificates(current),
            VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                         "Every member serves its re-issued certificates on the client and the peer port",
                         tls=current),
            _update_database("Successfully updated the Etcd TLS configuration"),
        ]
    elif change is TLSChange.UPDATE:
        steps = [
            _running("Etcd ops request is updating the certificates"),
            _sync_certificates(desired),
            *_final_roll(desired, verify=True, what="with the updated certificates"),
            _update_database("Successfully updated the Etcd TLS configuration"),
        ]
    elif change is TLSChange.HANDOVER:
        assert current is not None and desired is not None
        steps = list(handover_steps(current, desired))
    else:  # ISSUER
        assert current is not None and desired is not None
        steps = [
            _running("Etcd ops request is changing the issuer"),
            RollPass(constants.COND_TRUST_BUNDLE_WIDENED, "Every member trusts the old and the new CA",
                     wiring=render.Wiring.steady(current),
                     trust=Trust.CURRENT_AND_DESIRED, tls=desired),
            _sync_certificates(desired, source=" from the new issuer"),
            *_final_roll(desired, verify=True, what="with certificates from the new issuer"),
            RollPass(constants.COND_TRUST_BUNDLE_NARROWED, "Every member trusts the new CA only",
                     wiring=render.Wiring.steady(desired),
                     trust=Trust.DESIRED, tls=desired),
            _update_database("Successfully updated the Etcd TLS configuration"),
        ]
    return Plan(constants.OPS_TYPE_RECONFIGURE_TLS, change, desired, tuple(steps),
                variant=variant if change is TLSChange.ROTATE else None)


def handover_steps(current: etcd_api.TLSConfig, desired: etcd_api.TLSConfig) -> tuple[Step, ...]:
    """User-provided Secrets → cert-manager. The issuer change's three phases, with no roll between them (leaves are
    hot-reloaded; ``ServedCertificatesVerified`` restarts only a member that still serves the user's leaf after the
    delivery bound). Widen and narrow carry ``handover_from``: when the issuer's CA is the user's CA, both are
    no-ops, so a same-CA handover restarts nothing. The widen pass first checks the Certificates the handover will
    create (fail closed on a foreign one, before any member restarts)."""
    return (
        _running("Etcd ops request is handing the TLS over to cert-manager"),
        RollPass(constants.COND_TRUST_BUNDLE_WIDENED, "Every member trusts the user's CA and the issuer's CA (skipped when they are the same)",
                 wiring=render.Wiring.steady(current), trust=Trust.CURRENT_AND_DESIRED, tls=desired,
                 handover_from=current),
        _sync_certificates(desired, source=" from the issuer (handover)"),
        VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                     "Every member serves the certificates from the issuer on the client and the peer port",
                     tls=desired),
        RollPass(constants.COND_TRUST_BUNDLE_NARROWED, "Every member trusts the issuer's CA only (skipped when it is the user's CA)",
                 wiring=render.Wiring.steady(desired), trust=Trust.DESIRED, tls=desired, handover_from=current),
        _update_database("Successfully handed the Etcd TLS over to cert-manager"),
    )


def plan_for(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest,
             variant: RotateVariant = RotateVariant.HOT_RELOAD) -> Plan:
    """The plan of any supported request type (``variant``: what the engine observed for a rotate)."""
    spec = request.spec
    if spec.type == constants.OPS_TYPE_RECONFIGURE_TLS:
        if spec.tls is None:
            raise ValueError("spec.tls is nil, not supported in ReconfigureTLS type")
        return reconfigure_tls_plan(db, spec.tls, variant)
    if spec.type == constants.OPS_TYPE_RESTART:
        wiring = render.Wiring.steady(db.spec.tls)
        restart_steps = (
            _running("Etcd ops request is restarting the members"),
            Restart(constants.COND_RESTART_PODS, "Successfully restarted all the etcd members",
                    wiring=wiring, tls=db.spec.tls),
        )
        return Plan(spec.type, None, db.spec.tls, restart_steps)
    if spec.type == constants.OPS_TYPE_MOVE_LEADER:
        move = (MoveLeader(constants.COND_ETCD_LEADER_MOVED, "Successfully moved the leader"),)
        return Plan(spec.type, None, db.spec.tls, move, pauses=False)
    if spec.type == constants.OPS_TYPE_COMPACT:
        revision = spec.compact.revision if spec.compact is not None else None
        compact = (Compact(constants.COND_ETCD_COMPACTED, "Successfully compacted the etcd key-value history",
                           revision=revision),)
        return Plan(spec.type, None, db.spec.tls, compact, pauses=False)
    if spec.type == constants.OPS_TYPE_DEFRAGMENT:
        defragment = (
            Defragment(constants.COND_ETCD_DEFRAGMENTED, "Successfully defragmented every etcd member"),
            ClearAlarms(constants.COND_ETCD_ALARM_CLEARED, "No space alarm is raised"),
        )
        return Plan(spec.type, None, db.spec.tls, defragment, pauses=False)
    if spec.type == constants.OPS_TYPE_UPDATE_VERSION:
        return update_version_plan(db, request)
    if spec.type == constants.OPS_TYPE_ROTATE_AUTH:
        return rotate_auth_plan(db, request)
    if spec.type == constants.OPS_TYPE_BACKUP:
        if db.spec.backup is None:
            raise ValueError(f"Etcd {db.metadata.name} has no spec.backup: set spec.backup.destination first")
        backup = (UploadSnapshot(constants.COND_SNAPSHOT_UPLOADED, "Successfully uploaded a snapshot"),
                  PruneSnapshots(constants.COND_SNAPSHOTS_PRUNED, "The store keeps the retention's snapshots"))
        return Plan(spec.type, None, db.spec.tls, backup, pauses=False)
    if spec.type == constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS:
        return recovery_plan(db, request)
    if spec.type == constants.OPS_TYPE_RESTORE:
        source = spec.restore.source if spec.restore is not None else None
        if not source:
            raise ValueError("spec.restore.source can not be empty")
        if db.spec.backup is None:
            raise ValueError(f"Etcd {db.metadata.name} has no spec.backup: a Restore reads from its destination")
        restore = (
            _running(f"Etcd ops request is restoring the cluster from {source}"),
            VerifySnapshot(constants.COND_SNAPSHOT_VERIFIED, "The snapshot is whole and as recorded", source=source),
            RestoreMembers(constants.COND_MEMBERS_RESTORED, "Every member was restored from the snapshot"),
            VerifyRestore(constants.COND_RESTORE_VERIFIED, "Every member holds the snapshot's keys"),
            _update_database("Successfully restored the cluster from the snapshot"),
        )
        return Plan(spec.type, None, db.spec.tls, restore, restores=True)
    if spec.type == constants.OPS_TYPE_RECONFIGURE:
        return reconfigure_plan(db, request)
    if spec.type == constants.OPS_TYPE_VERTICAL_SCALING:
        return vertical_scaling_plan(db, request)
    if spec.type == constants.OPS_TYPE_HORIZONTAL_SCALING:
        target = spec.horizontal_scaling.replicas if spec.horizontal_scaling is not None else None
        if target is None or target < 1:
            raise ValueError("spec.horizontalScaling.replicas must be at least 1")
        origin = request.status.origin if request.status is not None else None
        start = origin.replicas if origin is not None and origin.replicas is not None else db.spec.replicas
        wiring = render.Wiring.steady(db.spec.tls)
        if target < start:
            scale = ScaleMembers(constants.COND_HORIZONTAL_SCALE_DOWN,
                                 f"Successfully scaled the cluster down from {start} to {target} members",
                                 replicas=target, wiring=wiring)
        else:
            scale = ScaleMembers(constants.COND_HORIZONTAL_SCALE_UP,
                                 f"Successfully scaled the cluster up from {start} to {target} members",
                                 replicas=target, wiring=wiring)
        return Plan(spec.type, None, db.spec.tls, (scale,), pauses=False)
    raise ValueError(f"unsupported EtcdOpsRequest type {spec.type!r}")


def update_version_plan(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest) -> Plan:
    """Up by at most one minor, or down by exactly one (etcd's downgrade protocol first), any patch within a minor:
    the template onto the target, the leader-aware roll, every member's version and the cluster version checked,
    then ``spec.version``. Anything else is refused when the request starts, with KubeDB's words for a downgrade."""
    spec = request.spec
    target = spec.update_version.target_version if spec.update_version is not None else None
    if not target:
        raise ValueError("spec.updateVersion.targetVersion can not be empty")
    if target not in constants.SUPPORTED_ETCD_VERSIONS:
        raise ValueError(f"spec.updateVersion.targetVersion {target} is not a supported etcd version: use one of "
                         f"{', '.join(constants.SUPPORTED_ETCD_VERSIONS)}")
    origin = request.status.origin if request.status is not None else None
    start = origin.version if origin is not None and origin.version else db.spec.version
    current, wanted = versions.parse(start), versions.parse(target)
    tls = db.spec.tls
    wiring = dataclasses.replace(render.Wiring.steady(tls), version=target)
    steps: list[Step] = [_running(f"Etcd ops request is updating etcd from {start} to {target}")]
    if wanted[:2] < current[:2]:
        if wanted[0] != current[0] or current[1] - wanted[1] != 1 or current[:2] < (3, 6):
            raise ValueError(f"downgrades are not supported from {start} to {target}: only one minor version down, "
                             "from etcd 3.6 on (etcd's own downgrade protocol)")
        minor = f"{wanted[0]}.{wanted[1]}"
        steps.append(EnableDowngrade(constants.COND_DOWNGRADE_ENABLED,
                                     f"Enabled etcd's downgrade to {minor}: cluster and storage version {minor}",
                                     version=minor))
    elif wanted[0] != current[0] or wanted[1] > current[1] + 1:
        raise ValueError(f"upgrading from {start} to {target} skips a minor version: upgrade one minor at a time")
    steps += [
        ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, f"Successfully re-rendered the StatefulSet for etcd "
                                                             f"{target}", wiring=wiring, tls=tls),
        Roll(constants.COND_RESTART_PODS, f"Successfully restarted the etcd members onto {target}", wiring=wiring,
             tls=tls),
        VerifyVersion(constants.COND_VERSION_VERIFIED, f"Every member runs etcd {target}", version=target),
        _update_database(f"Successfully updated the Etcd's version to {target}"),
    ]
    return Plan(spec.type, None, tls, tuple(steps), desired_version=target)


def rotate_auth_plan(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest) -> Plan:
    """A new root password, live: staged as ``password.next`` in the auth Secret clients read (the Etcd's, else the
    one the request names, else ``<etcd>-auth``), applied with UserChangePassword — or, on a cluster without
    authentication, the root user created and authentication turned on — and verified by a fresh login; then the
    Secret holds it as ``password`` and ``spec.authSecret`` names the Secret the request named. No member restarts:
    etcd keeps users in its data."""
    origin = request.status.origin if request.status is not None else None
    recorded = origin.auth_secret if origin is not None and origin.observed_at else None
    current = recorded if origin is not None and origin.observed_at else (
        db.spec.auth_secret.name if db.spec.auth_secret is not None else None)
    auth = request.spec.authentication
    source = auth.secret_ref.name if auth is not None and auth.secret_ref is not None else None
    if auth is not None and auth.secret_ref is not None and not source:
        raise ValueError("spec.authentication.secretRef.name can not be empty")
    name = db.metadata.name or ""
    staging = current or source or naming.auth_secret(name)
    final = source or staging
    turning_on = current is None
    steps = (
        _running("Etcd ops request is turning authentication on" if turning_on
                 else "Etcd ops request is rotating the root password"),
        UpdateCredential(constants.COND_UPDATE_CREDENTIAL, f"The new root password is staged in Secret {staging}",
                         staging_secret=staging, source_secret=source),
        ApplyCredential(constants.COND_ETCD_CREDENTIAL_APPLIED,
                        "etcd authentication is on with the new root password, verified by a fresh login"
                        if turning_on else "etcd has the new root password, verified by a fresh login; the old one "
                                           "is refused",
                        staging_secret=staging, source_secret=source),
        _update_database(f"Successfully rotated the root password; spec.authSecret is {final}"),
    )
    return Plan(request.spec.type, None, db.spec.tls, steps, auth_secrets=(staging, final))


def recovery_plan(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest) -> Plan:
    """Rebuild a cluster that lost quorum from its survivor: the loss and the survivor checked again; the survivor
    restarted alone with ``--force-new-cluster`` (the others' pods gone and their volumes wiped), then once more
    without it (a later restart must never force again); the others added back one at a time as learners and
    promoted; the StatefulSet back to every replica. No MoveLeader: the survivor leads throughout."""
    recover = request.spec.recover_from_quorum_loss
    if recover is None or not recover.confirm_member:
        raise ValueError("spec.recoverFromQuorumLoss.confirmMember can not be empty")
    if recover.member and recover.member != recover.confirm_member:
        raise ValueError(f"spec.recoverFromQuorumLoss.confirmMember {recover.confirm_member} is not "
                         f"spec.recoverFromQuorumLoss.member {recover.member}")
    survivor = recover.confirm_member
    pods = naming.pods(db.metadata.name or "", db.spec.replicas)
    if survivor not in pods:
        raise ValueError(f"spec.recoverFromQuorumLoss.confirmMember {survivor} is not a member of "
                         f"{db.metadata.name}: one of {', '.join(pods)}")
    steps = (
        _running(f"Etcd ops request is recovering the cluster from {survivor}"),
        ConfirmQuorumLoss(constants.COND_QUORUM_LOSS_CONFIRMED,
                          f"Quorum is lost and {survivor} has the highest committed index of the members that answer",
                          survivor=survivor),
        ForceNewCluster(constants.COND_SURVIVOR_FORCED,
                        f"{survivor} runs alone as a new cluster of one with its data (--force-new-cluster, then "
                        "restarted without it); the other members were wiped", survivor=survivor),
        RejoinMembers(constants.COND_MEMBERS_REJOINED, "Every other member was added back as a learner and promoted",
                      survivor=survivor),
        _update_database(f"Successfully recovered the cluster from {survivor}"),
    )
    return Plan(request.spec.type, None, db.spec.tls, steps, recovers=True)


def reconfigure_plan(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest) -> Plan:
    """The request's flags over the Etcd's (etcd's rules checked on the result), the template with them, the
    leader-aware roll and each member's own command line read back — or, with ``restart: "false"``, the template
    only (each member takes the flags at its next restart) — then ``spec.configuration.tuning``."""
    spec = request.spec
    configuration = spec.configuration
    if configuration is None or configuration.tuning is None:
        raise ValueError("spec.configuration.tuning must be specified")
    current = db.spec.configuration.tuning if db.spec.configuration is not None else None
    merged = tuning_api.merge(current, configuration.tuning)
    storage = db.status.storage if db.status is not None else None
    sizes = [m.db_size_bytes for m in (storage.members or {}).values()] if storage is not None else []
    problems = tuning_api.problems(merged, "spec.configuration.tuning", largest_db_bytes=max(sizes, default=0))
    if problems:
        raise ValueError("; ".join(f"{field}: {message}" for field, _value, message in problems))
    tls = db.spec.tls
    wiring = dataclasses.replace(render.Wiring.steady(tls), tuning=merged)
    flags = tuple(tuning_api.flags(merged))
    roll = configuration.restart != "false"
    steps: list[Step] = [
        _running("Etcd ops request is reconfiguring etcd"),
        ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, "Successfully re-rendered the StatefulSet with the new "
                                                            "flags", wiring=wiring, tls=tls),
    ]
    if roll:
        steps += [
            Roll(constants.COND_RESTART_PODS, "Successfully restarted the etcd members with the new flags",
                 wiring=wiring, tls=tls),
            VerifyConfiguration(constants.COND_CONFIGURATION_VERIFIED, "Every member runs with the new flags",
                                flags=flags),
        ]
    steps.append(_update_database("Successfully updated the Etcd's configuration"))
    return Plan(spec.type, None, tls, tuple(steps), desired_tuning=merged, pending_restart=not roll)


def vertical_scaling_plan(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest) -> Plan:
    """The etcd container's new resources: the template first (every pod created from now on has them), then either
    the leader-aware roll (``Restart``) or each running pod resized in place (``InPlace``), then the Etcd's
    ``spec.podTemplate.spec.resources``."""
    scaling = request.spec.vertical_scaling
    resources = scaling.etcd.resources if scaling is not None and scaling.etcd is not None else None
    if scaling is None or resources is None:
        raise ValueError("spec.verticalScaling.etcd.resources must be specified: the exporter is inert")
    tls = db.spec.tls
    wiring = dataclasses.replace(render.Wiring.steady(tls), resources=resources)
    steps: list[Step] = [
        _running("Etcd ops request is scaling the etcd container's resources"),
        ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, "Successfully re-rendered the StatefulSet with the new "
                                                            "resources", wiring=wiring, tls=tls),
    ]
    if scaling.mode == "InPlace":
        steps.append(ResizeInPlace(constants.COND_IN_PLACE_RESIZED, "Every member's pod was resized in place",
                                   resources=resources))
    else:
        steps.append(Roll(constants.COND_RESTART_PODS, "Successfully restarted the etcd members with the new "
                                                       "resources", wiring=wiring, tls=tls))
    steps.append(_update_database("Successfully updated the Etcd's resources"))
    return Plan(request.spec.type, None, tls, tuple(steps), desired_resources=resources)
