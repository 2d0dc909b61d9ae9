"""Certificate verdicts: the pure decisions behind the wire-truth scan, its alerts and auto-renew.

A TLS etcd cluster fails on the day a certificate expires, and nobody is told in advance: etcd exports no expiry
metric, cert-manager knows only its Secrets, not what each etcd process serves. The scan shell handshakes with
every member on the client and the peer port and hands the results here as :class:`Observation` values, together
with the trust-bundle CAs, the alert thresholds and ``now``. This module turns them into ``status.tls``
(:func:`scan_status`), the ``CertificatesValid`` condition (:func:`condition`), the Events (:func:`events`) and
the auto-renew decision (:func:`auto_renew`). It does no I/O and reads no clock: the same inputs give the same
answer, so an operator that restarts decides exactly as before.

Rules (each prevents a failure that was seen elsewhere or would follow from the obvious design):

- **The wire, not the Secret.** The served leaf is what clients see; a Secret can be renewed while the kubelet has
  not delivered the files yet, or the process kept an old leaf. ``matchesSecret`` (served serial == Secret leaf
  serial) and the ``ServedCertificateMismatch`` reason catch a member that cert-manager believes renewed.
- **A failed port is data, not a crash.** An unreachable member, a failed handshake, an unreadable Secret or
  malformed PEM become ``{error: …}`` / ``matchesSecret: false`` and the ``ScanFailed`` reason; the other members
  are still reported, so one broken member never hides the expiry of the others.
- **First reason that applies, in a fixed order** (``Expired``, ``ExpiringSoon``, ``CAExpiringSoon``,
  ``ServedCertificateMismatch``, ``ScanFailed``): the most urgent problem is the one a reader sees.
- **Stable messages.** Messages name member, port and the absolute ``notAfter``, never a countdown ("in 3m12s"):
  a countdown would rewrite the condition on every scan of a steady cluster and flood the API server and watchers.
- **Each alert once, across rescans and restarts.** An Event is keyed by (kind, certificate serial[, threshold]);
  the keys are returned to the caller to persist (``status.lifecycle.tlsScan.announced``), so neither a rescan nor a
  restarted operator repeats an Event. Keys of certificates no longer served are dropped only after a scan that
  saw every port, so a member that is briefly unreachable does not lose its keys and re-alert later.
- **One threshold Event per crossing, the tightest one.** When a certificate is first seen already past several
  thresholds (a fresh operator, a short-lived leaf), one ``CertificateExpiringSoon`` names the smallest threshold
  crossed and marks every larger one as announced: three Events at once for one fact is noise. A 10-minute leaf
  with ``alertBefore: [9m]`` fires exactly once, when less than 9 minutes are left.
- **Renewed means everyone.** ``CertificatesRenewed`` fires when every member serves a leaf other than the one the
  previous scan saw: a half-finished rotation is not announced as done.
- **Auto-renew is a safety net, not a second renewer.** Its default point (a quarter of the lifetime, at most
  720h before ``notAfter``) lies after cert-manager's own renewal point (a third of the lifetime). One request per
  expiry, named deterministically from that expiry, so a restarted operator that re-decides creates the same name
  (AlreadyExists) instead of a second request. After a failed request none is created before
  ``retryAfterFailure`` (an issuer that cannot issue must not be hammered). It is held while any member could not
  be scanned: the unscanned member may hold the earliest certificate, or be down for a reason a rotation would
  make worse.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from opsmanager import pki
from opsmanager.api import conditions, constants, durations, lifecycle
from opsmanager.api import opsrequest as ops_api

# --- names (to be moved to opsmanager.api.constants at merge) ---------------------------------------------------

# Names (condition, reasons, Events, ports, the trigger label) are the API's: opsmanager.api.constants.
PORTS: Final = constants.TLS_PORTS
EVENT_TYPE_WARNING: Final = "Warning"
EVENT_TYPE_NORMAL: Final = "Normal"


# --- inputs -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Observation:
    """One member and port as the scan saw it.

    ``served`` is the leaf of a fresh handshake, or None with ``error`` saying why (unreachable, handshake failed).
    ``secret_leaf`` is the leaf in that member's Secret, or None when the Secret is missing, unreadable or
    malformed (``secret_error`` may say which).
    """

    member: str
    port: str  # constants.PORT_CLIENT | constants.PORT_PEER
    served: pki.CertInfo | None
    secret_leaf: pki.CertInfo | None
    error: str | None = None
    secret_error: str | None = None

    @property
    def matches_secret(self) -> bool:
        return (self.served is not None and self.secret_leaf is not None
                and self.served.serial == self.secret_leaf.serial)


@dataclasses.dataclass(frozen=True)
class Scan:
    """Everything one scan of one Etcd produced: the observations, the trust-bundle CAs, the policy's
    ``alertBefore`` thresholds and the scan time (aware, UTC)."""

    observations: tuple[Observation, ...]
    cas: tuple[pki.CertInfo, ...]
    thresholds: tuple[datetime.timedelta, ...]
    now: datetime.datetime
    # The delivery grace: how long a member may serve another leaf than its Secret's, counted from when that
    # Secret leaf was issued (``secret_seen``, else its notBefore), before it is a mismatch. Zero: never.
    delivery_grace: datetime.timedelta = datetime.timedelta(0)
    # Secret leaf serial (lowercase hex) -> when the scan first saw it in the Secret (see :func:`seen_after`).
    secret_seen: Mapping[str, datetime.datetime] = dataclasses.field(default_factory=dict)
    # Auto-renew's window for the earliest leaf as a renewal would have it (``autoRenew.before``, else the default
    # for the lifetime its Certificate asks for: :func:`opsmanager.lifecycle.scan.renew_window`); zero when
    # auto-renew is off. A CA that ends within it is what the scan reports (:func:`ca_blocks_renewal`).
    renew_window: datetime.timedelta = datetime.timedelta(0)

    @property
    def smallest_threshold(self) -> datetime.timedelta:
        """The smallest positive threshold; zero without any (then only expiry counts)."""
        positive = [t for t in self.thresholds if t > datetime.timedelta(0)]
        return min(positive) if positive else datetime.timedelta(0)

    @property
    def largest_threshold(self) -> datetime.timedelta:
        positive = [t for t in self.thresholds if t > datetime.timedelta(0)]
        return max(positive) if positive else datetime.timedelta(0)


@dataclasses.dataclass(frozen=True)
class Event:
    """An Event to post on the Etcd: ``type_`` Warning or Normal, a CamelCase ``reason``, a stable message."""

    type_: str
    reason: str
    message: str


# --- helpers ----------------------------------------------------------------------------------------------------


def serial_hex(serial: int) -> str:
    """A serial as status shows it: lowercase hex, no separators, no leading zeros."""
    return format(serial, "x")


def go_duration(delta: datetime.timedelta) -> str:
    """A duration in Go's spelling (``720h``, ``9m``, ``1h30m``, ``90s`` → ``1m30s``), whole seconds."""
    return durations.format(datetime.timedelta(seconds=int(delta.total_seconds())))


