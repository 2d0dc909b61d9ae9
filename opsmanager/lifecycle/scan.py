"""The wire-truth scan of one TLS Etcd: what each member really serves, written to ``status.tls``, the
``CertificatesValid`` condition, once-only Events and the metrics.

Why the wire: cert-manager knows its Secrets, not what each etcd process serves. etcd re-reads its leaf per
handshake, so a member serves what the kubelet delivered — or, when a volume refresh is late or a member never
reloaded, something else. So for every member and for both TLS ports (client 2379, https peer 2382) the scan opens
a **fresh TLS handshake** and records the leaf it receives (read even when it has expired: the handshake does not
verify it), and compares it with the leaf in that member's Secret (the ``server`` alias for the client port, the
``peer`` alias for the peer port). The earliest CA of the trust bundle is recorded too.

The decisions are :mod:`opsmanager.lifecycle.verdict`'s (pure). Here, in this order, so that a crash never repeats
an Event: ``status.tls``, the condition and the scan's memory (``status.lifecycle.tlsScan``: the announced-Event
keys among it) in one write through :func:`opsmanager.cluster.etcdstatus.write`, then the Events, then the metrics.
A member that cannot be reached, an unreadable Secret or malformed PEM become findings (``ScanFailed``), never
exceptions.

While an EtcdOpsRequest holds the Etcd paused the scan stands aside: mid-rotation a mismatch is the plan, not a
finding; the first scan after the pause reports the result.

When: every ``scanInterval`` after ``status.tls.lastScanTime``, and whenever
``status.lifecycle.tlsScan.scanRequested`` holds a time after the last scan that has come (:func:`due`). Triggers
write it (:class:`RequestScan`, from :mod:`opsmanager.lifecycle.triggers`: an ops request ended, a Certificate was
re-issued) and so does the scan itself while a member is within the **delivery grace** (it serves another leaf
than its Secret's, but that Secret leaf is younger than ``--certificate-delivery-timeout``): it looks again every
few seconds until the member serves the new leaf or the grace is over and the member is flagged
``ServedCertificateMismatch``. A Secret leaf's age is counted from when the scan first saw its serial
(``status.lifecycle.tlsScan.secretSeen``), not from its notBefore, which some issuers backdate (ACME by an hour).
An Etcd an older operator annotated with this memory keeps it once (:func:`legacy_memory`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opsmanager import kube, pki
from opsmanager.api import conditions, constants, durations, lifecycle, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import etcdstatus, members, naming, render
from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.lifecycle import metrics, verdict
from opsmanager.tls import identity as tls_identity
from opsmanager.tls import material

# Legacy: where an older operator kept the scan's memory, now status.lifecycle.tlsScan. Read only by
# legacy_memory(), never written; removal note: delete them with it.
ANNOTATION_EVENT_KEYS: Final = "opsmanager.dev/tls-announced"  # which Events were posted (verdict's keys)
ANNOTATION_SCAN_REQUESTED: Final = "opsmanager.dev/tls-scan-requested"  # RFC 3339: scan once this time has come
ANNOTATION_SECRET_SEEN: Final = "opsmanager.dev/tls-secret-seen"  # Secret leaf serial -> first seen (verdict)
HANDSHAKE_TIMEOUT: Final = 3.0


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _leaf(secret: Mapping[str, Any] | None) -> tuple[pki.CertInfo | None, str | None]:
    """The leaf of a Secret's ``tls.crt`` and, when there is none, why (stable text: no addresses, no times)."""
    if secret is None:
        return None, "Secret not found"
    pem = material.secret_bytes(secret, "tls.crt")
    if not pem:
        return None, "Secret has no tls.crt"
    try:
        return pki.cert_info(pem), None
    except ValueError:
        return None, "Secret's tls.crt is not a certificate"


