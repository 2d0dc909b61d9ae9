"""The certificate verdicts of issue 11, without processes or clocks (``now`` is passed).

We test these aspects:

* ``status.tls`` has the issue's shape: lowercase hex serials, RFC 3339 times, ``matchesSecret``, ``{error}`` for
  a failed port, ``nextExpiry`` the earliest served leaf, ``caNotAfter`` the earliest CA; broken input never
  crashes;
* ``CertificatesValid`` takes the first reason that applies, in the issue's order, and its message is stable
  over the scans of a steady cluster;
* Events fire once per threshold per serial across rescans and restarts (keys round-trip through the annotation
  encoding, garbage is ignored), only the tightest crossed threshold fires, keys survive a scan that missed a
  member, and ``CertificatesRenewed`` needs every member renewed;
* auto-renew: not due, due, in flight, one per expiry (same name after a restart), back-off after a failure, held
  while members are unscanned, default ``before`` a quarter of the lifetime capped at 720h.
"""

from __future__ import annotations

import dataclasses
import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from opsmanager import pki
from opsmanager.lifecycle import verdict

T0 = datetime.datetime(2026, 12, 1, 0, 0, tzinfo=datetime.UTC)
MIN = datetime.timedelta(minutes=1)
HOUR = datetime.timedelta(hours=1)


def cert(serial: int, not_after: datetime.datetime, *, not_before: datetime.datetime = T0,
         is_ca: bool = False, name: str = "db") -> pki.CertInfo:
    return pki.CertInfo(
        serial=serial, fingerprint_sha256="00" * 32, subject=f"CN={name}", common_name=name,
        issuer="CN=etcd-ca", not_before=not_before, not_after=not_after, dns_names=(), ip_addresses=(),
        is_ca=is_ca,
    )


CA = cert(0xCA, T0 + 3650 * 24 * HOUR, is_ca=True, name="etcd-ca")


def healthy(lifetime: datetime.timedelta = 10 * MIN, members: int = 3, base: int = 0x100) -> list[verdict.Observation]:
    """Every member serving its Secret's leaf on both ports; serials base+0.. ."""
    out = []
    for i in range(members):
        for j, port in enumerate(verdict.PORTS):
            leaf = cert(base + 2 * i + j, T0 + lifetime + i * MIN)
            out.append(verdict.Observation(f"db-{i}", port, leaf, leaf))
    return out


def scan(observations: list[verdict.Observation], now: datetime.datetime = T0, *,
         thresholds: tuple[datetime.timedelta, ...] = (9 * MIN,),
         cas: tuple[pki.CertInfo, ...] = (CA,)) -> verdict.Scan:
    return verdict.Scan(tuple(observations), cas, thresholds, now)


# --- status.tls -------------------------------------------------------------------------------------------------


def test_status_has_the_issue_shape() -> None:
    obs = healthy()
    obs[3] = verdict.Observation("db-1", "peer", None, obs[3].secret_leaf, error="handshake failed: bad record")
    obs[4] = verdict.Observation("db-2", "client", cert(0xABCDEF, T0 + 5 * MIN), obs[4].secret_leaf)
    status = verdict.scan_status(scan(obs, T0 + datetime.timedelta(microseconds=5)))
    assert status["lastScanTime"] == "2026-12-01T00:00:00Z"
    assert [m["name"] for m in status["members"]] == ["db-0", "db-1", "db-2"]
    assert status["members"][0]["client"] == {
        "serial": "100", "notBefore": "2026-12-01T00:00:00Z", "notAfter": "2026-12-01T00:10:00Z",
        "issuer": "CN=etcd-ca", "matchesSecret": True,
    }
    assert status["members"][1]["peer"] == {"error": "handshake failed: bad record"}
    assert status["members"][2]["client"]["serial"] == "abcdef"
    assert status["members"][2]["client"]["matchesSecret"] is False
    assert status["nextExpiry"] == {"notAfter": "2026-12-01T00:05:00Z", "member": "db-2", "port": "client"}
    assert status["caNotAfter"] == "2036-11-28T00:00:00Z"


def test_status_survives_no_certificate_at_all() -> None:
    obs = [verdict.Observation("db-0", "client", None, None)]
    status = verdict.scan_status(scan(obs, cas=()))
    assert status["members"] == [{"name": "db-0", "client": {"error": "no certificate observed"}}]
    assert "nextExpiry" not in status and "caNotAfter" not in status


