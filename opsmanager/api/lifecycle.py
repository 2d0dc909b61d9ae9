"""Certificate lifecycle of a TLS Etcd: the policy ``spec.tlsLifecycle`` and the scan's ``status.tls``.

The policy's durations are Go duration strings in the CRD (``720h``, ``90s``); the helper methods return
timedeltas, so the scanner and the auto-renewer never parse text themselves. The models reject an unparsable or
non-positive duration and duplicate alert thresholds; the webhook (``opsmanager.webhook.validation``) gives the
same rules their user-facing messages.

Usage::

    policy = db.tls_lifecycle                          # spec.tlsLifecycle or the all-defaults policy
    policy.scan_interval_delta                         # timedelta(minutes=5)
    policy.alert_thresholds()                          # [60 d, 30 d, 7 d], largest first
    policy.auto_renew_before(lifetime)                 # explicit value, else min(lifetime / 4, 720h)
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import pydantic

from opsmanager.api import common, constants, durations


def _positive(text: str) -> str:
    if durations.parse(text) <= datetime.timedelta(0):
        raise ValueError(f"duration {text!r} must be greater than zero")
    return text


# A Go duration string greater than zero. No CRD pattern on purpose: the webhook's message names the field and the
# fix, where a pattern mismatch from the API server would only quote the regular expression.
PolicyDuration = Annotated[str, pydantic.AfterValidator(_positive)]


def default_renew_before(lifetime: datetime.timedelta) -> datetime.timedelta:
    """The auto-renew window when ``autoRenew.before`` is unset: a quarter of the leaf's lifetime (notAfter -
    notBefore), at most 720h — after cert-manager's own renewal point, so the operator is the safety net."""
    return min(lifetime / 4, durations.parse(constants.AUTO_RENEW_BEFORE_MAX))


class AutoRenew(common.Model):
    """When the operator itself asks for a rotation of the leaves (an `EtcdOpsRequest` labelled
    `ops.opsmanager.dev/trigger: auto-renew`)."""

    enabled: bool = pydantic.Field(
        default=True,
        description="Create a `ReconfigureTLS` request with `rotateCertificates: true` when the earliest served "
        "leaf is within `before` of its notAfter and no request is in flight for this Etcd.",
    )
    before: PolicyDuration | None = pydantic.Field(
        default=None,
        description="How long before a served leaf's notAfter to renew, a Go duration such as `360h`. Unset: a "
        "quarter of the certificate's lifetime, at most `720h` (after cert-manager's own renewal point, so the "
        "operator is a safety net, not a second renewer).",
    )
    retry_after_failure: PolicyDuration = pydantic.Field(
        default=constants.DEFAULT_AUTO_RENEW_RETRY_AFTER_FAILURE,
        description="After an auto-renew request `Failed`, wait this long (a Go duration) before creating another.",
    )

    @property
    def retry_after_failure_delta(self) -> datetime.timedelta:
        """``retryAfterFailure`` as a timedelta."""
        return durations.parse(self.retry_after_failure)

    def before_delta(self, lifetime: datetime.timedelta) -> datetime.timedelta:
        """The renew window for a leaf valid for ``lifetime`` (notAfter - notBefore): ``before`` when set, else
        a quarter of ``lifetime``, at most 720h."""
        if self.before is not None:
            return durations.parse(self.before)
        return default_renew_before(lifetime)


