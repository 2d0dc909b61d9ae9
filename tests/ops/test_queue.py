"""Queue rules: one Progressing per Etcd, FIFO, same-type collapse to the newest, apply IfReady/Always."""

from __future__ import annotations

from opsmanager.ops.queue import Queued, Verdict, decide


def q(name: str, created: str, type_: str = "Restart", phase: str = "Pending", apply: str = "IfReady") -> Queued:
    return Queued(name=name, type=type_, phase=phase, created=created, apply=apply)


def test_starts_when_alone_and_ready() -> None:
    me = q("a", "2026-01-01T00:00:01Z")
    assert decide(me, [me], "Ready").verdict is Verdict.START


def test_waits_behind_a_progressing_request() -> None:
    me = q("b", "2026-01-01T00:00:02Z", type_="ReconfigureTLS")
    other = q("a", "2026-01-01T00:00:01Z", phase="Progressing")
    d = decide(me, [other, me], "Ready")
    assert d.verdict is Verdict.WAIT and "a" in d.reason


def test_older_same_type_pending_is_skipped_for_the_newest() -> None:
    old, new = q("old", "2026-01-01T00:00:01Z"), q("new", "2026-01-01T00:00:02Z")
    assert decide(old, [old, new], "Ready").verdict is Verdict.SKIP
    assert decide(new, [old, new], "Ready").verdict is Verdict.START


def test_fifo_between_different_types() -> None:
    first = q("first", "2026-01-01T00:00:01Z", type_="ReconfigureTLS")
    second = q("second", "2026-01-01T00:00:02Z", type_="Restart")
    assert decide(second, [first, second], "Ready").verdict is Verdict.WAIT
    assert decide(first, [first, second], "Ready").verdict is Verdict.START
    done = q("first", "2026-01-01T00:00:01Z", type_="ReconfigureTLS", phase="Successful")
    assert decide(second, [done, second], "Ready").verdict is Verdict.START


def test_if_ready_waits_for_ready_always_does_not() -> None:
    assert decide(q("a", "t1"), [], "Critical").verdict is Verdict.WAIT
    assert decide(q("a", "t1", apply="Always"), [], "Critical").verdict is Verdict.START


def test_a_finished_newer_same_type_request_does_not_skip_an_older_pending_one() -> None:
    old = q("old", "2026-01-01T00:00:01Z")
    newer_done = q("newer", "2026-01-01T00:00:02Z", phase="Failed")
    assert decide(old, [old, newer_done], "Ready").verdict is Verdict.START
