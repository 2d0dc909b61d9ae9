"""The HorizontalScaling request in the fast world (the in-process API server and the fake etcd).

We test these aspects: up, each new member is added as a learner, its pod started (joining the existing cluster),
and promoted once caught up, one member at a time; down, the highest ordinal goes first, leadership moved off it
before MemberRemove, its pod and data volume go; the Etcd is never paused and no election happens; a learner that
never catches up is removed again and the request fails naming it; an operator that dies right after MemberAdd or
MemberRemove resumes without adding or removing twice; an even count is accepted with a warning in the status; each
count written is named with its request in the Etcd's ``status.scaledBy`` first, and the annotation older operators
wrote for it goes with the first count written.
"""

from __future__ import annotations

from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from tests.ops import world as w


def args(sts: w.Obj) -> list[str]:
    return list(sts["spec"]["template"]["spec"]["containers"][0]["args"])


async def test_up_from_3_to_5_adds_learners_one_at_a_time_and_promotes_each(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    await world.request("up", "db", "HorizontalScaling", horizontalScaling={"replicas": 5})
    req = await world.run("up")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert [c for c in world.cluster.calls if c.startswith("member_")] == [
        "member_add db-3", "member_promote db-3", "member_add db-4", "member_promote db-4"]
    assert sorted(m.name for m in world.cluster.voters) == naming.pods("db", 5)
    db = await world.get_etcd("db")
    assert db["spec"]["replicas"] == 5 and db["status"]["initialClusterState"] == "existing"
    assert db["status"]["scaledBy"] == {"request": "up", "replicas": 5}, "the webhook's record of the last count"
    assert constants.ANNOTATION_SCALED_BY not in (db["metadata"].get("annotations") or {})
    sts = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert sts is not None and "--initial-cluster-state=existing" in args(sts)
    initial = next(a for a in args(sts) if a.startswith("--initial-cluster="))
    assert initial.count("=http://") == 5, initial
    for pod in ("db-3", "db-4"):
        for step in (constants.STEP_ETCD_MEMBER_ADDED, constants.STEP_ETCD_LEARNER_PROMOTED):
            assert conditions.is_true(req["status"]["conditions"], constants.per_pod_type(step, pod))
    assert w.umbrella(req) == [constants.COND_HORIZONTAL_SCALE_UP, constants.COND_SUCCESSFUL]
    assert world.cluster.elections == []
    assert not await world.is_paused("db")
    assert "warnings" not in req["status"]


async def test_down_from_5_to_3_removes_the_highest_first_moving_leadership_off_it(world: w.World) -> None:
    await world.etcd("db", replicas=5)
    assert world.cluster is not None
    world.cluster._change_leader("db-4", "move")
    world.cluster.history.clear()
    await world.request("down", "db", "HorizontalScaling", horizontalScaling={"replicas": 3})
    req = await world.run("down")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    calls = [c for c in world.cluster.calls if c.startswith(("member_", "move_leader"))]
    assert calls[0].startswith("move_leader db-") and calls[0] not in ("move_leader db-3", "move_leader db-4")
    assert calls[1:] == ["member_remove db-4", "member_remove db-3"], calls
    assert [h.cause for h in world.cluster.history] == ["move"], "one MoveLeader, no election"
    db = await world.get_etcd("db")
    assert db["spec"]["replicas"] == 3
    pods = {p["metadata"]["name"] for p in await world.kube.list("v1", "Pod", w.NS)}
    assert pods == set(naming.pods("db", 3))
    for pod in ("db-3", "db-4"):
        assert conditions.is_true(req["status"]["conditions"],
                                  constants.per_pod_type(constants.STEP_ETCD_MEMBER_REMOVED, pod))
    assert conditions.is_true(req["status"]["conditions"], constants.per_pod_type(constants.STEP_MOVE_LEADER, "db-4"))
    assert w.umbrella(req) == [constants.COND_HORIZONTAL_SCALE_DOWN, constants.COND_SUCCESSFUL]
    assert not await world.is_paused("db")


async def test_a_learner_that_never_catches_up_is_removed_again_and_the_request_fails_naming_it(
        world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    world.cluster.lagging.add("db-3")
    await world.request("up", "db", "HorizontalScaling", horizontalScaling={"replicas": 5}, timeout="60s")

    async def tick(_i: int) -> None:
        world.clock.advance(2)

    req = await world.run("up", between=tick)
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and "db-3 did not catch up" in failed["message"], failed
    assert sorted(world.cluster.members) == naming.pods("db", 3), "the learner is out of the cluster again"
    assert (await world.get_etcd("db"))["spec"]["replicas"] == 3
    await world.settle()
    pods = {p["metadata"]["name"] for p in await world.kube.list("v1", "Pod", w.NS)}
    assert pods == set(naming.pods("db", 3))
    waiting = conditions.get_condition(req["status"]["conditions"],
                                       constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, "db-3"))
    assert waiting is not None and waiting["status"] == constants.FALSE


async def test_an_operator_dying_right_after_member_add_or_remove_does_neither_twice(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    world.crash_points |= {"after member_add db-3", "after member_add db-4"}
    await world.request("up", "db", "HorizontalScaling", horizontalScaling={"replicas": 5})
    req = await world.run("up")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert world.crashes == ["after member_add db-3", "after member_add db-4"]
    assert [c for c in world.cluster.calls if c.startswith("member_add")] == ["member_add db-3", "member_add db-4"]
    world.crash_points |= {"after member_remove db-4", "after member_remove db-3"}
    await world.request("down", "db", "HorizontalScaling", horizontalScaling={"replicas": 3})
    req = await world.run("down")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert world.crashes[2:] == ["after member_remove db-4", "after member_remove db-3"]
    assert [c for c in world.cluster.calls if c.startswith("member_remove")] == [
        "member_remove db-4", "member_remove db-3"]
    assert sorted(world.cluster.members) == naming.pods("db", 3)


async def test_the_annotation_older_operators_wrote_for_the_count_goes_with_the_next_count(world: w.World) -> None:
    await world.etcd("db", replicas=5)
    await world.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, "db",
                           {"metadata": {"annotations": {constants.ANNOTATION_SCALED_BY: "old/5", "keep": "me"}}})
    await world.request("down", "db", "HorizontalScaling", horizontalScaling={"replicas": 4})
    req = await world.run("down")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    db = await world.get_etcd("db")
    assert db["metadata"]["annotations"] == {"keep": "me"}
    assert db["status"]["scaledBy"] == {"request": "down", "replicas": 4}


async def test_an_even_count_is_accepted_with_a_warning_in_the_status(world: w.World) -> None:
    await world.etcd("db")
    await world.request("four", "db", "HorizontalScaling", horizontalScaling={"replicas": 4})
    req = await world.run("four")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert len(req["status"]["warnings"]) == 1 and "is 4" in req["status"]["warnings"][0], req["status"]


async def test_a_voter_down_holds_the_next_member_add_saying_why(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    world.cluster.stop("db-2")
    world.held.add("db-2")
    await world.request("up", "db", "HorizontalScaling", horizontalScaling={"replicas": 5})
    for _ in range(5):
        await world.engine().reconcile(w.NS, "up")
    req = await world.get_request("up")
    waiting = conditions.get_condition(req["status"]["conditions"], constants.COND_HORIZONTAL_SCALE_UP)
    assert waiting is not None and waiting["status"] == constants.FALSE
    assert "db-2 not answering" in waiting["message"], waiting
    assert not [c for c in world.cluster.calls if c.startswith("member_add")]


async def test_a_rollback_interrupted_by_a_crash_is_finished_not_added_again(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    world.cluster.lagging.add("db-3")
    world.crash_points.add("after member_remove db-3")
    await world.request("up", "db", "HorizontalScaling", horizontalScaling={"replicas": 4}, timeout="60s")

    async def tick(_i: int) -> None:
        world.clock.advance(2)

    req = await world.run("up", between=tick)
    assert world.crashes == ["after member_remove db-3"]
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    assert [c for c in world.cluster.calls if c.startswith("member_add")] == ["member_add db-3"], world.cluster.calls
    assert sorted(world.cluster.members) == naming.pods("db", 3)
    assert (await world.get_etcd("db"))["spec"]["replicas"] == 3


async def test_a_member_that_is_down_is_removed_all_the_same(world: w.World) -> None:
    await world.etcd("db", replicas=5)
    assert world.cluster is not None
    world.cluster.stop("db-4")
    world.held.add("db-4")
    await world.request("down", "db", "HorizontalScaling", horizontalScaling={"replicas": 4})
    req = await world.run("down")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert sorted(world.cluster.members) == naming.pods("db", 4)
