"""Certificates and keys: make them, read them, check that a key belongs to a certificate.

One module for X.509 so every part of the project — the sandbox's cert-manager, the etcd test fixtures, the
webhook's serving certificate, the ops engine's "is this material complete?" check — builds and inspects
certificates the same way. Keys are ECDSA P-256 by default: fast to make on a 2-core machine and accepted by
etcd, Go's TLS stack and Python's ssl.

Nothing here logs or returns a private key except as the explicit ``key_pem`` of a :class:`KeyPair`.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import ipaddress
import threading
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Usage = str  # "server auth" | "client auth" (cert-manager's spelling) or "server" | "client"

_EKU = {
    "server": ExtendedKeyUsageOID.SERVER_AUTH,
    "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client": ExtendedKeyUsageOID.CLIENT_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
}


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A PEM certificate (possibly followed by its chain) and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:  # never print the key
        return f"KeyPair(cert={cert_info(self.cert_pem).subject!r}, key=<redacted>)"


@dataclasses.dataclass(frozen=True)
class CertInfo:
    """What an operator needs to know about a certificate; safe to log and to put into status."""

    serial: int
    fingerprint_sha256: str
    subject: str
    common_name: str
    issuer: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    is_ca: bool

    @property
    def serial_hex(self) -> str:
        return format(self.serial, "x")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _new_key(algorithm: str = "ECDSA") -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    if algorithm.upper() == "RSA":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, encoding: str = "PKCS8") -> bytes:
    fmt = serialization.PrivateFormat.PKCS8
    if encoding.upper() == "PKCS1":
        fmt = serialization.PrivateFormat.TraditionalOpenSSL
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())


# The key types that can sign a certificate (cryptography's ``CertificateIssuerPrivateKeyTypes`` and its public twin,
# spelled out so that ``isinstance`` can narrow a loaded key to them).
_IssuerPrivateKey = (
    rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | dsa.DSAPrivateKey
    | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey
)
_IssuerPublicKey = (
    rsa.RSAPublicKey | ec.EllipticCurvePublicKey | dsa.DSAPublicKey
    | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey
)


def _issuer(ca: KeyPair) -> tuple[x509.Certificate, _IssuerPrivateKey, _IssuerPublicKey]:
    """The CA's certificate, private key and public key, refusing key types that cannot sign certificates."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    ca_public = ca_cert.public_key()
    if not isinstance(ca_key, _IssuerPrivateKey) or not isinstance(ca_public, _IssuerPublicKey):
        raise TypeError(f"a {type(ca_key).__name__} CA key cannot sign certificates")
    return ca_cert, ca_key, ca_public


def _name(common_name: str, organizations: Sequence[str] = (), org_units: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, u) for u in org_units]
    if common_name:
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _subject_alt_names(dns_names: Iterable[str], ip_addresses: Iterable[str], uris: Iterable[str],
                       emails: Iterable[str]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys(dns_names)]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ip_addresses)]
    sans += [x509.UniformResourceIdentifier(u) for u in uris]
    sans += [x509.RFC822Name(e) for e in emails]
    return sans


# How far back the certificates the project makes for its own use (tests, the webhook's serving certificate) start,
# to cover clock skew between the machines that check them. cert-manager does not backdate: its emulation passes an
# exact ``not_before``.
BACKDATE = datetime.timedelta(minutes=5)


def validity(
    duration: datetime.timedelta,
    *,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
    now: datetime.datetime | None = None,
) -> tuple[datetime.datetime, datetime.datetime]:
    """The (notBefore, notAfter) a certificate made here gets, to the second (X.509 keeps no fractions).

    By default it starts :data:`BACKDATE` before ``now`` and ends ``duration`` after ``now``. An explicit
    ``not_before`` moves the start, and the default end becomes ``not_before + duration`` (cert-manager's rule); an
    explicit ``not_after`` is kept even when it is earlier than ``not_before`` (a leaf capped at an expired CA's end
    is born expired).
    """
    at = now if now is not None else _now()
    start = not_before if not_before is not None else at - BACKDATE
    end = not_after if not_after is not None else (start + duration if not_before is not None else at + duration)
    return _whole_second(start), _whole_second(end)