def _cas(secret: Mapping[str, Any] | None) -> list[pki.CertInfo]:
    out = []
    for block in pki.split_pem(material.secret_bytes(secret, naming.TRUST_BUNDLE_KEY) or b""):
        try:
            out.append(pki.cert_info(block))
        except ValueError:
            continue  # a malformed block is skipped; no CA at all becomes ScanFailed
    return out


async def _served(client: etcd_client.EtcdClient | None, ep: access.Endpoint | None,
                  port: str) -> tuple[pki.CertInfo | None, str | None]:
    if client is None or ep is None:
        return None, "no pod address"
    try:
        return await client.served_certificate(ep, port=port, timeout=HANDSHAKE_TIMEOUT), None
    except etcd_errors.MemberUnreachable:
        return None, "unreachable"
    except etcd_errors.EtcdError as err:
        return None, f"handshake failed ({type(err).__name__})"


async def observe(k: kube.Kube, db: etcd_api.Etcd, *, now: datetime.datetime) -> verdict.Scan:
    """One scan of every expected member on both ports (the TLS configuration must be set)."""
    tls = db.spec.tls
    assert tls is not None, "observe() scans a TLS Etcd"
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    expected = naming.pods(name, db.spec.replicas)
    leaves = {port: _leaf(await k.get("v1", "Secret", ns, render.secret_name(db, tls, alias)))
              for port, alias in constants.PORT_ALIAS.items()}
    cas = _cas(await k.get("v1", "Secret", ns, naming.trust_bundle_secret(name)))
    pods = await members.pods(k, ns, name)
    identity, _ = await tls_identity.client_identity(k, ns, name, [tls])
    eps = {ep.name: ep for ep in members.endpoints(name, ns, pods, expected, schemes=("https",), peer_scheme="https")}
    observations = []
    client = etcd_client.EtcdClient(list(eps.values()), tls=identity, timeout=HANDSHAKE_TIMEOUT) if eps else None
    try:
        for member in expected:
            for port in constants.TLS_PORTS:
                served, error = await _served(client, eps.get(member), port)
                leaf, secret_error = leaves[port]
                observations.append(verdict.Observation(member, port, served, leaf, error=error,
                                                        secret_error=secret_error))
    finally:
        if client is not None:
            await client.close()
    return verdict.Scan(tuple(observations), tuple(cas), tuple(db.tls_lifecycle.alert_thresholds()), now,
                        renew_window=renew_window(db, observations))


def renew_window(db: etcd_api.Etcd, observations: Sequence[verdict.Observation]) -> datetime.timedelta:
    """Auto-renew's window for the earliest served leaf, as a renewal would have it: ``autoRenew.before`` when set,
    else the default for the lifetime its Certificate asks for (``duration``, cert-manager's 2160h when unset) — not
    the served leaf's, which an issuer caps at its CA's notAfter: near a CA's end the leaves get shorter and so
    would the window, until a renewal that cannot help looked due only in its last seconds. Zero when auto-renew is
    off, for user-provided Secrets, or when no leaf was served."""
    policy = db.tls_lifecycle.auto_renew
    tls = db.spec.tls
    served = [(o.port, o.served) for o in observations if o.served is not None]
    if not policy.enabled or tls is None or tls.external_secrets is not None or not served:
        return datetime.timedelta(0)
    if policy.before is not None:
        return durations.parse(policy.before)
    port, first = min(served, key=lambda pair: pair[1].not_after)
    spec = tls.certificate(constants.PORT_ALIAS[port])
    asked = durations.parse(spec.duration) if spec is not None and spec.duration else CERT_MANAGER_DEFAULT_DURATION
    return lifecycle.default_renew_before(max(asked, first.not_after - first.not_before))


# What cert-manager issues for when a Certificate sets no ``duration``.
CERT_MANAGER_DEFAULT_DURATION: Final = datetime.timedelta(hours=2160)


def parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 time from status or an annotation; None when absent or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return conditions.parse_rfc3339(value)
    except ValueError:
        return None


