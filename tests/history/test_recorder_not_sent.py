"""The recorder's fail-over within one operation (``e2e.history``), with its etcd calls replaced.

We test these aspects:
* an error that proves the member never received the request (a failed TLS handshake; no connection to send it
  on) is told apart from one that leaves the outcome unknown (a timeout, a connection lost mid-call);
* such a try is not an operation: the recorder goes on to the next target with the same value, and records the
  operation once, where a target took it; an unknown outcome stops there and is recorded as unknown;
* when no target takes it, nothing is recorded;
* failing over walks every target in turn (not back and forth between the first two), and starts the round
  again once all have failed.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e import history, writer
from opsmanager.etcd import access

HANDSHAKE = ("TLSHandshakeFailed: Put on m-0 (10.0.0.1:2379) [https]: TLS handshake failed (failed to connect to "
             "all addresses; last error: UNAVAILABLE: ipv4:10.0.0.1:2379: Handshake read failed (Socket closed))")
NO_CONNECTION = ("MemberUnreachable: Put on m-1 (10.0.0.2:2379) [http]: member unreachable (failed to connect to "
                 "all addresses; last error: UNAVAILABLE: ipv4:10.0.0.2:2379: Connection refused)")
LOST = "MemberUnreachable: Put on m-1 (10.0.0.2:2379) [http]: member unreachable (Socket closed)"
TIMEOUT = "RequestTimeout: Put on m-2: no answer before the deadline"


def test_errors_that_prove_the_request_was_never_sent() -> None:
    assert history.never_sent(HANDSHAKE) and history.never_sent(NO_CONNECTION)
    assert not history.never_sent(LOST) and not history.never_sent(TIMEOUT) and not history.never_sent("")


TARGETS = [writer.Target(access.Endpoint(name=f"m-{i}", host=f"10.0.0.{i + 1}"), "http") for i in range(3)]


def recorder_answering(errors: list[str]) -> tuple[history.Recorder, list[str]]:
    rec = history.Recorder(TARGETS)
    tried: list[str] = []

    async def one(client: int, kind: str, key: str, value: str, expect: int, target: writer.Target) -> Any:
        tried.append(f"{target.endpoint.name}:{value}")
        error = errors.pop(0)
        return history.Operation(client=client, kind=kind, key=key, call=1, return_=2,
                                 outcome="unknown" if error else "ok", value=value, error=error, revision=7)

    rec._one = one  # type: ignore[method-assign]
    return rec, tried


@pytest.mark.asyncio
async def test_a_try_never_sent_goes_on_to_the_next_target_with_the_same_value() -> None:
    rec, tried = recorder_answering([HANDSHAKE, NO_CONNECTION, ""])
    op, target = await rec._first_sent(history._FailOver(rec.targets, 0), 0, "put", "/p/k0", "c0-1", 0)
    assert op is not None and op.outcome == "ok" and target == TARGETS[2]
    assert tried == ["m-0:c0-1", "m-1:c0-1", "m-2:c0-1"] and rec.not_sent == 2


@pytest.mark.asyncio
async def test_an_unknown_outcome_stops_there_and_nothing_taken_is_nothing_recorded() -> None:
    rec, tried = recorder_answering([HANDSHAKE, TIMEOUT])
    op, target = await rec._first_sent(history._FailOver(rec.targets, 0), 0, "put", "/p/k0", "c0-1", 0)
    assert op is not None and op.outcome == "unknown" and op.error == TIMEOUT and target == TARGETS[1]
    rec, tried = recorder_answering([HANDSHAKE] * 3)
    assert (await rec._first_sent(history._FailOver(rec.targets, 0), 0, "put", "/p/k0", "c0-1", 0))[0] is None
    assert rec.not_sent == 3


def test_failing_over_walks_every_target_in_turn() -> None:
    targets = [writer.Target(access.Endpoint(name=f"m-{i}", host=f"10.0.0.{i + 1}"), "http") for i in range(3)]
    way = history._FailOver(history._Targets(targets, None, None), home=1)
    first = way.order()[0]
    assert first == targets[1]  # the home member first
    seen = [first]
    for _ in range(2):
        way.fail(seen[-1])
        seen.append(way.order()[0])
    assert sorted(t.endpoint.name for t in seen) == ["m-0", "m-1", "m-2"]
    way.fail(seen[-1])
    assert way.order()[0] == targets[1] and way.failed == []  # all failed: the round starts again
    way.ok(targets[2])
    assert way.order()[0] == targets[2]