def _whole_second(t: datetime.datetime) -> datetime.datetime:
    return t.astimezone(datetime.UTC).replace(microsecond=0)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    *,
    serial: int,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
    is_ca: bool,
    key_encipherment: bool,
) -> x509.CertificateBuilder:
    """What every certificate made here starts with: names, public key, serial, validity, BasicConstraints and
    KeyUsage (keyCertSign and cRLSign for a CA).

    The validity goes through the builder's constructor: its ``not_valid_after`` setter refuses an end before the
    start, which a leaf capped at an expired CA's notAfter has (as cert-manager's CA issuer makes it).
    """
    return (
        x509.CertificateBuilder(
            issuer_name=issuer, subject_name=subject, public_key=key.public_key(), serial_number=serial,
            not_valid_before=not_before.astimezone(datetime.UTC).replace(tzinfo=None),
            not_valid_after=not_after.astimezone(datetime.UTC).replace(tzinfo=None),
        )
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=key_encipherment,
                data_encipherment=False, key_agreement=False, key_cert_sign=is_ca, crl_sign=is_ca,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    )


def _with_usages_and_sans(builder: x509.CertificateBuilder, usages: Iterable[Usage],
                          sans: list[x509.GeneralName]) -> x509.CertificateBuilder:
    ekus = list(dict.fromkeys(_EKU[u] for u in usages if u in _EKU))
    if ekus:
        builder = builder.add_extension(x509.ExtendedKeyUsage(ekus), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder


def make_ca(
    common_name: str = "opsmanager-ca",
    *,
    duration: datetime.timedelta = datetime.timedelta(days=3650),
    organizations: Sequence[str] = (),
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> KeyPair:
    """A self-signed CA certificate (CA:TRUE, keyCertSign, cRLSign); validity as :func:`validity`."""
    return make_self_signed(common_name, usages=(), duration=duration, organizations=organizations, is_ca=True,
                            not_before=not_before, not_after=not_after)


def make_leaf(
    ca: KeyPair,
    common_name: str,
    *,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str] = (),
    uris: Iterable[str] = (),
    emails: Iterable[str] = (),
    usages: Iterable[Usage] = ("server", "client"),
    duration: datetime.timedelta = datetime.timedelta(days=90),
    organizations: Sequence[str] = (),
    org_units: Sequence[str] = (),
    serial: int | None = None,
    is_ca: bool = False,
    key_algorithm: str = "ECDSA",
    key_encoding: str = "PKCS8",
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> KeyPair:
    """A certificate signed by ``ca`` with the given SANs and extended key usages.

    Validity: see :func:`validity` (by default backdated by :data:`BACKDATE`; ``not_after`` is not capped at the
    CA's end here — the caller decides, as cert-manager's CA issuer does).
    """
    ca_cert, ca_key, ca_public = _issuer(ca)
    start, end = validity(duration, not_before=not_before, not_after=not_after)
    key = _new_key(key_algorithm)
    sans = _subject_alt_names(dns_names, ip_addresses, uris, emails)
    builder = _builder(
        _name(common_name, organizations, org_units), ca_cert.subject, key,
        serial=serial if serial is not None else x509.random_serial_number(), not_before=start, not_after=end,
        is_ca=is_ca, key_encipherment=key_algorithm.upper() == "RSA",
    ).add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False)
    builder = _with_usages_and_sans(builder, usages, sans)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key, key_encoding))


def split_pem(data: bytes) -> list[bytes]:
    """Split a PEM bundle into its certificates (each ending in a newline)."""
    out: list[bytes] = []
    marker = b"-----END CERTIFICATE-----"
    for chunk in data.split(marker)[:-1]:
        start = chunk.find(b"-----BEGIN CERTIFICATE-----")
        if start >= 0:
            out.append(chunk[start:] + marker + b"\n")
    return out


def bundle(*pems: bytes) -> bytes:
    """Concatenate PEM certificates into one trust bundle, dropping exact duplicates, order kept."""
    seen: dict[bytes, None] = {}
    for pem in pems:
        for cert in split_pem(pem):
            seen.setdefault(cert.strip() + b"\n")
    return b"".join(seen)


