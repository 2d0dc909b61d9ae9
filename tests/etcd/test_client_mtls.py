"""The admin client against a real 3-member etcd cluster with client and peer mTLS (one cluster per module).

We test: finding the leader (cross-checked with etcd3gw over the JSON gateway); MoveLeader to a follower with every
member agreeing within a few Status rounds of etcd's answer; MoveLeader sent via a follower being routed to the
leader; MemberUpdate; the served certificate following an in-place leaf replacement on the client and the peer port;
TLS name override; typed errors (no gRPC error escapes); the dual-scheme fallback; the recovery gate after a
follower restart; and the live writer losing no write while leadership moves.

Tests leave the cluster as they found it: 3 healthy voters, same CA, original peer URLs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncIterator

import etcd3gw
import grpc
import pytest
import requests

from e2e import consistency, localcluster, writer
from opsmanager import pki
from opsmanager.etcd import access, errors
from opsmanager.etcd import client as etcd_client
from tests.timing import abaseline, allowance

pytestmark = pytest.mark.slow

Cluster = localcluster.LocalEtcdCluster


@pytest.fixture
async def client(etcd_mtls_cluster: Cluster) -> AsyncIterator[etcd_client.EtcdClient]:
    async with etcd_client.EtcdClient(etcd_mtls_cluster.endpoints(), tls=etcd_mtls_cluster.tls_identity(),
                                      timeout=3.0) as c:
        yield c


async def _follower(c: etcd_client.EtcdClient, *, other_than: int = 0) -> etcd_client.MemberStatus:
    views = await c.statuses()
    return next(v for v in views.values()
                if isinstance(v, etcd_client.MemberStatus) and not v.is_leader and v.member_id != other_than)


async def test_leader_is_found_and_matches_the_json_gateway(client: etcd_client.EtcdClient,
                                                            etcd_mtls_cluster: Cluster) -> None:
    leader = await client.maintenance.leader()
    views = await client.statuses()
    assert all(isinstance(v, etcd_client.MemberStatus) for v in views.values()), views
    statuses = [v for v in views.values() if isinstance(v, etcd_client.MemberStatus)]
    assert [s.member_id for s in statuses if s.is_leader] == [leader.member_id]
    assert {s.leader_id for s in statuses} == {leader.member_id}
    assert len({s.member_id for s in statuses}) == 3 and {s.version for s in statuses} == {"3.5.1"}

    # An independent client (etcd3gw: JSON over HTTPS to the grpc-gateway) sees the same leader and members.
    # Its own ca_cert argument loses to $REQUESTS_CA_BUNDLE (requests' session.verify quirk), so hand it a session
    # that ignores the environment.
    cl = etcd_mtls_cluster
    session = requests.Session()
    session.trust_env = False
    session.verify = str(cl.ca_file)
    session.cert = (str(cl.client_cert_file), str(cl.client_key_file))
    gw = etcd3gw.Etcd3Client(host=leader.endpoint.host, port=leader.endpoint.client_port, protocol="https",
                             timeout=5, session=session)
    gw_status = await asyncio.to_thread(gw.status)
    assert int(gw_status["leader"]) == leader.member_id == int(gw_status["header"]["member_id"])
    gw_members = await asyncio.to_thread(gw.members)
    ours = await client.members()
    assert {int(m["ID"]): sorted(m["peerURLs"]) for m in gw_members} == {m.id: sorted(m.peer_urls) for m in ours}
    assert {m.name for m in ours} == {m.name for m in cl.members} and not any(m.is_learner for m in ours)


async def test_move_leader_to_a_follower_and_all_members_agree_promptly(client: etcd_client.EtcdClient) -> None:
    before = await client.maintenance.leader()
    target = await _follower(client)
    one_round = await abaseline(client.statuses)  # one Status of every member, here and now
    move = await client.move_leader(target.member_id)
    assert (move.previous_leader_id, move.leader_id) == (before.member_id, target.member_id)
    assert move.sent_to == before.endpoint.label and move.redirects == 0
    # Once etcd's MoveLeader returns, every member reports the new leader within a few rounds of Status.
    assert move.total_seconds - move.rpc_seconds < allowance(one_round), (move, one_round)
    assert sorted(move.agreed) == ["m0", "m1", "m2"] and move.unreachable == ()
    views = await client.statuses()  # independent re-check after the call returned
    assert {v.leader_id for v in views.values() if isinstance(v, etcd_client.MemberStatus)} == {target.member_id}


async def test_move_leader_sent_to_a_follower_is_routed_to_the_leader(client: etcd_client.EtcdClient,
                                                                      etcd_mtls_cluster: Cluster) -> None:
    leader = await client.maintenance.leader()
    via = await _follower(client)
    target = await _follower(client, other_than=via.member_id)
    move = await client.move_leader(target.member_id, via=via.endpoint)
    assert move.redirects == 1 and move.sent_to == leader.endpoint.label
    assert (await client.maintenance.leader()).member_id == target.member_id

    # A client that only knows one follower finds the leader through MemberList's client URLs.
    lonely_follower = await _follower(client)
    back_to = leader.member_id if leader.member_id != lonely_follower.member_id else via.member_id
    async with etcd_client.EtcdClient([lonely_follower.endpoint], tls=etcd_mtls_cluster.tls_identity()) as lonely:
        moved = await lonely.move_leader(back_to)
        assert moved.leader_id == back_to and moved.sent_to != lonely_follower.endpoint.label
    assert (await client.maintenance.leader()).member_id == back_to


async def test_move_leader_to_a_non_member_is_a_bad_transferee(client: etcd_client.EtcdClient) -> None:
    with pytest.raises(errors.BadLeaderTransferee) as info:
        await client.move_leader(0x1234, timeout=2)
    assert not errors.is_transient(info.value) and "MoveLeader on m" in str(info.value)
    with pytest.raises(ValueError, match="target_id"):
        await client.move_leader(0)


async def test_writer_loses_no_write_while_the_leader_moves(client: etcd_client.EtcdClient,
                                                            etcd_mtls_cluster: Cluster) -> None:
    targets = writer.targets_for(etcd_mtls_cluster.endpoints(), identities=[etcd_mtls_cluster.tls_identity()])
    w = writer.Writer(targets, prefix=b"/test/writer-move-leader")
    async with w:
        await w.wait_ok(10)
        for _ in range(3):
            target = await _follower(client)
            w.mark(f"move_leader -> {target.endpoint.name}")
            await client.move_leader(target.member_id)
            await w.wait_ok(10)
    result = w.result
    assert result is not None
    assert result.failed == 0, result.errors
    assert result.ok >= 40, result.summary()
    read = await w.read_back()  # every acknowledged write, one key each (raises LostWrites naming any missing)
    assert read.ok and read.acknowledged == result.ok and read.stored >= result.ok, read.describe()
    # HashKV at one revision, equal on every member (the check after every operation, e2e/consistency.py)
    hashes = await consistency.hashkv_agree(etcd_mtls_cluster.endpoints(), [etcd_mtls_cluster.tls_identity()])
    assert hashes.agree and len(hashes.hashes) == 3 and len(set(hashes.hashes.values())) == 1, hashes.describe()
    assert hashes.revision >= read.revision
    with pytest.raises(consistency.HashKVDisagree, match="3 member\\(s\\) reachable, expected 4"):
        await consistency.hashkv_agree(etcd_mtls_cluster.endpoints(), [etcd_mtls_cluster.tls_identity()], expected=4)


async def test_member_update_changes_the_peer_urls_members_sees(client: etcd_client.EtcdClient) -> None:
    member = next(m for m in await client.members() if m.name == "m1")
    host = member.peer_urls[0].rsplit(":", 1)[0]
    wanted = [*member.peer_urls, f"{host}:2390"]  # sorts after the working URL: peers keep dialling that one
    try:
        returned = await client.member_update(member.id, wanted)
        assert sorted(next(m for m in returned if m.id == member.id).peer_urls) == sorted(wanted)
        seen = next(m for m in await client.members(linearizable=True) if m.id == member.id)
        assert sorted(seen.peer_urls) == sorted(wanted)
    finally:
        await client.member_update(member.id, list(member.peer_urls))
    restored = next(m for m in await client.members() if m.id == member.id)
    assert restored.peer_urls == member.peer_urls
    with pytest.raises(ValueError, match="peer_urls"):
        await client.member_update(member.id, [])
    with pytest.raises(errors.MemberNotFound):
        await client.member_update(0x4242, list(member.peer_urls))


async def test_served_certificate_follows_in_place_replacement_on_client_and_peer_ports(
        client: etcd_client.EtcdClient, etcd_mtls_cluster: Cluster) -> None:
    name = "m2"
    before_client = await client.served_certificate(name)
    before_peer = await client.served_certificate(name, port="peer")
    assert before_client.serial != before_peer.serial  # separate leaves per port
    serial, peer_serial = random.getrandbits(63) | 1, random.getrandbits(63) | 1
    server, peer = etcd_mtls_cluster.issue_member_certs(name, serial=serial, peer_serial=peer_serial)
    etcd_mtls_cluster.replace_member_certs(name, server, peer)
    pid = etcd_mtls_cluster.member(name).pid

    after_client = await client.served_certificate(name)
    after_peer = await client.served_certificate(name, port="peer")
    assert (after_client.serial, after_peer.serial) == (serial, peer_serial)
    assert after_client.fingerprint_sha256 == pki.cert_info(server.cert_pem).fingerprint_sha256
    assert after_client.issuer == before_client.issuer and after_client.not_after > before_client.not_before
    assert etcd_mtls_cluster.member(name).pid == pid  # no restart happened
    # A new gRPC connection verifies the new leaf (same CA) and the member still serves.
    async with etcd_client.EtcdClient([etcd_mtls_cluster.endpoint(name)], tls=etcd_mtls_cluster.tls_identity()) as c:
        assert (await c.maintenance.status(name)).member_id


async def test_server_name_override_verifies_the_certificate_dns_name(etcd_mtls_cluster: Cluster) -> None:
    eps = etcd_mtls_cluster.endpoints(server_name=True)
    assert eps[0].server_name == "m0.etcd.test" and eps[0].host.startswith("127.")
    async with etcd_client.EtcdClient(eps, tls=etcd_mtls_cluster.tls_identity()) as c:
        assert (await c.maintenance.status("m0")).member_id
        wrong = dataclasses.replace(eps[0], server_name="someone-else.example")
        with pytest.raises(errors.TLSHandshakeFailed) as info:
            await c.maintenance.status(wrong, timeout=2)
        assert "m0 (" in str(info.value) and not errors.is_transient(info.value)


async def test_tls_failures_are_typed_and_the_identity_can_be_swapped(etcd_mtls_cluster: Cluster) -> None:
    foreign = access.TLSIdentity(pki.make_ca("someone-else").cert_pem, name="foreign")
    async with etcd_client.EtcdClient(etcd_mtls_cluster.endpoints(), tls=foreign, timeout=2) as c:
        with pytest.raises(errors.TLSHandshakeFailed):
            await c.maintenance.status("m0")  # we do not trust the member
        c.set_tls(etcd_mtls_cluster.tls_identity(client_cert=False, name="no-cert"))
        with pytest.raises(errors.TLSHandshakeFailed) as info:
            await c.maintenance.status("m0")  # the member does not accept us: no client certificate
        assert "m0 (" in str(info.value) and isinstance(info.value.__cause__, grpc.RpcError)
        c.set_tls(etcd_mtls_cluster.tls_identity())
        assert (await c.maintenance.status("m0")).scheme == "https"


async def test_dual_scheme_endpoint_uses_the_scheme_that_answers(etcd_mtls_cluster: Cluster) -> None:
    dual = etcd_mtls_cluster.endpoint("m0", schemes=("http", "https"))
    async with etcd_client.EtcdClient([dual], tls=etcd_mtls_cluster.tls_identity(), timeout=2) as c:
        assert (await c.maintenance.status("m0")).scheme == "https"  # http tried first, refused by the TLS-only port
        assert (await c.maintenance.status("m0")).scheme == "https"  # remembered: https first now
        with pytest.raises(errors.MemberUnreachable):  # plaintext HTTP/2 on a TLS-only port: the socket is closed
            await c.maintenance.status("m0", scheme="http")


async def test_no_grpc_error_escapes_the_public_calls(etcd_mtls_cluster: Cluster) -> None:
    x, y = etcd_mtls_cluster.subnet
    dead = access.Endpoint("dead", f"127.{x}.{y}.250", metrics_port=None)
    calls = {
        "status": lambda c: c.maintenance.status("dead"),
        "leader": lambda c: c.maintenance.leader(timeout=0.5),
        "members": lambda c: c.members(),
        "member_update": lambda c: c.member_update(1, ["https://127.0.0.1:2380"]),
        "member_add": lambda c: c.member_add(["https://127.0.0.1:2380"]),
        "member_remove": lambda c: c.member_remove(1),
        "member_promote": lambda c: c.member_promote(1),
        "put": lambda c: c.kv.put("k", "v"),
        "get": lambda c: c.kv.get("k"),
        "move_leader": lambda c: c.move_leader(1, timeout=1),
        "wait_recovered": lambda c: c.wait_recovered("dead", expected_voters=3, timeout=0.5),
        "served_certificate": lambda c: c.served_certificate("dead"),
        "hash_kv": lambda c: c.hash_kv("dead"),
        "check_consistency": lambda c: c.maintenance.check_consistency(timeout=0.5),
    }
    foreign = access.TLSIdentity(pki.make_ca("x").cert_pem, name="foreign")
    for tls, eps in ((etcd_mtls_cluster.tls_identity(), [dead]), (foreign, etcd_mtls_cluster.endpoints()[:1])):
        async with etcd_client.EtcdClient(eps, tls=tls, timeout=0.5) as c:
            for name, call in calls.items():
                if name in ("status", "wait_recovered", "served_certificate", "hash_kv") and eps[0].name != "dead":
                    continue
                with pytest.raises(errors.EtcdError) as info:
                    await call(c)
                assert not isinstance(info.value, grpc.RpcError), name
            health = await c.health(eps[0], timeout=0.5)  # never raises: unhealthy is a result
            if eps[0].name == "dead":
                assert not health.healthy and not health.reachable
            else:  # /health on the plain-HTTP metrics port needs no client TLS at all
                assert health.healthy and health.via == "http-metrics"
            views = await c.statuses(timeout=0.5)
            assert all(isinstance(v, errors.EtcdError) for v in views.values())


async def test_wait_recovered_gates_a_restarted_follower(client: etcd_client.EtcdClient,
                                                         etcd_mtls_cluster: Cluster) -> None:
    follower = await _follower(client)
    name = follower.endpoint.name
    etcd_mtls_cluster.stop_member(name)
    try:
        for i in range(20):  # the follower falls behind
            await client.kv.put(f"/test/lag/{i}", "x" * 100)
        with pytest.raises(errors.NotRecovered) as info:  # 2 of 3 up: quorum, but not recovered
            await client.wait_recovered(name, expected_voters=3, timeout=1.5)
        assert "health" in info.value.reason or "unreachable" in info.value.reason.lower(), info.value.reason
    finally:
        etcd_mtls_cluster.start_member(name, wait=None)
    recovery = await client.wait_recovered(name, expected_voters=3, timeout=20, check_hash=True)
    assert recovery.member == name and recovery.voters == 3
    assert recovery.applied_index >= recovery.leader_commit_index
    assert await client.kv.get("/test/lag/19", endpoint=name) == b"x" * 100
    hashes = await client.maintenance.check_consistency()
    assert len(hashes) == 3 and len({(h.revision, h.hash) for h in hashes}) == 1
