"""cert-manager in the sandbox: CA and SelfSigned Issuers/ClusterIssuers and Certificates.

What it does, following cert-manager v1.x (see ../shared/reference/etcd-tls-and-prior-art.md §E):

- **Issuers** (namespaced) and **ClusterIssuers** of kind ``ca`` (key pair from Secret ``spec.ca.secretName``
  with ``tls.crt``/``tls.key``, in the Issuer's namespace, or in ``cert-manager`` for a ClusterIssuer) or
  ``selfSigned`` get a ``Ready`` condition: True/``KeyPairVerified`` ("Signing CA verified"),
  False/``ErrGetKeyPair`` (Secret missing) or False/``ErrInvalidKeyPair``. Other issuer types stay
  not Ready (``UnsupportedIssuer``). A not-Ready issuer never issues: that is how a test makes an issuer
  "never issue" (point it at a Secret that does not exist).
- A **Certificate** produces its Secret (type ``kubernetes.io/tls``; ``tls.crt`` = leaf + the issuer's
  intermediates, ``tls.key``, ``ca.crt`` = the issuer's root, or the certificate itself for SelfSigned) with
  cert-manager's annotations (``cert-manager.io/certificate-name``, ``issuer-name``, ``issuer-kind``,
  ``issuer-group``, ``common-name``, ``alt-names``, ``ip-sans``, ``uri-sans``), label
  ``controller.cert-manager.io/fao``, and ``spec.secretTemplate`` labels/annotations.
- Status: conditions ``Ready`` and ``Issuing`` (with ``observedGeneration``), ``revision`` (1 on first
  issuance, +1 each time), ``notBefore``/``notAfter``/``renewalTime``.
- It (re-)issues when the Secret is missing, incomplete, its key does not match, it was issued by another
  issuer, its certificate no longer matches the spec (names, CN, subject, isCA, usages, key algorithm,
  duration, key encoding), it expired or its renewal time came, or when someone sets ``Issuing=True`` on the
  status (``cmctl renew``): then it issues, removes ``Issuing`` and bumps ``revision``. A new private key is made
  every time (``rotationPolicy: Always``, cert-manager's default since v1.18).
- **Timing, as cert-manager's** (:func:`issued_validity`, :func:`renewal_time`): notBefore is the issuance time
  (no backdating) and notAfter ``notBefore + duration`` (pkg/util/pki/certificatetemplate.go); a CA issuer cuts
  notAfter at the earliest notAfter of its CA chain (pkg/util/pki/validity.go), so a leaf of a CA with a minute
  left ends with the CA and a leaf of an expired CA is born expired. Renewal at ``renewBefore`` before notAfter
  when it is positive and shorter than the actual lifetime, else ``renewBeforePercentage`` of it, else at 2/3 of
  the actual lifetime, truncated to the second (pkg/util/pki/renewaltime.go); the controller looks again exactly
  then (no resync period). A born-expired certificate is not stored: issuance fails (``Issuing=False``,
  ``InvalidCertificate``; ``lastFailureTime``, ``failedIssuanceAttempts``) and is retried after cert-manager's
  back-off (1 h doubling to 32 h) — at once on a spec change or ``Issuing=True`` — as cert-manager does since
  cert-manager#8610 instead of re-issuing in a loop. All of it runs on the controller's ``clock`` (injectable).
- Deleting a Certificate leaves its Secret (cert-manager's default). A Secret that carries the
  ``certificate-name`` annotation of *another existing* Certificate is never overwritten: the Certificate gets
  Ready=False, reason ``SecretInUse``. A Secret without cert-manager annotations is taken over (as
  cert-manager does), which the Issuing condition message and an Event say.
- Deviations (docs/sandbox.md lists them all): the default key is ECDSA P-256 (cert-manager's is RSA 2048, slow
  to make on 2 cores; set ``privateKey.algorithm: RSA`` to get RSA); no CertificateRequest objects; no minimum
  duration (cert-manager requires ≥ 1h; short durations make renewal testable); ``issuance_delay`` seconds pass
  between ``Issuing=True`` and the Secret being written (default 0).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import ipaddress
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from opsmanager import kube, pki
from opsmanager.api import common as api_common
from opsmanager.api import conditions as api_conditions
from opsmanager_sandbox import events, workqueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]

GROUP = "cert-manager.io"
CLUSTER_RESOURCE_NAMESPACE = "cert-manager"
ANN = "cert-manager.io/"
DEFAULT_DURATION = datetime.timedelta(hours=2160)
KNOWN_USAGES = {
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
    "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user",
    "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
}
_EKU_OF = {"server auth": ExtendedKeyUsageOID.SERVER_AUTH, "client auth": ExtendedKeyUsageOID.CLIENT_AUTH}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rfc3339(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(secret: Obj | None, key: str) -> bytes:
    value = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(value) if value else b""


# ---------------------------------------------------------------------------------------------------------------
# issuers


@dataclasses.dataclass(frozen=True)
class IssuerState:
    ready: bool
    reason: str
    message: str
    kind: str = ""                   # "ca" | "selfSigned" | ""
    ca: pki.KeyPair | None = None    # the CA's chain (first = signer) and key, for kind "ca"


def issuer_state(issuer: Obj, secret: Obj | None) -> IssuerState:
    """Whether an Issuer/ClusterIssuer can sign, from its spec and (for a CA issuer) its key-pair Secret."""
    spec = issuer.get("spec") or {}
    if "selfSigned" in spec:
        return IssuerState(True, "IsReady", "", "selfSigned")
    if "ca" in spec:
        name = (spec.get("ca") or {}).get("secretName", "")
        if secret is None:
            return IssuerState(False, "ErrGetKeyPair", f'Error getting keypair for CA issuer: secrets "{name}" not found',
                               "ca")
        crt, key = _unb64(secret, "tls.crt"), _unb64(secret, "tls.key")
        if not crt or not key:
            return IssuerState(False, "ErrInvalidKeyPair", f'Error getting keypair for CA issuer: secret "{name}" '
                               "must contain tls.crt and tls.key", "ca")
        if not pki.split_pem(crt) or not pki.key_matches_cert(crt, key):
            return IssuerState(False, "ErrInvalidKeyPair", "Error getting keypair for CA issuer: tls.crt and tls.key "
                               f'of secret "{name}" are not a matching certificate and private key', "ca")
        if not pki.cert_info(crt).is_ca:
            return IssuerState(False, "ErrInvalidKeyPair", f'Error getting keypair for CA issuer: the certificate in '
                               f'secret "{name}" is not a CA (basicConstraints CA:FALSE)', "ca")
        return IssuerState(True, "KeyPairVerified", "Signing CA verified", "ca", pki.KeyPair(crt, key))
    kinds = sorted(k for k in spec if k not in ("selfSigned", "ca"))
    return IssuerState(False, "UnsupportedIssuer", f"the sandbox's cert-manager issues only with ca and selfSigned "
                       f"issuers, not {kinds}")


# ---------------------------------------------------------------------------------------------------------------
# certificates: pure decisions


class SpecError(ValueError):
    """The Certificate's spec cannot be issued (message names the field and the fix)."""


