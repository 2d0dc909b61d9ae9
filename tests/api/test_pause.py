"""The paused contract (``opsmanager.api.pause``): who holds a pause, and that nobody removes another's.

We test these aspects: a request's pause is recognised only with its exact message; a pause set by hand (any
other message) has a holder but no request; ``Paused=False`` or no condition is not paused; ``pause`` then
``release`` by the same request round-trips; ``release`` by another name changes nothing; a request holds its
pause only while it exists, is not being deleted and has not finished (``request_holds``).
"""

from __future__ import annotations

import copy
from typing import Any

from opsmanager.api import conditions, constants, pause


def paused(reason: str, message: str, status: str = constants.TRUE) -> dict[str, Any]:
    return {"conditions": conditions.set_condition([], constants.COND_PAUSED, status, reason=reason,
                                                   message=message)}


def test_a_request_holds_the_pause_only_with_its_exact_message() -> None:
    assert pause.held_by_request(paused("add-tls", "EtcdOpsRequest add-tls is in process")) == "add-tls"
    assert pause.held_by_request(paused("add-tls", "EtcdOpsRequest other is in process")) is None


def test_a_pause_set_by_hand_has_a_holder_but_no_request() -> None:
    status = paused("maintenance", "paused by hand for a backup")
    assert pause.is_paused(status)
    assert pause.holder(status) == "maintenance"
    assert pause.held_by_request(status) is None


def test_false_or_absent_is_not_paused() -> None:
    for status in ({}, None, {"conditions": []}, paused("x", "EtcdOpsRequest x is in process", constants.FALSE)):
        assert not pause.is_paused(status)
        assert pause.holder(status) == ""
        assert pause.held_by_request(status) is None


def test_pause_and_release_round_trip_and_release_leaves_another_pause() -> None:
    other = {"conditions": conditions.set_condition([], "Ready", constants.TRUE)}
    snapshot = copy.deepcopy(other)
    held = pause.pause(other, "rotate")
    assert pause.held_by_request(held) == "rotate"
    assert pause.release(held, "someone-else") == held
    assert pause.release(held, "rotate")["conditions"] == other["conditions"]
    by_hand = paused("backup", "paused by hand")
    assert pause.release(by_hand, "rotate") == by_hand
    assert other == snapshot  # inputs are not mutated


def test_a_request_holds_its_pause_only_while_it_exists_and_runs() -> None:
    def request(phase: str | None, **meta: Any) -> dict[str, Any]:
        return {"metadata": {"name": "op", **meta}, "status": {"phase": phase} if phase else {}}

    assert pause.request_holds(request(None))  # admitted, not yet picked up
    assert pause.request_holds(request(constants.PHASE_PENDING))
    assert pause.request_holds(request(constants.PHASE_PROGRESSING))
    assert not pause.request_holds(None)
    for phase in constants.TERMINAL_OPS_PHASES:
        assert not pause.request_holds(request(phase))
    assert not pause.request_holds(request(constants.PHASE_PROGRESSING, deletionTimestamp="2026-12-01T01:00:00Z"))