def _where(obs: Observation) -> str:
    return f"{obs.member} {obs.port}"


def _served(scan: Scan) -> list[tuple[Observation, pki.CertInfo]]:
    return [(o, o.served) for o in scan.observations if o.served is not None]


def _earliest(scan: Scan) -> tuple[Observation, pki.CertInfo] | None:
    served = _served(scan)
    if not served:
        return None
    return min(served, key=lambda pair: pair[1].not_after)  # min keeps the first of equals: observation order


def _earliest_ca(scan: Scan) -> pki.CertInfo | None:
    return min(scan.cas, key=lambda ca: ca.not_after) if scan.cas else None


def renewal_ca(scan: Scan) -> pki.CertInfo | None:
    """The CA the earliest served leaf was issued by (of the trust bundle's, the latest-ending one with the leaf's
    issuer as its subject: a renewed CA keeps its subject); None when no leaf was served or none matches."""
    earliest = _earliest(scan)
    if earliest is None:
        return None
    issuers = [ca for ca in scan.cas if ca.subject == earliest[1].issuer]
    return max(issuers, key=lambda ca: ca.not_after) if issuers else None


def ca_blocks_renewal(scan: Scan) -> pki.CertInfo | None:
    """The CA of the earliest leaf when it ends within auto-renew's window: leaves renewed from it would end with it
    (issuers cap a leaf at its CA's notAfter), so a renewal cannot help — the CA is the problem to report."""
    ca = renewal_ca(scan)
    if ca is None or scan.renew_window <= datetime.timedelta(0) or ca.not_after - scan.now > scan.renew_window:
        return None
    return ca