def test_unreadable_secret_is_a_mismatch_in_status_and_scan_failed_in_the_condition() -> None:
    obs = healthy()
    obs[0] = verdict.Observation("db-0", "client", obs[0].served, None, secret_error="malformed PEM")
    assert verdict.scan_status(scan(obs))["members"][0]["client"]["matchesSecret"] is False
    status, reason, message = verdict.condition(scan(obs))
    assert (status, reason) == ("False", "ScanFailed")
    assert "db-0 client" in message and "malformed PEM" in message


# --- CertificatesValid ------------------------------------------------------------------------------------------


def test_valid_when_far_from_expiry_and_matching() -> None:
    status, reason, message = verdict.condition(scan(healthy()))
    assert (status, reason) == ("True", "Valid")
    assert "2026-12-01T00:10:00Z (db-0 client)" in message


def test_reasons_in_the_issue_order() -> None:
    def problems(expired: bool, soon: bool, ca_soon: bool, mismatch: bool, failed: bool) -> str:
        obs = healthy(lifetime=HOUR)
        if expired:
            obs[0] = verdict.Observation("db-0", "client", cert(1, T0 - MIN), cert(1, T0 - MIN))
        if soon:
            obs[1] = verdict.Observation("db-0", "peer", cert(2, T0 + 5 * MIN), cert(2, T0 + 5 * MIN))
        if mismatch:
            obs[2] = verdict.Observation("db-1", "client", obs[2].served, cert(3, T0 + HOUR))
        if failed:
            obs[3] = verdict.Observation("db-1", "peer", None, obs[3].secret_leaf, error="connection refused")
        cas = (cert(0xCA, T0 + 2 * MIN, is_ca=True),) if ca_soon else (CA,)
        return verdict.condition(scan(obs, cas=cas))[1]

    order = ["Expired", "ExpiringSoon", "CAExpiringSoon", "ServedCertificateMismatch", "ScanFailed"]
    for first in range(len(order)):
        flags = [i >= first for i in range(len(order))]
        assert problems(*flags) == order[first]
    assert problems(False, False, False, False, False) == "Valid"


def test_expiring_soon_names_member_port_and_not_after() -> None:
    status, reason, message = verdict.condition(scan(healthy(), T0 + 2 * MIN))
    assert (status, reason) == ("False", "ExpiringSoon")
    assert message.startswith("db-0 client serves a certificate (serial 100) that expires at 2026-12-01T00:10:00Z")
    assert "9m alert threshold" in message


def test_mismatch_message_names_both_serials() -> None:
    obs = healthy(lifetime=HOUR)
    obs[5] = verdict.Observation("db-2", "peer", obs[5].served, cert(0xBEEF, T0 + HOUR))
    status, reason, message = verdict.condition(scan(obs))
    assert (status, reason) == ("False", "ServedCertificateMismatch")
    assert "db-2 peer serves serial 105" in message and "its Secret holds serial beef" in message


@given(st.integers(min_value=0, max_value=10 * 24 * 3600))
def test_condition_is_stable_while_its_reason_does_not_change(offset: int) -> None:
    obs = healthy(lifetime=20 * 24 * HOUR)
    thresholds = (24 * HOUR, 7 * 24 * HOUR)
    first = verdict.condition(scan(obs, T0, thresholds=thresholds))
    later = verdict.condition(scan(obs, T0 + datetime.timedelta(seconds=offset), thresholds=thresholds))
    if later[1] == first[1]:
        assert later == first


def test_no_threshold_means_only_expiry_counts() -> None:
    assert verdict.condition(scan(healthy(), T0 + 9 * MIN, thresholds=()))[1] == "Valid"
    assert verdict.condition(scan(healthy(), T0 + 11 * MIN, thresholds=()))[1] == "Expired"


# --- Events -----------------------------------------------------------------------------------------------------


def reasons(events: list[verdict.Event]) -> list[str]:
    return [e.reason for e in events]


def test_ten_minute_leaf_with_a_nine_minute_threshold_fires_once_per_certificate() -> None:
    obs = healthy(lifetime=10 * MIN, members=1)
    keys: frozenset[str] = frozenset()
    fired: list[verdict.Event] = []
    for second in range(0, 9 * 60, 15):  # a scan every 15 s until just before expiry
        out, keys = verdict.events(keys, scan(obs, T0 + datetime.timedelta(seconds=second)))
        fired += out
        if second < 60:
            assert out == []
        keys = verdict.decode_keys(verdict.encode_keys(keys))  # persisted and read back (a restart)
    assert reasons(fired) == ["CertificateExpiringSoon", "CertificateExpiringSoon"]
    assert {e.message.split(" serves")[0] for e in fired} == {"db-0 client", "db-0 peer"}
    assert all(e.type_ == "Warning" for e in fired)


