"""CA rollover, the provisioner's half: notice a renewed CA and file the ``EtcdOpsRequest`` that rolls it. The rolling itself is the ops engine's CA-rollover plan (:func:`opsmanager.ops.operations.reconfigure_tls.plans.rotate_variant`).

cert-manager renews the CA behind a CA Issuer on its own schedule (a CA ``Certificate`` with ``rotationPolicy:
Always``), and a user may replace the CA Secret. etcd loads CA files only at start, so a leaf of the new CA must not
reach any member before every member has restarted onto a bundle holding that CA — the gate holds such a source
back as ``UntrustedCA`` (:mod:`.gate`). Held, it is safe but not for long: the leaf it would replace expires. So:

- **what is a renewed CA** (:func:`renewed_cas`, pure): a CA that signs a held source's leaf (its ``ca.crt``), or
  the CA a CA Issuer of this Etcd signs with now (the Issuer's ``spec.ca.secretName``, its ``ca.crt`` or else
  ``tls.crt`` — public certificates, never the key) — noticed before cert-manager issues any leaf from it, which
  leaves the whole leaf lifetime for the rollover; not loaded by every member (:func:`.release.loaded`); a CA
  (basicConstraints) and valid now;
- **the request** (:func:`request_body`): ``<etcd>-ca-rollover-<12 hex of the CA's SHA-256>`` — named from the new
  CA, filed by :mod:`opsmanager.cluster.filer` once per CA (the episode, recorded in the Etcd's
  ``status.lifecycle.filed``; a restarted operator that decides again gets AlreadyExists) — ``ReconfigureTLS`` with
  ``rotateCertificates: true`` (the engine observes, when it starts, that the sources or the issuer are on a CA not
  loaded everywhere and runs the rollover plan), labelled ``ops.opsmanager.dev/trigger: ca-rollover``, owned by the
  Etcd. It queues like any request: a newer ReconfigureTLS supersedes it while it is Pending, and that one
  observes the same CA and rolls it;
- **Event** ``CARolloverRequested`` on the Etcd, naming the request and the CA (subject, fingerprint).

A request that ended ``Failed`` is not filed again for the same CA: delete it to retry (the filer re-files a
deleted rollover request; the runbook in ``docs/operations.md``). The annotation ``ops.opsmanager.dev/ca-rollover-to``
on the request is description for a reader (the CA's whole fingerprint, where the name holds 12 hex); nothing reads
it back.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from opsmanager import kube, pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import filer, render
from opsmanager.tls import gate, material, release

log = logging.getLogger(__name__)

ISSUER_API: Final = "cert-manager.io/v1"
ANNOTATION_ROLLOVER_TO: Final = "ops.opsmanager.dev/ca-rollover-to"  # on the request: the new CA's fingerprint


@dataclasses.dataclass(frozen=True)
class RenewedCA:
    """A CA some member has not loaded. ``why``: where it was seen (a held source, or an Issuer)."""

    pem: bytes
    fingerprint: str
    subject: str
    why: str


def _ns(db: etcd_api.Etcd) -> str:
    return db.metadata.namespace or "default"


def request_name(etcd: str, fingerprint: str) -> str:
    return f"{etcd}-ca-rollover-{fingerprint.lower()[:12]}"


def renewed_cas(candidates: Iterable[tuple[bytes, str]], loaded: bytes, now: datetime.datetime) -> list[RenewedCA]:
    """The candidate CAs (PEM, where seen) that are valid CAs now and not among ``loaded``, newest first, each
    once. Pure."""
    known = {gate.fingerprint(ca) for ca in pki.split_pem(loaded)}
    out: dict[str, RenewedCA] = {}
    infos: dict[str, pki.CertInfo] = {}
    for pems, why in candidates:
        for pem in pki.split_pem(pems):
            try:
                info = pki.cert_info(pem)
            except ValueError:
                continue
            fp = info.fingerprint_sha256
            if fp in known or fp in out or not info.is_ca or not info.not_before <= now <= info.not_after:
                continue
            out[fp] = RenewedCA(pem, fp, info.subject, why)
            infos[fp] = info
    return sorted(out.values(), key=lambda c: (infos[c.fingerprint].not_before, c.fingerprint), reverse=True)


async def issuer_cas(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig) -> list[tuple[bytes, str]]:
    """The CA each namespaced CA Issuer of ``tls`` signs with now (read from its ``spec.ca.secretName``: ``ca.crt``,
    else ``tls.crt``), with where it was seen. Other issuers (ClusterIssuer, ACME, Vault …) give nothing here."""
    ns, out, seen = _ns(db), [], set()
    for alias in constants.CERT_ALIASES:
        ref = render.issuer_of(tls, alias)
        if ref is None or ref.kind != constants.ISSUER_KIND or ref.name in seen:
            continue
        seen.add(ref.name)
        issuer = await k.get(ISSUER_API, ref.kind, ns, ref.name)
        secret_name = (((issuer or {}).get("spec") or {}).get("ca") or {}).get("secretName")
        if not secret_name:
            continue
        secret = await k.get("v1", "Secret", ns, secret_name)
        ca = material.secret_bytes(secret, "ca.crt") or material.secret_bytes(secret, "tls.crt")
        if ca:
            out.append((ca, f"Issuer {ns}/{ref.name} (CA Secret {secret_name})"))
    return out


async def source_cas(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig,
                     only: Iterable[str] | None = None) -> list[tuple[bytes, str]]:
    """The ``ca.crt`` of each source (``render.source_secret_name``) whose leaf that CA signs; ``only``: the
    sources (``ns/name``) to read, all when None."""
    ns, out = _ns(db), []
    wanted = set(only) if only is not None else None
    for alias in constants.CERT_ALIASES:
        name = render.source_secret_name(db, tls, alias)
        if wanted is not None and f"{ns}/{name}" not in wanted:
            continue
        secret = await k.get("v1", "Secret", ns, name)
        ca, leaf = material.secret_bytes(secret, "ca.crt"), material.secret_bytes(secret, "tls.crt")
        if ca and leaf and pki.signed_by(leaf, ca):
            out.append((ca, f"Secret {ns}/{name}"))
    return out


def request_body(db: etcd_api.Etcd, ca: RenewedCA) -> dict[str, Any]:
    name = db.metadata.name or ""
    return ops_api.filed_request(etcd=name, namespace=_ns(db), etcd_uid=db.metadata.uid,
                                 name=request_name(name, ca.fingerprint), trigger=constants.TRIGGER_CA_ROLLOVER,
                                 annotations={ANNOTATION_ROLLOVER_TO: ca.fingerprint},
                                 spec={"type": constants.OPS_TYPE_RECONFIGURE_TLS, "tls": {"rotateCertificates": True}})


async def file_if_renewed(k: kube.Kube, obj: Mapping[str, Any], held: Iterable[gate.Problem], *,
                          now: datetime.datetime | None = None) -> str | None:
    """After a provisioner pass: file the CA-rollover request when a renewed CA is seen. Returns the name of the
    request created (None: nothing new to roll, or it was filed before).

    Not for user-provided Secrets (``spec.tls.externalSecrets``): a rotate request is refused for them (the user
    rotates their own Secrets), so a new user CA stays held as ``UntrustedCA`` and reported; the way out is leaves
    of the loaded CA, or the handover to cert-manager."""
    db = etcd_api.Etcd.model_validate(obj)
    tls = db.spec.tls
    if tls is None or tls.external_secrets is not None or not db.metadata.name:
        return None
    untrusted = [p.secret for p in held if p.code == gate.UNTRUSTED_CA]
    candidates = await issuer_cas(k, db, tls)
    if untrusted:
        candidates += await source_cas(k, db, tls, only=untrusted)
    if not candidates:
        return None
    loaded = await release.loaded(k, db)
    if not loaded:
        return None  # no member runs with a trust bundle yet: the Etcd is being set up, there is nothing to roll
    renewed = renewed_cas(candidates, loaded, now or datetime.datetime.now(datetime.UTC))
    if not renewed:
        return None
    ca = renewed[0]
    body = request_body(db, ca)
    # Re-filed when deleted: deleting a rollover request that failed is how a person retries it.
    if not await filer.file(k, obj, filer.Filing(constants.TRIGGER_CA_ROLLOVER, ca.fingerprint, body,
                                                 refile_if_deleted=True), now=now):
        return None
    name = body["metadata"]["name"]
    message = (f"created EtcdOpsRequest {name} (ReconfigureTLS, rotateCertificates, CA rollover): CA {ca.subject} "
               f"(SHA-256 {ca.fingerprint[:16]}…, seen in {ca.why}) is not loaded by every member")
    log.info("Etcd %s/%s: %s", _ns(db), db.metadata.name, message)
    await k.event(dict(obj), reason=constants.EVENT_CA_ROLLOVER_REQUESTED, message=message, type_="Normal")
    return str(name)