class TLSLifecycle(common.Model):
    """Certificate-lifecycle policy of a TLS Etcd: how often the served certificates are scanned, when to warn and
    when to renew. Every field is optional; the whole block is ignored while `spec.tls` is unset."""

    scan_interval: PolicyDuration = pydantic.Field(
        default=constants.DEFAULT_TLS_SCAN_INTERVAL,
        description="How often every member's served certificates are read with a fresh TLS handshake (client "
        "and peer port), a Go duration. A scan also follows every ops request and any change of the TLS Secrets.",
    )
    alert_before: list[PolicyDuration] = pydantic.Field(
        default=list(constants.DEFAULT_TLS_ALERT_BEFORE),
        description="Alert thresholds before a certificate's notAfter, Go durations, no two equal: one "
        "`CertificateExpiringSoon` Event per threshold per certificate. `CertificatesValid` turns False "
        "(`ExpiringSoon`) within the smallest. Empty: no early warning, only `Expired`.",
    )
    auto_renew: AutoRenew = pydantic.Field(
        default_factory=AutoRenew, description="Automatic renewal of the served leaves."
    )

    @pydantic.field_validator("alert_before")
    @classmethod
    def _no_duplicate_thresholds(cls, value: list[str]) -> list[str]:
        seen: dict[datetime.timedelta, str] = {}
        for text in value:
            delta = durations.parse(text)
            if delta in seen:
                raise ValueError(f"alert threshold {text!r} duplicates {seen[delta]!r}")
            seen[delta] = text
        return value

    @property
    def scan_interval_delta(self) -> datetime.timedelta:
        """``scanInterval`` as a timedelta."""
        return durations.parse(self.scan_interval)

    def alert_thresholds(self) -> list[datetime.timedelta]:
        """``alertBefore`` as timedeltas, largest first (the order in which a nearing notAfter crosses them)."""
        return sorted((durations.parse(text) for text in self.alert_before), reverse=True)

    def smallest_alert_threshold(self) -> datetime.timedelta:
        """The smallest threshold (within it ``CertificatesValid`` is ``ExpiringSoon``); zero when there is none."""
        thresholds = self.alert_thresholds()
        return thresholds[-1] if thresholds else datetime.timedelta(0)

    def auto_renew_before(self, lifetime: datetime.timedelta) -> datetime.timedelta:
        """The auto-renew window for a leaf valid for ``lifetime``; see :meth:`AutoRenew.before_delta`."""
        return self.auto_renew.before_delta(lifetime)

    @property
    def retry_after_failure_delta(self) -> datetime.timedelta:
        """``autoRenew.retryAfterFailure`` as a timedelta."""
        return self.auto_renew.retry_after_failure_delta


# --- status.tls --------------------------------------------------------------------------------------------------

Port = Literal["client", "peer"]


class ServedCertificate(common.OpenModel):
    """The leaf one member served on one port at the last scan, or why it could not be read."""

    serial: str | None = pydantic.Field(
        default=None, pattern=r"^[0-9a-f]+$",
        description="Serial number, lowercase hex without separators.",
    )
    not_before: str | None = pydantic.Field(default=None, description="RFC 3339 start of validity.")
    not_after: str | None = pydantic.Field(default=None, description="RFC 3339 end of validity.")
    issuer: str | None = pydantic.Field(default=None, description="Issuer distinguished name, e.g. `CN=etcd-ca`.")
    matches_secret: bool | None = pydantic.Field(
        default=None, description="True when the served leaf is the one in the member's Secret (`tls.crt`)."
    )
    error: str | None = pydantic.Field(
        default=None, description="Set when the port could not be reached or handshaken; the other fields are then "
        "absent.",
    )


class MemberTLSStatus(common.OpenModel):
    """What one member serves."""

    name: str = pydantic.Field(min_length=1, description="Member (pod) name, e.g. `db-0`.")
    client: ServedCertificate | None = pydantic.Field(
        default=None, description="The leaf served on the client port (2379)."
    )
    peer: ServedCertificate | None = pydantic.Field(
        default=None, description="The leaf served on the https peer port."
    )

    def port(self, port: str) -> ServedCertificate | None:
        """The entry for ``port`` (``client`` or ``peer``)."""
        return self.client if port == constants.PORT_CLIENT else self.peer if port == constants.PORT_PEER else None


class NextExpiry(common.OpenModel):
    """The earliest notAfter among the served leaves."""

    not_after: str = pydantic.Field(description="RFC 3339 notAfter of the earliest-expiring served leaf.")
    member: str = pydantic.Field(description="Member serving it.")
    port: Port = pydantic.Field(description="`client` or `peer`.")


class TLSStatus(common.OpenModel):
    """The last certificate scan: what every member really serves (read with a fresh handshake)."""

    last_scan_time: str | None = pydantic.Field(default=None, description="RFC 3339 time of the last scan.")
    members: list[MemberTLSStatus] | None = pydantic.Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="One entry per member, with the leaf served on each port.",
    )
    next_expiry: NextExpiry | None = pydantic.Field(
        default=None, description="The earliest-expiring served leaf: its notAfter, member and port."
    )
    ca_not_after: str | None = pydantic.Field(
        default=None, description="RFC 3339 notAfter of the earliest-expiring CA in the trust bundle."
    )

    def member(self, name: str) -> MemberTLSStatus | None:
        """The entry of member ``name``, or None."""
        for entry in self.members or ():
            if entry.name == name:
                return entry
        return None