def _ca_blocks_message(ca: pki.CertInfo, scan: Scan) -> str:
    verb = "expired" if ca.not_after <= scan.now else "expires"
    return (f"CA {ca.subject or ca.issuer} (serial {serial_hex(ca.serial)}) {verb} at "
            f"{conditions.rfc3339(ca.not_after)}, within autoRenew.before ({go_duration(scan.renew_window)}): "
            "leaves renewed from it would end with it, so auto-renew files no request — replace the CA (its "
            "Secret, or the issuer), and the operator rolls the new CA over")


def _failed(scan: Scan) -> list[Observation]:
    return [o for o in scan.observations if o.served is None]


# --- delivery grace ---------------------------------------------------------------------------------------------

# While a member is within the grace, the scan looks again this soon (or at the grace's end, if sooner).
GRACE_RECHECK: Final = datetime.timedelta(seconds=10)


def issued_at(scan: Scan, leaf: pki.CertInfo) -> datetime.datetime:
    """When a Secret's leaf counts as issued for the delivery grace: when the scan first saw its serial in the
    Secret (recorded by the scan shell), else its notBefore."""
    return scan.secret_seen.get(serial_hex(leaf.serial), leaf.not_before)


def in_grace(scan: Scan, obs: Observation) -> bool:
    """True when ``obs`` serves another leaf than its Secret's, but that Secret leaf is younger than the delivery
    grace: the kubelet may not have delivered it yet, so it is not (yet) a mismatch."""
    if obs.served is None or obs.secret_leaf is None or obs.matches_secret:
        return False
    return scan.now < issued_at(scan, obs.secret_leaf) + scan.delivery_grace


def _mismatched(scan: Scan) -> list[Observation]:
    """Members serving another leaf than their Secret's, past the delivery grace."""
    return [o for o in scan.observations
            if o.served is not None and o.secret_leaf is not None and not o.matches_secret and not in_grace(scan, o)]


def recheck_at(scan: Scan) -> datetime.datetime | None:
    """When to scan again because a member is within the delivery grace (None: no member is): soon, and at the
    latest just after the grace ends, so the scan either sees the new serial served or flags the member."""
    ends = [issued_at(scan, o.secret_leaf) + scan.delivery_grace
            for o in scan.observations if o.secret_leaf is not None and in_grace(scan, o)]
    if not ends:
        return None
    return min(min(ends) + datetime.timedelta(seconds=1), scan.now + GRACE_RECHECK)


# Legacy: the grammar of the annotation an older operator kept first sightings in (``<serial>@<unix seconds, hex>``
# joined by commas), now ``status.lifecycle.tlsScan.secretSeen``. decode_seen() is the legacy reader's, encode_seen()
# its counterpart for tests; removal note: delete both with the annotation's reader (scan.legacy_memory).
_SEEN = re.compile(r"^([0-9a-f]{1,64})@([0-9a-f]{1,12})$")


def decode_seen(text: object) -> dict[str, datetime.datetime]:
    """Secret serial -> first seen, from the legacy annotation value; malformed parts (or a non-string) are
    ignored."""
    out: dict[str, datetime.datetime] = {}
    if not isinstance(text, str):
        return out
    for part in text.split(","):
        match = _SEEN.match(part.strip())
        if match:
            out[match.group(1)] = datetime.datetime.fromtimestamp(int(match.group(2), 16), datetime.UTC)
    return out


def encode_seen(seen: Mapping[str, datetime.datetime]) -> str:
    """The legacy annotation value :func:`decode_seen` reads, sorted."""
    return ",".join(f"{serial}@{_stamp(at)}" for serial, at in sorted(seen.items()))


def seen_after(previous: Mapping[str, datetime.datetime], observations: Iterable[Observation],
               now: datetime.datetime) -> dict[str, datetime.datetime]:
    """The first-seen map after a scan at ``now``: every Secret leaf serial it read keeps its earlier time or gets
    ``now``; serials no longer in any Secret are dropped (so the map stays as small as the Secrets)."""
    out: dict[str, datetime.datetime] = {}
    for obs in observations:
        if obs.secret_leaf is not None:
            serial = serial_hex(obs.secret_leaf.serial)
            out[serial] = previous.get(serial, now)
    return out


# --- scan triggers ----------------------------------------------------------------------------------------------


def scan_due(*, last_scan: datetime.datetime | None, interval: datetime.timedelta,
             requested: datetime.datetime | None, now: datetime.datetime) -> bool:
    """Whether to scan now: never scanned, the interval has passed since the last scan, or a scan was requested
    for a time after the last scan that has come (an ops request ended, a Secret changed, a delivery recheck)."""
    if last_scan is None or now - last_scan >= interval:
        return True
    return requested is not None and last_scan < requested <= now


