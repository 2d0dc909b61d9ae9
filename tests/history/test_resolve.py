"""A whole watch log settles the writes of unknown outcome before the linearizability check."""

from __future__ import annotations

from e2e import history, watchcheck


def _op(client: int, kind: str, value: str, call: int, ret: int | None, outcome: str = "ok", **kw: object) -> \
        history.Operation:
    return history.Operation(client=client, kind=kind, key="/p/k0", call=call, return_=ret, outcome=outcome,
                             value=value, **kw)  # type: ignore[arg-type]


def test_unknown_writes_are_settled_by_what_the_watch_delivered() -> None:
    ops = (
        _op(0, "put", "a", 10, 20, revision=5),
        _op(1, "put", "b", 15, None, outcome="unknown", error="timeout"),  # delivered at 6: it happened
        _op(2, "put", "c", 16, None, outcome="unknown", error="timeout"),  # never delivered: it did not
        _op(0, "get", "", 30, None, outcome="unknown", error="timeout"),  # an unknown read constrains nothing
        _op(0, "get", "", 40, 50, revision=6, found=True, read_value="b", mod_revision=6),
        _op(2, "txn", "d", 60, None, outcome="unknown", expect=6, error="timeout"),  # delivered, nothing after it
    )
    log = (watchcheck.Connected(1, "m0"),
           watchcheck.Delivered(5, 1, "m0", (watchcheck.Event("put", "/p/k0", "a", 5),)),
           watchcheck.Delivered(6, 1, "m0", (watchcheck.Event("put", "/p/k0", "b", 6),)),
           watchcheck.Delivered(7, 1, "m0", (watchcheck.Event("put", "/p/k0", "d", 7),)))
    recorded = history.Recorded(history.History("/p", ops), log, last_revision=7)
    settled = {op.value or op.kind + str(op.call): op for op in recorded.resolved().operations}
    assert set(settled) == {"a", "b", "get40", "d"}
    b = settled["b"]
    assert (b.outcome, b.revision, b.return_) == ("ok", 6, 50)  # before the read that saw revision 6 returned
    assert settled["d"].outcome == "unknown"  # nothing returned after revision 7: it may have happened at the end


def test_without_a_whole_watch_log_nothing_is_settled() -> None:
    ops = (_op(1, "put", "b", 15, None, outcome="unknown", error="timeout"),)
    recorded = history.Recorded(history.History("/p", ops), (), last_revision=0)
    assert recorded.resolved().operations == ops


def test_every_watchers_log_is_checked_and_named_and_reconnects_are_counted() -> None:
    ops = (_op(0, "put", "a", 10, 20, revision=5), _op(0, "put", "b", 30, 40, revision=6))
    whole = (watchcheck.Connected(1, "m0"),
             watchcheck.Delivered(5, 1, "m0", (watchcheck.Event("put", "/p/k0", "a", 5),)),
             watchcheck.Broken("transient", "MemberUnreachable: m0 stopped"),
             watchcheck.Connected(6, "m1"),
             watchcheck.Delivered(6, 1, "m1", (watchcheck.Event("put", "/p/k0", "b", 6),)))
    missing_b = (watchcheck.Connected(1, "m1"),
                 watchcheck.Delivered(5, 1, "m1", (watchcheck.Event("put", "/p/k0", "a", 5),)),
                 watchcheck.Delivered(7, 1, "m1", ()))
    one = history.Recorded(history.History("/p", ops), whole, last_revision=6)
    assert one.watch_problems() == [] and one.reconnects() == 1
    two = history.Recorded(history.History("/p", ops), whole, last_revision=6, other_watch_logs=(missing_b,))
    problems = two.watch_problems()
    assert problems and all(p.startswith("watcher 1: ") for p in problems), problems
    assert two.reconnects() == 1
