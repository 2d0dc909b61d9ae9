"""The product on real nodes: three kubelets v1.37.2 over containerd 2.x and runc, a pod network in namespaces the
sandbox made, kube-proxy, CoreDNS (``opsmanager_sandbox.realnodes``), under the real control plane.

We test these aspects:
- the nodes are what a cluster's nodes are: Ready, the real kubelet and runtime, internal IPs in the cluster network;
- a 3-member Etcd's members land on three nodes (the product's default anti-affinity) with pod IPs its Services'
  EndpointSlices list, and answer through kube-proxy's ClusterIP and CoreDNS's names from inside a pod;
- ``kubectl logs`` and ``kubectl exec … etcdctl endpoint health`` reach a member through kube-apiserver and the
  kubelet;
- a member cut from its peers (nftables inside its pod's network namespace) during a Restart: what the operator does
  (it waits, naming the member, restarts nobody while the cut would cost the quorum), and that the request finishes
  once the cut heals, with no failed or lost write and HashKV agreeing;
- ``kubectl drain`` of a node holding a member during an add-TLS: both finish, no write fails, never fewer than
  two members Ready (the budget), the evicted member back on another node;
- a node that stops (kubelet, kube-proxy and containerd killed, its containers running on): the Etcd's Ready
  condition names the member on the NotReady node, and a Restart waits naming it, restarting nobody, until the
  node is back;
- a stopped sandbox leaves no process, network namespace, mount, cgroup or link behind.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager_sandbox import cluster as sandbox_cluster
from opsmanager_sandbox.realnodes import faults, network
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("real-nodes"), control_plane="kubernetes", nodes=3) as s:
        yield s


def kubectl(sc: scenario.Scenario, *args: str, timeout: float = 60.0) -> str:
    done = subprocess.run(["kubectl", "--kubeconfig", str(sc.sandbox.kubeconfig), *args], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


async def test_the_nodes_are_real_kubelets_on_containerd_in_the_cluster_network(sc: scenario.Scenario) -> None:
    plan = sc.sandbox.realnodes.plan
    nodes = json.loads(kubectl(sc, "get", "nodes", "-o", "json"))["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-1", "node-2", "node-3"]
    for n in nodes:
        status = n["status"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"]), status
        assert status["nodeInfo"]["kubeletVersion"] == "v1.37.2"
        assert status["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2."), status["nodeInfo"]
        internal = [a["address"] for a in status["addresses"] if a["type"] == "InternalIP"]
        assert len(internal) == 1 and ipaddress.ip_address(internal[0]) in plan.segment, internal
    wide = kubectl(sc, "get", "nodes", "-o", "wide")
    assert wide.count("containerd://2.") == 3 and wide.count(" Ready ") == 3, wide


async def test_members_run_on_three_nodes_with_pod_ips_their_endpoint_slices_list(sc: scenario.Scenario) -> None:
    plan = sc.sandbox.realnodes.plan
    db = "spread"
    await sc.fresh_etcd(db)
    pods = [await sc.k.get("v1", "Pod", sc.namespace, p) for p in naming.pods(db, 3)]
    assert len({p["spec"]["nodeName"] for p in pods}) == 3, [p["spec"]["nodeName"] for p in pods]
    ips = {p["status"]["podIP"] for p in pods}
    for ip in ips:
        address = ipaddress.ip_address(ip)
        assert not address.is_loopback and address in plan.pods, ip

    async def listed() -> bool:
        for service in (naming.client_service(db), naming.headless_service(db)):
            slices = await sc.k.list("discovery.k8s.io/v1", "EndpointSlice", sc.namespace,
                                     label_selector=f"kubernetes.io/service-name={service}")
            found = {a for s in slices for e in s.get("endpoints") or () for a in e["addresses"]}
            if found != ips:
                return False
        return True

    sc.k.resources.add(sandbox_cluster.ENDPOINT_SLICES)
    await aeventually(listed, timeout=30, what="the Services' EndpointSlices list the three pod IPs")


async def test_kubectl_logs_and_exec_reach_a_member_through_the_kubelet(sc: scenario.Scenario) -> None:
    db = "spread"
    pod = naming.pods(db, 3)[0]
    logs = kubectl(sc, "logs", "-n", sc.namespace, pod, "-c", naming.CONTAINER_NAME)
    assert "ready to serve client requests" in logs, logs[-2000:]
    health = kubectl(sc, "exec", "-n", sc.namespace, pod, "-c", naming.CONTAINER_NAME, "--",
                     "etcdctl", "endpoint", "health", "--cluster")
    assert health.count("is healthy") == 3, health


async def test_a_pod_reaches_the_members_by_service_name_through_dns_and_kube_proxy(sc: scenario.Scenario) -> None:
    db = "spread"
    pod = naming.pods(db, 3)[1]
    service = f"http://{naming.client_service(db)}.{sc.namespace}.svc.cluster.local:{naming.CLIENT_PORT}"
    out = kubectl(sc, "exec", "-n", sc.namespace, pod, "-c", naming.CONTAINER_NAME, "--",
                  "etcdctl", f"--endpoints={service}", "put", "via-service", "yes")
    assert out.strip() == "OK", out
    member = f"http://{naming.pod_fqdn(db, sc.namespace, naming.pods(db, 3)[2])}:{naming.CLIENT_PORT}"
    got = kubectl(sc, "exec", "-n", sc.namespace, pod, "-c", naming.CONTAINER_NAME, "--",
                  "etcdctl", f"--endpoints={member}", "get", "via-service", "--print-value-only")
    assert got.strip() == "yes", got


async def _a_follower(sc: scenario.Scenario, db: str) -> str:
    client = await sc.plain_client(db)
    try:
        statuses = await client.statuses(timeout=5)
    finally:
        await client.close()
    return next(name for name, st in sorted(statuses.items(), reverse=True) if not getattr(st, "is_leader", True))


async def _condition_messages(sc: scenario.Scenario, request: str) -> list[str]:
    req = await sc.request(request) or {}
    return [f"{c['type']}={c['status']}: {c.get('message', '')}" for c in (req.get("status") or {}).get("conditions")
            or ()]


async def test_a_restart_waits_while_a_member_is_cut_from_its_peers_and_finishes_once_it_heals(
        sc: scenario.Scenario) -> None:
    db = "cut"
    await sc.fresh_etcd(db)
    victim = await _a_follower(sc, db)  # a cut leader costs an election of its own, before the operator does a thing
    pod = await sc.k.get("v1", "Pod", sc.namespace, victim)
    cut = faults.Cut(await sc.sandbox.realnodes.container_pid(pod, naming.CONTAINER_NAME),
                     ports=(naming.PEER_PORT_HTTP, naming.PEER_PORT_HTTPS))
    async def uids() -> dict[str, str]:
        return {p: (await sc.k.get("v1", "Pod", sc.namespace, p) or {}).get("metadata", {}).get("uid", "")
                for p in naming.pods(db, 3)}

    before = await uids()
    async with sc.live(db) as (w, _mon):
        cut.apply()
        try:
            await sc.submit("restart-cut", db, "Restart")

            async def waits_naming_the_victim() -> bool:
                return any(victim in m and "=False" in m for m in await _condition_messages(sc, "restart-cut"))

            await aeventually(waits_naming_the_victim, timeout=120,
                              what=f"the Restart waits, naming the cut member {victim}")
            waiting = await _condition_messages(sc, "restart-cut")
            req = await sc.request("restart-cut") or {}
            assert (req.get("status") or {}).get("phase") != constants.PHASE_SUCCESSFUL, waiting
            # a restart now would leave one healthy member of three: nobody was restarted
            assert await uids() == before, waiting
        finally:
            cut.heal()
        final = await sc.watch_request("restart-cut", timeout=240)
        assert final["status"]["phase"] == constants.PHASE_SUCCESSFUL, await _condition_messages(sc, "restart-cut")
    after = await uids()
    assert all(after[p] != before[p] for p in before), "every member was restarted once the cut healed"
    print("while cut:", *waiting, sep="\n  ")
    assert w.result is not None and w.result.failed == 0, w.result
    await sc.consistency(db, w)


async def test_a_node_drained_during_an_add_tls_both_finish_within_the_budget(sc: scenario.Scenario) -> None:
    db = "drained"
    await sc.fresh_etcd(db)
    await sc.ca_issuer("ca-drain")
    # A follower's node: evicting the leader from outside costs an election that no operator step can move
    # first (docs/operations.md, "A drain that evicts the leader").
    victim = await _a_follower(sc, db)
    node = (await sc.k.get("v1", "Pod", sc.namespace, victim))["spec"]["nodeName"]  # type: ignore[index]
    fewest = 3

    async def count_ready() -> None:
        nonlocal fewest
        while True:
            pods = [await sc.k.get("v1", "Pod", sc.namespace, p) for p in naming.pods(db, 3)]
            ready = sum(1 for p in pods if p and not p["metadata"].get("deletionTimestamp") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or ()))
            fewest = min(fewest, ready)
            await asyncio.sleep(0.1)  # the sampling interval

    async with sc.live(db) as (w, _mon):
        counter = asyncio.create_task(count_ready())
        try:
            await sc.submit("drained-add-tls", db, "ReconfigureTLS",
                            tls={"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca-drain"}})
            drained = await asyncio.to_thread(
                subprocess.run, ["kubectl", "--kubeconfig", str(sc.sandbox.kubeconfig), "drain", node,
                                 "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=240s"],
                capture_output=True, text=True, timeout=300)
            final = await sc.watch_request("drained-add-tls", timeout=300)
        finally:
            counter.cancel()
            kubectl(sc, "uncordon", node)
    print(drained.stdout[-2000:], drained.stderr[-2000:])
    assert drained.returncode == 0, drained.stderr
    assert f"pod/{victim} evicted" in drained.stdout, drained.stdout
    assert final["status"]["phase"] == constants.PHASE_SUCCESSFUL, await _condition_messages(sc, "drained-add-tls")
    assert fewest >= 2, f"{fewest} members Ready at one point: the budget allows one disruption"
    moved = (await sc.k.get("v1", "Pod", sc.namespace, victim))["spec"]["nodeName"]  # type: ignore[index]
    assert moved != node, "the evicted member came back on the cordoned node"
    assert w.result is not None and w.result.failed == 0, w.result
    await sc.consistency(db, w)


async def test_a_stopped_node_is_named_and_a_restart_waits_for_it_saying_so(sc: scenario.Scenario) -> None:
    db = "stranded"
    await sc.fresh_etcd(db)
    victim = naming.pods(db, 3)[1]
    pod = await sc.k.get("v1", "Pod", sc.namespace, victim)
    node = pod["spec"]["nodeName"]
    named = f"{victim} is on node {node}, which is not Ready"
    await sc.sandbox.realnodes.stop_node(node)
    try:
        async def etcd_names_it() -> str:
            etcd = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db) or {}
            ready = [c for c in (etcd.get("status") or {}).get("conditions") or () if c["type"] == "Ready"]
            return ready[0]["message"] if ready and named in ready[0]["message"] else ""

        message = await aeventually(etcd_names_it, timeout=90, what=f"the Etcd's Ready condition naming {named}")
        print("Etcd:", message)
        before = (await sc.k.get("v1", "Pod", sc.namespace, victim))["metadata"]["uid"]  # type: ignore[index]
        await sc.submit("restart-stranded", db, "Restart")

        async def request_names_it() -> list[str]:
            return [m for m in await _condition_messages(sc, "restart-stranded") if named in m]

        waiting = await aeventually(request_names_it, timeout=60, what=f"the Restart waiting, naming {named}")
        print("request:", *waiting)
        pods = [await sc.k.get("v1", "Pod", sc.namespace, p) for p in naming.pods(db, 3)]
        assert not [p for p in pods if p is None or p["metadata"].get("deletionTimestamp")], \
            "a member was restarted while another's node was down"
        assert (await sc.k.get("v1", "Pod", sc.namespace, victim))["metadata"]["uid"] == before  # type: ignore[index]
    finally:
        await sc.sandbox.realnodes.start_node(node, sc.sandbox.kubernetes)
    final = await sc.watch_request("restart-stranded", timeout=300)
    assert final["status"]["phase"] == constants.PHASE_SUCCESSFUL, await _condition_messages(sc, "restart-stranded")


async def test_a_stopped_sandbox_leaves_nothing_behind(tmp_path: Path) -> None:
    sb = sandbox_cluster.Sandbox(dir=tmp_path / "sb", control_plane="kubernetes", nodes=1)
    await sb.start()
    try:
        index = sb.realnodes.plan.index
        assert network.cgroup_pids(sb.realnodes.plan.tag), "the node runs processes in its cgroups"
        assert network.leftovers(index)
    finally:
        await sb.stop()
    assert network.leftovers(index) == []
    lingering = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(tmp_path) in line]
    assert lingering == []
