"""The material gate: may a source Secret be copied into the Secret members (or clients) mount? — pure.

Members and clients mount Secrets only the operator writes (``render.secret_name``, ``<db>-ca-bundle``). What
cert-manager (or, later, a user) writes is a *source* (``render.source_secret_name``); :mod:`.release` copies a
source into its mounted Secret only when :func:`check` passes. Why: etcd re-reads its leaf on every handshake but
its CA files only at start, so a leaf mounted the moment it is issued reaches the members at once — and a leaf
chaining to a CA some member has not loaded partitions the cluster (every peer renews together).

:func:`check` returns the problems of one source, each with a stable ``code`` (the Event/condition reason) and a
message naming the Secret and the reason — never Secret data:

==================  =============================================================================================
``SourceMissing``    the source Secret does not exist (yet)
``MissingKey``       ``tls.crt``, ``tls.key`` or ``ca.crt`` is absent or empty
``MalformedPEM``     a key is not base64, or holds no parseable PEM certificate / key
``KeyMismatch``      ``tls.key`` is not the private key of ``tls.crt``
``SANMismatch``      the leaf's DNS SANs do not cover ``<pod>.<headless-svc>.<ns>.svc`` of every member
``NotYetValid``      ``now`` is before the leaf's notBefore
``Expired``          ``now`` is after the leaf's notAfter
``UntrustedCA``      the leaf is not signed by a CA every member has loaded (:func:`loaded_cas`)
==================  =============================================================================================

:func:`loaded_cas` is the rule for "which CAs has every member loaded": the operator records, on the trust bundle,
the second each CA (by SHA-256 fingerprint) entered it (:data:`naming.ANNOTATION_CA_ENTERED`); a member has loaded
CA X iff X is in the bundle and entered it strictly before the member's etcd container started
(``containerStatuses[].state.running.startedAt``). Both times are whole seconds (Kubernetes truncates
``startedAt``), so "strictly before" on truncated values is sound: it can only answer "not loaded" too often,
never too rarely. A CA without a record (a cluster from before this rule) counts as loaded by every running member:
until now the bundle changed only through the engine's rolls, which restart every member onto it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from opsmanager import pki
from opsmanager.tls import material

KEYS: Final = ("tls.crt", "tls.key", "ca.crt")

SOURCE_MISSING: Final = "SourceMissing"
MISSING_KEY: Final = "MissingKey"
MALFORMED_PEM: Final = "MalformedPEM"
KEY_MISMATCH: Final = "KeyMismatch"
SAN_MISMATCH: Final = "SANMismatch"
NOT_YET_VALID: Final = "NotYetValid"
EXPIRED: Final = "Expired"
UNTRUSTED_CA: Final = "UntrustedCA"
CODES: Final = (SOURCE_MISSING, MISSING_KEY, MALFORMED_PEM, KEY_MISMATCH, SAN_MISMATCH, NOT_YET_VALID, EXPIRED,
                UNTRUSTED_CA)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One reason a source may not be released. ``secret`` is ``namespace/name``; ``message`` names it."""

    code: str
    secret: str
    message: str


@dataclasses.dataclass(frozen=True, repr=False)
class Verdict:
    """The gate's answer for one source. ``data`` (the three keys, decoded) is set only when it passes;
    the repr never shows it."""

    secret: str
    problems: tuple[Problem, ...]
    data: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    cert: pki.CertInfo | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    def __repr__(self) -> str:
        state = "pass" if self.passed else ", ".join(p.code for p in self.problems)
        return f"gate.Verdict({self.secret!r}, {state})"


def covers(dns_names: Iterable[str], name: str) -> bool:
    """Whether a certificate's DNS SANs cover ``name`` (exact, or a ``*.`` wildcard for exactly one label)."""
    name = name.lower().rstrip(".")
    for san in dns_names:
        san = san.lower().rstrip(".")
        if san == name:
            return True
        if san.startswith("*.") and "." in name:
            first, rest = name.split(".", 1)
            if first and rest == san[2:]:
                return True
    return False


