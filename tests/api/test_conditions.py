"""Condition helpers: keyed by type, first-insertion order, lastTransitionTime only on status change, pure.

We test these aspects: append vs update in place; the transition time is kept when only the message changes and
moves when the status flips; the input list is never mutated; get / is_true / is_false / remove; the injectable
clock and RFC 3339 formatting; transition_age for step timeouts.
"""

from __future__ import annotations

import copy
import datetime

import pytest

from opsmanager.api import conditions, constants

T0 = datetime.datetime(2026, 11, 29, 14, 39, 0, 123456, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=1)
T2 = T0 + datetime.timedelta(minutes=2)


def test_new_types_are_appended_in_order_with_the_injected_time() -> None:
    conds = conditions.set_condition(None, "Running", "True", reason="Running", message="m", now=T0)
    conds = conditions.set_condition(conds, "CertificateSynced", "False", reason="CertificateSynced", now=T1)
    assert [c["type"] for c in conds] == ["Running", "CertificateSynced"]
    assert conds[0] == {
        "type": "Running", "status": "True", "reason": "Running", "message": "m",
        "lastTransitionTime": "2026-11-29T14:39:00Z",
    }
    assert conds[1]["lastTransitionTime"] == "2026-11-29T14:40:00Z"


def test_same_status_keeps_transition_time_but_updates_the_rest() -> None:
    conds = conditions.set_condition([], "RestartPods", "False", message="restarting 1/3", now=T0)
    conds = conditions.set_condition(conds, "RestartPods", "False", message="restarting 2/3",
                                     observed_generation=4, now=T2)
    assert conds == [{"type": "RestartPods", "status": "False", "message": "restarting 2/3",
                      "observedGeneration": 4, "lastTransitionTime": "2026-11-29T14:39:00Z"}]


def test_status_change_moves_transition_time_and_keeps_position() -> None:
    conds = conditions.set_condition([], "Running", "True", now=T0)
    conds = conditions.set_condition(conds, "RestartPods", "False", now=T0)
    conds = conditions.set_condition(conds, "Successful", "False", now=T0)
    conds = conditions.set_condition(conds, "RestartPods", "True", reason="RestartPods", now=T2)
    assert [c["type"] for c in conds] == ["Running", "RestartPods", "Successful"]
    assert conds[1]["status"] == "True"
    assert conds[1]["lastTransitionTime"] == "2026-11-29T14:41:00Z"
    assert conds[2]["lastTransitionTime"] == "2026-11-29T14:39:00Z"


def test_fields_left_out_of_an_update_are_removed() -> None:
    conds = conditions.set_condition([], "Failed", "False", reason="X", message="y", severity="Error", now=T0)
    conds = conditions.set_condition(conds, "Failed", "False", now=T1)
    assert conds == [{"type": "Failed", "status": "False", "lastTransitionTime": "2026-11-29T14:39:00Z"}]


def test_helpers_never_mutate_their_input() -> None:
    original = [conditions.make_condition("Running", "True", now=T0)]
    snapshot = copy.deepcopy(original)
    conditions.set_condition(original, "Running", "False", now=T1)
    conditions.set_condition(original, "Other", "True", now=T1)
    conditions.remove_condition(original, "Running")
    got = conditions.get_condition(original, "Running")
    assert got is not None
    got["status"] = "Unknown"
    assert original == snapshot


def test_merge_conditions_takes_explicit_times_for_new_or_flipped_entries() -> None:
    existing = [{"type": "A", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z", "extra": 1}]
    merged = conditions.merge_conditions(
        existing,
        [{"type": "A", "status": "True", "lastTransitionTime": "2026-02-02T00:00:00Z"},
         {"type": "B", "status": "True"}],
        now=T0,
    )
    assert merged == [
        {"type": "A", "status": "True", "lastTransitionTime": "2026-02-02T00:00:00Z", "extra": 1},
        {"type": "B", "status": "True", "lastTransitionTime": "2026-11-29T14:39:00Z"},
    ]


def test_get_is_true_is_false_remove() -> None:
    conds = conditions.set_condition([], "Paused", "True", now=T0)
    conds = conditions.set_condition(conds, "Ready", "False", now=T0)
    assert conditions.is_true(conds, "Paused") and not conditions.is_false(conds, "Paused")
    assert conditions.is_false(conds, "Ready") and not conditions.is_true(conds, "Ready")
    assert not conditions.is_true(conds, "Missing") and not conditions.is_false(None, "Missing")
    assert conditions.get_condition(conds, "Missing") is None
    assert [c["type"] for c in conditions.remove_condition(conds, constants.COND_PAUSED)] == ["Ready"]
    assert conditions.remove_condition(conds, "Missing") == conds
    assert conditions.remove_condition(None, "x") == []


def test_bad_condition_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="True, False, Unknown"):
        conditions.set_condition([], "A", "true")
    with pytest.raises(ValueError, match="non-empty 'type'"):
        conditions.merge_conditions([], [{"status": "True"}])
    with pytest.raises(ValueError, match="type must not be empty"):
        conditions.make_condition("", "True")


def test_default_clock_is_now_in_utc() -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    cond = conditions.make_condition("A", "True")
    after = datetime.datetime.now(datetime.UTC)
    stamped = conditions.parse_rfc3339(cond["lastTransitionTime"])
    assert before <= stamped <= after
    assert cond["lastTransitionTime"].endswith("Z")


def test_rfc3339_handles_naive_and_offset_times() -> None:
    assert conditions.rfc3339(datetime.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    assert conditions.rfc3339(datetime.datetime(2026, 1, 2, 5, 4, 5, tzinfo=plus2)) == "2026-01-02T03:04:05Z"
    assert conditions.parse_rfc3339("2026-01-02T03:04:05.5+00:00").second == 5


def test_transition_age_measures_from_the_persisted_time() -> None:
    conds = conditions.set_condition([], "RestartPods", "False", now=T0)
    conds = conditions.set_condition(conds, "RestartPods", "False", message="still", now=T2)
    age = conditions.transition_age(conds, "RestartPods", now=T2)
    assert age == T2 - T0.replace(microsecond=0)
    assert conditions.transition_age(conds, "Missing", now=T2) is None
    assert conditions.transition_age([{"type": "X", "status": "True", "lastTransitionTime": "bad"}], "X") is None