def ceil_second(moment: datetime.datetime) -> datetime.datetime:
    """``moment`` rounded up to a whole second: RFC 3339 in status and annotations keeps whole seconds, and a
    request must stay *after* the scan time it is compared with."""
    whole = moment.replace(microsecond=0)
    return whole if whole == moment else whole + datetime.timedelta(seconds=1)


def last_scan(obj: Mapping[str, Any]) -> datetime.datetime | None:
    return parse_time(((obj.get("status") or {}).get("tls") or {}).get("lastScanTime"))


def scan_requested(obj: Mapping[str, Any]) -> datetime.datetime | None:
    return memory(obj).requested


@dataclasses.dataclass(frozen=True)
class Memory:
    """What the scan remembers of an Etcd: the keys of the Events it posted, when it first saw each Secret leaf
    serial, and the time a scan was requested for."""

    announced: frozenset[str] = frozenset()
    seen: Mapping[str, datetime.datetime] = dataclasses.field(default_factory=dict)
    requested: datetime.datetime | None = None


def memory(obj: Mapping[str, Any]) -> Memory:
    """The scan's memory of ``obj``: ``status.lifecycle.tlsScan``, else what an older operator annotated."""
    typed = lifecycle.LifecycleMemory.of(obj.get("status")).tls_scan
    if typed is not None:
        seen = {serial: at for serial, text in (typed.secret_seen or {}).items() if (at := parse_time(text))}
        return Memory(frozenset(typed.announced or ()), seen, parse_time(typed.scan_requested))
    return legacy_memory((obj.get("metadata") or {}).get("annotations") or {})


def legacy_memory(annotations: Mapping[str, Any]) -> Memory:
    """The memory an older operator kept in annotations (:data:`ANNOTATION_EVENT_KEYS`,
    :data:`ANNOTATION_SECRET_SEEN`, :data:`ANNOTATION_SCAN_REQUESTED`), read until the first scan writes
    ``status.lifecycle.tlsScan``. Removal note: delete with those constants once no supported upgrade starts from
    an operator that wrote them."""
    return Memory(verdict.decode_keys(annotations.get(ANNOTATION_EVENT_KEYS)),
                  verdict.decode_seen(annotations.get(ANNOTATION_SECRET_SEEN)),
                  parse_time(annotations.get(ANNOTATION_SCAN_REQUESTED)))


def _tls_scan_memory(status: Mapping[str, Any]) -> lifecycle.TLSScanMemory | None:
    return lifecycle.LifecycleMemory.of(status).tls_scan