def test_only_the_tightest_crossed_threshold_fires_and_larger_ones_never_later() -> None:
    thresholds = (1440 * HOUR, 720 * HOUR, 168 * HOUR)
    leaf = cert(7, T0 + 100 * HOUR)
    obs = [verdict.Observation("db-0", "client", leaf, leaf)]
    out, keys = verdict.events(frozenset(), scan(obs, thresholds=thresholds))
    assert reasons(out) == ["CertificateExpiringSoon"] and "168h alert threshold" in out[0].message
    out, keys = verdict.events(keys, scan(obs, T0 + HOUR, thresholds=thresholds))
    assert out == []


def test_each_threshold_fires_as_it_is_crossed() -> None:
    thresholds = (1440 * HOUR, 720 * HOUR, 168 * HOUR)
    leaf = cert(7, T0 + 2000 * HOUR)
    obs = [verdict.Observation("db-0", "client", leaf, leaf)]
    keys: frozenset[str] = frozenset()
    fired = []
    for hour in range(0, 2000, 10):
        out, keys = verdict.events(keys, scan(obs, T0 + hour * HOUR, thresholds=thresholds))
        fired += [e.message.split("within the ")[1] for e in out if e.reason == "CertificateExpiringSoon"]
    assert fired == ["1440h alert threshold", "720h alert threshold", "168h alert threshold"]


def test_expired_mismatch_and_ca_fire_once_each() -> None:
    obs = [verdict.Observation("db-0", "client", cert(1, T0 - MIN), cert(2, T0 + HOUR))]
    cas = (cert(0xCA, T0 + 5 * MIN, is_ca=True),)
    out, keys = verdict.events(frozenset(), scan(obs, cas=cas))
    assert sorted(reasons(out)) == ["CAExpiringSoon", "CertificateExpired", "ServedCertificateMismatch"]
    again, keys2 = verdict.events(keys, scan(obs, T0 + HOUR, cas=cas))
    assert again == [] and keys2 == keys


def test_keys_survive_a_scan_that_missed_a_member_and_are_pruned_after_a_complete_one() -> None:
    obs = healthy(lifetime=10 * MIN, members=2)
    out, keys = verdict.events(frozenset(), scan(obs, T0 + 5 * MIN))
    assert len(out) == 4
    partial = [o if o.member != "db-1" else verdict.Observation(o.member, o.port, None, o.secret_leaf, error="x")
               for o in obs]
    _, kept = verdict.events(keys, scan(partial, T0 + 6 * MIN))
    assert kept == keys
    out, _ = verdict.events(kept, scan(obs, T0 + 7 * MIN))
    assert out == []
    renewed = healthy(lifetime=10 * MIN, members=2, base=0x200)
    _, pruned = verdict.events(kept, scan(renewed, T0 + 8 * MIN, thresholds=()))
    assert pruned == frozenset()


def test_certificates_renewed_only_when_every_member_serves_a_new_leaf() -> None:
    before = verdict.scan_status(scan(healthy(lifetime=HOUR)))
    half = healthy(lifetime=HOUR)
    half[0] = verdict.Observation("db-0", "client", cert(0x999, T0 + 2 * HOUR), cert(0x999, T0 + 2 * HOUR))
    out, _ = verdict.events(frozenset(), scan(half), before)
    assert "CertificatesRenewed" not in reasons(out)
    out, _ = verdict.events(frozenset(), scan(healthy(lifetime=2 * HOUR, base=0x300)), before)
    assert reasons(out) == ["CertificatesRenewed"] and out[0].type_ == "Normal"
    assert "db-0, db-1, db-2" in out[0].message
    out, _ = verdict.events(frozenset(), scan(healthy(lifetime=HOUR)), None)
    assert out == []
    out, _ = verdict.events(frozenset(), scan(healthy(lifetime=HOUR)), {"members": "garbage"})
    assert out == []


@given(st.text())
def test_decode_keys_tolerates_garbage(text: str) -> None:
    keys = verdict.decode_keys(text)
    assert verdict.decode_keys(verdict.encode_keys(keys)) == keys


