"""The rolling-restart decision: followers first (most lagged first), leader last after MoveLeader, never disrupt
a cluster that is not at rest, and re-deriving the decision after a crash never restarts a member twice."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from opsmanager.cluster.health import MemberView
from opsmanager.ops.rollout import ActionKind, next_action


def member(pod: str, member_id: int, *, up_to_date: bool, leader_id: int = 0, **fields: object) -> MemberView:
    """A member at rest (pod serving, etcd healthy) unless ``fields`` say otherwise."""
    base: dict[str, object] = {"pod_ready": True, "reachable": True, "healthy": True}
    return MemberView(pod, member_id=member_id, leader_id=leader_id, up_to_date=up_to_date,
                      **{**base, **fields})  # type: ignore[arg-type]


def three(leader: str = "db-1", up: tuple[str, ...] = ()) -> list[MemberView]:
    return [
        member(pod, 100 + i, up_to_date=pod in up, leader_id=100 + ("db-0", "db-1", "db-2").index(leader),
               applied_index=50 + i)
        for i, pod in enumerate(("db-0", "db-1", "db-2"))
    ]


def test_followers_go_first_most_lagged_first() -> None:
    action = next_action(three(leader="db-2"), expected_voters=3)
    assert (action.kind, action.pod) == (ActionKind.RESTART, "db-0")
    members = three(leader="db-2")
    members[0] = dataclasses.replace(members[0], applied_index=99)
    assert next_action(members, 3).pod == "db-1"


def test_leader_last_after_moving_leadership_to_the_most_caught_up_updated_follower() -> None:
    members = three(leader="db-1", up=("db-0", "db-2"))
    members[0] = dataclasses.replace(members[0], applied_index=70)
    action = next_action(members, 3)
    assert action.kind is ActionKind.MOVE_LEADER
    assert (action.pod, action.target_pod, action.target_id) == ("db-1", "db-0", 100)


def test_after_the_move_the_old_leader_is_restarted_then_done() -> None:
    moved = three(leader="db-0", up=("db-0", "db-2"))
    assert (next_action(moved, 3).kind, next_action(moved, 3).pod) == (ActionKind.RESTART, "db-1")
    assert next_action(three(leader="db-0", up=("db-0", "db-1", "db-2")), 3).kind is ActionKind.DONE


def test_waits_while_a_restarted_member_is_missing_or_recovering() -> None:
    gone = MemberView("db-0", up_to_date=True, exists=False)
    assert next_action([gone, *three()[1:]], 3).kind is ActionKind.WAIT
    slow = member("db-0", 100, up_to_date=True, leader_id=101, healthy=False)
    assert next_action([slow, *three()[1:]], 3).kind is ActionKind.WAIT


def test_refuses_a_cluster_that_is_not_at_rest() -> None:
    sick = member("db-0", 100, up_to_date=False, leader_id=101, pod_ready=False)
    assert next_action([sick, *three()[1:]], 3).kind is ActionKind.REFUSE
    learner = dataclasses.replace(three()[0], is_learner=True)
    assert next_action([learner, *three()[1:]], 3).kind is ActionKind.REFUSE
    assert next_action(three()[:2], 3).kind is ActionKind.REFUSE
    assert next_action([], 3).kind is ActionKind.REFUSE


def test_single_member_restarts_in_place() -> None:
    solo = [member("db-0", 1, up_to_date=False, leader_id=1)]
    action = next_action(solo, 1)
    assert (action.kind, action.pod) == (ActionKind.RESTART, "db-0")
    assert "downtime" in action.reason
    assert action.follower is False  # nobody else serves: the pod's own grace


def test_a_restart_says_whether_its_member_is_a_follower_among_serving_members() -> None:
    # The engine stops a follower with the kubelet's minimal grace, and the leader with the pod's own.
    action = next_action(three(leader="db-0"), 3)
    assert action.kind is ActionKind.RESTART and action.pod != "db-0" and action.follower is True
    baseline = next_action(three(leader="db-0"), 3, move_leader=False)
    assert (baseline.pod, baseline.follower) == ("db-0", False)  # the baseline restarts the leader as it is
    assert next_action(three(leader="db-1"), 3, move_leader=False).follower is True


@given(
    leader=st.integers(0, 2),
    up=st.sets(st.integers(0, 2)),
    indexes=st.lists(st.integers(0, 1000), min_size=3, max_size=3),
)
def test_never_restarts_the_leader_of_a_multi_member_cluster_nor_an_updated_member(
    leader: int, up: set[int], indexes: list[int]
) -> None:
    members = [
        member(f"db-{i}", i + 1, up_to_date=i in up, leader_id=leader + 1, applied_index=indexes[i])
        for i in range(3)
    ]
    action = next_action(members, 3)
    if action.kind is ActionKind.RESTART:
        victim = next(m for m in members if m.name == action.pod)
        assert not victim.is_leader and not victim.up_to_date
    if action.kind is ActionKind.MOVE_LEADER:
        assert all(m.up_to_date for m in members if not m.is_leader) or action.target_pod is not None
        assert action.target_pod != action.pod
    assert (action.kind is ActionKind.DONE) == (len(up) == 3)


def test_the_benchmark_baseline_restarts_in_ordinal_order_the_leader_included_with_no_move_leader() -> None:
    # ops.opsmanager.dev/bench-skip-move-leader: our checks, minus MoveLeader (docs/benchmarks.md).
    action = next_action(three(leader="db-0"), 3, move_leader=False)
    assert (action.kind, action.pod) == (ActionKind.RESTART, "db-0")
    assert "leader" in action.reason
    assert next_action(three(leader="db-0", up=("db-0",)), 3, move_leader=False).pod == "db-1"
    assert next_action(three(leader="db-2", up=("db-0", "db-1")), 3, move_leader=False).kind is ActionKind.RESTART
    assert next_action(three(up=("db-0", "db-1", "db-2")), 3, move_leader=False).kind is ActionKind.DONE
    sick = dataclasses.replace(three()[0], healthy=False)
    assert next_action([sick, *three()[1:]], 3, move_leader=False).kind is ActionKind.REFUSE  # same at-rest checks


def test_a_member_on_a_node_that_is_not_ready_is_named_with_its_node_and_nobody_is_restarted() -> None:
    stranded = member("db-2", 102, up_to_date=False, leader_id=101, pod_ready=False, node="node-3",
                      node_down="NodeStatusUnknown: Kubelet stopped posting node status.")
    action = next_action([*three()[:2], stranded], 3)
    assert action.kind is ActionKind.REFUSE and action.pod is None
    assert action.reason == ("not at rest: db-2 is on node node-3, which is not Ready (NodeStatusUnknown: Kubelet "
                             "stopped posting node status.)")
    # etcd itself may still answer through that member (its process runs on): the node decides, not etcd
    running = dataclasses.replace(stranded, pod_ready=False, healthy=True)
    assert next_action([*three()[:2], running], 3).kind is ActionKind.REFUSE