def check(secret: Mapping[str, Any] | None, name: str, *, dns_names: Sequence[str],
          loaded: bytes | None, now: datetime.datetime) -> Verdict:
    """The gate on one source Secret (the object as the API returns it, or None when absent).

    ``dns_names``: the member names the leaf must cover (server and peer: ``<pod>.<svc>.<ns>.svc`` of every
    member; client: none). ``loaded``: the CAs (PEM bundle) every TLS-serving member has loaded, or None when
    no member serves TLS yet (add TLS, a new cluster: nothing to partition). Structural problems stop the check
    (the later checks need a parseable pair); SAN, validity and trust problems are all reported together.
    """
    if secret is None:
        return Verdict(name, (Problem(SOURCE_MISSING, name, f"Secret {name} does not exist yet"),))
    data = secret.get("data") or {}
    missing = [k for k in KEYS if not data.get(k)]
    if missing:
        return Verdict(name, (Problem(MISSING_KEY, name, f"Secret {name} has no {', '.join(missing)}"),))
    decoded = {k: material.decode(data, k) for k in KEYS}
    bad = [k for k, v in decoded.items() if not v]
    if bad:
        return Verdict(name, (Problem(MALFORMED_PEM, name, f"Secret {name}: {', '.join(bad)} is not valid base64"),))
    raw = {k: v for k, v in decoded.items() if v}
    try:
        if not pki.split_pem(raw["tls.crt"]):
            raise ValueError("tls.crt")
        info = pki.cert_info(raw["tls.crt"])
    except ValueError:
        return Verdict(name, (Problem(MALFORMED_PEM, name, f"Secret {name}: tls.crt holds no parseable PEM "
                                                            "certificate"),))
    try:
        cas = pki.split_pem(raw["ca.crt"])
        if not cas:
            raise ValueError("ca.crt")
        for ca in cas:
            pki.cert_info(ca)
    except ValueError:
        return Verdict(name, (Problem(MALFORMED_PEM, name, f"Secret {name}: ca.crt holds no parseable PEM "
                                                            "certificate"),))
    if b"PRIVATE KEY-----" not in raw["tls.key"]:
        return Verdict(name, (Problem(MALFORMED_PEM, name, f"Secret {name}: tls.key holds no PEM private key"),))
    if not pki.key_matches_cert(raw["tls.crt"], raw["tls.key"]):
        return Verdict(name, (Problem(KEY_MISMATCH, name, f"Secret {name}: tls.key is not the private key of "
                                                           "tls.crt"),))
    problems: list[Problem] = []
    uncovered = [n for n in dns_names if not covers(info.dns_names, n)]
    if uncovered:
        problems.append(Problem(SAN_MISMATCH, name, f"Secret {name}: tls.crt does not cover "
                                                     f"{', '.join(uncovered)} (its DNS SANs: "
                                                     f"{', '.join(info.dns_names) or 'none'})"))
    if now < info.not_before:
        problems.append(Problem(NOT_YET_VALID, name, f"Secret {name}: tls.crt (serial {info.serial_hex}) is not "
                                                      f"valid before {info.not_before.isoformat()}"))
    if now > info.not_after:
        problems.append(Problem(EXPIRED, name, f"Secret {name}: tls.crt (serial {info.serial_hex}) expired at "
                                                f"{info.not_after.isoformat()}"))
    if loaded is not None and not pki.signed_by(raw["tls.crt"], loaded):
        problems.append(Problem(UNTRUSTED_CA, name, f"Secret {name}: tls.crt (serial {info.serial_hex}) is "
                                                     f"issued by {info.issuer}, a CA not every member has loaded; "
                                                     "it is held back (mounting it would partition the cluster)"))
    if problems:
        return Verdict(name, tuple(problems), cert=info)
    return Verdict(name, (), raw, info)


# --- which CAs every member has loaded -----------------------------------------------------------------------


EPOCH: Final = "1970-01-01T00:00:00Z"


def fingerprint(ca_pem: bytes) -> str:
    return pki.cert_info(ca_pem).fingerprint_sha256


def stamp(t: datetime.datetime) -> str:
    """A time as the record keeps it: UTC, whole seconds (as Kubernetes writes ``startedAt``)."""
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(value: str) -> datetime.datetime | None:
    """A time of the record (or a ``startedAt``), None when unreadable."""
    return _parse(value)


def _parse(value: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(datetime.UTC)
    except (ValueError, AttributeError):
        return None


def decode_record(raw: str | None) -> dict[str, str] | None:
    """The ``ca-entered`` annotation's map, or None when there is none (a legacy bundle) or it is unreadable."""
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


def encode_record(record: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(record.items())), separators=(",", ":"))


def record_after_write(previous: Mapping[str, str] | None, previous_bundle: bytes, bundle: bytes,
                       now: datetime.datetime, *, initial: bool = False) -> dict[str, str]:
    """The record for ``bundle`` about to replace ``previous_bundle``: CAs already recorded keep their time, new
    ones enter ``now``; CAs no longer in the bundle are dropped. A legacy bundle (``previous`` None) is read as
    :func:`legacy_record`. ``initial``: the bundle is created before any member exists, so every member that ever
    starts loads it (recorded as the epoch: no same-second doubt)."""
    known = dict(previous) if previous is not None else legacy_record(previous_bundle)
    when = EPOCH if initial else stamp(now)
    return {fp: known.get(fp, when) for fp in (fingerprint(ca) for ca in pki.split_pem(bundle))}


def legacy_record(bundle: bytes) -> dict[str, str]:
    """What :func:`loaded_cas` assumes for a bundle without a record: every CA there since the beginning."""
    return {fingerprint(ca): EPOCH for ca in pki.split_pem(bundle)}


def loaded_cas(bundle: bytes, record: Mapping[str, str] | None,
               started: Mapping[str, datetime.datetime | None]) -> bytes:
    """The CAs of ``bundle`` every running member has loaded (PEM bundle, bundle order).

    ``started``: each member pod's etcd container start (None: not running — it will load the bundle as it is
    when it starts, so it constrains nothing). A CA is loaded by a member iff it entered the bundle strictly
    before that start; a CA with no entry in a missing record (a legacy bundle) counts as loaded by all.
    """
    record = dict(record) if record is not None else legacy_record(bundle)
    out: list[bytes] = []
    for ca in pki.split_pem(bundle):
        raw = record.get(fingerprint(ca))
        entered = _parse(raw) if raw is not None else None
        if entered is None:
            continue  # a CA written without a time (should not happen): trust nobody has loaded it
        if all(start is None or entered < start.replace(microsecond=0) for start in started.values()):
            out.append(ca)
    return b"".join(out)


def container_started(pod: Mapping[str, Any], container: str) -> datetime.datetime | None:
    """When ``container`` of ``pod`` last started (``state.running.startedAt``), None when it is not running."""
    for cs in ((pod.get("status") or {}).get("containerStatuses")) or []:
        if cs.get("name") == container:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            return _parse(str(started)) if started else None
    return None