def merge_scan_request(*, pending: datetime.datetime | None, last_scan: datetime.datetime | None,
                       wanted: datetime.datetime) -> datetime.datetime | None:
    """The scan request to record when a trigger wants a scan at ``wanted``, or None when nothing must change:
    ``wanted`` is not after the last scan (that scan already covered it), or an earlier request is still
    pending (its scan covers this one; a member still in the delivery grace then asks again itself)."""
    if last_scan is not None and wanted <= last_scan:
        return None
    if pending is not None and (last_scan is None or pending > last_scan) and pending <= wanted:
        return None
    return wanted


def _port_entry(obs: Observation) -> dict[str, Any]:
    if obs.served is None:
        return {"error": obs.error or "no certificate observed"}
    return {
        "serial": serial_hex(obs.served.serial),
        "notBefore": conditions.rfc3339(obs.served.not_before),
        "notAfter": conditions.rfc3339(obs.served.not_after),
        "issuer": obs.served.issuer,
        "matchesSecret": obs.matches_secret,
    }


# --- status.tls -------------------------------------------------------------------------------------------------


def scan_status(scan: Scan) -> dict[str, Any]:
    """``status.tls`` for this scan: members in the order first observed, ports as observed."""
    members: dict[str, dict[str, Any]] = {}
    for obs in scan.observations:
        entry = members.setdefault(obs.member, {"name": obs.member})
        entry[obs.port] = _port_entry(obs)
    status: dict[str, Any] = {
        "lastScanTime": conditions.rfc3339(scan.now),
        "members": list(members.values()),
    }
    earliest = _earliest(scan)
    if earliest is not None:
        obs, cert = earliest
        status["nextExpiry"] = {"notAfter": conditions.rfc3339(cert.not_after), "member": obs.member,
                                "port": obs.port}
    ca = _earliest_ca(scan)
    if ca is not None:
        status["caNotAfter"] = conditions.rfc3339(ca.not_after)
    return status


# --- CertificatesValid ------------------------------------------------------------------------------------------


def condition(scan: Scan) -> tuple[str, str, str]:
    """``(status, reason, message)`` of ``CertificatesValid``: the first reason that applies, stable messages."""
    now = scan.now
    served = sorted(_served(scan), key=lambda pair: pair[1].not_after)
    expired = [(o, c) for o, c in served if c.not_after <= now]
    if expired:
        obs, cert = expired[0]
        return constants.FALSE, constants.REASON_CERTS_EXPIRED, (
            f"{_where(obs)} serves a certificate (serial {serial_hex(cert.serial)}) that expired at "
            f"{conditions.rfc3339(cert.not_after)}{_more(len(expired))}")
    blocking = ca_blocks_renewal(scan)
    if blocking is not None:
        return constants.FALSE, constants.REASON_CA_EXPIRING_SOON, _ca_blocks_message(blocking, scan)
    soon = [(o, c) for o, c in served if c.not_after - now <= scan.smallest_threshold]
    if soon:
        obs, cert = soon[0]
        return constants.FALSE, constants.REASON_CERTS_EXPIRING_SOON, (
            f"{_where(obs)} serves a certificate (serial {serial_hex(cert.serial)}) that expires at "
            f"{conditions.rfc3339(cert.not_after)}, within the {go_duration(scan.smallest_threshold)} alert "
            f"threshold{_more(len(soon))}")
    ca = _earliest_ca(scan)
    if ca is not None and ca.not_after - now <= scan.smallest_threshold:
        verb = "expired" if ca.not_after <= now else "expires"
        return constants.FALSE, constants.REASON_CA_EXPIRING_SOON, (
            f"CA {ca.subject or ca.issuer} (serial {serial_hex(ca.serial)}) {verb} at "
            f"{conditions.rfc3339(ca.not_after)}, within the {go_duration(scan.smallest_threshold)} alert threshold")
    mismatched = sorted(_mismatched(scan), key=lambda o: o.served.not_after if o.served else now)
    if mismatched:
        obs = mismatched[0]
        assert obs.served is not None and obs.secret_leaf is not None
        return constants.FALSE, constants.REASON_SERVED_CERTIFICATE_MISMATCH, (
            f"{_where(obs)} serves serial {serial_hex(obs.served.serial)} (notAfter "
            f"{conditions.rfc3339(obs.served.not_after)}), its Secret holds serial "
            f"{serial_hex(obs.secret_leaf.serial)}{_more(len(mismatched))}")
    problems = [f"{_where(o)}: {o.error or 'no certificate observed'}" for o in _failed(scan)]
    problems += [f"{_where(o)}: Secret unreadable ({o.secret_error or 'no leaf certificate'})"
                 for o in scan.observations if o.served is not None and o.secret_leaf is None]
    if not scan.cas:
        problems.append("trust bundle: no readable CA certificate")
    if not scan.observations:
        problems.append("no member observed")
    if problems:
        return constants.FALSE, constants.REASON_SCAN_FAILED, "could not verify " + "; ".join(problems)
    earliest = served[0]
    return constants.TRUE, constants.REASON_CERTS_VALID, (
        f"every member serves its Secret's certificate; the earliest expires at "
        f"{conditions.rfc3339(earliest[1].not_after)} ({_where(earliest[0])})")