class AutoDefragment(common.Model):
    """When the storage scan files a Defragment request by itself: once the space a defragmentation would give back
    (the file's size minus what is in use, on the member where it is largest) is both this share of the file and at
    least this many bytes. Once per episode: not again until that member's reclaimable share has dropped below the
    threshold."""

    enabled: bool = pydantic.Field(default=True, description="File Defragment requests (trigger `auto-defragment`).")
    reclaimable_percent: int = pydantic.Field(
        default=50, ge=1, le=100,
        description="The share of a member's database file that is free (compacted, not yet given back), in %.")
    min_reclaimable_bytes: int = pydantic.Field(
        default=256 * 1024 * 1024, ge=0,
        description="And at least this many bytes free, so a small database is never defragmented for nothing.")


class StorageAutoscale(common.Model):
    """When the storage scan files a VolumeExpansion by itself — KubeDB's ``EtcdAutoscaler`` storage policy
    (``spec.storage.etcd``), kept on the Etcd: once a member's database file passes ``usageThreshold`` % of its data
    volume's capacity, every volume grows by ``scalingThreshold`` % (never past ``upperBound``). Once per episode:
    an episode is the volume at one size, so a request that failed is not filed again until the size changed."""

    trigger: Literal["On", "Off"] = pydantic.Field(
        default="Off", description="`On`: file VolumeExpansion requests (trigger `storage-autoscale`); `Off`: never.")
    usage_threshold: int = pydantic.Field(
        default=80, ge=1, le=100,
        description="The share of a member's volume capacity its database file may take before the volumes grow, "
                    "in %.")
    scaling_threshold: int = pydantic.Field(
        default=50, ge=1, le=1000, description="How much the volumes grow each time, in % of their current size.")
    expansion_mode: Literal["Online", "Offline"] = pydantic.Field(
        default="Online", description="The filed VolumeExpansion's `mode`.")
    upper_bound: common.Quantity | None = pydantic.Field(
        default=None, description="The largest size the volumes may grow to (absent: no bound); a volume at the "
                                  "bound is left alone, and the alert says so.")


class StorageLifecycle(common.Model):
    """Storage-lifecycle policy: how often every member's database size, in-use size and quota are read (status,
    metrics, the quota alert), when a Defragment is filed by itself, and when the volumes grow by themselves."""

    scan_interval: PolicyDuration = pydantic.Field(
        default="1m", description="How often every member's Status is read, a Go duration.")
    auto_defragment: AutoDefragment = pydantic.Field(
        default_factory=AutoDefragment, description="Automatic defragmentation.")
    autoscale: StorageAutoscale = pydantic.Field(
        default_factory=StorageAutoscale, description="Automatic volume expansion (KubeDB's EtcdAutoscaler storage "
                                                      "policy).")
    quota_volume_percent: int | None = pydantic.Field(
        default=None, ge=1, le=100,
        description="Ties `--quota-backend-bytes` to the data volume: when set, every VolumeExpansion raises the "
                    "quota to this share of the new size (never lowers it), and rolls the members onto it.")

    @property
    def scan_interval_delta(self) -> datetime.timedelta:
        return durations.parse(self.scan_interval)


class MemberStorage(common.OpenModel):
    """One member's database as its Status reports it."""

    db_size_bytes: int = pydantic.Field(description="The database file's size (`dbSize`).")
    db_size_in_use_bytes: int = pydantic.Field(description="The part of it in use (`dbSizeInUse`).")
    quota_bytes: int | None = pydantic.Field(
        default=None, description="`--quota-backend-bytes` as the member runs it (NOSPACE beyond).")
    volume_capacity_bytes: int | None = pydantic.Field(
        default=None, description="The capacity of the member's data volume (its claim's `status.capacity`); "
                                  "absent for ephemeral storage.")


class StorageStatus(common.OpenModel):
    """The last storage scan."""

    last_scan_time: str | None = pydantic.Field(default=None, description="When (RFC 3339).")
    members: dict[str, MemberStorage] | None = pydantic.Field(default=None, description="By pod name.")
    reclaimable_bytes: int | None = pydantic.Field(
        default=None, description="The most a defragmentation would give back on one member.")


