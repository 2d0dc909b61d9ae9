"""Every operation runs to Successful in the fast world (in-process API server, fake etcd; see conftest.py).

We test these aspects, for add TLS, rotate, issuer change, remove TLS, Restart and MoveLeader:
- the phase ends ``Successful`` and the step conditions appear in the plan's order;
- each member is restarted exactly once per pass (rotate: no pass at all), never two at a time, and never while it leads (leadership was
  moved first: the fake cluster saw no election, only MoveLeaders);
- TLS operations: every member serves the certificate now in its Secret, and ``spec.tls`` is written back;
- every member's peer URL is registered under the scheme of the end state; removing TLS deletes the
  Certificates and Secrets the operator created;
- the Etcd is not left paused, and no etcd admin is left open.
The real-etcd proof of the same claims (0 failed writes, 0 unplanned elections) is tests/e2e/test_ops_engine.py.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from opsmanager import kube, pki
from opsmanager.api import constants
from opsmanager.etcd import access, errors
from opsmanager.etcd import client as etcd_client
from opsmanager.ops import restart
from tests.ops import world as w

ISSUER_A = {**w.ISSUER, "name": "ca-a"}
ISSUER_B = {**w.ISSUER, "name": "ca-b"}


@dataclasses.dataclass(frozen=True)
class Operation:
    name: str
    start_with_tls: bool
    type: str
    spec: dict[str, Any]
    order: list[str]
    passes: int  # rolling restarts, i.e. restarts of each member
    tls_after: bool


OPERATIONS = [
    Operation("add-tls", False, "ReconfigureTLS", {"tls": {"issuerRef": ISSUER_A}},
              ["Running", "CertificateSynced", "TLSListenersAdded", "PeerURLsUpdated", "UpdateStatefulSet",
               "RestartPods", "UpdateDatabase", "Successful"], 2, True),
    # Zero-restart: the members hot-reload the re-issued leaves (tests/ops/test_engine_rotate.py has the rest).
    Operation("rotate", True, "ReconfigureTLS", {"tls": {"rotateCertificates": True}},
              ["Running", "IssueCertificatesSucceeded", "CertificateSynced", "ServedCertificatesVerified",
               "UpdateDatabase", "Successful"], 0, True),
    Operation("change-issuer", True, "ReconfigureTLS", {"tls": {"issuerRef": ISSUER_B}},
              ["Running", "TrustBundleWidened", "CertificateSynced", "UpdateStatefulSet", "RestartPods",
               "TrustBundleNarrowed", "UpdateDatabase", "Successful"], 3, True),
    Operation("remove-tls", True, "ReconfigureTLS", {"tls": {"remove": True}},
              ["Running", "PlaintextListenersAdded", "PeerURLsUpdated", "UpdateStatefulSet", "RestartPods",
               "UpdateDatabase", "Successful"], 2, False),
    Operation("restart", False, "Restart", {}, ["Running", "RestartPods", "Successful"], 1, False),
    Operation("restart-tls", True, "Restart", {}, ["Running", "RestartPods", "Successful"], 1, True),
]
TLS_OPERATIONS = [op for op in OPERATIONS if op.type == "ReconfigureTLS"]
PODS = ["db-0", "db-1", "db-2"]


async def prepare(world: w.World, op: Operation) -> None:
    await world.etcd("db", tls_issuer="ca-a" if op.start_with_tls else None)
    await world.request(op.name, "db", op.type, **op.spec)


async def served_as_in_secrets(world: w.World) -> bool:
    assert world.cluster is not None
    secret = await world.kube.get("v1", "Secret", w.NS, "db-server-cert")
    assert secret is not None
    serial = pki.cert_info(base64.b64decode(secret["data"]["tls.crt"])).serial
    return all(m.served["client"].serial == serial for m in world.cluster.members.values())


async def assert_rolled_safely(world: w.World, op: Operation) -> None:
    assert world.cluster is not None
    assert {p: world.record.creations.get(p, 0) for p in PODS} == {p: op.passes for p in PODS}, \
        "each member restarted once per pass"
    assert world.record.max_missing == min(op.passes, 1), "one member at a time"
    assert world.record.restarted_while_leader == []
    assert world.cluster.elections == [], "every leader change was a MoveLeader"
    assert [c.cause for c in world.cluster.history] == ["move"] * op.passes
    assert not await world.is_paused("db")
    assert world.cluster.open_admins == 0
    tls = (await world.get_etcd("db"))["spec"].get("tls")
    assert (tls is not None) == op.tls_after
    if op.tls_after:
        assert await served_as_in_secrets(world)


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
async def test_operation_runs_to_successful_rolling_one_member_at_a_time_leader_last(
        world: w.World, op: Operation) -> None:
    await prepare(world, op)
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == op.order
    await assert_rolled_safely(world, op)
    assert world.cluster is not None
    peer_schemes = {url.split("://")[0] for m in world.cluster.members.values() for url in m.peer_urls}
    assert peer_schemes == {"https" if op.tls_after else "http"}
    if op.name == "remove-tls":  # the certificates this operator created go with TLS: mounted and sources
        assert await world.kube.list(w.CERT_API, "Certificate", w.NS) == []
        assert [s["metadata"]["name"] for s in await world.kube.list("v1", "Secret", w.NS)] == []
    if op.tls_after:  # members mount what the operator released: its own Secrets, the sources' material
        for alias in constants.CERT_ALIASES:
            mounted = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-cert")
            source = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-issued")
            assert mounted is not None and source is not None
            assert mounted["metadata"]["ownerReferences"][0]["kind"] == constants.ETCD_KIND
            assert not any(a.startswith("cert-manager.io/") for a in mounted["metadata"].get("annotations") or {})
            assert mounted["data"] == source["data"]


async def test_followers_are_stopped_with_the_kubelets_minimal_grace_and_the_leader_with_its_own(
        world: w.World) -> None:
    op = next(o for o in OPERATIONS if o.name == "restart")
    await prepare(world, op)
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    # Every member is a follower when it is restarted (leadership moved off the last one first), so each is
    # stopped with the shorter of the kubelet's minimal window and its own grace (0 here: this world's pods go at once).
    assert sorted(world.kube.evicted_with) == [(p, 0) for p in PODS]
    # the benchmark's baseline restarts the leader in place: with the pod's own grace
    world.kube.evicted_with.clear()
    await world.request("again", "db", "Restart")
    await world.kube.patch(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "again", {"metadata": {
        "annotations": {constants.ANNOTATION_BENCH_SKIP_MOVE_LEADER: "true"}}})
    assert world.cluster is not None
    leader = world.cluster.leader
    req = await world.run("again")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    graces = dict(world.kube.evicted_with)
    assert graces.pop(leader) is None and set(graces.values()) == {0}
    minimal = restart.FOLLOWER_STOP_GRACE_SECONDS
    assert minimal == 2
    assert restart.stop_grace({"spec": {}}, follower=True) == minimal  # the pod's default is 30 s
    assert restart.stop_grace({"spec": {"terminationGracePeriodSeconds": 30}}, follower=True) == minimal
    assert restart.stop_grace({"spec": {"terminationGracePeriodSeconds": 1}}, follower=True) == 1
    assert restart.stop_grace({"spec": {"terminationGracePeriodSeconds": 30}}, follower=False) is None


async def test_an_eviction_the_budget_refused_is_tried_again_as_a_followers_restart(world: w.World) -> None:
    op = next(o for o in OPERATIONS if o.name == "restart")
    await prepare(world, op)
    refused: list[str] = []
    evict = world.kube.evict

    async def refuse_the_first_try(namespace: str, pod: str, **kw: Any) -> None:
        if pod not in refused:  # a budget whose status still counts the member restarted before as disrupted
            refused.append(pod)
            raise kube.TooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.")
        await evict(namespace, pod, **kw)

    world.kube.evict = refuse_the_first_try  # type: ignore[method-assign]
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert sorted(refused) == sorted(PODS)
    # tried again on the next pass (EvictPod--<pod> still False), each still a follower: the same short grace
    assert sorted(world.kube.evicted_with) == [(p, 0) for p in PODS]


def _status(name: str, member_id: int, leader_id: int) -> etcd_client.MemberStatus:
    return etcd_client.MemberStatus(
        endpoint=access.Endpoint(name, "127.0.0.1"), scheme="http", member_id=member_id, cluster_id=7,
        leader_id=leader_id, raft_index=9, raft_term=2, raft_applied_index=9, revision=5, version="3.6.16",
        db_size=1, db_size_in_use=1, is_learner=False, errors=())


class _Answers:
    """What a Status of every member answered (an error for one that did not)."""

    def __init__(self, statuses: dict[str, Any]) -> None:
        self._statuses = statuses

    async def statuses(self, **_: Any) -> dict[str, Any]:
        return self._statuses


async def test_an_eviction_tried_again_is_a_followers_when_it_and_the_members_answering_name_another_leader() -> None:
    down = errors.MemberUnreachable("connection refused", endpoint="db-2")
    view = {"db-0": _status("db-0", 1, 2), "db-1": _status("db-1", 2, 2), "db-2": down}
    assert await restart.a_follower(_Answers(view), "db-0")  # type: ignore[arg-type]
    assert not await restart.a_follower(_Answers(view), "db-1")  # type: ignore[arg-type]  # the leader
    assert not await restart.a_follower(_Answers(view), "db-2")  # type: ignore[arg-type]  # no answer of its own
    split = {**view, "db-2": _status("db-2", 3, 3)}  # two leaders named: no certainty
    assert not await restart.a_follower(_Answers(split), "db-0")  # type: ignore[arg-type]
    leaderless = {"db-0": _status("db-0", 1, 0), "db-1": _status("db-1", 2, 0)}
    assert not await restart.a_follower(_Answers(leaderless), "db-0")  # type: ignore[arg-type]


async def test_move_leader_to_a_named_follower(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None and world.cluster.leader == "db-0"
    term = world.cluster.term
    await world.request("move", "db", "MoveLeader", moveLeader={"newLeader": "db-2"})
    req = await world.run("move")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert w.umbrella(req) == ["EtcdLeaderMoved", "Successful"]
    assert world.cluster.leader == "db-2" and world.cluster.term == term + 1
    assert world.record.creations == {}  # nothing restarted
    assert not await world.is_paused("db")


async def test_move_leader_to_a_name_that_is_not_a_member_fails_naming_the_members(world: w.World) -> None:
    await world.etcd("db")
    await world.request("move", "db", "MoveLeader", moveLeader={"newLeader": "db-7"})
    req = await world.run("move")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = next(c for c in req["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    assert "db-7" in failed["message"] and "db-0, db-1, db-2" in failed["message"]
    assert world.cluster is not None and world.cluster.history == []