def _more(count: int) -> str:
    return f" (and {count - 1} more)" if count > 1 else ""


# --- Events and their once-only keys ----------------------------------------------------------------------------

# Key grammar: ``S:<serial>:<seconds>`` (expiring-soon announced down to that threshold), ``X:<serial>`` (expired),
# ``C:<serial>`` (CA expiring soon), ``B:<serial>`` (that CA ends within auto-renew's window: no renewal can help),
# ``M:<serial>`` (served serial mismatching its Secret). Serials in lowercase hex.
_KEY = re.compile(r"^(?:S:[0-9a-f]{1,64}:[0-9]{1,12}|[XCMB]:[0-9a-f]{1,64})$")
_KEY_SEPARATOR: Final = ","


def encode_keys(keys: Iterable[str]) -> str:
    """The keys as one legacy annotation value, sorted and comma-separated (the counterpart of :func:`decode_keys`,
    for tests; removal note: delete both with the annotation's reader, scan.legacy_memory)."""
    return _KEY_SEPARATOR.join(sorted({k for k in keys if _KEY.match(k)}))


def decode_keys(text: object) -> frozenset[str]:
    """The keys from an older operator's annotation value; anything that is not a well-formed key (or not a string)
    is ignored."""
    if not isinstance(text, str):
        return frozenset()
    return frozenset(part.strip() for part in text.split(_KEY_SEPARATOR) if _KEY.match(part.strip()))


def _announced_threshold(keys: Iterable[str], serial: str) -> int | None:
    """The smallest threshold (seconds) already announced for that serial, or None."""
    found = [int(k.split(":")[2]) for k in keys if k.startswith(f"S:{serial}:")]
    return min(found) if found else None


def _key_serial(key: str) -> str:
    return key.split(":")[1]


def previous_serials(previous_tls: Mapping[str, Any] | None) -> dict[tuple[str, str], str]:
    """``(member, port) -> serial`` from an earlier ``status.tls``; malformed parts are skipped."""
    result: dict[tuple[str, str], str] = {}
    if not isinstance(previous_tls, Mapping):
        return result
    members = previous_tls.get("members")
    if not isinstance(members, list):
        return result
    for member in members:
        if not isinstance(member, Mapping) or not isinstance(member.get("name"), str):
            continue
        for port in PORTS:
            entry = member.get(port)
            if isinstance(entry, Mapping) and isinstance(entry.get("serial"), str):
                result[(member["name"], port)] = entry["serial"]
    return result


