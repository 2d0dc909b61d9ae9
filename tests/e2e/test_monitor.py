"""The leader monitor counts elections on a real cluster: one per MoveLeader, one for a killed leader."""

from __future__ import annotations

import asyncio
import time

import pytest

from e2e import monitor
from opsmanager.etcd import client as etcd_client

pytestmark = pytest.mark.slow


async def _until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.05)


async def test_counts_one_election_per_leader_move_and_one_for_a_killed_leader(etcd_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = etcd_cluster_factory(3, mode="plain")
    eps = cluster.endpoints()
    mon = monitor.LeaderMonitor(eps)
    await mon.start()
    await _until(lambda: mon.result.first_term > 0)
    async with etcd_client.EtcdClient(eps) as client:
        leader = await client.leader()
        statuses = await client.statuses()
        target = next(s for s in statuses.values()
                      if isinstance(s, etcd_client.MemberStatus) and not s.is_leader)
        await client.move_leader(target.member_id)
        await _until(lambda: mon.result.elections >= 1)
        assert mon.result.changes[-1].leader_id == target.member_id
        assert leader.member_id != target.member_id
        cluster.kill_member(target.endpoint.name)
        await _until(lambda: mon.result.elections >= 2, timeout=15.0)
    result = await mon.stop()
    assert result.elections == 2
    assert [c.term for c in result.changes] == [result.first_term + 1, result.first_term + 2]