@dataclasses.dataclass(frozen=True)
class Desired:
    """The parts of a Certificate spec that the issued certificate must reflect."""

    common_name: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    uris: tuple[str, ...]
    emails: tuple[str, ...]
    organizations: tuple[str, ...]
    org_units: tuple[str, ...]
    is_ca: bool
    usages: tuple[str, ...]
    duration: datetime.timedelta
    renew_before: datetime.timedelta | None
    renew_before_percentage: int | None
    key_algorithm: str
    key_encoding: str
    issuer_name: str
    issuer_kind: str
    issuer_group: str

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), default=str, sort_keys=True).encode()).hexdigest()


def desired(cert: Obj) -> Desired:
    spec = cert.get("spec") or {}
    ref = spec.get("issuerRef") or {}
    if not spec.get("secretName"):
        raise SpecError("spec.secretName is required: the name of the Secret to store the certificate in")
    if not ref.get("name"):
        raise SpecError("spec.issuerRef.name is required: the Issuer (or ClusterIssuer) to sign with")
    kind = ref.get("kind") or "Issuer"
    group = ref.get("group") or GROUP
    if kind not in ("Issuer", "ClusterIssuer") or group != GROUP:
        raise SpecError(f"spec.issuerRef: kind {kind!r} of group {group!r} is not served by the sandbox; use kind "
                        "Issuer or ClusterIssuer of group cert-manager.io")
    names = [spec.get("commonName"), *(spec.get(k) for k in ("dnsNames", "ipAddresses", "uris", "emailAddresses"))]
    if not any(names) and not (spec.get("literalSubject")):
        raise SpecError("at least one of spec.commonName, spec.dnsNames, spec.uris, spec.ipAddresses or "
                        "spec.emailAddresses must be set")
    for ip in spec.get("ipAddresses") or []:
        try:
            ipaddress.ip_address(ip)
        except ValueError as exc:
            raise SpecError(f"spec.ipAddresses: {ip!r} is not an IP address") from exc
    usages = tuple(spec.get("usages") or ("digital signature", "key encipherment"))
    unknown = [u for u in usages if u not in KNOWN_USAGES]
    if unknown:
        raise SpecError(f"spec.usages: unknown usage(s) {unknown}; use cert-manager's names such as "
                        "'server auth', 'client auth', 'digital signature'")
    try:
        duration = api_common.parse_duration(spec["duration"]) if spec.get("duration") else DEFAULT_DURATION
        renew_before = api_common.parse_duration(spec["renewBefore"]) if spec.get("renewBefore") else None
    except ValueError as exc:
        raise SpecError(f"spec.duration/spec.renewBefore: {exc}") from exc
    if duration <= datetime.timedelta(0):
        raise SpecError("spec.duration must be greater than zero")
    pk = spec.get("privateKey") or {}
    algorithm = str(pk.get("algorithm") or "ECDSA").upper()
    if algorithm not in ("ECDSA", "RSA"):
        raise SpecError(f"spec.privateKey.algorithm {pk.get('algorithm')!r} is not supported by the sandbox; use "
                        "ECDSA or RSA")
    encoding = str(pk.get("encoding") or "PKCS1").upper()
    if encoding not in ("PKCS1", "PKCS8"):
        raise SpecError(f"spec.privateKey.encoding must be PKCS1 or PKCS8, not {pk.get('encoding')!r}")
    subject = spec.get("subject") or {}
    pct = spec.get("renewBeforePercentage")
    return Desired(
        common_name=spec.get("commonName") or "",
        dns_names=tuple(spec.get("dnsNames") or ()),
        ip_addresses=tuple(str(ipaddress.ip_address(i)) for i in spec.get("ipAddresses") or ()),
        uris=tuple(spec.get("uris") or ()),
        emails=tuple(spec.get("emailAddresses") or ()),
        organizations=tuple(subject.get("organizations") or ()),
        org_units=tuple(subject.get("organizationalUnits") or ()),
        is_ca=bool(spec.get("isCA")),
        usages=usages,
        duration=duration,
        renew_before=renew_before,
        renew_before_percentage=int(pct) if pct is not None else None,
        key_algorithm=algorithm,
        key_encoding=encoding,
        issuer_name=ref["name"],
        issuer_kind=kind,
        issuer_group=group,
    )