def test_decode_keys_reads_what_encode_keys_wrote_and_ignores_the_rest() -> None:
    assert verdict.encode_keys({"X:ab", "S:ab:540", "bogus"}) == "S:ab:540,X:ab"
    assert verdict.decode_keys("S:ab:540,,X:ab, M:1 ,S:XY:1,Q:1") == {"S:ab:540", "X:ab", "M:1"}
    assert verdict.decode_keys(None) == frozenset() and verdict.decode_keys(42) == frozenset()


@settings(deadline=None, max_examples=50)
@given(
    lifetime_min=st.integers(min_value=1, max_value=300),
    thresholds_min=st.lists(st.integers(min_value=1, max_value=300), max_size=4),
    step_s=st.integers(min_value=30, max_value=900),
)
def test_no_event_repeats_over_a_lifetime(lifetime_min: int, thresholds_min: list[int], step_s: int) -> None:
    leaf = cert(5, T0 + lifetime_min * MIN)
    obs = [verdict.Observation("db-0", "client", leaf, leaf)]
    thresholds = tuple(t * MIN for t in thresholds_min)
    keys: frozenset[str] = frozenset()
    fired: list[str] = []
    for second in range(0, lifetime_min * 60 + 2 * step_s, step_s):
        out, keys = verdict.events(keys, scan(obs, T0 + datetime.timedelta(seconds=second), thresholds=thresholds))
        fired += [e.message for e in out]
        rescan, _ = verdict.events(keys, scan(obs, T0 + datetime.timedelta(seconds=second), thresholds=thresholds))
        assert rescan == []
    assert len(fired) == len(set(fired))
    assert sum("within the" in m for m in fired) <= len(set(thresholds))
    assert sum("expired at" in m for m in fired) == 1


# --- auto-renew -------------------------------------------------------------------------------------------------


def decide(now: datetime.datetime, **overrides: object) -> verdict.Decision:
    args: dict[str, object] = {
        "etcd": "db", "not_before": T0, "not_after": T0 + 6 * MIN, "enabled": True, "before": 5 * MIN,
        "retry_after_failure": 24 * HOUR, "in_flight": False, "last_failure_at": None,
        "unscanned_members": (), "requested_for": None, "now": now,
    }
    args.update(overrides)
    return verdict.auto_renew(**args)  # type: ignore[arg-type]


def test_not_due_then_create_with_a_deterministic_name() -> None:
    assert decide(T0 + 30 * datetime.timedelta(seconds=1)).verdict is verdict.Verdict.NONE
    first = decide(T0 + 2 * MIN)
    assert first.verdict is verdict.Verdict.CREATE
    assert first.request_name == decide(T0 + 3 * MIN).request_name  # a restart re-derives the same name
    assert first.request_name == f"db-auto-renew-{int((T0 + 6 * MIN).timestamp()):x}"
    assert decide(T0 + 2 * MIN, not_after=T0 + 7 * MIN).request_name != first.request_name


def test_one_per_expiry_and_none_while_in_flight_or_disabled() -> None:
    assert decide(T0 + 2 * MIN, in_flight=True).verdict is verdict.Verdict.NONE
    assert decide(T0 + 2 * MIN, enabled=False).verdict is verdict.Verdict.NONE
    assert decide(T0 + 2 * MIN, requested_for=T0 + 6 * MIN).verdict is verdict.Verdict.NONE
    assert decide(T0 + 2 * MIN, requested_for=T0 - HOUR).verdict is verdict.Verdict.CREATE


def test_back_off_after_a_failure_then_a_new_name() -> None:
    failed = T0 + 2 * MIN
    wait = decide(T0 + 3 * MIN, requested_for=T0 + 6 * MIN, last_failure_at=failed)
    assert wait.verdict is verdict.Verdict.WAIT_RETRY and wait.retry_at == failed + 24 * HOUR
    retry = decide(failed + 24 * HOUR, requested_for=T0 + 6 * MIN, last_failure_at=failed)
    assert retry.verdict is verdict.Verdict.CREATE
    assert retry.request_name != decide(T0 + 2 * MIN).request_name
    assert retry.request_name is not None and retry.request_name.startswith("db-auto-renew-")


def test_held_while_members_are_unscanned() -> None:
    held = decide(T0 + 2 * MIN, unscanned_members=["db-2", "db-1", "db-2"])
    assert held.verdict is verdict.Verdict.HOLD and held.held_members == ("db-2", "db-1")
    assert "db-2, db-1" in held.reason
    assert decide(T0, unscanned_members=["db-2"]).verdict is verdict.Verdict.NONE  # not due: no noise
    nothing = decide(T0, not_before=None, not_after=None, unscanned_members=["db-0"])
    assert nothing.verdict is verdict.Verdict.NONE and "db-0" in nothing.reason
    assert decide(T0, not_before=None, not_after=None).verdict is verdict.Verdict.NONE


