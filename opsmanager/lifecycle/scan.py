"""The wire-truth scan of one TLS Etcd: what each member really serves, written to ``status.tls``, the
``CertificatesValid`` condition, once-only Events and the metrics.

Why the wire: cert-manager knows its Secrets, not what each etcd process serves. etcd re-reads its leaf per
handshake, so a member serves what the kubelet delivered — or, when a volume refresh is late or a member never
reloaded, something else. So for every member and for both TLS ports (client 2379, https peer 2382) the scan opens
a **fresh TLS handshake** and records the leaf it receives (read even when it has expired: the handshake does not
verify it), and compares it with the leaf in that member's Secret (the ``server`` alias for the client port, the
``peer`` alias for the peer port). The earliest CA of the trust bundle is recorded too.

The decisions are :mod:`opsmanager.lifecycle.verdict`'s (pure). Here, in this order, so that a crash never repeats
an Event: status and condition (one ``transact_status``), then the announced-Event keys (an annotation on the
Etcd), then the Events, then the metrics. A member that cannot be reached, an unreadable Secret or malformed PEM
become findings (``ScanFailed``), never exceptions.

While an EtcdOpsRequest holds the Etcd paused the scan stands aside: mid-rotation a mismatch is the plan, not a
finding; the first scan after the pause reports the result.

When: every ``scanInterval`` after ``status.tls.lastScanTime``, and whenever the annotation
``opsmanager.dev/tls-scan-requested`` holds a time after the last scan that has come (:func:`due`). Triggers write
it (:mod:`opsmanager.lifecycle.triggers`: an ops request ended, a Certificate was re-issued) and so does the scan
itself while a member is within the **delivery grace** (it serves another leaf than its Secret's, but that Secret
leaf is younger than ``--certificate-delivery-timeout``): it looks again every few seconds until the member serves
the new leaf or the grace is over and the member is flagged ``ServedCertificateMismatch``. A Secret leaf's age is
counted from when the scan first saw its serial (annotation ``opsmanager.dev/tls-secret-seen``), not from its
notBefore, which some issuers backdate (ACME by an hour).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opsmanager import kube, pki
from opsmanager.api import conditions, constants, durations, lifecycle, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import members, naming, render
from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.lifecycle import metrics, verdict
from opsmanager.tls import identity as tls_identity
from opsmanager.tls import material

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


PATCH_ATTEMPTS: Final = 5


async def patch_annotations(k: kube.Kube, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
    """Merge ``annotations`` into the Etcd's metadata, retrying a Conflict (the API server may give up re-applying
    a merge patch while the object is written often, e.g. while it is created) a few times, briefly backing off."""
    for attempt in range(PATCH_ATTEMPTS):
        try:
            await k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, name,
                          {"metadata": {"annotations": dict(annotations)}})
            return
        except kube.Conflict:
            if attempt == PATCH_ATTEMPTS - 1:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))  # back-off between attempts, not a synchronisation


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
    return parse_time(((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SCAN_REQUESTED))


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
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    observed = await observe(k, db, now=now or _now())
    seen = verdict.seen_after(verdict.decode_seen(annotations.get(ANNOTATION_SECRET_SEEN)), observed.observations,
                              observed.now)
    scan = dataclasses.replace(observed, delivery_grace=datetime.timedelta(seconds=delivery_grace),
                               secret_seen=seen)
    tls_status = verdict.scan_status(scan)
    status, reason, message = verdict.condition(scan)
    generation = (obj.get("metadata") or {}).get("generation")

    def mutate(st: dict[str, Any]) -> dict[str, Any]:
        st = dict(st)
        st["tls"] = tls_status
        st["conditions"] = conditions.set_condition(st.get("conditions"), constants.COND_CERTIFICATES_VALID, status,
                                                    reason=reason, message=message, observed_generation=generation)
        return st

    previous_tls = (obj.get("status") or {}).get("tls")
    await k.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns, name, mutate)
    events, keys = verdict.events(verdict.decode_keys(annotations.get(ANNOTATION_EVENT_KEYS)), scan, previous_tls)
    wanted: dict[str, str] = {ANNOTATION_EVENT_KEYS: verdict.encode_keys(keys),
                              ANNOTATION_SECRET_SEEN: verdict.encode_seen(seen)}
    recheck = verdict.recheck_at(scan)
    if recheck is not None:
        again = verdict.merge_scan_request(pending=scan_requested(obj), last_scan=scan.now.replace(microsecond=0),
                                           wanted=ceil_second(recheck))
        if again is not None:
            wanted[ANNOTATION_SCAN_REQUESTED] = conditions.rfc3339(again)
    changed = {key: value for key, value in wanted.items() if value != annotations.get(key)}
    if changed:
        # Keys first, Events second: a crash in between loses an Event rather than posting it twice.
        await patch_annotations(k, ns, name, changed)
    for event in events:
        await k.event(dict(obj), reason=event.reason, message=event.message, type_=event.type_)
    metrics.publish(ns, name, tls_status)
    if any(o.error or o.secret_error for o in scan.observations):
        metrics.scan_failed()
    return scan