def renewal_time(want: Desired, not_before: datetime.datetime, not_after: datetime.datetime) -> datetime.datetime:
    """When cert-manager renews (``RenewalTime``, pkg/util/pki/renewaltime.go), to the second.

    ``renewBefore`` before notAfter when it is positive and shorter than the ACTUAL lifetime (notBefore..notAfter,
    which a CA issuer may have cut short); else ``renewBeforePercentage`` of that lifetime when it is in (0, 100);
    else a third of it (renewal at 2/3). Truncated to the second, as cert-manager stores it in the status.
    """
    lifetime = not_after - not_before
    if want.renew_before is not None and datetime.timedelta(0) < want.renew_before < lifetime:
        before = want.renew_before
    elif want.renew_before_percentage is not None and 0 < want.renew_before_percentage < 100:
        before = lifetime * want.renew_before_percentage / 100
    else:
        before = lifetime / 3
    return (not_after - before).replace(microsecond=0)


def issued_validity(want: Desired, issuer: IssuerState, now: datetime.datetime
                    ) -> tuple[datetime.datetime, datetime.datetime]:
    """The (notBefore, notAfter) of a certificate issued at ``now``, as cert-manager sets them.

    notBefore is the issuance time (no backdating; whole seconds, as X.509 stores it) and notAfter is
    ``notBefore + duration`` (``CertificateTemplateOverrideDuration``, pkg/util/pki/certificatetemplate.go). A CA
    issuer caps notAfter at the earliest notAfter of its CA chain (``CertificateNotAfterValidity``,
    pkg/util/pki/validity.go), so a leaf of a CA with a minute left ends with the CA, and a leaf of an expired CA
    is born expired.
    """
    not_before = now.astimezone(datetime.UTC).replace(microsecond=0)
    not_after = not_before + want.duration
    if issuer.kind == "ca" and issuer.ca is not None:
        ca_end = min(pki.cert_info(c).not_after for c in pki.split_pem(issuer.ca.cert_pem))
        not_after = min(not_after, ca_end)
    return not_before, not_after


# cert-manager's back-off after a failed issuance: 1 h, doubled per failed attempt, at most 32 h
# (pkg/controller/certificates/trigger, shouldBackoffReissuingOnFailure).
RETRY_AFTER_FAILURE = datetime.timedelta(hours=1)
MAX_RETRY_AFTER_FAILURE = datetime.timedelta(hours=32)


def failure_backoff(failed_attempts: int) -> datetime.timedelta:
    """How long after its last failed issuance a Certificate waits before the next one (spec changes and a manual
    ``Issuing=True`` do not wait)."""
    return min(MAX_RETRY_AFTER_FAILURE, RETRY_AFTER_FAILURE * (1 << min(5, max(0, failed_attempts - 1))))


@dataclasses.dataclass(frozen=True)
class Trigger:
    reason: str
    message: str


def _eku_names(cert: x509.Certificate) -> set[str]:
    try:
        ekus = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return set()
    return {name for name, oid in _EKU_OF.items() if oid in ekus}


