"""The one member view (``cluster.members.observe``) that the health verdict and the rolling restart read.

We test these aspects: each expected member gets one view in order; a missing or terminating pod is ``exists=False``;
``up_to_date`` compares the pod's revision with the StatefulSet's update revision; the leader and a learner are
seen from etcd's answers; a member whose etcd is down is not healthy and says why; without a client (nothing can
be asked) the views carry the pod facts only; endpoints skip pods without an address or on their way out.
"""

from __future__ import annotations

import datetime
from typing import Any

from opsmanager import kube
from opsmanager.cluster import members
from tests.fakes import etcd as fake

NS, DB = "demo", "db"
NAMES = ["db-0", "db-1", "db-2"]


def pod(name: str, *, ip: str | None = "127.0.0.10", revision: str = "new", ready: bool = True,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"controller-revision-hash": revision}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_endpoints_skip_pods_without_an_address_or_on_their_way_out() -> None:
    pods = {"db-0": pod("db-0"), "db-1": pod("db-1", ip=None), "db-2": pod("db-2", deleting=True)}
    eps = members.endpoints(DB, NS, pods, NAMES, schemes=("https", "http"), peer_scheme="http")
    assert [(e.name, e.schemes, e.peer_port, e.server_name) for e in eps] == [
        ("db-0", ("https", "http"), 2380, "db-0.db-pods.demo.svc")]


async def test_one_view_per_member_from_pods_and_etcd() -> None:
    cluster = fake.FakeCluster(NAMES, leader="db-1")
    cluster.member("db-2").is_learner = True
    pods = {"db-0": pod("db-0"), "db-1": pod("db-1", revision="old"), "db-2": pod("db-2", ready=False)}
    async with cluster.admin(members.endpoints(DB, NS, pods, NAMES, schemes=("http",)), None) as admin:
        views = await members.observe(admin, pods, NAMES, timeout=1.0, update_revision="new", learners=True)
    assert [v.name for v in views] == NAMES
    db0, db1, db2 = views
    assert db0.up_to_date and db0.healthy and db0.pod_ready and not db0.is_leader
    assert not db1.up_to_date and db1.is_leader
    assert db2.is_learner and not db2.pod_ready
    assert db0.leader_id == db1.member_id != 0


async def test_a_member_whose_etcd_is_down_is_not_healthy_and_says_why() -> None:
    cluster = fake.FakeCluster(NAMES, leader="db-1")
    cluster.stop("db-0")
    pods = {n: pod(n) for n in NAMES}
    async with cluster.admin(members.endpoints(DB, NS, pods, NAMES, schemes=("http",)), None) as admin:
        views = await members.observe(admin, pods, NAMES, timeout=1.0)
    assert not views[0].healthy and not views[0].answering
    assert views[0].reason.startswith("unreachable")
    assert views[1].healthy and views[1].is_leader


async def test_without_a_client_the_views_carry_the_pod_facts_only() -> None:
    pods = {"db-0": pod("db-0"), "db-1": pod("db-1", ip=None), "db-2": pod("db-2", deleting=True)}
    views = await members.observe(None, pods, NAMES, timeout=1.0, update_revision="new")
    assert [(v.exists, v.pod_ready, v.healthy, v.reason) for v in views] == [
        (True, True, False, "not asked"), (True, False, False, "no pod IP yet"),
        (False, False, False, "pod does not exist")]


def test_a_budget_admitted_this_pod_only_with_an_entry_newer_than_the_pod() -> None:
    """``disruptedPods`` names the pod, stamped at or after the pod's creation, and the pod is not being deleted:
    an eviction of this very pod was admitted (whose delete may never have happened)."""
    def budget(stamp: str | None) -> dict[str, Any]:
        return {"status": {"disruptedPods": {"e-2": stamp}} if stamp else {}}

    pod: dict[str, Any] = {"metadata": {"name": "e-2", "creationTimestamp": "2026-01-01T00:00:10Z"}}
    assert members.admitted_by_budget(budget("2026-01-01T00:01:00Z"), pod)
    assert members.admitted_by_budget(budget("2026-01-01T00:00:10Z"), pod)
    assert not members.admitted_by_budget(budget("2026-01-01T00:00:09Z"), pod)  # an earlier pod of that name
    assert not members.admitted_by_budget(budget(None), pod)
    assert not members.admitted_by_budget(None, pod)
    assert not members.admitted_by_budget(budget("not a time"), pod)
    other = {"metadata": {"name": "e-1", "creationTimestamp": "2026-01-01T00:00:10Z"}}
    assert not members.admitted_by_budget(budget("2026-01-01T00:01:00Z"), other)
    going = {"metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:02:00Z"}}
    assert not members.admitted_by_budget(budget("2026-01-01T00:01:00Z"), going)