def _with_tls_scan(status: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """``status`` with these fields of ``status.lifecycle.tlsScan`` replaced (the others kept)."""
    mem = lifecycle.LifecycleMemory.of(status)
    known = mem.tls_scan or lifecycle.TLSScanMemory()
    return mem.model_copy(update={"tls_scan": known.model_copy(update=fields)}).into(status)


@dataclasses.dataclass(frozen=True)
class RequestScan:
    """A scan wanted once ``at`` has come, merged with the live status (:func:`verdict.merge_scan_request`: the
    earliest pending request after the last scan wins). ``pending``: an older operator's pending request, used while
    the status has no scan memory yet."""

    at: datetime.datetime
    pending: datetime.datetime | None = None

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        known = _tls_scan_memory(status)
        pending = parse_time(known.scan_requested) if known is not None else self.pending
        last = parse_time((status.get("tls") or {}).get("lastScanTime"))
        wanted = verdict.merge_scan_request(pending=pending, last_scan=last, wanted=self.at)
        if wanted is None:
            return status
        return _with_tls_scan(status, scan_requested=conditions.rfc3339(wanted))


async def record_scan_request(k: kube.Kube, namespace: str, name: str, at: datetime.datetime, *,
                              pending: datetime.datetime | None = None) -> None:
    """Write :class:`RequestScan` for the Etcd: merged with the live status inside the writer's transaction, so a
    trigger that wrote meanwhile keeps the earlier time."""
    await etcdstatus.write(k, namespace, name, RequestScan(at, pending=pending))


@dataclasses.dataclass(frozen=True)
class ScanRecorded:
    """One scan's results in one write: ``status.tls``, ``CertificatesValid``, and the scan's memory — the keys of
    the Events about to be posted, the first sightings of Secret leaves, and a recheck while a member is within the
    delivery grace (merged as :class:`RequestScan` is)."""

    tls: dict[str, Any]
    condition: etcdstatus.SetCondition
    announced: frozenset[str]
    seen: Mapping[str, datetime.datetime]
    scanned_at: datetime.datetime
    recheck: datetime.datetime | None
    pending: datetime.datetime | None  # what was pending before the scan, used while the status has no memory yet

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        st = self.condition.apply({**status, "tls": self.tls})
        known = _tls_scan_memory(st)
        pending = parse_time(known.scan_requested) if known is not None else self.pending
        requested = pending
        if self.recheck is not None:
            requested = verdict.merge_scan_request(pending=pending, last_scan=self.scanned_at,
                                                   wanted=self.recheck) or pending
        return _with_tls_scan(st, announced=sorted(self.announced),
                              secret_seen={serial: conditions.rfc3339(at) for serial, at in sorted(self.seen.items())},
                              scan_requested=conditions.rfc3339(requested) if requested is not None else None)


def due(obj: Mapping[str, Any], *, now: datetime.datetime) -> bool:
    """Whether to scan the Etcd now (:func:`verdict.scan_due`): never scanned, its scan interval has passed since
    the last scan, or a requested scan time after the last scan has come."""
    db = etcd_api.Etcd.model_validate(obj)
    return verdict.scan_due(last_scan=last_scan(obj), interval=db.tls_lifecycle.scan_interval_delta,
                            requested=scan_requested(obj), now=now)


async def scan_once(k: kube.Kube, obj: Mapping[str, Any], *, now: datetime.datetime | None = None,
                    delivery_grace: float = 0.0) -> verdict.Scan | None:
    """Scan one Etcd and record what was found; None when there is nothing to scan (no TLS, paused, or never Ready
    yet).
    ``delivery_grace``: seconds a member may serve another leaf than its Secret's new one before it is a mismatch."""
    if pause.is_paused(obj.get("status")):
        return None
    if not conditions.is_true((obj.get("status") or {}).get("conditions"), constants.COND_PROVISIONED):
        # Never Ready yet: its members may not exist at all (a missing issuer, say) — the provisioner's own
        # conditions say what it waits for, and "no pod address" for each would only hide that.
        return None
    db = etcd_api.Etcd.model_validate(obj)
    if db.spec.tls is None:
        return None
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    remembered = memory(obj)
    observed = await observe(k, db, now=now or _now())
    seen = verdict.seen_after(remembered.seen, observed.observations, observed.now)
    scan = dataclasses.replace(observed, delivery_grace=datetime.timedelta(seconds=delivery_grace),
                               secret_seen=seen)
    tls_status = verdict.scan_status(scan)
    status, reason, message = verdict.condition(scan)
    events, keys = verdict.events(remembered.announced, scan, (obj.get("status") or {}).get("tls"))
    recheck = verdict.recheck_at(scan)
    # One write, keys before Events: a crash in between loses an Event rather than posting it twice.
    await etcdstatus.write(k, ns, name, ScanRecorded(
        tls_status, etcdstatus.SetCondition(constants.COND_CERTIFICATES_VALID, status, reason, message,
                                            (obj.get("metadata") or {}).get("generation")),
        keys, seen, scan.now.replace(microsecond=0), ceil_second(recheck) if recheck is not None else None,
        remembered.requested))
    for event in events:
        await k.event(dict(obj), reason=event.reason, message=event.message, type_=event.type_)
    metrics.publish(ns, name, tls_status)
    if any(o.error or o.secret_error for o in scan.observations):
        metrics.scan_failed()
    return scan
