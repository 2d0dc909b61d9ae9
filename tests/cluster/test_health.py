"""The phase from real member health: Ready / Critical / NotReady / Provisioning / Halted, decided in one place."""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.cluster import health


def member(i: int, healthy: bool = True, leader: int = 1, ready: bool = True) -> health.MemberView:
    return health.MemberView(f"db-{i}", pod_ready=ready, reachable=healthy, healthy=healthy, member_id=i + 1,
                             leader_id=leader if healthy else 0, reason="" if healthy else "unreachable")


def phase(v: health.Verdict, provisioned: bool = True, halted: bool = False) -> str:
    return health.phase_of(v, halted=halted, provisioned=provisioned)


def test_all_healthy_with_one_leader_is_ready() -> None:
    v = health.assess(3, [member(0), member(1), member(2)])
    assert v.all_healthy_one_leader and v.leader == "db-0"
    assert phase(v) == constants.DB_PHASE_READY
    assert phase(v, provisioned=False) == constants.DB_PHASE_READY
    assert v.summary() == "3/3 members healthy, leader db-0"


def test_two_leaders_claimed_is_not_ready() -> None:
    v = health.assess(3, [member(0, leader=1), member(1, leader=2), member(2, leader=1)])
    assert not v.all_healthy_one_leader and v.leader is None
    assert phase(v) == constants.DB_PHASE_CRITICAL


def test_leader_outside_the_members_is_not_ready() -> None:
    v = health.assess(3, [member(0, leader=9), member(1, leader=9), member(2, leader=9)])
    assert phase(v) == constants.DB_PHASE_CRITICAL


def test_quorum_but_not_all_is_critical() -> None:
    v = health.assess(3, [member(0), member(1), member(2, healthy=False)])
    assert v.has_quorum and phase(v) == constants.DB_PHASE_CRITICAL
    assert "db-2: unreachable" in v.summary()


def test_no_quorum_is_not_ready() -> None:
    v = health.assess(3, [member(0), member(1, healthy=False), member(2, healthy=False)])
    assert not v.has_quorum and phase(v) == constants.DB_PHASE_NOT_READY


def test_missing_views_count_as_down() -> None:
    v = health.assess(5, [member(0), member(1), member(2)])
    assert v.has_quorum and not v.all_healthy_one_leader  # 3 of 5
    assert health.assess(5, [member(0), member(1)]).has_quorum is False


def test_never_provisioned_stays_provisioning_until_ready() -> None:
    v = health.assess(3, [member(0), member(1), member(2, healthy=False)])
    assert phase(v, provisioned=False) == constants.DB_PHASE_PROVISIONING
    assert phase(health.assess(3, [], blocked="no sts"), provisioned=False) == constants.DB_PHASE_PROVISIONING


def test_halted_wins() -> None:
    v = health.assess(3, [member(0), member(1), member(2)])
    assert phase(v, halted=True) == constants.DB_PHASE_HALTED


def test_single_member_cluster() -> None:
    assert phase(health.assess(1, [member(0, leader=1)])) == constants.DB_PHASE_READY
    assert phase(health.assess(1, [member(0, healthy=False)])) == constants.DB_PHASE_NOT_READY


def test_blocked_summary_is_the_reason() -> None:
    v = health.assess(3, [], blocked="cannot check the members over TLS: x")
    assert v.summary() == "cannot check the members over TLS: x" and not v.accepting_connections


def test_healthy_members_whose_pods_are_not_ready_yet_are_not_ready() -> None:
    v = health.assess(3, [member(0), member(1), member(2, ready=False)])
    assert not v.all_healthy_one_leader and v.has_quorum
    assert phase(v) == constants.DB_PHASE_CRITICAL
    assert phase(v, provisioned=False) == constants.DB_PHASE_PROVISIONING


def test_a_healthy_member_on_a_node_that_is_not_ready_is_a_problem_named_with_its_node() -> None:
    views = [health.MemberView(f"db-{i}", pod_ready=i != 2, reachable=True, healthy=True, member_id=10 + i,
                               leader_id=10, node=f"node-{i + 1}",
                               node_down="NodeStatusUnknown: Kubelet stopped posting node status." if i == 2 else "")
             for i in range(3)]
    verdict = health.assess(3, views)
    assert verdict.problems == ("db-2 is on node node-3, which is not Ready (NodeStatusUnknown: Kubelet stopped "
                                "posting node status.)",)
    assert not verdict.all_healthy_one_leader and verdict.has_quorum
    assert "db-2 is on node node-3" in verdict.summary()