def test_default_before_is_a_quarter_of_the_lifetime_capped_at_720h() -> None:
    assert verdict.renew_before(T0, T0 + 8 * MIN, None) == 2 * MIN
    assert verdict.renew_before(T0, T0 + 365 * 24 * HOUR, None) == 720 * HOUR
    assert verdict.renew_before(T0, T0 + 8 * MIN, 5 * MIN) == 5 * MIN
    assert decide(T0 + 4 * MIN, before=None).verdict is verdict.Verdict.NONE  # 6 m lifetime: due at 4m30s
    assert decide(T0 + 5 * MIN, before=None).verdict is verdict.Verdict.CREATE
    assert decide(T0 + 5 * MIN, before=None, not_after=T0 + 6 * MIN).renew_at == T0 + datetime.timedelta(
        minutes=4, seconds=30)


@given(st.integers(min_value=0, max_value=3 * 24 * 3600), st.booleans(), st.booleans())
def test_never_create_while_in_flight_or_before_the_retry(offset: int, in_flight: bool, failed: bool) -> None:
    now = T0 + datetime.timedelta(seconds=offset)
    failure = T0 + MIN if failed else None
    d = decide(now, in_flight=in_flight, last_failure_at=failure, requested_for=T0 + 6 * MIN if failed else None)
    if d.verdict is verdict.Verdict.CREATE:
        assert not in_flight
        assert failure is None or now >= failure + 24 * HOUR


def test_go_duration() -> None:
    assert verdict.go_duration(720 * HOUR) == "720h"
    assert verdict.go_duration(9 * MIN) == "9m"
    assert verdict.go_duration(datetime.timedelta(seconds=90)) == "1m30s"
    assert verdict.go_duration(datetime.timedelta(0)) == "0s"


def test_a_certificate_is_expired_at_its_not_after() -> None:
    leaf = cert(9, T0)
    obs = [verdict.Observation("db-0", "client", leaf, leaf)]
    assert verdict.condition(scan(obs))[1] == "Expired"
    assert reasons(verdict.events(frozenset(), scan(obs))[0]) == ["CertificateExpired"]


# --- delivery grace ---------------------------------------------------------------------------------------------
# The Secret leaf's age counts from when the scan first saw its serial (secret_seen), else its notBefore. The tests
# set both explicitly, so they hold whether the sandbox backdates notBefore or not.


def renewed_secret(lifetime: datetime.timedelta = HOUR) -> list[verdict.Observation]:
    """db-1 client still serves its old leaf; its Secret holds a new one (serial 0xbeef, notBefore T0)."""
    obs = healthy(lifetime=lifetime)
    obs[2] = verdict.Observation("db-1", "client", obs[2].served, cert(0xBEEF, T0 + 2 * HOUR))
    return obs


def graced(observations: list[verdict.Observation], now: datetime.datetime, grace: datetime.timedelta,
           seen: dict[str, datetime.datetime] | None = None) -> verdict.Scan:
    return verdict.Scan(tuple(observations), (CA,), (9 * MIN,), now, delivery_grace=grace,
                        secret_seen=seen or {})


def test_a_served_leaf_older_than_a_young_secret_leaf_is_no_mismatch_within_the_grace() -> None:
    obs = renewed_secret()
    within = graced(obs, T0 + MIN, 2 * MIN)
    assert verdict.condition(within)[1] == "Valid"
    assert "ServedCertificateMismatch" not in reasons(verdict.events(frozenset(), within)[0])
    assert verdict.scan_status(within)["members"][1]["client"]["matchesSecret"] is False  # status stays factual
    after = graced(obs, T0 + 2 * MIN, 2 * MIN)
    assert verdict.condition(after)[1] == "ServedCertificateMismatch"
    assert reasons(verdict.events(frozenset(), after)[0]) == ["ServedCertificateMismatch"]
    assert verdict.condition(graced(obs, T0 + MIN, datetime.timedelta(0)))[1] == "ServedCertificateMismatch"


