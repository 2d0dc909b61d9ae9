"""The leader monitor counts elections on a real cluster: one per MoveLeader, at least one for a killed leader.

A killed leader leaves two voters whose election timers can fire together: a split vote costs a term of its own,
so the monitor (which counts term increments, every campaign) may see more than one there — never fewer.
"""

from __future__ import annotations

import pytest

from e2e import monitor
from opsmanager.etcd import client as etcd_client
from tests.polling import aeventually

pytestmark = pytest.mark.slow


async def test_counts_one_election_per_leader_move_and_one_for_a_killed_leader(etcd_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = etcd_cluster_factory(3, mode="plain")
    eps = cluster.endpoints()
    mon = monitor.LeaderMonitor(eps)
    await mon.start()
    await aeventually(lambda: mon.result.first_term > 0, what="the first term seen")
    async with etcd_client.EtcdClient(eps) as client:
        leader = await client.maintenance.leader()
        statuses = await client.statuses()
        target = next(s for s in statuses.values()
                      if isinstance(s, etcd_client.MemberStatus) and not s.is_leader)
        before = mon.result  # an election of the fresh cluster before the move is not the move's
        await client.move_leader(target.member_id)

        def moved() -> monitor.LeaderChange | None:
            return next((c for c in mon.result.changes[len(before.changes):] if c.leader_id == target.member_id), None)

        change = await aeventually(moved, what="the election for the move")
        assert change.term == before.last_term + 1, "a MoveLeader is exactly one election (TimeoutNow, no campaign)"
        assert leader.member_id != target.member_id
        cluster.kill_member(target.endpoint.name)

        def after_kill() -> monitor.LeaderChange | None:
            return next((c for c in mon.result.changes if c.term > change.term), None)

        await aeventually(after_kill, timeout=15.0, what="a new leader after the kill")
    result = await mon.stop()
    assert result.elections >= 2
    assert result.changes[-1].term == result.last_term > change.term
    assert result.changes[-1].leader_id not in (target.member_id, 0)
