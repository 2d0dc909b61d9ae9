"""The Defragment request in the fast world (the in-process API server and the fake etcd).

We test these aspects: every member is defragmented once, one at a time, followers first and the leader last after
leadership moved off it (no member is defragmented while it leads); the Etcd is never paused; each member's size
before and after is in ``status.databaseSizes``; a NOSPACE alarm is disarmed after the defragmentation while a
CORRUPT one is left and named; a member that does not answer holds the next defragmentation, saying why.
"""

from __future__ import annotations

from opsmanager.api import conditions, constants
from opsmanager.etcd import client as etcd_client
from tests.ops import world as w

PODS = ("db-0", "db-1", "db-2")


async def test_followers_first_the_leader_last_after_moving_leadership(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    first_leader = world.cluster.leader
    await world.request("defrag", "db", "Defragment", defragment={})
    req = await world.run("defrag")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    order = [name for name, _ in world.cluster.defragmented]
    assert sorted(order) == list(PODS) and len(order) == 3
    assert order[-1] == first_leader, "the leader is defragmented last"
    assert all(name != leader for name, leader in world.cluster.defragmented), "never while it leads"
    assert [h.cause for h in world.cluster.history] == ["move"], "one MoveLeader, no election"
    sizes = req["status"]["databaseSizes"]
    assert set(sizes) == set(PODS)
    assert all(s["afterBytes"] < s["beforeBytes"] for s in sizes.values()), sizes
    for pod in PODS:
        assert conditions.is_true(req["status"]["conditions"], constants.per_pod_type(constants.STEP_DEFRAGMENT, pod))
    assert not await world.is_paused("db")


async def test_nospace_is_disarmed_and_corrupt_is_left_named(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    ids = {m.name: m.id for m in world.cluster.members.values()}
    world.cluster.alarms[:] = [etcd_client.Alarm(ids["db-1"], "NOSPACE"), etcd_client.Alarm(ids["db-2"], "CORRUPT")]
    await world.request("defrag", "db", "Defragment", defragment={})
    req = await world.run("defrag")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert world.cluster.alarms == [etcd_client.Alarm(ids["db-2"], "CORRUPT")]
    cleared = conditions.get_condition(req["status"]["conditions"], constants.COND_ETCD_ALARM_CLEARED)
    assert cleared is not None
    assert f"Disarmed NOSPACE on {ids['db-1']:x}" in cleared["message"]
    assert f"CORRUPT on {ids['db-2']:x}" in cleared["message"]


async def test_a_member_down_holds_the_next_defragmentation_saying_why(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    world.cluster.stop("db-2")
    await world.request("defrag", "db", "Defragment", defragment={})
    for _ in range(5):
        await world.engine().reconcile(w.NS, "defrag")
    req = await world.get_request("defrag")
    waiting = conditions.get_condition(req["status"]["conditions"], constants.COND_ETCD_DEFRAGMENTED)
    assert waiting is not None and waiting["status"] == constants.FALSE
    assert "db-2 not answering" in waiting["message"], waiting
    assert world.cluster.defragmented == []
    world.cluster.start("db-2")
    req = await world.run("defrag")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