# The operator checks the same certificates on every pass over every Etcd (each Secret, each member's answer),
# and parsing and key loading are costly next to a lookup. What these functions answer depends
# on the bytes only, so it is remembered — certificates by their bytes (public), anything with a private key by a
# SHA-256 of the bytes only, so the cache never holds key material.
_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=_CACHE_SIZE)
def cert_info(pem_or_der: bytes) -> CertInfo:
    """Parse the first certificate of a PEM (or a DER blob) into a :class:`CertInfo` (remembered per bytes)."""
    if pem_or_der.lstrip().startswith(b"-----"):
        cert = x509.load_pem_x509_certificate(split_pem(pem_or_der)[0] if b"END CERT" in pem_or_der else pem_or_der)
    else:
        cert = x509.load_der_x509_certificate(pem_or_der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = tuple(san.get_values_for_type(x509.DNSName))
        ips = tuple(str(i) for i in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        dns, ips = (), ()
    try:
        is_ca = bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        is_ca = False
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return CertInfo(
        serial=cert.serial_number,
        fingerprint_sha256=hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest(),
        subject=cert.subject.rfc4514_string(),
        common_name=str(cns[0].value) if cns else "",
        issuer=cert.issuer.rfc4514_string(),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        dns_names=dns,
        ip_addresses=ips,
        is_ca=is_ca,
    )


def key_matches_cert(cert_pem: bytes, key_pem: bytes) -> bool:
    """True when ``key_pem`` is the private key of the first certificate in ``cert_pem``. Never raises. Remembered
    per (certificate, key) by a digest, not by the key's bytes."""
    digest = hashlib.sha256(len(cert_pem).to_bytes(8, "big") + cert_pem + key_pem).digest()
    return _key_matches_cert(digest, cert_pem, key_pem)


_KEY_MATCHES: dict[bytes, bool] = {}  # digest of (certificate, key) -> match; insertion order = age


_KEY_MATCHES_LOCK = threading.Lock()  # callers may be on worker threads


def _key_matches_cert(digest: bytes, cert_pem: bytes, key_pem: bytes) -> bool:
    with _KEY_MATCHES_LOCK:
        known = _KEY_MATCHES.get(digest)
    if known is None:
        known = _key_matches_cert_uncached(cert_pem, key_pem)
        with _KEY_MATCHES_LOCK:
            while len(_KEY_MATCHES) >= _CACHE_SIZE:
                del _KEY_MATCHES[next(iter(_KEY_MATCHES))]  # the oldest first
            _KEY_MATCHES[digest] = known
    return known


def _key_matches_cert_uncached(cert_pem: bytes, key_pem: bytes) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(split_pem(cert_pem)[0])
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError, IndexError):
        return False
    fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(
        cert.public_key().public_bytes(serialization.Encoding.DER, fmt)
        == key.public_key().public_bytes(serialization.Encoding.DER, fmt)
    )


@functools.lru_cache(maxsize=_CACHE_SIZE)
def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """True when the first certificate of ``cert_pem`` is directly signed by one of the CAs in ``ca_pem``
    (remembered per bytes)."""
    try:
        cert = x509.load_pem_x509_certificate(split_pem(cert_pem)[0])
        cas = [x509.load_pem_x509_certificate(c) for c in split_pem(ca_pem)]
    except (ValueError, IndexError):
        return False
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
            return True
        except (ValueError, TypeError, Exception):  # InvalidSignature is not a ValueError
            continue
    return False


def make_self_signed(
    common_name: str,
    *,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str] = (),
    uris: Iterable[str] = (),
    emails: Iterable[str] = (),
    usages: Iterable[Usage] = ("server", "client"),
    duration: datetime.timedelta = datetime.timedelta(days=90),
    organizations: Sequence[str] = (),
    org_units: Sequence[str] = (),
    is_ca: bool = False,
    key_algorithm: str = "ECDSA",
    key_encoding: str = "PKCS8",
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> KeyPair:
    """A certificate signed by its own key, with any SANs and usages (cert-manager's SelfSigned issuer).

    With ``is_ca=True`` it can sign others (keyCertSign, cRLSign) — the usual bootstrap of a CA Issuer. Validity: see
    :func:`validity`.
    """
    start, end = validity(duration, not_before=not_before, not_after=not_after)
    key = _new_key(key_algorithm)
    subject = _name(common_name, organizations, org_units)
    sans = _subject_alt_names(dns_names, ip_addresses, uris, emails)
    builder = _builder(
        subject, subject, key, serial=x509.random_serial_number(), not_before=start, not_after=end, is_ca=is_ca,
        key_encipherment=key_algorithm.upper() == "RSA",
    ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    builder = _with_usages_and_sans(builder, usages, sans)
    cert = builder.sign(key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key, key_encoding))
