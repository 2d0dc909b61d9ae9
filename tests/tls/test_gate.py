"""The material gate (pure): each problem code, the pass case, and the rule for which CAs every member has loaded.

We test these aspects:
- a complete, matching, covering, valid leaf from a loaded CA passes, and its data is handed out only then;
- each code (SourceMissing, MissingKey, MalformedPEM, KeyMismatch, SANMismatch, NotYetValid, Expired,
  UntrustedCA) is reported with a message naming the Secret, and no message carries Secret data;
- SAN wildcards cover exactly one label;
- loaded CAs: a CA that entered the bundle strictly before a member's container started is loaded by it; one that
  entered at or after is not; a legacy bundle (no record) counts as loaded by every running member; a member that
  is not running constrains nothing; the record keeps old entries and stamps new ones.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest

from opsmanager import pki
from opsmanager.tls import gate


def now() -> datetime.datetime:
    """The time of the call, not of the import: a suite that collects this module and runs it twenty minutes later
    makes its certificates then (backdated by pki's few minutes), so a module-level "now" would call them not yet
    valid."""
    return datetime.datetime.now(datetime.UTC)

NAME = "ns/db-server-issued"
MEMBERS = [f"db-{i}.db-pods.ns.svc" for i in range(3)]
CA = pki.make_ca("gate-a")
OTHER_CA = pki.make_ca("gate-b")


def leaf(ca: pki.KeyPair = CA, *, dns: tuple[str, ...] = ("*.db-pods.ns.svc",),
         not_before: datetime.datetime | None = None, not_after: datetime.datetime | None = None) -> pki.KeyPair:
    kw: dict[str, Any] = {}
    if not_before is not None or not_after is not None:
        kw["not_before"] = not_before or now() - datetime.timedelta(hours=1)
        kw["not_after"] = not_after or now() + datetime.timedelta(days=1)
    return pki.make_leaf(ca, "db", dns_names=dns, **kw)


def secret(pair: pki.KeyPair | None = None, *, ca: bytes = CA.cert_pem, **override: Any) -> dict[str, Any]:
    pair = pair or leaf()
    data = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": ca}
    encoded: dict[str, Any] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    encoded.update(override)
    return {"metadata": {"name": "db-server-issued"}, "data": {k: v for k, v in encoded.items() if v is not None}}


def check(obj: dict[str, Any] | None, *, loaded: bytes | None = CA.cert_pem,
          dns: list[str] | None = None) -> gate.Verdict:
    return gate.check(obj, NAME, dns_names=MEMBERS if dns is None else dns, loaded=loaded, now=now())


def codes(v: gate.Verdict) -> list[str]:
    return [p.code for p in v.problems]


def test_a_good_source_passes_and_only_then_hands_out_its_data() -> None:
    pair = leaf()
    v = check(secret(pair))
    assert v.passed and codes(v) == []
    assert v.data["tls.crt"] == pair.cert_pem and v.data["tls.key"] == pair.key_pem
    assert "BEGIN" not in repr(v) and repr(v) == f"gate.Verdict({NAME!r}, pass)"
    assert check(secret(pair), loaded=None).passed  # no member serves TLS yet: any CA


@pytest.mark.parametrize(("obj", "code", "words"), [
    (None, gate.SOURCE_MISSING, "does not exist"),
    (secret(**{"tls.key": None}), gate.MISSING_KEY, "tls.key"),
    (secret(**{"ca.crt": ""}), gate.MISSING_KEY, "ca.crt"),
    (secret(**{"tls.crt": "%%%not-base64"}), gate.MALFORMED_PEM, "tls.crt is not valid base64"),
    (secret(**{"tls.crt": base64.b64encode(b"hello").decode()}), gate.MALFORMED_PEM, "tls.crt holds no"),
    (secret(**{"ca.crt": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
               .decode()}), gate.MALFORMED_PEM, "ca.crt holds no"),
    (secret(**{"tls.key": base64.b64encode(b"not a key").decode()}), gate.MALFORMED_PEM, "tls.key"),
    (secret(**{"tls.key": base64.b64encode(leaf().key_pem).decode()}), gate.KEY_MISMATCH, "not the private key"),
])
def test_structural_problems_stop_the_check(obj: dict[str, Any] | None, code: str, words: str) -> None:
    v = check(obj)
    assert codes(v) == [code]
    assert NAME in v.problems[0].message and words in v.problems[0].message
    assert not v.data


def test_a_leaf_that_does_not_cover_every_member_is_a_san_mismatch() -> None:
    v = check(secret(leaf(dns=("db-0.db-pods.ns.svc", "localhost"))))
    assert codes(v) == [gate.SAN_MISMATCH]
    assert "db-1.db-pods.ns.svc, db-2.db-pods.ns.svc" in v.problems[0].message
    assert check(secret(leaf(dns=())), dns=[]).passed  # the client identity covers no member name


def test_validity_window() -> None:
    expired = leaf(not_before=now() - datetime.timedelta(days=2), not_after=now() - datetime.timedelta(days=1))
    assert codes(check(secret(expired))) == [gate.EXPIRED]
    future = leaf(not_before=now() + datetime.timedelta(hours=1), not_after=now() + datetime.timedelta(days=1))
    assert codes(check(secret(future))) == [gate.NOT_YET_VALID]


def test_a_leaf_from_a_ca_not_every_member_loaded_is_held_back() -> None:
    v = check(secret(leaf(OTHER_CA), ca=OTHER_CA.cert_pem))
    assert codes(v) == [gate.UNTRUSTED_CA]
    assert "not every member has loaded" in v.problems[0].message
    assert check(secret(leaf(OTHER_CA), ca=OTHER_CA.cert_pem), loaded=pki.bundle(CA.cert_pem, OTHER_CA.cert_pem)
                 ).passed
    # several late problems are reported together
    both = check(secret(leaf(OTHER_CA, dns=("x",)), ca=OTHER_CA.cert_pem))
    assert codes(both) == [gate.SAN_MISMATCH, gate.UNTRUSTED_CA]


def test_no_message_carries_secret_data() -> None:
    pair = leaf(OTHER_CA, dns=("x",))
    cases = [secret(pair, ca=OTHER_CA.cert_pem), secret(**{"tls.key": base64.b64encode(leaf().key_pem).decode()})]
    for obj in cases:
        for p in check(obj).problems:
            for value in obj["data"].values():
                assert value[:40] not in p.message
            assert "PRIVATE" not in p.message and "BEGIN" not in p.message


def test_wildcards_cover_exactly_one_label() -> None:
    assert gate.covers(["*.db-pods.ns.svc"], "db-0.db-pods.ns.svc")
    assert gate.covers(["DB-0.db-pods.ns.svc."], "db-0.db-pods.ns.svc")
    assert not gate.covers(["*.db-pods.ns.svc"], "a.db-0.db-pods.ns.svc")
    assert not gate.covers(["*.db-pods.ns.svc"], "db-pods.ns.svc")
    assert not gate.covers(["*.ns.svc"], "db-0.db-pods.ns.svc")


# --- which CAs every member has loaded -------------------------------------------------------------------------

T0 = datetime.datetime(2026, 12, 1, 1, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_a_ca_is_loaded_by_a_member_that_started_strictly_after_it_entered() -> None:
    bundle = pki.bundle(CA.cert_pem, OTHER_CA.cert_pem)
    record = {gate.fingerprint(CA.cert_pem): gate.stamp(at(0)), gate.fingerprint(OTHER_CA.cert_pem): gate.stamp(at(60))}
    all_late = {"db-0": at(61), "db-1": at(70), "db-2": at(90)}
    assert gate.loaded_cas(bundle, record, all_late) == bundle
    one_early = {**all_late, "db-1": at(30)}  # db-1 started before the new CA entered: it has only the old one
    assert gate.loaded_cas(bundle, record, one_early) == CA.cert_pem
    same_second = {**all_late, "db-2": at(60.9)}  # the same second: not provably after
    assert gate.loaded_cas(bundle, record, same_second) == CA.cert_pem
    not_running = {**all_late, "db-1": None}  # it will load the bundle as it is when it starts
    assert gate.loaded_cas(bundle, record, not_running) == bundle
    assert gate.loaded_cas(bundle, record, {}) == bundle  # no member yet


def test_a_legacy_bundle_counts_as_loaded_by_every_running_member() -> None:
    assert gate.loaded_cas(CA.cert_pem, None, {"db-0": at(0), "db-1": None}) == CA.cert_pem
    assert gate.decode_record(None) is None and gate.decode_record("not json") is None


def test_the_record_keeps_old_entries_and_stamps_new_ones() -> None:
    first = gate.record_after_write({}, b"", CA.cert_pem, at(5), initial=True)
    assert first == {gate.fingerprint(CA.cert_pem): gate.EPOCH}
    widened = gate.record_after_write(first, CA.cert_pem, pki.bundle(CA.cert_pem, OTHER_CA.cert_pem), at(100))
    assert widened == {gate.fingerprint(CA.cert_pem): gate.EPOCH, gate.fingerprint(OTHER_CA.cert_pem): gate.stamp(at(100))}
    narrowed = gate.record_after_write(widened, b"", OTHER_CA.cert_pem, at(200))
    assert narrowed == {gate.fingerprint(OTHER_CA.cert_pem): gate.stamp(at(100))}
    # a legacy bundle being widened: what it held is taken as there from the beginning
    legacy = gate.record_after_write(None, CA.cert_pem, pki.bundle(CA.cert_pem, OTHER_CA.cert_pem), at(300))
    assert legacy[gate.fingerprint(CA.cert_pem)] == gate.EPOCH
    assert legacy[gate.fingerprint(OTHER_CA.cert_pem)] == gate.stamp(at(300))
    assert gate.decode_record(gate.encode_record(legacy)) == legacy


def test_container_start_is_read_from_the_running_state() -> None:
    pod = {"status": {"containerStatuses": [
        {"name": "other", "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}},
        {"name": "etcd", "state": {"running": {"startedAt": "2026-12-01T01:00:05Z"}}}]}}
    assert gate.container_started(pod, "etcd") == at(5)
    waiting = {"status": {"containerStatuses": [{"name": "etcd", "state": {"waiting": {"reason": "x"}}}]}}
    assert gate.container_started(waiting, "etcd") is None
    assert gate.container_started({}, "etcd") is None
