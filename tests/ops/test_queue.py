"""Queue rules: one Progressing per Etcd, FIFO, same-type collapse to the newest (never onto a request that cannot
start where the older one can), apply IfReady/Always and the expiry exception, and why every wait waits."""

from __future__ import annotations

import pytest

from opsmanager.ops.core.queue import (
    REASON_ETCD_PAUSED,
    REASON_STARTED,
    REASON_STARTED_AS_RESCUE,
    REASON_WAITING_FOR_READY,
    REASON_WAITING_FOR_REQUEST,
    WAITING_REASONS,
    EtcdState,
    Queued,
    Verdict,
    decide,
    needs_expiry,
)

READY = EtcdState("Ready")
EXPIRED = EtcdState("NotReady", not_ready="0/3 members healthy; db-0: TLSHandshakeFailed",
                    expired="db-0 client notAfter 2026-01-01T00:00:00Z")


def q(name: str, created: str, type_: str = "Restart", phase: str = "Pending", apply: str = "IfReady",
      rescues: bool = False) -> Queued:
    return Queued(name=name, type=type_, phase=phase, created=created, apply=apply, rescues=rescues)


def rotate(name: str, created: str, apply: str = "IfReady") -> Queued:
    return q(name, created, type_="ReconfigureTLS", apply=apply, rescues=True)


def test_starts_when_alone_and_ready() -> None:
    me = q("a", "2026-01-01T00:00:01Z")
    d = decide(me, [me], READY)
    assert (d.verdict, d.reason) == (Verdict.START, REASON_STARTED)


def test_waits_behind_a_progressing_request() -> None:
    me = q("b", "2026-01-01T00:00:02Z", type_="ReconfigureTLS")
    other = q("a", "2026-01-01T00:00:01Z", phase="Progressing")
    d = decide(me, [other, me], READY)
    assert d.verdict is Verdict.WAIT and d.reason == REASON_WAITING_FOR_REQUEST and "a (Restart)" in d.message


def test_older_same_type_pending_is_skipped_for_the_newest() -> None:
    old, new = q("old", "2026-01-01T00:00:01Z"), q("new", "2026-01-01T00:00:02Z")
    assert decide(old, [old, new], READY).verdict is Verdict.SKIP
    assert decide(new, [old, new], READY).verdict is Verdict.START


def test_fifo_between_different_types() -> None:
    first = q("first", "2026-01-01T00:00:01Z", type_="ReconfigureTLS")
    second = q("second", "2026-01-01T00:00:02Z", type_="Restart")
    d = decide(second, [first, second], READY)
    assert d.verdict is Verdict.WAIT and "older request first" in d.message
    assert decide(first, [first, second], READY).verdict is Verdict.START
    done = q("first", "2026-01-01T00:00:01Z", type_="ReconfigureTLS", phase="Successful")
    assert decide(second, [done, second], READY).verdict is Verdict.START


def test_if_ready_waits_for_ready_always_does_not() -> None:
    d = decide(q("a", "t1"), [], EtcdState("Critical", not_ready="2/3 members healthy; db-2: unreachable"))
    assert d.verdict is Verdict.WAIT and d.reason == REASON_WAITING_FOR_READY
    assert "Critical: 2/3 members healthy; db-2: unreachable" in d.message and "apply: Always" in d.message
    assert decide(q("a", "t1", apply="Always"), [], EtcdState("Critical")).verdict is Verdict.START


def test_a_finished_newer_same_type_request_does_not_skip_an_older_pending_one() -> None:
    old = q("old", "2026-01-01T00:00:01Z")
    newer_done = q("newer", "2026-01-01T00:00:02Z", phase="Failed")
    assert decide(old, [old, newer_done], READY).verdict is Verdict.START


# --- expiry: IfReady on an Etcd not Ready only because its certificates expired ---------------------------------

def test_a_rescuing_request_starts_on_an_expired_etcd_with_apply_if_ready() -> None:
    me = rotate("rot", "t1")
    d = decide(me, [me], EXPIRED)
    assert (d.verdict, d.reason) == (Verdict.START, REASON_STARTED_AS_RESCUE)
    assert "only because its certificates expired" in d.message and "db-0 client" in d.message


def test_any_other_not_ready_keeps_a_rescuing_request_pending() -> None:
    not_expired = EtcdState("NotReady", not_ready="0/3 members healthy")
    assert decide(rotate("rot", "t1"), [], not_expired).verdict is Verdict.WAIT


def test_a_request_that_cannot_rescue_waits_on_an_expired_etcd() -> None:
    d = decide(q("restart", "t1"), [], EXPIRED)
    assert d.verdict is Verdict.WAIT and d.reason == REASON_WAITING_FOR_READY