def test_the_grace_counts_from_first_seen_not_from_a_backdated_not_before() -> None:
    obs = renewed_secret()  # the Secret leaf's notBefore is T0
    seen = {"beef": T0 + 10 * MIN}  # first seen ten minutes after its notBefore (an issuer that backdates)
    assert verdict.condition(graced(obs, T0 + 11 * MIN, 2 * MIN, seen))[1] == "Valid"
    assert verdict.condition(graced(obs, T0 + 11 * MIN, 2 * MIN))[1] == "ServedCertificateMismatch"


def test_a_member_serving_the_new_leaf_after_the_grace_announces_the_renewal() -> None:
    before = verdict.scan_status(scan(healthy(lifetime=HOUR)))
    during = graced(renewed_secret(), T0 + MIN, 2 * MIN)
    out, keys = verdict.events(frozenset(), during, before)
    assert out == []
    new = healthy(lifetime=2 * HOUR, base=0x300)
    out, _ = verdict.events(keys, graced(new, T0 + 90 * datetime.timedelta(seconds=1), 2 * MIN), before)
    assert reasons(out) == ["CertificatesRenewed"]


def test_recheck_soon_while_in_the_grace_and_just_after_it_at_the_latest() -> None:
    obs = renewed_secret()
    assert verdict.recheck_at(graced(obs, T0 + MIN, 2 * MIN)) == T0 + MIN + verdict.GRACE_RECHECK
    assert verdict.recheck_at(graced(obs, T0 + 2 * MIN - datetime.timedelta(seconds=3), 2 * MIN)) == (
        T0 + 2 * MIN + datetime.timedelta(seconds=1))
    assert verdict.recheck_at(graced(obs, T0 + 3 * MIN, 2 * MIN)) is None  # past the grace: flagged, no recheck
    assert verdict.recheck_at(graced(healthy(), T0, 2 * MIN)) is None


def test_first_seen_keeps_earlier_times_adds_new_serials_and_drops_gone_ones() -> None:
    obs = renewed_secret()
    first = verdict.seen_after({}, obs, T0)
    assert set(first) == {verdict.serial_hex(o.secret_leaf.serial) for o in obs if o.secret_leaf} and \
        set(first.values()) == {T0}
    later = verdict.seen_after({**first, "dead": T0 - HOUR}, obs, T0 + HOUR)
    assert later == first
    assert verdict.decode_seen(verdict.encode_seen(later)) == later
    assert verdict.decode_seen("beef@1,zz@1,@,x") == {"beef": datetime.datetime.fromtimestamp(1, datetime.UTC)}
    assert verdict.decode_seen(None) == {}


# --- scan triggers ----------------------------------------------------------------------------------------------


def test_scan_due_on_the_interval_or_a_requested_time_after_the_last_scan_that_has_come() -> None:
    def due(now: datetime.datetime, requested: datetime.datetime | None, last: datetime.datetime | None = T0) -> bool:
        return verdict.scan_due(last_scan=last, interval=5 * MIN, requested=requested, now=now)

    assert due(T0, None, last=None)
    assert not due(T0 + MIN, None) and due(T0 + 5 * MIN, None)
    assert due(T0 + MIN, T0 + 30 * datetime.timedelta(seconds=1))  # an ops request ended after the last scan
    assert not due(T0 + MIN, T0 + 2 * MIN)  # not yet: a delivery delay or a grace recheck in the future
    assert due(T0 + 2 * MIN, T0 + 2 * MIN)
    assert not due(T0 + MIN, T0)  # the last scan already covered it
    assert not due(T0 + MIN, T0 - MIN)


def test_merge_keeps_the_earliest_pending_request_and_skips_what_a_scan_covered() -> None:
    def merge(pending: datetime.datetime | None, wanted: datetime.datetime) -> datetime.datetime | None:
        return verdict.merge_scan_request(pending=pending, last_scan=T0, wanted=wanted)

    assert merge(None, T0 + MIN) == T0 + MIN
    assert merge(None, T0) is None and merge(None, T0 - MIN) is None
    assert merge(T0 + MIN, T0 + 2 * MIN) is None  # the pending earlier scan covers it
    assert merge(T0 + 2 * MIN, T0 + MIN) == T0 + MIN  # earlier wins
    assert merge(T0 - MIN, T0 + MIN) == T0 + MIN  # a consumed request is replaced
    assert verdict.merge_scan_request(pending=None, last_scan=None, wanted=T0) == T0


@given(st.lists(st.integers(min_value=-600, max_value=600), min_size=1, max_size=6),
       st.integers(min_value=0, max_value=600))