def events(
    previous_keys: Iterable[str],
    scan: Scan,
    previous_tls: Mapping[str, Any] | None = None,
) -> tuple[list[Event], frozenset[str]]:
    """The Events this scan must post, and the keys to persist (pass them back as ``previous_keys`` next time).

    ``previous_tls`` is the ``status.tls`` of the previous scan (for ``CertificatesRenewed``); None or garbage means
    "no previous scan".
    """
    keys = {k for k in previous_keys if _KEY.match(k)}
    out: list[Event] = []
    now = scan.now
    thresholds = sorted({t for t in scan.thresholds if t > datetime.timedelta(0)})
    mismatched = _mismatched(scan)
    for obs, cert in _served(scan):
        serial = serial_hex(cert.serial)
        not_after = conditions.rfc3339(cert.not_after)
        left = cert.not_after - now
        if left <= datetime.timedelta(0):
            if f"X:{serial}" not in keys:
                keys.add(f"X:{serial}")
                out.append(Event(EVENT_TYPE_WARNING, constants.EVENT_CERTIFICATE_EXPIRED,
                                 f"{_where(obs)} serves a certificate (serial {serial}) that expired at {not_after}"))
        else:
            crossed = [t for t in thresholds if left <= t]
            if crossed:
                tightest = int(crossed[0].total_seconds())
                announced = _announced_threshold(keys, serial)
                if announced is None or tightest < announced:
                    keys = {k for k in keys if not k.startswith(f"S:{serial}:")}
                    keys.add(f"S:{serial}:{tightest}")
                    out.append(Event(EVENT_TYPE_WARNING, constants.EVENT_CERTIFICATE_EXPIRING_SOON,
                                     f"{_where(obs)} serves a certificate (serial {serial}) that expires at "
                                     f"{not_after}, within the {go_duration(crossed[0])} alert threshold"))
        if obs.secret_leaf is not None and obs in mismatched and f"M:{serial}" not in keys:
            keys.add(f"M:{serial}")
            out.append(Event(EVENT_TYPE_WARNING, constants.EVENT_SERVED_CERTIFICATE_MISMATCH,
                             f"{_where(obs)} serves serial {serial} (notAfter {not_after}), its Secret holds "
                             f"serial {serial_hex(obs.secret_leaf.serial)}"))
    out += _ca_events(scan, keys)
    renewed = _renewed(scan, previous_serials(previous_tls))
    if renewed is not None:
        out.append(renewed)
    complete = bool(scan.observations) and not _failed(scan) and bool(scan.cas)
    if complete:  # forget certificates no longer served, only when nothing could have been missed
        current = {serial_hex(c.serial) for _, c in _served(scan)} | {serial_hex(c.serial) for c in scan.cas}
        keys = {k for k in keys if _key_serial(k) in current}
    return out, frozenset(keys)


def _ca_events(scan: Scan, keys: set[str]) -> list[Event]:
    """The CA Events of this scan (adding their keys to ``keys``): a CA within the largest threshold, and once more
    the CA that stops a renewal."""
    out: list[Event] = []
    blocking = ca_blocks_renewal(scan)
    for ca in sorted(scan.cas, key=lambda c: c.not_after):
        serial = serial_hex(ca.serial)
        if ca == blocking and f"B:{serial}" not in keys:  # once more, when it is what stops a renewal
            keys.add(f"B:{serial}")
            out.append(Event(EVENT_TYPE_WARNING, constants.EVENT_CA_EXPIRING_SOON, _ca_blocks_message(ca, scan)))
        if ca.not_after - scan.now <= scan.largest_threshold and f"C:{serial}" not in keys:
            keys.add(f"C:{serial}")
            verb = "expired" if ca.not_after <= scan.now else "expires"
            out.append(Event(EVENT_TYPE_WARNING, constants.EVENT_CA_EXPIRING_SOON,
                             f"CA {ca.subject or ca.issuer} (serial {serial}) {verb} at "
                             f"{conditions.rfc3339(ca.not_after)}"))
    return out


def _renewed(scan: Scan, before: Mapping[tuple[str, str], str]) -> Event | None:
    if not before or not scan.observations or _failed(scan):
        return None
    compared = [(o, c) for o, c in _served(scan) if (o.member, o.port) in before]
    if not compared or any(before[(o.member, o.port)] == serial_hex(c.serial) for o, c in compared):
        return None
    members = ", ".join(dict.fromkeys(o.member for o in scan.observations))
    earliest = min(c.not_after for _, c in compared)
    return Event(EVENT_TYPE_NORMAL, constants.EVENT_CERTIFICATES_RENEWED,
                 f"every member serves a new certificate ({members}); the earliest expires at "
                 f"{conditions.rfc3339(earliest)}")


# --- auto-renew -------------------------------------------------------------------------------------------------


class Verdict(enum.Enum):
    NONE = "None"  # nothing to do (disabled, not due, in flight, already requested for this expiry)
    CREATE = "Create"  # create the EtcdOpsRequest ``request_name`` (AlreadyExists means done)
    HOLD = "Hold"  # due, but members could not be scanned: post AutoRenewHeld naming ``held_members``
    WAIT_RETRY = "WaitRetry"  # due, but the last auto-renew request failed: nothing before ``retry_at``
    CA_EXPIRING = "CAExpiring"  # due, but the CA ends within the window: renewed leaves would end with it


@dataclasses.dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    request_name: str | None = None
    held_members: tuple[str, ...] = ()
    renew_at: datetime.datetime | None = None  # when the earliest leaf becomes due (None without a leaf)
    retry_at: datetime.datetime | None = None  # WAIT_RETRY: the earliest time of the next attempt
    episode: str | None = None  # CREATE: what the request is filed for (:func:`request_episode`)