def test_a_newer_request_that_cannot_start_does_not_supersede_one_that_can() -> None:
    """The operator's rollover request (Always, or a rescue) stays; the hand-filed IfReady Restart-type collapse
    would have left the Etcd with nothing that can run."""
    mine = q("ca-rollover", "t1", type_="ReconfigureTLS", apply="Always")
    hand = q("by-hand", "t2", type_="ReconfigureTLS")  # IfReady, cannot rescue (say: remove TLS)
    not_ready = EtcdState("NotReady", not_ready="0/3 members healthy")
    assert decide(mine, [mine, hand], not_ready).verdict is Verdict.START
    d = decide(hand, [mine, hand], not_ready)
    assert d.verdict is Verdict.WAIT and "ca-rollover" in d.message


def test_a_newer_request_that_can_start_too_supersedes() -> None:
    mine, hand = rotate("ca-rollover", "t1"), rotate("by-hand", "t2")
    assert decide(mine, [mine, hand], EXPIRED).verdict is Verdict.SKIP
    assert decide(hand, [mine, hand], EXPIRED).reason == REASON_STARTED_AS_RESCUE


def test_two_requests_that_both_wait_still_collapse() -> None:
    old, new = q("old", "t1"), q("new", "t2")
    not_ready = EtcdState("NotReady")
    assert decide(old, [old, new], not_ready).verdict is Verdict.SKIP


def test_expiry_is_observed_only_when_it_could_matter() -> None:
    me = rotate("rot", "t1")
    assert needs_expiry(me, [], EtcdState("NotReady"))
    assert needs_expiry(me, [], EtcdState("Critical"))
    assert not needs_expiry(me, [], READY)
    assert not needs_expiry(me, [], EtcdState("Provisioning"))
    assert not needs_expiry(rotate("rot", "t1", apply="Always"), [], EtcdState("NotReady"))
    assert not needs_expiry(q("restart", "t1"), [], EtcdState("NotReady"))
    # an older Always request may be superseded by a newer IfReady rescue: that one's start depends on expiry
    assert needs_expiry(rotate("rot", "t1", apply="Always"), [rotate("hand", "t2")], EtcdState("NotReady"))


# --- every waiting case says why -------------------------------------------------------------------------------

WAITS = [
    ("another request runs", q("me", "t2"), [q("run", "t1", type_="ReconfigureTLS", phase="Progressing")], READY,
     REASON_WAITING_FOR_REQUEST, "waiting for run (ReconfigureTLS) to finish"),
    ("an older request is queued", q("me", "t2"), [q("old", "t1", type_="MoveLeader")], READY,
     REASON_WAITING_FOR_REQUEST, "waiting for the older request old (MoveLeader) to run first"),
    ("paused by hand", q("me", "t1"), [], EtcdState("Ready", paused_by="backup-tool"),
     REASON_ETCD_PAUSED, "the Etcd is paused by backup-tool"),
    ("paused by a request that ended", q("me", "t1"), [], EtcdState("Ready", paused_by="EtcdOpsRequest gone"),
     REASON_ETCD_PAUSED, "paused by EtcdOpsRequest gone"),
    ("not ready", q("me", "t1"), [], EtcdState("NotReady", not_ready="0/3 members healthy; db-0: TLSHandshakeFailed"),
     REASON_WAITING_FOR_READY, "the Etcd is NotReady: 0/3 members healthy; db-0: TLSHandshakeFailed"),
    ("critical", q("me", "t1"), [], EtcdState("Critical", not_ready="2/3 members healthy"),
     REASON_WAITING_FOR_READY, "file it again with apply: Always"),
    ("provisioning", q("me", "t1"), [], EtcdState("Provisioning", not_ready="waiting for cert-manager"),
     REASON_WAITING_FOR_READY, "once the Etcd has been provisioned"),
    ("no phase yet", q("me", "t1"), [], EtcdState(None), REASON_WAITING_FOR_READY, "not yet reporting a phase"),
    ("halted", q("me", "t1"), [], EtcdState("Halted"), REASON_WAITING_FOR_READY, "spec.halted is false"),
    ("expired, but cannot rescue", q("me", "t1"), [], EXPIRED, REASON_WAITING_FOR_READY, "apply: Always"),
]


@pytest.mark.parametrize(("case", "me", "others", "etcd", "reason", "says"), WAITS, ids=[w[0] for w in WAITS])
def test_every_wait_names_what_it_waits_for(case: str, me: Queued, others: list[Queued], etcd: EtcdState,
                                            reason: str, says: str) -> None:
    d = decide(me, [me, *others], etcd)
    assert d.verdict is Verdict.WAIT, case
    assert d.reason == reason and d.reason in WAITING_REASONS
    assert says in d.message, d.message
