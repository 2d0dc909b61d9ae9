"""The watch check on fabricated watch logs.

We test these aspects:
* a whole stream, broken and resumed from the next revision on another member, passes;
* a duplicate, an event out of order, a gap, an event no client wrote and a reconnect past the next revision are
  each refused;
* a new history (another cluster ID) is fine after a clear error and refused as a silent jump without one;
* a write whose outcome was unknown may be missing from the stream, unless a read showed it happened;
* the changes of a recorded history: known writes at their revision, unknown ones at the revision a read saw.
"""

from __future__ import annotations

import dataclasses

import pytest

from e2e import history, watchcheck, writer
from e2e.watchcheck import Broken, Change, Connected, Delivered, Event
from opsmanager.etcd import access

CLUSTER, OTHER = 0xC1, 0xC2
MADE = [Change("/p/k0", "a", 5), Change("/p/k1", "b", 7), Change("/p/k0", "c", 9), Change("/p/k1", "d", None)]


def ev(key: str, value: str, revision: int) -> Event:
    return Event("put", key, value, revision)


A, B, C = ev("/p/k0", "a", 5), ev("/p/k1", "b", 7), ev("/p/k0", "c", 9)


def whole() -> list[watchcheck.Entry]:
    return [Connected(1, "m0"), Delivered(4, CLUSTER, "m0"), Delivered(5, CLUSTER, "m0", (A,)),
            Broken("transient", "MemberUnreachable: the stream ended"),
            Connected(6, "m1"), Delivered(6, CLUSTER, "m1"), Delivered(9, CLUSTER, "m1", (B, C))]


def test_a_whole_stream_resumed_on_another_member_passes() -> None:
    assert watchcheck.check(whole(), MADE, prefix="/p/", until=9) == []
    assert watchcheck.summary(whole()) == {"responses": 4, "events": 3, "connects": 2, "transient": 1}


def test_a_duplicate_is_refused() -> None:
    log = [*whole(), Delivered(9, CLUSTER, "m1", (C,))]
    assert any(p.startswith("duplicate: put /p/k0='c' at revision 9") for p in watchcheck.check(log, MADE))


def test_an_event_out_of_order_is_refused() -> None:
    log = [Connected(1, "m0"), Delivered(9, CLUSTER, "m0", (A, C, B))]
    assert any(p.startswith("out of order: put /p/k1='b' at revision 7") for p in watchcheck.check(log, MADE))


def test_a_gap_is_refused() -> None:
    log = [Connected(1, "m0"), Delivered(9, CLUSTER, "m0", (A, C))]
    problems = watchcheck.check(log, MADE)
    assert problems == ["gap: /p/k1='b' written at revision 7 was never delivered (the watch covered revisions 1-9)"]


def test_a_change_after_the_last_event_is_a_gap_once_the_watcher_reached_it() -> None:
    log = whole()[:3]  # stopped after revision 5
    assert watchcheck.check(log, MADE) == []  # b and c may still be on their way
    assert len(watchcheck.check(log, MADE, until=9)) == 2


def test_a_reconnect_past_the_next_revision_is_refused() -> None:
    log = [Connected(1, "m0"), Delivered(5, CLUSTER, "m0", (A,)), Broken("transient"), Connected(8, "m1"),
           Delivered(9, CLUSTER, "m1", (C,))]
    problems = watchcheck.check(log, MADE)
    assert any("reconnected on m1 from revision 8, past the last revision seen (5) + 1" in p for p in problems)
    assert any(p.startswith("gap: /p/k1='b'") for p in problems)


def test_an_event_no_client_wrote_is_refused() -> None:
    log = [*whole(), Delivered(12, CLUSTER, "m1", (ev("/p/k0", "from-elsewhere", 12),))]
    assert watchcheck.check(log, MADE) == ["not in the history: put /p/k0='from-elsewhere' at revision 12 — no "
                                           "client wrote it"]
    moved = [Connected(1, "m0"), Delivered(6, CLUSTER, "m0", (ev("/p/k0", "a", 6),))]
    assert any("it was written at revision 5" in p for p in watchcheck.check(moved, MADE))


