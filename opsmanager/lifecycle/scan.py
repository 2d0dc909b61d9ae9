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
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Final

from opsmanager import kube, pki
from opsmanager.api import conditions, constants, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.lifecycle import metrics, verdict
from opsmanager.provisioner import material, members, naming, render

ANNOTATION_EVENT_KEYS: Final = "opsmanager.dev/tls-announced"  # which Events were posted (verdict's keys)
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
    identity, _ = await members.client_identity(k, ns, name, [tls])
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
    return verdict.Scan(tuple(observations), tuple(cas), tuple(db.tls_lifecycle.alert_thresholds()), now)


def due(obj: Mapping[str, Any], *, now: datetime.datetime) -> bool:
    """Whether the Etcd's scan interval has passed since its last scan (or it never had one)."""
    db = etcd_api.Etcd.model_validate(obj)
    last = ((obj.get("status") or {}).get("tls") or {}).get("lastScanTime")
    if not last:
        return True
    try:
        return now - conditions.parse_rfc3339(str(last)) >= db.tls_lifecycle.scan_interval_delta
    except ValueError:
        return True


async def scan_once(k: kube.Kube, obj: Mapping[str, Any], *, now: datetime.datetime | None = None) -> verdict.Scan | None:
    """Scan one Etcd and record what was found; None when there is nothing to scan (no TLS, or paused)."""
    if pause.is_paused(obj.get("status")):
        return None
    db = etcd_api.Etcd.model_validate(obj)
    if db.spec.tls is None:
        return None
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    scan = await observe(k, db, now=now or _now())
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
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    events, keys = verdict.events(verdict.decode_keys(annotations.get(ANNOTATION_EVENT_KEYS)), scan, previous_tls)
    encoded = verdict.encode_keys(keys)
    if encoded != annotations.get(ANNOTATION_EVENT_KEYS):
        # Keys first, Events second: a crash in between loses an Event rather than posting it twice.
        await k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns, name,
                      {"metadata": {"annotations": {ANNOTATION_EVENT_KEYS: encoded}}})
    for event in events:
        await k.event(dict(obj), reason=event.reason, message=event.message, type_=event.type_)
    metrics.publish(ns, name, tls_status)
    if any(o.error or o.secret_error for o in scan.observations):
        metrics.scan_failed()
    return scan