def renew_before(not_before: datetime.datetime, not_after: datetime.datetime,
                 before: datetime.timedelta | None) -> datetime.timedelta:
    """``autoRenew.before`` in effect: as given, else the API's default for that lifetime
    (:func:`opsmanager.api.lifecycle.default_renew_before`)."""
    return before if before is not None else lifecycle.default_renew_before(not_after - not_before)


def _stamp(moment: datetime.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return format(int(moment.timestamp()), "x")


def request_name(etcd: str, not_after: datetime.datetime, failed_at: datetime.datetime | None = None) -> str:
    """``<etcd>-auto-renew-<suffix>``: the suffix is the expiry (hex Unix seconds), plus the failure time for a
    retry of a failed request for the same expiry — deterministic, so a restart re-derives the same name."""
    name = f"{etcd}-auto-renew-{_stamp(not_after)}"
    return name if failed_at is None else f"{name}-{_stamp(failed_at)}"


def request_episode(not_after: datetime.datetime, failed_at: datetime.datetime | None = None) -> str:
    """The episode an auto-renew request is filed for (the filer's record): the expiry it renews and, for a retry,
    the failure it follows — what :func:`request_name` is derived from."""
    episode = f"notAfter {conditions.rfc3339(not_after)}"
    return episode if failed_at is None else f"{episode}, retry after the failure at {conditions.rfc3339(failed_at)}"


def auto_renew(
    *,
    etcd: str,
    not_before: datetime.datetime | None,
    not_after: datetime.datetime | None,
    enabled: bool,
    before: datetime.timedelta | None,
    retry_after_failure: datetime.timedelta,
    in_flight: bool,
    last_failure_at: datetime.datetime | None,
    unscanned_members: Sequence[str],
    requested_for: datetime.datetime | None,
    now: datetime.datetime,
    ca_blocks: datetime.datetime | None = None,
) -> Decision:
    """Decide whether to create an auto-renew request for ``etcd``.

    ``not_before``/``not_after``: the earliest served leaf (None when none was seen). ``in_flight``: a request
    (any) runs for this Etcd. ``requested_for``/``last_failure_at``: the expiry the latest auto-renew request was
    created for, and when it failed (None if it did not, or none exists). ``ca_blocks``: the notAfter of the CA that
    issued that leaf when it ends within the renew window (:func:`ca_blocks_renewal`): then no request is filed
    (``CA_EXPIRING``) — the leaves it would produce end with the CA, and the scan reports the CA instead.
    """
    if not enabled:
        return Decision(Verdict.NONE, "auto-renew is disabled")
    if in_flight:
        return Decision(Verdict.NONE, "a request is in flight for this Etcd")
    held = tuple(dict.fromkeys(unscanned_members))
    if not_after is None or not_before is None:
        # Nothing due is known: holding would post AutoRenewHeld on every scan of a cluster that is simply down.
        unscanned = f"; not scanned: {', '.join(held)}" if held else ""
        return Decision(Verdict.NONE, f"no served certificate seen{unscanned}")
    renew_at = not_after - renew_before(not_before, not_after, before)
    if now < renew_at:
        return Decision(Verdict.NONE, f"the earliest certificate (notAfter {conditions.rfc3339(not_after)}) is "
                        f"due for renewal at {conditions.rfc3339(renew_at)}", renew_at=renew_at)
    if ca_blocks is not None:
        return Decision(Verdict.CA_EXPIRING, f"the CA that issued the earliest certificate ends at "
                        f"{conditions.rfc3339(ca_blocks)}, within the renew window: renewed leaves would end with it; "
                        "no request filed", renew_at=renew_at)
    same_expiry = requested_for is not None and _stamp(requested_for) == _stamp(not_after)
    if same_expiry and last_failure_at is None:
        return Decision(Verdict.NONE, f"already requested for notAfter {conditions.rfc3339(not_after)}",
                        renew_at=renew_at)
    if last_failure_at is not None and now < last_failure_at + retry_after_failure:
        retry_at = last_failure_at + retry_after_failure
        return Decision(Verdict.WAIT_RETRY, f"the last auto-renew request failed at "
                        f"{conditions.rfc3339(last_failure_at)}; next attempt not before "
                        f"{conditions.rfc3339(retry_at)}", renew_at=renew_at, retry_at=retry_at)
    if held:
        return Decision(Verdict.HOLD, f"renewal due, held while not scanned: {', '.join(held)}",
                        held_members=held, renew_at=renew_at)
    retry_of = last_failure_at if same_expiry else None
    return Decision(Verdict.CREATE, f"the earliest certificate expires at {conditions.rfc3339(not_after)}, "
                    f"within {go_duration(not_after - renew_at)}", request_name=request_name(etcd, not_after, retry_of),
                    renew_at=renew_at, episode=request_episode(not_after, retry_of))


# The auto request's spec.timeout: a quarter of the renew window, at least 1m, at most 10m — so a re-issue that
# hangs (an issuer that cannot issue) fails while most of the window is left for the retry and for a person.
AUTO_RENEW_TIMEOUT_MIN: Final = datetime.timedelta(minutes=1)
AUTO_RENEW_TIMEOUT_MAX: Final = datetime.timedelta(minutes=10)


def request_timeout(before: datetime.timedelta) -> datetime.timedelta:
    """``spec.timeout`` of an auto-renew request for a renew window ``before``: clamp(before / 4, 1m, 10m)."""
    return max(AUTO_RENEW_TIMEOUT_MIN, min(AUTO_RENEW_TIMEOUT_MAX, before / 4))


def request_body(*, etcd: str, namespace: str, etcd_uid: str | None, name: str, not_after: datetime.datetime,
                 timeout: datetime.timedelta, now: datetime.datetime | None = None) -> dict[str, Any]:
    """The auto-renew ``EtcdOpsRequest``: ``ReconfigureTLS`` with ``rotateCertificates: true``, labelled
    ``ops.opsmanager.dev/trigger: auto-renew``, annotated with the expiry it renews, owned by the Etcd. When that
    expiry has already passed (``now``), ``apply: Always``: a cluster serving expired leaves is not Ready (its health
    checks cannot handshake), and an ``IfReady`` request would wait for ever instead of running the rescue."""
    return ops_api.filed_request(
        etcd=etcd, namespace=namespace, etcd_uid=etcd_uid, name=name, trigger=constants.TRIGGER_AUTO_RENEW,
        annotations={ANNOTATION_AUTO_RENEW_FOR: conditions.rfc3339(not_after)},
        spec={"type": constants.OPS_TYPE_RECONFIGURE_TLS, "tls": {"rotateCertificates": True},
              "timeout": go_duration(timeout),
              **({"apply": constants.APPLY_ALWAYS} if now is not None and not_after <= now else {})})


# On the request: the notAfter it renews, in full (the name holds it as hex seconds). Description for a reader of
# the request; nothing reads it back (auto-renew's memory is the Etcd's status.lifecycle).
ANNOTATION_AUTO_RENEW_FOR: Final = "opsmanager.dev/auto-renew-for"


@dataclasses.dataclass(frozen=True)
class AutoRenewState:
    """What auto-renew remembers of an Etcd (``status.lifecycle``, :func:`opsmanager.lifecycle.autorenew.memory`):
    the latest request it filed, the expiry that request was for, when it was found failed, and the members of the
    current hold (so ``AutoRenewHeld`` is posted once per hold). :meth:`decode` reads the annotation an older
    operator kept it in (``opsmanager.dev/tls-auto-renew``), :meth:`encode` writes that format for tests; removal
    note: delete both with that annotation's reader (autorenew.legacy_memory)."""

    request: str | None = None
    requested_for: datetime.datetime | None = None
    failed_at: datetime.datetime | None = None
    held: tuple[str, ...] = ()

    def encode(self) -> str:
        out: dict[str, Any] = {}
        if self.request:
            out["request"] = self.request
        if self.requested_for is not None:
            out["for"] = conditions.rfc3339(self.requested_for)
        if self.failed_at is not None:
            out["failedAt"] = conditions.rfc3339(self.failed_at)
        if self.held:
            out["held"] = list(self.held)
        return json.dumps(out, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: object) -> AutoRenewState:
        """The state from the annotation; anything malformed reads as "nothing remembered" for that field."""
        try:
            raw = json.loads(text) if isinstance(text, str) else {}
        except ValueError:
            raw = {}
        if not isinstance(raw, dict):
            raw = {}

        def when(key: str) -> datetime.datetime | None:
            try:
                return conditions.parse_rfc3339(str(raw[key])) if key in raw else None
            except ValueError:
                return None

        request = raw.get("request")
        held = raw.get("held")
        return cls(request=request if isinstance(request, str) and request else None,
                   requested_for=when("for"), failed_at=when("failedAt"),
                   held=tuple(h for h in held if isinstance(h, str)) if isinstance(held, list) else ())