def test_a_requested_scan_is_never_lost_by_merging(offsets: list[int], now_offset: int) -> None:
    """Whatever the order of triggers after a scan at T0, the recorded request makes a scan due at the earliest
    wanted time after T0 (and not before it)."""
    pending: datetime.datetime | None = None
    for offset in offsets:
        merged = verdict.merge_scan_request(pending=pending, last_scan=T0,
                                            wanted=T0 + datetime.timedelta(seconds=offset))
        pending = merged if merged is not None else pending
    after = [T0 + datetime.timedelta(seconds=o) for o in offsets if o > 0]
    now = T0 + datetime.timedelta(seconds=now_offset)
    due = verdict.scan_due(last_scan=T0, interval=HOUR, requested=pending, now=now)
    assert due == bool(after and min(after) <= now)


# --- auto-renew request and memory ------------------------------------------------------------------------------


def test_auto_request_timeout_is_a_quarter_of_the_window_clamped_to_1m_10m() -> None:
    assert verdict.request_timeout(5 * MIN) == MIN + 15 * datetime.timedelta(seconds=1)
    assert verdict.request_timeout(2 * MIN) == MIN
    assert verdict.request_timeout(720 * HOUR) == 10 * MIN


def test_auto_request_body() -> None:
    body = verdict.request_body(etcd="db", namespace="ns", etcd_uid="u-1", name="db-auto-renew-1",
                                not_after=T0 + 6 * MIN, timeout=75 * datetime.timedelta(seconds=1))
    assert body["kind"] == "EtcdOpsRequest" and body["apiVersion"] == "ops.opsmanager.dev/v1alpha1"
    assert body["metadata"]["labels"] == {"ops.opsmanager.dev/trigger": "auto-renew"}
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "name": "db", "uid": "u-1"}]
    assert body["metadata"]["annotations"] == {"opsmanager.dev/auto-renew-for": "2026-12-01T00:06:00Z"}
    assert body["spec"] == {"type": "ReconfigureTLS", "databaseRef": {"name": "db"},
                            "tls": {"rotateCertificates": True}, "timeout": "1m15s"}
    before = verdict.request_body(etcd="db", namespace="ns", etcd_uid="u-1", name="n", not_after=T0 + 6 * MIN,
                                  timeout=75 * datetime.timedelta(seconds=1), now=T0 + 5 * MIN)
    assert "apply" not in before["spec"]  # IfReady, as any request, while the leaves are still valid


def test_an_auto_request_for_leaves_already_expired_applies_always_for_the_rescue() -> None:
    body = verdict.request_body(etcd="db", namespace="ns", etcd_uid="u-1", name="n", not_after=T0 + 6 * MIN,
                                timeout=75 * datetime.timedelta(seconds=1), now=T0 + 7 * MIN)
    assert body["spec"]["apply"] == "Always"  # the expired cluster is not Ready: IfReady would wait for ever
    decision = verdict.auto_renew(etcd="db", not_before=T0, not_after=T0 + 6 * MIN, enabled=True,
                                  before=datetime.timedelta(minutes=2), retry_after_failure=datetime.timedelta(seconds=30),
                                  in_flight=False, last_failure_at=None, unscanned_members=(), requested_for=None,
                                  now=T0 + 7 * MIN)
    assert decision.verdict is verdict.Verdict.CREATE  # the scan read the expired leaves: it still files


def test_auto_renew_state_round_trips_and_tolerates_garbage() -> None:
    state = verdict.AutoRenewState("db-auto-renew-1", T0 + 6 * MIN, T0 + 3 * MIN, ("db-1",))
    assert verdict.AutoRenewState.decode(state.encode()) == state
    assert verdict.AutoRenewState.decode(verdict.AutoRenewState().encode()) == verdict.AutoRenewState()
    for garbage in (None, 42, "", "{", "[]", '{"for": "yesterday", "held": "db-1", "request": 7}'):
        assert verdict.AutoRenewState.decode(garbage) == verdict.AutoRenewState()


# --- a CA that ends within the renew window: reported, not renewed ----------------------------------------------

SHORT_CA = cert(0xCB, T0 + 10 * MIN, is_ca=True, name="etcd-ca")  # the leaves' issuer, ending with them