def _subject(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> tuple[str, ...]:
    return tuple(str(a.value) for a in cert.subject.get_attributes_for_oid(oid))


def issuance_trigger(cert: Obj, secret: Obj | None, want: Desired, now: datetime.datetime,
                     issued_digest: str | None = None) -> Trigger | None:
    """Why the Certificate must be (re-)issued now, or None if its Secret is up to date.

    ``issued_digest`` is the :meth:`Desired.digest` recorded at the last issuance (if known): a difference means
    the spec changed in a way the certificate's content may not show (duration, key encoding).
    """
    name = (cert.get("spec") or {}).get("secretName", "")
    if secret is None:
        return Trigger("DoesNotExist", "Issuing certificate as Secret does not exist")
    crt, key = _unb64(secret, "tls.crt"), _unb64(secret, "tls.key")
    if not crt or not key:
        return Trigger("MissingData", f'Issuing certificate as Secret "{name}" does not contain a certificate '
                       "and private key")
    try:
        leaf = x509.load_pem_x509_certificate(pki.split_pem(crt)[0])
    except (ValueError, IndexError):
        return Trigger("InvalidCertificate", f'Issuing certificate as Secret "{name}" contains an invalid certificate')
    if not pki.key_matches_cert(crt, key):
        return Trigger("InvalidKeyPair", f'Issuing certificate as Secret "{name}" contains a private key that does '
                       "not match the certificate")
    ann = (secret.get("metadata") or {}).get("annotations") or {}
    if (ann.get(ANN + "issuer-name"), ann.get(ANN + "issuer-kind", "Issuer"),
            ann.get(ANN + "issuer-group", GROUP)) != (want.issuer_name, want.issuer_kind, want.issuer_group):
        return Trigger("IncorrectIssuer", f'Issuing certificate as Secret was previously issued by '
                       f'"{ann.get(ANN + "issuer-kind", "Issuer")}.{ann.get(ANN + "issuer-group", GROUP)}/'
                       f'{ann.get(ANN + "issuer-name", "")}"')
    info = pki.cert_info(crt)
    mismatches = []
    if info.common_name != want.common_name:
        mismatches.append("commonName")
    if sorted(info.dns_names) != sorted(want.dns_names):
        mismatches.append("dnsNames")
    if sorted(info.ip_addresses) != sorted(want.ip_addresses):
        mismatches.append("ipAddresses")
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = sorted(san.get_values_for_type(x509.UniformResourceIdentifier))
        emails = sorted(san.get_values_for_type(x509.RFC822Name))
    except x509.ExtensionNotFound:
        uris, emails = [], []
    if uris != sorted(want.uris):
        mismatches.append("uris")
    if emails != sorted(want.emails):
        mismatches.append("emailAddresses")
    if info.is_ca != want.is_ca:
        mismatches.append("isCA")
    if _eku_names(leaf) != {u for u in want.usages if u in _EKU_OF}:
        mismatches.append("usages")
    if _subject(leaf, NameOID.ORGANIZATION_NAME) != want.organizations or \
            _subject(leaf, NameOID.ORGANIZATIONAL_UNIT_NAME) != want.org_units:
        mismatches.append("subject")
    pub = leaf.public_key()
    algorithm = "RSA" if isinstance(pub, rsa.RSAPublicKey) else "ECDSA" if isinstance(pub, ec.EllipticCurvePublicKey) \
        else "other"
    if algorithm != want.key_algorithm:
        mismatches.append("privateKey.algorithm")
    if issued_digest is not None and issued_digest != want.digest() and not mismatches:
        mismatches.append("spec")
    if mismatches:
        return Trigger("SecretMismatch", "Issuing certificate as Secret was previously issued with different "
                       f"{', '.join(mismatches)}")
    if now >= info.not_after:
        return Trigger("Expired", f"Certificate expired on {rfc3339(info.not_after)}")
    renew_at = renewal_time(want, info.not_before, info.not_after)
    if now >= renew_at:
        return Trigger("Renewing", f"Renewing certificate as renewal was scheduled at {rfc3339(renew_at)}")
    return None


def sign(want: Desired, issuer: IssuerState, now: datetime.datetime | None = None) -> tuple[pki.KeyPair, bytes]:
    """Make the key and certificate issued at ``now`` (default: the current time; validity: :func:`issued_validity`);
    returns (tls.crt + tls.key as a KeyPair, ca.crt)."""
    ekus = tuple(u for u in want.usages if u in _EKU_OF)
    not_before, not_after = issued_validity(want, issuer, now or _now())
    common = dict(dns_names=want.dns_names, ip_addresses=want.ip_addresses, uris=want.uris, emails=want.emails,
                  usages=ekus, duration=want.duration, organizations=want.organizations, org_units=want.org_units,
                  is_ca=want.is_ca, key_algorithm=want.key_algorithm, key_encoding=want.key_encoding,
                  not_before=not_before, not_after=not_after)
    if issuer.kind == "selfSigned":
        pair = pki.make_self_signed(want.common_name, **common)  # type: ignore[arg-type]
        return pair, pair.cert_pem
    assert issuer.ca is not None
    chain = pki.split_pem(issuer.ca.cert_pem)
    signer = pki.KeyPair(chain[0], issuer.ca.key_pem)
    leaf = pki.make_leaf(signer, want.common_name, **common)  # type: ignore[arg-type]
    root = chain[-1]
    root_info = pki.cert_info(root)
    intermediates = chain[:-1] if root_info.subject == root_info.issuer else chain
    return pki.KeyPair(leaf.cert_pem + b"".join(intermediates), leaf.key_pem), root


def secret_body(cert: Obj, want: Desired, pair: pki.KeyPair, ca_pem: bytes, existing: Obj | None) -> Obj:
    meta = cert["metadata"]
    spec = cert.get("spec") or {}
    template = spec.get("secretTemplate") or {}
    annotations = dict(template.get("annotations") or {})
    annotations.update({
        ANN + "certificate-name": meta["name"],
        ANN + "issuer-name": want.issuer_name,
        ANN + "issuer-kind": want.issuer_kind,
        ANN + "issuer-group": want.issuer_group,
        ANN + "common-name": want.common_name,
        ANN + "alt-names": ",".join(want.dns_names),
        ANN + "ip-sans": ",".join(want.ip_addresses),
        ANN + "uri-sans": ",".join(want.uris),
    })
    labels = dict(template.get("labels") or {})
    labels["controller.cert-manager.io/fao"] = "true"
    body: Obj = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": spec["secretName"], "namespace": meta.get("namespace") or "default",
                     "labels": labels, "annotations": annotations},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": _b64(pair.cert_pem), "tls.key": _b64(pair.key_pem), "ca.crt": _b64(ca_pem)},
    }
    if existing is not None:
        old_meta = existing.get("metadata") or {}
        body["metadata"]["labels"] = dict(old_meta.get("labels") or {}, **labels)
        body["metadata"]["annotations"] = dict(old_meta.get("annotations") or {}, **annotations)
        body["metadata"]["resourceVersion"] = old_meta.get("resourceVersion")
        if old_meta.get("ownerReferences"):
            body["metadata"]["ownerReferences"] = old_meta["ownerReferences"]
        body["type"] = existing.get("type") or "kubernetes.io/tls"
        data = dict(existing.get("data") or {})
        data.update(body["data"])
        body["data"] = data
    return body


