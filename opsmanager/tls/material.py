"""Is a certificate Secret complete? — the gate before anything mounts it.

etcd exits at start when a file named in its flags is missing or unreadable, and cert-manager fills a Secret
some time after the Certificate exists (first an empty or partial Secret may be there, or one left by an earlier
Certificate). So the provisioner creates the trust bundle and the StatefulSet only once every leaf Secret holds
**complete, parseable material**: ``tls.crt`` (a PEM certificate), ``tls.key`` (the private key *of that*
certificate) and ``ca.crt`` (at least one PEM certificate). The ops engine uses the same check before it rolls a
member onto new certificates.

Pure: the Secret is a dict as the API returns it (``data`` values base64). Problems are described by key name only;
no Secret data ever appears in a message.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from opsmanager import pki

KEYS = ("tls.crt", "tls.key", "ca.crt")


@dataclasses.dataclass(frozen=True, repr=False)
class Material:
    """The verdict on one Secret. ``problem`` is empty when ``complete``; ``ca_pem`` is the Secret's ``ca.crt``
    (public) when complete, else empty. The repr names the Secret and the verdict only."""

    secret: str
    complete: bool
    problem: str = ""
    ca_pem: bytes = b""
    cert: pki.CertInfo | None = None

    def __repr__(self) -> str:
        state = "complete" if self.complete else f"incomplete: {self.problem}"
        return f"Material({self.secret!r}, {state})"


def decode(data: Mapping[str, Any], key: str) -> bytes | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return None


def secret_bytes(secret: Mapping[str, Any] | None, key: str) -> bytes | None:
    """The decoded value of ``data[key]`` of a Secret read from the API; None when absent or not base64."""
    return decode((secret or {}).get("data") or {}, key)


def check_secret(secret: Mapping[str, Any] | None, name: str) -> Material:
    """Whether ``secret`` (the object read from the API, or None when absent) holds complete TLS material.

    ``name`` is how the Secret is named in the verdict (``namespace/name``).
    """
    if secret is None:
        return Material(name, False, f"Secret {name} does not exist yet (cert-manager has not issued it)")
    data = secret.get("data") or {}
    missing = [k for k in KEYS if not data.get(k)]
    if missing:
        return Material(name, False, f"Secret {name} has no {', '.join(missing)} yet")
    cert_pem, key_pem, ca_pem = (decode(data, k) for k in KEYS)
    if cert_pem is None or key_pem is None or ca_pem is None:
        bad = [k for k, v in zip(KEYS, (cert_pem, key_pem, ca_pem), strict=True) if v is None]
        return Material(name, False, f"Secret {name}: {', '.join(bad)} is not valid base64")
    if not pki.split_pem(cert_pem):
        return Material(name, False, f"Secret {name}: tls.crt holds no PEM certificate")
    try:
        info = pki.cert_info(cert_pem)
    except ValueError:
        return Material(name, False, f"Secret {name}: tls.crt is not a parseable certificate")
    if not pki.split_pem(ca_pem):
        return Material(name, False, f"Secret {name}: ca.crt holds no PEM certificate")
    try:
        for ca in pki.split_pem(ca_pem):
            pki.cert_info(ca)
    except ValueError:
        return Material(name, False, f"Secret {name}: ca.crt is not a parseable certificate")
    if not pki.key_matches_cert(cert_pem, key_pem):
        return Material(name, False, f"Secret {name}: tls.key is not the private key of tls.crt "
                                     "(a half-written or foreign Secret)")
    return Material(name, True, "", ca_pem, info)


def first_problem(materials: Iterable[Material]) -> Material | None:
    """The first incomplete verdict, or None when all are complete."""
    for m in materials:
        if not m.complete:
            return m
    return None


def union_of_cas(materials: Iterable[Material]) -> bytes:
    """The trust bundle's content at creation: every distinct CA of the leaf Secrets' ``ca.crt``, in order.

    Raises ``ValueError`` when a verdict is incomplete (the bundle must never be built from partial material).
    """
    pems: list[bytes] = []
    for m in materials:
        if not m.complete:
            raise ValueError(f"cannot build the trust bundle from an incomplete Secret: {m.problem}")
        pems.append(m.ca_pem)
    result = pki.bundle(*pems)
    if not result:
        raise ValueError("cannot build an empty trust bundle: give at least one complete Secret")
    return result