def test_a_ca_ending_within_the_renew_window_is_the_reason_before_the_leaves_expiring_soon() -> None:
    s = verdict.Scan(tuple(healthy()), (SHORT_CA,), (9 * MIN,), T0 + 8 * MIN, renew_window=3 * MIN)
    assert verdict.ca_blocks_renewal(s) == SHORT_CA
    status, reason, message = verdict.condition(s)
    assert (status, reason) == ("False", "CAExpiringSoon")
    assert "within autoRenew.before (3m)" in message and "auto-renew files no request" in message
    assert "replace the CA" in message
    # The same scan without auto-renew (no window): the leaves' expiry comes first, as before.
    plain = verdict.Scan(tuple(healthy()), (SHORT_CA,), (9 * MIN,), T0 + 8 * MIN)
    assert verdict.ca_blocks_renewal(plain) is None and verdict.condition(plain)[1] == "ExpiringSoon"
    # A CA far from its end does not block a renewal.
    far = verdict.Scan(tuple(healthy()), (CA,), (9 * MIN,), T0 + 8 * MIN, renew_window=3 * MIN)
    assert verdict.ca_blocks_renewal(far) is None and verdict.condition(far)[1] == "ExpiringSoon"


def test_a_ca_blocking_the_renewal_is_announced_once_saying_so() -> None:
    s = verdict.Scan(tuple(healthy()), (SHORT_CA,), (), T0 + 8 * MIN, renew_window=3 * MIN)
    events, keys = verdict.events(frozenset(), s)
    ca_events = [e for e in events if e.reason == "CAExpiringSoon"]
    assert len(ca_events) == 1 and "auto-renew files no request" in ca_events[0].message
    again, _ = verdict.events(keys, dataclasses.replace(s, now=T0 + 9 * MIN))
    assert not [e for e in again if e.reason == "CAExpiringSoon"]
    # Announced before by its alert threshold (a short CA crosses it at once): told again, now saying why.
    after_alert, _ = verdict.events(frozenset({f"C:{SHORT_CA.serial:x}"}), s)
    assert [e.message for e in after_alert if e.reason == "CAExpiringSoon"] == [ca_events[0].message]


def test_no_auto_renew_request_when_the_ca_ends_within_the_renew_window() -> None:
    common = {"etcd": "db", "not_before": T0, "not_after": T0 + 10 * MIN, "enabled": True, "before": 3 * MIN,
              "retry_after_failure": HOUR, "in_flight": False, "last_failure_at": None, "unscanned_members": (),
              "requested_for": None}
    d = verdict.auto_renew(**common, now=T0 + 8 * MIN, ca_blocks=T0 + 10 * MIN)  # type: ignore[arg-type]
    assert d.verdict is verdict.Verdict.CA_EXPIRING and d.request_name is None
    assert "within the renew window" in d.reason
    # Not due yet: nothing to decide about the CA.
    assert verdict.auto_renew(**common, now=T0, ca_blocks=T0 + 10 * MIN).verdict is verdict.Verdict.NONE  # type: ignore[arg-type]
    # No CA in the way: the request is filed.
    assert verdict.auto_renew(**common, now=T0 + 8 * MIN).verdict is verdict.Verdict.CREATE  # type: ignore[arg-type]


def _etcd(tls: dict[str, object], lifecycle: dict[str, object] | None = None) -> object:
    from opsmanager.api import etcd as etcd_api
    return etcd_api.Etcd.model_validate({
        "metadata": {"name": "db", "namespace": "ns"},
        "spec": {"version": "3.5.1", "replicas": 3, "tls": tls, **({"tlsLifecycle": lifecycle} if lifecycle else {})}})


def test_the_renew_window_is_the_one_a_renewal_would_have_not_the_capped_leafs() -> None:
    from opsmanager.lifecycle import scan as scan_shell
    issuer = {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}}
    # A leaf cut short by its CA (47 s left of a 3-minute CA): a renewal would ask for cert-manager's 2160h.
    capped = [verdict.Observation("db-0", "client", cert(1, T0 + datetime.timedelta(seconds=47)), None)]
    assert scan_shell.renew_window(_etcd(issuer), capped) == 540 * HOUR  # type: ignore[arg-type]
    sized = {**issuer, "certificates": [{"alias": "server", "duration": "10m"}]}
    assert scan_shell.renew_window(_etcd(sized), capped) == datetime.timedelta(seconds=150)  # type: ignore[arg-type]
    explicit = _etcd(issuer, {"autoRenew": {"before": "1m"}})
    assert scan_shell.renew_window(explicit, capped) == MIN  # type: ignore[arg-type]
    off = _etcd(issuer, {"autoRenew": {"enabled": False}})
    assert scan_shell.renew_window(off, capped) == datetime.timedelta(0)  # type: ignore[arg-type]
