"""The leader monitor counts elections on a real cluster: one per MoveLeader, one for a killed leader."""

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
        leader = await client.leader()
        statuses = await client.statuses()
        target = next(s for s in statuses.values()
                      if isinstance(s, etcd_client.MemberStatus) and not s.is_leader)
        await client.move_leader(target.member_id)
        await aeventually(lambda: mon.result.elections >= 1, what="the election for the move")
        assert mon.result.changes[-1].leader_id == target.member_id
        assert leader.member_id != target.member_id
        cluster.kill_member(target.endpoint.name)
        await aeventually(lambda: mon.result.elections >= 2, timeout=15.0, what="the election after the kill")
    result = await mon.stop()
    assert result.elections == 2
    assert [c.term for c in result.changes] == [result.first_term + 1, result.first_term + 2]