def set_condition(conditions: list[Obj], type_: str, status: str | None, reason: str = "", message: str = "",
                  generation: int | None = None, now: datetime.datetime | None = None) -> list[Obj]:
    """Return ``conditions`` with ``type_`` set (``status=None`` removes it); keeps lastTransitionTime when the
    status does not change."""
    out = [c for c in conditions if c.get("type") != type_]
    if status is None:
        return out
    old = next((c for c in conditions if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
    cond: Obj = {"type": type_, "status": status, "reason": reason, "message": message,
                 "lastTransitionTime": since or rfc3339(now or _now())}
    if generation is not None:
        cond["observedGeneration"] = generation
    out.append(cond)
    order = {"Ready": 0, "Issuing": 1}
    return sorted(out, key=lambda c: order.get(str(c.get("type")), 9))


def condition(obj: Obj, type_: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


# ---------------------------------------------------------------------------------------------------------------
# the controller


_SECRET_INVALID = ("DoesNotExist", "MissingData", "InvalidKeyPair", "InvalidCertificate", "Expired")


def _rv(obj: Obj | None) -> int:
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Controller:
    """Issuer, ClusterIssuer and Certificate controllers, driven by list/watch over HTTP."""

    def __init__(self, client: kube.Kube, *, issuance_delay: float = 0.0,
                 clock: Callable[[], datetime.datetime] = _now) -> None:
        self.client = client
        self.issuance_delay = issuance_delay
        self.clock = clock  # cert-manager's clock: issuance times, renewal and expiry decisions, status times
        self.recorder = events.Recorder(client, "cert-manager-certificates-issuing")
        self.issuers = kube.Informer(client, "cert-manager.io/v1", "Issuer")
        self.cluster_issuers = kube.Informer(client, "cert-manager.io/v1", "ClusterIssuer")
        self.certificates = kube.Informer(client, "cert-manager.io/v1", "Certificate")
        self.secrets = kube.Informer(client, "v1", "Secret")
        self.issuer_queue: workqueue.WorkQueue[tuple[str, str, str]] = workqueue.WorkQueue(
            "cert-manager-issuers", self.reconcile_issuer)
        self.cert_queue: workqueue.WorkQueue[tuple[str, str]] = workqueue.WorkQueue(
            "cert-manager-certificates", self.reconcile_certificate, workers=2)
        self._written: dict[tuple[str, str, str], Obj] = {}       # our last writes (fresher than the cache)
        self._issued_digest: dict[str, str] = {}                  # certificate uid -> Desired.digest()
        self._issuing_since: dict[str, float] = {}
        self._failed_digest: dict[str, str] = {}                  # certificate uid -> Desired.digest() that failed

    # -- plumbing ---------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.issuers.add_handler(lambda t, o, old: self._issuer_changed("Issuer", o))
        self.cluster_issuers.add_handler(lambda t, o, old: self._issuer_changed("ClusterIssuer", o))
        self.certificates.add_handler(lambda t, o, old: self._seen("Certificate", t, o))
        self.certificates.add_handler(lambda t, o, old: self.cert_queue.add(kube.key_of(o)))
        self.secrets.add_handler(lambda t, o, old: self._seen("Secret", t, o))
        self.secrets.add_handler(self._secret_changed)
        informers = (self.secrets, self.issuers, self.cluster_issuers, self.certificates)
        for inf in informers:
            inf.start()
        for inf in informers:
            await inf.synced.wait()
        self.issuer_queue.start()
        self.cert_queue.start()

    async def stop(self) -> None:
        await self.cert_queue.stop()
        await self.issuer_queue.stop()
        for inf in (self.secrets, self.issuers, self.cluster_issuers, self.certificates):
            await inf.stop()
        await self.recorder.flush()

    def _fresh(self, kind: str, cached: Obj | None, ns: str, name: str) -> Obj | None:
        """Our own last write of an object while the informer has not delivered it yet, else the cache."""
        mine = self._written.get((kind, ns, name))
        return mine if mine is not None else cached

    def _seen(self, kind: str, etype: str, obj: Obj) -> None:
        ns, name = kube.key_of(obj)
        mine = self._written.get((kind, ns, name))
        if mine is not None and (etype == "DELETED" or _rv(obj) >= _rv(mine)):
            self._written.pop((kind, ns, name), None)

    def _issuer_changed(self, kind: str, issuer: Obj) -> None:
        ns, name = kube.key_of(issuer)
        self.issuer_queue.add((kind, ns, name))
        for cert in self.certificates.items(None if kind == "ClusterIssuer" else ns):
            ref = (cert.get("spec") or {}).get("issuerRef") or {}
            if ref.get("name") == name and (ref.get("kind") or "Issuer") == kind:
                self.cert_queue.add(kube.key_of(cert))

    def _secret_changed(self, etype: str, secret: Obj, old: Obj | None) -> None:
        ns, name = kube.key_of(secret)
        for issuer in self.issuers.items(ns):
            if ((issuer.get("spec") or {}).get("ca") or {}).get("secretName") == name:
                self.issuer_queue.add(("Issuer", ns, issuer["metadata"]["name"]))
        if ns == CLUSTER_RESOURCE_NAMESPACE:
            for issuer in self.cluster_issuers.items():
                if ((issuer.get("spec") or {}).get("ca") or {}).get("secretName") == name:
                    self.issuer_queue.add(("ClusterIssuer", "", issuer["metadata"]["name"]))
        for cert in self.certificates.items(ns):
            if (cert.get("spec") or {}).get("secretName") == name:
                self.cert_queue.add(kube.key_of(cert))

    def _issuer(self, kind: str, ns: str, name: str) -> tuple[Obj | None, IssuerState]:
        if kind == "ClusterIssuer":
            issuer = self.cluster_issuers.get("", name)
            secret_ns = CLUSTER_RESOURCE_NAMESPACE
        else:
            issuer = self.issuers.get(ns, name)
            secret_ns = ns
        if issuer is None:
            where = "" if kind == "ClusterIssuer" else f" in namespace {ns}"
            return None, IssuerState(False, "IssuerNotFound", f'{kind} "{name}" not found{where}')
        secret_name = ((issuer.get("spec") or {}).get("ca") or {}).get("secretName", "")
        secret = self.secrets.get(secret_ns, secret_name) if secret_name else None
        return issuer, issuer_state(issuer, secret)

    # -- issuers ----------------------------------------------------------------------------------------------------

    async def reconcile_issuer(self, key: tuple[str, str, str]) -> float | None:
        kind, ns, name = key
        issuer, state = self._issuer(kind, ns, name)
        if issuer is None:
            return None
        conditions = (issuer.get("status") or {}).get("conditions") or []
        new = set_condition(conditions, "Ready", "True" if state.ready else "False", state.reason, state.message,
                            issuer["metadata"].get("generation"))
        if [_cmp(c) for c in new] != [_cmp(c) for c in conditions]:
            await self.client.patch("cert-manager.io/v1", kind, ns or None, name, {"status": {"conditions": new}},
                                    subresource="status")
        return None

    # -- certificates -----------------------------------------------------------------------------------------------

    async def _write_status(self, cert: Obj, status: Obj) -> Obj | None:
        ns, name = kube.key_of(cert)
        if status == cert.get("status"):
            return cert
        body = dict(cert, status=status)
        try:
            updated = await self.client.replace(body, subresource="status")
        except (kube.Conflict, kube.NotFound):
            self.cert_queue.add((ns, name))  # re-read and decide again
            return None
        self._written[("Certificate", ns, name)] = updated
        return updated

    async def reconcile_certificate(self, key: tuple[str, str]) -> float | None:
        ns, name = key
        cert = self._fresh("Certificate", self.certificates.get(ns, name), ns, name)
        if self.certificates.get(ns, name) is None or cert is None or \
                (cert.get("metadata") or {}).get("deletionTimestamp"):
            return None
        meta = cert["metadata"]
        uid = str(meta.get("uid"))
        gen = meta.get("generation")
        status = dict(cert.get("status") or {})
        conditions = list(status.get("conditions") or [])
        now = self.clock()
        try:
            want = desired(cert)
        except SpecError as exc:
            status["conditions"] = set_condition(conditions, "Ready", "False", "InvalidSpec", str(exc), gen, now)
            await self._write_status(cert, status)
            return None
        secret_name = cert["spec"]["secretName"]
        secret = self._fresh("Secret", self.secrets.get(ns, secret_name), ns, secret_name)

        # never overwrite another live Certificate's Secret
        owner = ((secret or {}).get("metadata") or {}).get("annotations", {}).get(ANN + "certificate-name")
        if owner and owner != name:
            other = self.certificates.get(ns, owner)
            if other is not None and (other.get("spec") or {}).get("secretName") == secret_name:
                msg = (f'Secret "{secret_name}" holds the certificate of Certificate "{owner}", which also uses it; '
                       "not overwriting it (two Certificates must not share a secretName)")
                status["conditions"] = set_condition(set_condition(conditions, "Issuing", None), "Ready", "False",
                                                     "SecretInUse", msg, gen, now)
                await self._write_status(cert, status)
                return None

        trigger = issuance_trigger(cert, secret, want, now, self._issued_digest.get(uid))
        issuing = condition(cert, "Issuing")
        manual = issuing is not None and issuing.get("status") == "True"
        if trigger is None and not manual:
            return await self._up_to_date(cert, secret, want, status, conditions, now)
        if trigger is None and issuing is not None:
            trigger = Trigger(str(issuing.get("reason") or "ManuallyTriggered"), str(issuing.get("message") or ""))
        assert trigger is not None
        if owner is None and secret is not None and trigger.reason == "IncorrectIssuer" and \
                not ((secret.get("metadata") or {}).get("annotations") or {}).get(ANN + "issuer-name"):
            trigger = Trigger("IncorrectIssuer", f'Issuing certificate as Secret "{secret_name}" was not issued by '
                              "cert-manager; it will be taken over and overwritten")

        # 0. after a failed issuance, wait out cert-manager's back-off unless the spec changed (or Issuing=True is set)
        wait = 0.0 if manual else self._backoff_left(uid, status, want, now)
        if wait > 0:
            if trigger.reason in _SECRET_INVALID:
                status["conditions"] = set_condition(conditions, "Ready", "False", trigger.reason, trigger.message,
                                                     gen, now)
                await self._write_status(cert, status)
            expiry = _expiry(secret)
            if expiry is not None and expiry > now:  # come back to mark it expired, even while backing off
                wait = min(wait, (expiry - now).total_seconds())
            return max(0.05, wait)

        # 1. mark Issuing=True (the trigger), as cert-manager's trigger controller does
        if not manual:
            conditions = set_condition(conditions, "Issuing", "True", trigger.reason, trigger.message, gen, now)
            self.recorder.event(cert, "Normal", "Issuing", trigger.message)
        issuer, state = self._issuer(want.issuer_kind, ns, want.issuer_name)
        if not state.ready:
            ready = condition(cert, "Ready")
            if secret is None or trigger.reason in _SECRET_INVALID or ready is None or ready.get("status") != "True":
                conditions = set_condition(conditions, "Ready", "False", "IssuerNotReady",
                                           f'{want.issuer_kind} "{want.issuer_name}" is not ready: {state.message}',
                                           gen, now)
            status["conditions"] = conditions
            await self._write_status(cert, status)
            return None  # the issuer's events bring us back
        loop_now = time.monotonic()
        since = self._issuing_since.setdefault(uid, loop_now)
        if loop_now - since < self.issuance_delay:
            if trigger.reason in _SECRET_INVALID:
                conditions = set_condition(conditions, "Ready", "False", trigger.reason, trigger.message, gen, now)
            status["conditions"] = conditions
            await self._write_status(cert, status)
            return self.issuance_delay - (loop_now - since)

        # 2. issue and store
        pair, ca_pem = sign(want, state, now)
        info = pki.cert_info(pair.cert_pem)
        if info.not_after <= now:
            return await self._fail_born_expired(cert, want, status, conditions, trigger, info, now)
        body = secret_body(cert, want, pair, ca_pem, secret)
        try:
            if secret is None:
                written = await self.client.create(body)
            else:
                written = await self.client.replace(body)
        except kube.Conflict:
            return 0.1  # someone changed the Secret meanwhile: decide again
        self._written[("Secret", ns, secret_name)] = written
        self._issued_digest[uid] = want.digest()
        self._issuing_since.pop(uid, None)
        self._failed_digest.pop(uid, None)
        renew_at = renewal_time(want, info.not_before, info.not_after)
        for cleared in ("lastFailureTime", "failedIssuanceAttempts"):
            status.pop(cleared, None)
        status.update({
            "revision": int(status.get("revision") or 0) + 1,
            "notBefore": rfc3339(info.not_before),
            "notAfter": rfc3339(info.not_after),
            "renewalTime": rfc3339(renew_at),
        })
        conditions = set_condition(conditions, "Issuing", None)
        status["conditions"] = set_condition(conditions, "Ready", "True", "Ready",
                                             "Certificate is up to date and has not expired", gen, now)
        if await self._write_status(cert, status) is None:
            return None
        self.recorder.event(cert, "Normal", "Issuing", "The certificate has been successfully issued")
        return max(0.05, (renew_at - self.clock()).total_seconds())

    def _backoff_left(self, uid: str, status: Obj, want: Desired, now: datetime.datetime) -> float:
        """Seconds of cert-manager's back-off after the last failed issuance still to wait (0: none). A spec changed
        since that failure does not wait (cert-manager compares the next request with the spec)."""
        last = status.get("lastFailureTime")
        if not last or self._failed_digest.get(uid, want.digest()) != want.digest():
            return 0.0
        attempts = int(status.get("failedIssuanceAttempts") or 1)
        return (api_conditions.parse_rfc3339(str(last)) + failure_backoff(attempts) - now).total_seconds()

    async def _fail_born_expired(self, cert: Obj, want: Desired, status: Obj, conditions: list[Obj],
                                 trigger: Trigger, info: pki.CertInfo, now: datetime.datetime) -> float | None:
        """The issuer signed a certificate that has already expired (a CA issuer caps it at its expired CA's end):
        it is not stored, and issuance fails with back-off, as cert-manager does since cert-manager#8610 (2026) rather
        than re-issuing in a loop."""
        meta = cert["metadata"]
        uid, gen = str(meta.get("uid")), meta.get("generation")
        attempts = int(status.get("failedIssuanceAttempts") or 0) + 1
        message = ("The certificate request has failed to complete and will be retried: the signed certificate "
                   f"expired on {rfc3339(info.not_after)}, before it could be stored (its issuer's CA ends then)")
        status.update({"lastFailureTime": rfc3339(now), "failedIssuanceAttempts": attempts})
        conditions = set_condition(conditions, "Issuing", "False", "InvalidCertificate", message, gen, now)
        if trigger.reason in _SECRET_INVALID:
            conditions = set_condition(conditions, "Ready", "False", trigger.reason, trigger.message, gen, now)
        status["conditions"] = conditions
        self._failed_digest[uid] = want.digest()
        self._issuing_since.pop(uid, None)
        if await self._write_status(cert, status) is None:
            return None
        self.recorder.event(cert, "Warning", "InvalidCertificate", message)
        return failure_backoff(attempts).total_seconds()

    async def _up_to_date(self, cert: Obj, secret: Obj | None, want: Desired, status: Obj,
                          conditions: list[Obj], now: datetime.datetime) -> float:
        info = pki.cert_info(_unb64(secret, "tls.crt"))
        renew_at = renewal_time(want, info.not_before, info.not_after)
        status.update({"notBefore": rfc3339(info.not_before), "notAfter": rfc3339(info.not_after),
                       "renewalTime": rfc3339(renew_at)})
        status["conditions"] = set_condition(conditions, "Ready", "True", "Ready",
                                             "Certificate is up to date and has not expired",
                                             cert["metadata"].get("generation"), now)
        self._issuing_since.pop(str(cert["metadata"].get("uid")), None)
        await self._write_status(cert, status)
        return max(0.05, (renew_at - self.clock()).total_seconds())


def _expiry(secret: Obj | None) -> datetime.datetime | None:
    crt = _unb64(secret, "tls.crt")
    try:
        return pki.cert_info(crt).not_after if crt else None
    except (ValueError, IndexError):
        return None


def _cmp(c: Obj) -> tuple[Any, ...]:
    return (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
