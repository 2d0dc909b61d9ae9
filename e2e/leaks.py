"""Find secrets where they must never be: logs, Events, statuses, annotations, metrics (issue 15 part 5).

A *secret* is a value from a Secret's ``data`` (decoded), a PEM private key, a bearer token: anything whose
disclosure hands out access. :func:`needles` turns one into the forms it could appear in — the raw bytes, their
base64, and, for PEM, each line of each block's base64 body (a key logged with its newlines escaped, or cut, still
shows whole body lines) — ignoring anything shorter than :data:`MIN_LENGTH` bytes (too likely to match by chance).
:func:`scan` looks for every needle in every haystack and returns :class:`Finding` s that name where and which
secret (by its label: ``Secret ns/name key``), **never the value**, so a failing test never prints what leaked.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

MIN_LENGTH = 16
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


@dataclasses.dataclass(frozen=True)
class Finding:
    where: str  # the haystack: a file, an Event, an object's field, /metrics
    secret: str  # the secret's label (never its value)
    form: str  # raw, base64 or pem-body

    def __str__(self) -> str:
        return f"{self.secret} ({self.form} form) found in {self.where}"


def needles(value: bytes) -> list[tuple[str, bytes]]:
    """The forms of one secret value to look for, as (form, bytes); none for a value under MIN_LENGTH bytes."""
    value = value.strip()
    if len(value) < MIN_LENGTH:
        return []
    found = [("raw", value), ("base64", base64.b64encode(value))]
    for block in _PEM_BLOCK.finditer(value):
        for line in block.group(2).split():
            if len(line) >= MIN_LENGTH:
                found.append(("pem-body", line))
    return found


def secret_data(secrets: Iterable[Mapping[str, Any]]) -> dict[str, bytes]:
    """Every value of every Secret's ``data`` (decoded) and ``stringData``, labelled ``Secret ns/name key``."""
    values: dict[str, bytes] = {}
    for secret in secrets:
        meta = secret.get("metadata") or {}
        where = f"Secret {meta.get('namespace')}/{meta.get('name')}"
        for key, raw in (secret.get("data") or {}).items():
            try:
                values[f"{where} {key}"] = base64.b64decode(raw or "", validate=True)
            except (binascii.Error, ValueError):
                values[f"{where} {key} (not base64)"] = str(raw).encode()
        for key, raw in (secret.get("stringData") or {}).items():
            values[f"{where} {key}"] = str(raw).encode()
    return values


def kubeconfig_secrets(config: Mapping[str, Any], label: str = "kubeconfig") -> dict[str, bytes]:
    """The credentials of a kubeconfig: each user's token, client key (and password)."""
    values: dict[str, bytes] = {}
    for user in config.get("users") or []:
        name = user.get("name")
        creds = user.get("user") or {}
        if creds.get("token"):
            values[f"{label} user {name} token"] = str(creds["token"]).encode()
        if creds.get("password"):
            values[f"{label} user {name} password"] = str(creds["password"]).encode()
        if creds.get("client-key-data"):
            values[f"{label} user {name} client-key-data"] = base64.b64decode(creds["client-key-data"])
    return values


def scan(haystacks: Mapping[str, bytes | str], secrets: Mapping[str, bytes]) -> list[Finding]:
    """Every (haystack, secret, form) where a form of the secret occurs in the haystack."""
    forms = [(label, form, needle) for label, value in secrets.items() for form, needle in needles(value)]
    findings = []
    for where, hay in haystacks.items():
        text = hay.encode() if isinstance(hay, str) else hay
        seen: set[str] = set()
        for label, form, needle in forms:
            if label not in seen and needle in text:
                seen.add(label)
                findings.append(Finding(where, label, form))
    return findings