def test_a_budget_entry_older_than_its_pod_is_stale_and_says_when_it_expires() -> None:
    def pod(name: str, created: str, *, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:05:00Z"
        return {"metadata": meta}

    budget = {"status": {"disruptedPods": {"e-0": "2026-01-01T00:00:00Z", "e-1": "2026-01-01T00:00:30Z",
                                           "e-2": "2026-01-01T00:00:00Z", "e-3": "2026-01-01T00:00:00Z"}}}
    pods = {"e-0": pod("e-0", "2026-01-01T00:00:05Z"),                   # recreated after the entry: stale
            "e-1": pod("e-1", "2026-01-01T00:00:05Z"),                   # the entry is this pod's: not stale
            "e-2": pod("e-2", "2026-01-01T00:00:05Z", deleting=True)}    # going anyway
    assert members.stale_budget_entries(budget, pods) == {
        "e-0": datetime.datetime(2026, 1, 1, 0, 2, tzinfo=datetime.UTC)}
    assert members.stale_budget_entries(None, pods) == {}


def _own_world(**over: Any) -> dict[str, Any]:
    """e-0 evicted by the request at 00:00:00 (recorded 00:00:01), recreated at 00:00:05, healthy again; the budget
    still counts it, and nothing else; three members, all serving."""
    created = "2026-01-01T00:00:05Z"
    world: dict[str, Any] = dict(
        budget={"status": {"disruptedPods": {"e-0": "2026-01-01T00:00:00Z"}}},
        pods={n: {**pod(n), "metadata": {**pod(n)["metadata"], "creationTimestamp": created}}
              for n in ("e-0", "e-1", "e-2")},
        evicted_at={"e-0": datetime.datetime(2026, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)},
        recovered=["e-0"], replicas=3)
    world.update(over)
    return world


def test_a_stale_entry_of_the_requests_own_eviction_is_proven_only_with_every_member_serving() -> None:
    assert members.own_stale_entries(**_own_world()) == ["e-0"]
    # not this request's eviction: no record of it, or one at another time
    assert members.own_stale_entries(**_own_world(evicted_at={})) == []
    assert members.own_stale_entries(**_own_world(evicted_at={
        "e-0": datetime.datetime(2026, 1, 1, 0, 1, 30, tzinfo=datetime.UTC)})) == []
    # the member not healthy again yet
    assert members.own_stale_entries(**_own_world(recovered=[])) == []
    world = _own_world()
    world["pods"]["e-2"] = {**pod("e-2", ready=False), "metadata": world["pods"]["e-2"]["metadata"]}
    assert members.own_stale_entries(**world) == []  # a member not serving: one more disruption would be two
    assert members.own_stale_entries(**_own_world(replicas=4)) == []  # a member missing
    # someone else's disruption in flight beside ours (its entry as new as its pod): the refusal stands
    world = _own_world()
    world["budget"]["status"]["disruptedPods"]["e-1"] = "2026-01-01T00:00:30Z"
    assert members.own_stale_entries(**world) == []
    # the entry is the live pod's own (not stale): nothing to prove
    world = _own_world()
    world["budget"]["status"]["disruptedPods"]["e-0"] = "2026-01-01T00:00:30Z"
    assert members.own_stale_entries(**world) == []
    assert members.own_stale_entries(**_own_world(budget=None)) == []


class NodeReader:
    """Answers ``get`` of Nodes from a table (None: absent), or refuses them all; counts what was asked."""

    def __init__(self, nodes: dict[str, dict[str, Any]] | None) -> None:
        self.nodes = nodes
        self.asked: list[str] = []

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        assert (api_version, kind, namespace) == ("v1", "Node", None)
        self.asked.append(name)
        if self.nodes is None:
            raise kube.Forbidden('nodes "x" is forbidden')
        return self.nodes.get(name)


def node(ready: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": message}]}}


def on(pod_obj: dict[str, Any], node_name: str) -> dict[str, Any]:
    return {**pod_obj, "spec": {"nodeName": node_name}}


async def test_only_the_nodes_of_pods_that_do_not_serve_are_read_and_not_ready_ones_named() -> None:
    pods = {"db-0": on(pod("db-0"), "node-1"), "db-1": on(pod("db-1", ready=False), "node-2"),
            "db-2": on(pod("db-2", ready=False), "node-3")}
    reader = NodeReader({"node-2": node("True", "KubeletReady"),
                         "node-3": node("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")})
    down = await members.down_nodes(reader, pods)  # type: ignore[arg-type]
    assert down == {"node-3": "NodeStatusUnknown: Kubelet stopped posting node status."}
    assert reader.asked == ["node-2", "node-3"]  # node-1's pod serves: not read
    views = await members.observe(None, pods, NAMES, timeout=1.0, nodes_down=down)
    assert [(v.node, v.node_down) for v in views] == [("node-1", ""), ("node-2", ""), ("node-3", down["node-3"])]


async def test_nodes_that_cannot_be_read_or_do_not_exist_count_as_ready() -> None:
    pods = {"db-0": on(pod("db-0", ready=False), "node-1")}
    assert await members.down_nodes(NodeReader(None), pods) == {}  # type: ignore[arg-type]
    assert await members.down_nodes(NodeReader({}), pods) == {}  # type: ignore[arg-type]