def test_another_cluster_after_a_clear_error_starts_a_new_segment() -> None:
    # A restore to revision 3: the new history writes n at 4 and 5 (revisions the old one had too).
    made = [*(dataclasses.replace(c, cluster_id=CLUSTER) for c in MADE),
            Change("/p/k0", "n4", 4, OTHER), Change("/p/k1", "n5", 5, OTHER)]
    restarted = [Broken("new-cluster", "m1 answers for cluster c2, not c1"), Connected(4, "m1"),
                 Delivered(3, OTHER, "m1"), Delivered(5, OTHER, "m1", (ev("/p/k0", "n4", 4), ev("/p/k1", "n5", 5)))]
    assert watchcheck.check([*whole(), *restarted], made, until=5) == []
    assert watchcheck.check([*whole(), *restarted[:3]], made, until=5) == [
        "gap: /p/k0='n4' written at revision 4 was never delivered (the watch covered revisions 4-5)",
        "gap: /p/k1='n5' written at revision 5 was never delivered (the watch covered revisions 4-5)"]
    compacted = [Broken("compacted", "revision 6 is compacted", compact_revision=8), Connected(10, "m2"),
                 Delivered(10, CLUSTER, "m2")]
    assert watchcheck.check([*whole(), *compacted], MADE) == []


def test_a_silent_jump_to_another_cluster_is_refused() -> None:
    # A restore kept revisions up to 7 and took new writes; the watcher reconnected from 10 and was served events of
    # the new history at 10, from another cluster, with no error.
    log = [*whole(), Broken("transient"), Connected(10, "m2"), Delivered(10, OTHER, "m2"),
           Delivered(11, OTHER, "m2", (ev("/p/k0", "c", 11),))]
    problems = watchcheck.check(log, MADE)
    assert problems[0] == ("silent jump: m2 answered for cluster c2 after cluster c1, with no error between (a new "
                           "history must end the watch with 'compacted' or 'new-cluster')")
    assert any("it was written at revision 9" in p for p in problems)


def test_a_write_of_unknown_outcome_may_be_missing_unless_a_read_saw_it() -> None:
    assert watchcheck.check(whole(), MADE, until=9) == []  # d (unknown) never delivered: fine
    seen = watchcheck.changes([("/p/k0", "a", 5), ("/p/k1", "d", None)], reads=[("/p/k1", "d", 8)])
    assert seen == [Change("/p/k0", "a", 5), Change("/p/k1", "d", 8)]
    log = [Connected(1, "m0"), Delivered(9, CLUSTER, "m0", (A,))]
    assert watchcheck.check(log, seen, until=9) == [
        "gap: /p/k1='d' written at revision 8 was never delivered (the watch covered revisions 1-9)"]


def test_a_recorded_history_gives_its_changes() -> None:
    op = history.Operation
    h = history.History(prefix="/p", operations=(
        op(client=0, kind="put", key="/p/k0", value="a", call=0, return_=5, outcome="ok", revision=5),
        op(client=1, kind="txn", key="/p/k0", value="x", expect=3, call=1, return_=6, outcome="ok", revision=5,
           succeeded=False, found=True, read_value="a", mod_revision=5),
        op(client=1, kind="txn", key="/p/k0", value="b", expect=5, call=7, return_=9, outcome="ok", revision=6,
           succeeded=True),
        op(client=2, kind="put", key="/p/k1", value="c", call=2, return_=None, outcome="unknown", error="timeout"),
        op(client=0, kind="get", key="/p/k1", call=10, return_=12, outcome="ok", revision=8, found=True,
           read_value="c", mod_revision=7),
    ))
    assert h.changes() == [Change("/p/k0", "a", 5), Change("/p/k0", "b", 6), Change("/p/k1", "c", 7)]
    assert h.counts() == {"operations": 5, "put ok": 1, "txn ok": 2, "put unknown": 1, "get ok": 1}


async def test_a_watcher_that_is_not_running_says_so_instead_of_waiting() -> None:
    target = writer.Target(access.Endpoint(name="m0", host="127.0.0.1", schemes=("http",)), "http")
    w = history.Watcher([target], prefix="/p/")
    with pytest.raises(RuntimeError, match="not running"):
        await w.wait_reached(5, timeout=30)
