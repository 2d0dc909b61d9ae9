"""The in-memory etcd (:mod:`tests.fakes.etcd`) answers as the real admin client does.

We test these aspects: MoveLeader to a follower is accepted and starts a new term; to a non-member or a learner it
raises ``BadLeaderTransferee`` and to a member that is down ``LeaderTransferTimeout`` (the real client's typed
errors), changing nothing; a leader going down causes an election, recorded as such; losing the majority means
``NoQuorum`` on consensus calls and unhealthy members; a member comes back caught up; peer URLs and served
certificates are what was set.
"""

from __future__ import annotations

import pytest

from opsmanager import pki
from opsmanager.etcd import access, errors
from tests.fakes import etcd as fake

NAMES = ["e-0", "e-1", "e-2"]


def admin(cluster: fake.FakeCluster) -> fake.FakeAdmin:
    return cluster.admin([access.Endpoint(name=n, host=f"10.0.0.{i + 1}", schemes=("http",))
                          for i, n in enumerate(NAMES)], None)


async def test_move_leader_to_a_follower_changes_the_leader_and_the_term() -> None:
    cluster = fake.FakeCluster(NAMES)
    async with admin(cluster) as a:
        move = await a.move_leader(cluster.member("e-2").id)
        statuses = await a.statuses()
    assert cluster.leader == "e-2" and cluster.term == 2
    assert move.previous_leader_id == cluster.member("e-0").id
    assert {s.leader_id for s in statuses.values() if not isinstance(s, errors.EtcdError)} == {move.leader_id}
    assert [c.cause for c in cluster.history] == ["move"] and cluster.elections == []
    assert cluster.open_admins == 0


@pytest.mark.parametrize("target", ["not a member", "learner", "down"])
async def test_move_leader_refusals_raise_the_real_clients_errors_and_change_nothing(target: str) -> None:
    cluster = fake.FakeCluster(NAMES)
    if target == "learner":
        cluster.member("e-1").is_learner = True
    if target == "down":
        cluster.stop("e-1")
    target_id = 0xDEAD if target == "not a member" else cluster.member("e-1").id
    expected = errors.LeaderTransferTimeout if target == "down" else errors.BadLeaderTransferee
    async with admin(cluster) as a:
        with pytest.raises(expected):
            await a.move_leader(target_id)
    assert cluster.leader == "e-0" and cluster.term == 1 and cluster.history == []


async def test_a_leader_going_down_is_an_election_and_a_lost_majority_is_no_quorum() -> None:
    cluster = fake.FakeCluster(NAMES)
    cluster.stop("e-0")
    assert cluster.leader == "e-1" and [c.cause for c in cluster.elections] == ["election"]
    cluster.stop("e-1")
    assert cluster.leader is None and not cluster.has_quorum()
    async with admin(cluster) as a:
        with pytest.raises(errors.NoQuorum):
            await a.members()
        assert not (await a.health("e-2")).healthy
        assert isinstance((await a.statuses())["e-0"], errors.MemberUnreachable)
        with pytest.raises(errors.NoQuorum):
            await a.wait_recovered("e-2", expected_voters=3)
    cluster.write(5)
    cluster.start("e-0")
    assert cluster.leader is not None and cluster.member("e-0").applied_index == cluster.raft_index
    async with admin(cluster) as a:
        with pytest.raises(errors.NotRecovered):
            await a.wait_recovered("e-0", expected_voters=3)  # e-1 is still down
        cluster.start("e-1")
        recovery = await a.wait_recovered("e-0", expected_voters=3)
    assert recovery.voters == 3


async def test_member_update_and_served_certificates() -> None:
    cluster = fake.FakeCluster(NAMES)
    ca = pki.make_ca()
    info = pki.cert_info(pki.make_leaf(ca, "e-0").cert_pem)
    cluster.serve("e-0", "client", info)
    async with admin(cluster) as a:
        members = await a.member_update(cluster.member("e-1").id, ["https://e-1:2382"])
        assert next(m for m in members if m.name == "e-1").peer_urls == ("https://e-1:2382",)
        assert (await a.served_certificate("e-0")).serial == info.serial
        with pytest.raises(errors.TLSHandshakeFailed):
            await a.served_certificate("e-0", port="peer")
        with pytest.raises(errors.MemberNotFound):
            await a.member_update(0xDEAD, ["https://x:2382"])