# --- what the lifecycle remembers (status.lifecycle) ------------------------------------------------------------

Trigger = Literal["ca-rollover", "auto-renew", "auto-defragment", "scheduled-backup", "storage-autoscale"]


class FiledRequest(common.OpenModel):
    """The latest request one automatic filer filed, and the episode it was filed for. A filer files once per
    episode: the request's name is derived from the episode, and an episode recorded here is not filed again."""

    trigger: Trigger = pydantic.Field(
        description="The filer: the request's `ops.opsmanager.dev/trigger` label (`ca-rollover`, `auto-renew`, "
                    "`auto-defragment`, `scheduled-backup`).")
    episode: str = pydantic.Field(
        min_length=1,
        description="What the request was filed for: the new CA's SHA-256 (`ca-rollover`), the notAfter it renews "
                    "and, for a retry, the failure it follows (`auto-renew`), when the reclaimable share went over "
                    "the policy (`auto-defragment`), the schedule slot (`scheduled-backup`).")
    request: str = pydantic.Field(min_length=1, description="The `EtcdOpsRequest`'s name.")
    filed_at: str | None = pydantic.Field(default=None, description="When it was filed (RFC 3339).")


class TLSScanMemory(common.OpenModel):
    """What the certificate scan remembers between scans."""

    announced: list[str] | None = pydantic.Field(
        default=None,
        description="The once-only Events already posted, as keys of (kind, certificate serial[, threshold]): "
                    "recorded before the Events, so neither a rescan nor a restarted operator repeats one.")
    secret_seen: dict[str, str] | None = pydantic.Field(
        default=None,
        description="When the scan first saw each Secret leaf (serial → RFC 3339): a leaf's age for the delivery "
                    "grace counts from there, not from its notBefore, which some issuers backdate.")
    scan_requested: str | None = pydantic.Field(
        default=None,
        description="Scan once this time (RFC 3339) has come, before the scan interval: set when an ops request "
                    "ends, a certificate is re-issued, or a member is within the delivery grace.")


class AutoRenewMemory(common.OpenModel):
    """What auto-renew remembers of its latest request (whose name is in `filed`)."""

    requested_for: str | None = pydantic.Field(
        default=None, description="The notAfter (RFC 3339) the latest auto-renew request was filed for.")
    failed_at: str | None = pydantic.Field(
        default=None,
        description="When that request was found `Failed`, `Skipped` or deleted before it renewed (RFC 3339); no "
                    "retry before `autoRenew.retryAfterFailure` has passed since.")
    held: list[str] | None = pydantic.Field(
        default=None,
        description="The members not scanned that hold a due renewal back (`AutoRenewHeld` is posted once per "
                    "hold).")


class AutoDefragmentMemory(common.OpenModel):
    """The storage scan's current auto-defragment episode."""

    episode_since: str | None = pydantic.Field(
        default=None,
        description="When the current episode's request was first due (RFC 3339): its name is derived from it, and "
                    "the episode ends when the reclaimable share drops below the policy.")


class LifecycleMemory(common.OpenModel):
    """What the operator's automatic filers and the certificate scan remember between passes and across operator
    restarts. Written by the operator only."""

    filed: list[FiledRequest] | None = pydantic.Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["trigger"]},
        description="Per filer, the latest request it filed and the episode it was for.")
    tls_scan: TLSScanMemory | None = pydantic.Field(default=None, description="The certificate scan's memory.")
    auto_renew: AutoRenewMemory | None = pydantic.Field(default=None, description="Auto-renew's memory.")
    auto_defragment: AutoDefragmentMemory | None = pydantic.Field(
        default=None, description="Auto-defragment's current episode.")

    @classmethod
    def of(cls, status: Mapping[str, Any] | None) -> LifecycleMemory:
        """The memory in an Etcd's ``status`` (empty when there is none, or when it does not parse)."""
        raw = (status or {}).get("lifecycle")
        try:
            return cls.model_validate(raw) if isinstance(raw, Mapping) else cls()
        except pydantic.ValidationError:
            return cls()

    def into(self, status: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``status`` holding this memory."""
        return {**status, "lifecycle": self.to_dict()}

    def filed_by(self, trigger: str) -> FiledRequest | None:
        """The latest request filed by ``trigger``, or None."""
        return next((f for f in self.filed or () if f.trigger == trigger), None)
