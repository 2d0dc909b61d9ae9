"""Status transactions: the provisioner's conditions and phase, never the engine's Paused, no-ops stay no-ops."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from opsmanager.api import conditions, constants, pause
from opsmanager.cluster import health
from opsmanager.provisioner import status

T0 = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)


def ready_verdict() -> health.Verdict:
    return health.assess(3, [health.MemberView(f"db-{i}", True, True, True, i + 1, 1) for i in range(3)])


def critical_verdict() -> health.Verdict:
    views = [health.MemberView(f"db-{i}", True, True, True, i + 1, 1) for i in range(2)]
    return health.assess(3, [*views, health.MemberView("db-2", reason="unreachable")])


def paused_status() -> dict[str, Any]:
    return {"conditions": conditions.set_condition(None, constants.COND_PAUSED, constants.TRUE,
                                                   reason="add-tls", message="owned by add-tls", now=T0)}


def test_the_paused_condition_is_never_touched() -> None:
    before = paused_status()
    after = copy.deepcopy(before)
    for change in (status.ProvisioningStarted(1, now=T1), status.Reconciled(False, "Paused", "m", 1, now=T1),
                  status.Observed(ready_verdict(), halted=False, generation=1, now=T1),
                  status.DeletionBlocked("m", 1, now=T1)):
        after = change.apply(after)
    assert conditions.get_condition(after["conditions"], constants.COND_PAUSED) == before["conditions"][0]
    assert pause.is_paused(after) and pause.holder(after) == "add-tls"


def test_provisioning_started_once_and_phase_only_when_absent() -> None:
    s = status.ProvisioningStarted(1, now=T0).apply({})
    assert s["phase"] == constants.DB_PHASE_PROVISIONING
    assert conditions.is_true(s["conditions"], constants.COND_PROVISIONING_STARTED)
    s["phase"] = constants.DB_PHASE_READY
    again = status.ProvisioningStarted(2, now=T1).apply(copy.deepcopy(s))
    assert again == s  # a no-op: transact_status writes nothing


def test_ready_sets_provisioned_once_and_never_clears_it() -> None:
    s = status.Observed(ready_verdict(), halted=False, generation=1, now=T0).apply({})
    assert s["phase"] == constants.DB_PHASE_READY
    for type_ in (constants.COND_READY, constants.COND_PROVISIONED, constants.COND_REPLICA_READY,
                  constants.COND_ACCEPTING_CONNECTION):
        assert conditions.is_true(s["conditions"], type_), type_
    s = status.Observed(critical_verdict(), halted=False, generation=1, now=T1).apply(s)
    assert s["phase"] == constants.DB_PHASE_CRITICAL
    assert conditions.is_false(s["conditions"], constants.COND_READY)
    assert conditions.is_true(s["conditions"], constants.COND_PROVISIONED)
    provisioned = conditions.get_condition(s["conditions"], constants.COND_PROVISIONED)
    assert provisioned is not None and provisioned["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_before_first_ready_the_phase_is_provisioning() -> None:
    s = status.Observed(critical_verdict(), halted=False, generation=1, now=T0).apply({})
    assert s["phase"] == constants.DB_PHASE_PROVISIONING
    assert not status.is_provisioned(s)


def test_an_unchanged_observation_is_a_no_op() -> None:
    s = status.Observed(ready_verdict(), halted=False, generation=3, now=T0).apply({})
    again = status.Observed(ready_verdict(), halted=False, generation=3, now=T1).apply(copy.deepcopy(s))
    assert again == s


def test_halted_then_resumed() -> None:
    s = status.Observed(health.assess(3, [], blocked="halted"), halted=True, generation=2, now=T0).apply({})
    assert s["phase"] == constants.DB_PHASE_HALTED
    assert conditions.is_true(s["conditions"], constants.COND_HALTED)
    s = status.Observed(ready_verdict(), halted=False, generation=3, now=T1).apply(s)
    assert s["phase"] == constants.DB_PHASE_READY
    assert conditions.is_false(s["conditions"], constants.COND_HALTED)
    never = status.Observed(ready_verdict(), halted=False, generation=3, now=T1).apply({})
    assert conditions.get_condition(never["conditions"], constants.COND_HALTED) is None


def test_reconciled_sets_observed_generation_only_when_done() -> None:
    s = status.Reconciled(False, "WaitingForCertificates", "waiting", 4, now=T0).apply({})
    assert "observedGeneration" not in s
    assert conditions.is_false(s["conditions"], status.COND_RECONCILED)
    s = status.Reconciled(True, "Reconciled", "ok", 4, now=T1).apply(s)
    assert s["observedGeneration"] == 4
    assert conditions.is_true(s["conditions"], status.COND_RECONCILED)


def test_the_ready_condition_follows_the_phase_exactly() -> None:
    for verdict in (ready_verdict(), critical_verdict(), health.assess(3, [])):
        s = status.Observed(verdict, halted=False, generation=1, now=T0).apply({"conditions": []})
        assert conditions.is_true(s["conditions"], constants.COND_READY) == (s["phase"] == constants.DB_PHASE_READY)


def test_refuses_to_write_a_condition_it_does_not_own() -> None:
    with pytest.raises(ValueError, match="does not own condition 'Paused'"):
        status._set({}, constants.COND_PAUSED, constants.TRUE, "r", "m", 1, T0)


def test_while_a_request_holds_the_pause_nothing_is_written() -> None:
    s = status.Observed(critical_verdict(), halted=False, generation=1, now=T0).apply(
        status.Observed(ready_verdict(), halted=False, generation=1, now=T0).apply({}))
    held = pause.pause(s, "add-tls")
    other_member_down = health.assess(3, [*(health.MemberView(f"db-{i}", True, True, True, i + 1, 1)
                                            for i in (0, 2)), health.MemberView("db-1", reason="no pod IP yet")])
    for verdict in (other_member_down, ready_verdict()):
        assert status.Observed(verdict, halted=False, generation=1, now=T1).apply(copy.deepcopy(held)) == held
    unpaused = status.Observed(other_member_down, halted=False, generation=1, now=T1).apply(copy.deepcopy(s))
    assert unpaused != s, "without a request's pause, every change is written"
    by_hand = status.Observed(ready_verdict(), halted=False, generation=1, now=T1).apply(copy.deepcopy(
        {**s, "conditions": conditions.set_condition(s["conditions"], constants.COND_PAUSED, constants.TRUE,
                                                     reason="manual", message="paused by hand", now=T0)}))
    assert by_hand["phase"] == constants.DB_PHASE_READY, "a pause set by hand still sees the status updated"


# --- quorum loss: status.quorumLoss and QuorumLost, true only after the bound ----------------------------------


def lost_verdict() -> health.Verdict:
    """One of three answers (no leader), with its committed index; the other two are gone."""
    return health.assess(3, [health.MemberView("db-0", True, True, False, 1, 0, reason="no quorum", raft_index=120),
                             health.MemberView("db-1", reason="unreachable"),
                             health.MemberView("db-2", reason="unreachable")])


def provisioned() -> dict[str, Any]:
    return status.Observed(ready_verdict(), halted=False, generation=1, now=T0).apply({})


def test_quorum_lost_only_after_the_bound_naming_the_survivor() -> None:
    st = status.Observed(lost_verdict(), halted=False, generation=1, now=T0, quorum_loss_after=60).apply(provisioned())
    assert st["quorumLoss"] == {"since": "2026-01-01T12:00:00Z", "answering": {"db-0": 120}, "survivor": "db-0"}
    assert not conditions.is_true(st["conditions"], constants.COND_QUORUM_LOST)
    later = T0 + datetime.timedelta(seconds=61)
    st = status.Observed(lost_verdict(), halted=False, generation=1, now=later, quorum_loss_after=60).apply(st)
    assert st["quorumLoss"]["since"] == "2026-01-01T12:00:00Z"  # kept from the first sight
    cond = conditions.get_condition(st["conditions"], constants.COND_QUORUM_LOST)
    assert cond is not None and cond["status"] == constants.TRUE and "confirmMember: db-0" in cond["message"]
    back = status.Observed(ready_verdict(), halted=False, generation=1, now=later, quorum_loss_after=60).apply(st)
    assert "quorumLoss" not in back and not conditions.is_true(back["conditions"], constants.COND_QUORUM_LOST)


def test_a_cluster_never_provisioned_or_halted_reports_no_quorum_loss() -> None:
    st = status.Observed(lost_verdict(), halted=False, generation=1, now=T0, quorum_loss_after=0).apply({})
    assert "quorumLoss" not in st and conditions.get_condition(st.get("conditions"), constants.COND_QUORUM_LOST) is None
    st = status.Observed(lost_verdict(), halted=True, generation=1, now=T0, quorum_loss_after=0).apply(provisioned())
    assert "quorumLoss" not in st


def test_the_survivor_is_the_highest_committed_index_ties_to_the_lowest_ordinal() -> None:
    assert health.survivor([("db-0", 100), ("db-2", 130), ("db-1", 120)]) == "db-2"
    assert health.survivor([("db-2", 130), ("db-1", 130)]) == "db-1"
    assert health.survivor([]) is None


def test_every_change_leaves_its_argument_alone() -> None:
    before = status.Observed(ready_verdict(), halted=False, generation=1, now=T0).apply({})
    frozen = copy.deepcopy(before)
    for change in (status.ProvisioningStarted(2, now=T1), status.Reconciled(True, "Reconciled", "ok", 2, now=T1),
                   status.Observed(critical_verdict(), halted=False, generation=2, now=T1),
                   status.Observed(lost_verdict(), halted=True, generation=2, now=T1, quorum_loss_after=0),
                   status.MaterialReady((("Expired", "held back"),), 2, now=T1),
                   status.MaterialAnnounced((("ns/db-peer-issued", "Expired"),)),
                   status.DeletionBlocked("m", 2, now=T1)):
        assert change.apply(before) != frozen
        assert before == frozen, change


def test_the_announced_material_is_a_sorted_record_removed_when_empty() -> None:
    s = status.MaterialAnnounced((("ns/b", "Expired"), ("ns/a", "UntrustedCA"))).apply({"phase": "Ready"})
    assert s["materialAnnounced"] == [{"secret": "ns/a", "reason": "UntrustedCA"},
                                      {"secret": "ns/b", "reason": "Expired"}]
    assert status.announced({"status": s}) == {("ns/a", "UntrustedCA"), ("ns/b", "Expired")}
    assert status.MaterialAnnounced(()).apply(s) == {"phase": "Ready"}
    assert status.announced({"status": {"phase": "Ready"}}) is None
