"""StatefulSet controller + kubelet against the sandbox API server, on real etcd processes.

We test: a plain 3-member etcd StatefulSet (headless Service, downward-API env, ``--initial-cluster`` with pod DNS
names, ``0.0.0.0`` listen URLs) comes up healthy; deleting one pod restarts exactly that member with its data
(same member ID, same data directory, the other members' processes untouched); the objects look as a real
cluster's do (PVCs Bound, pod identity, StatefulSet status); a Secret update reaches a pod's mounted files.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import aiohttp
import pytest

from opsmanager_sandbox import cluster, process
from tests.fixtures.sandbox_controllers import plain_etcd_statefulset
from tests.polling import aeventually

pytestmark = pytest.mark.slow


async def etcd_post(ip: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as sess:
        async with sess.post(f"http://{ip}:2379{path}", json=body or {}) as resp:
            return dict(await resp.json(content_type=None))


async def healthy(ip: str) -> bool:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as sess:
            async with sess.get(f"http://{ip}:2379/health") as resp:
                return resp.status == 200 and (await resp.json(content_type=None)).get("health") == "true"
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False


async def test_plain_etcd_statefulset_is_healthy_and_a_deleted_member_comes_back_with_its_data(
        full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox
    await sb.apply(plain_etcd_statefulset())
    pods = await sb.wait_ready_pods("default", "app.kubernetes.io/name=etcd", 3, timeout=30)
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    assert len(set(ips.values())) == 3
    for ip in ips.values():
        assert await healthy(ip)
    members = (await etcd_post(ips["etcd-0"], "/v3/cluster/member/list"))["members"]
    assert sorted(m["name"] for m in members) == ["etcd-0", "etcd-1", "etcd-2"]
    assert {m["name"]: m["peerURLs"] for m in members}["etcd-1"] == ["http://etcd-1.etcd.default.svc:2380"]

    sts = await sb.client.get("apps/v1", "StatefulSet", "default", "etcd")
    assert sts["status"]["readyReplicas"] == 3 and sts["status"]["currentRevision"] == sts["status"]["updateRevision"]
    claims = await sb.client.list("v1", "PersistentVolumeClaim", "default")
    assert sorted((c["metadata"]["name"], c["status"]["phase"]) for c in claims) == [
        ("data-etcd-0", "Bound"), ("data-etcd-1", "Bound"), ("data-etcd-2", "Bound")]
    pod1 = await sb.client.get("v1", "Pod", "default", "etcd-1")
    assert pod1["spec"]["nodeName"] == "sandbox" and pod1["spec"]["subdomain"] == "etcd"

    assert sb.kubelet is not None
    pids = sb.kubelet.pids()
    member1 = (await etcd_post(ips["etcd-1"], "/v3/maintenance/status"))["header"]["member_id"]
    data_dirs = sorted((sb.dir / "pvc" / "default").iterdir())
    started = time.monotonic()
    await sb.client.delete("v1", "Pod", "default", "etcd-1")

    async def replaced() -> bool:
        pod = await sb.client.get("v1", "Pod", "default", "etcd-1")
        return bool(pod and pod["metadata"]["uid"] != pod1["metadata"]["uid"]
                    and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in (pod.get("status") or {}).get("conditions") or []))

    await aeventually(replaced, timeout=30, interval=0.05, what="etcd-1 recreated and Ready")
    restart_seconds = time.monotonic() - started
    new_pids = sb.kubelet.pids()
    assert new_pids[("default", "etcd-0", "etcd")] == pids[("default", "etcd-0", "etcd")]
    assert new_pids[("default", "etcd-2", "etcd")] == pids[("default", "etcd-2", "etcd")]
    assert new_pids[("default", "etcd-1", "etcd")] != pids[("default", "etcd-1", "etcd")]
    pod1_new = await sb.client.get("v1", "Pod", "default", "etcd-1")
    assert pod1_new["status"]["podIP"] == ips["etcd-1"]  # same name, same address
    assert (await etcd_post(ips["etcd-1"], "/v3/maintenance/status"))["header"]["member_id"] == member1
    assert sorted((sb.dir / "pvc" / "default").iterdir()) == data_dirs
    for ip in ips.values():
        assert await aeventually(lambda ip=ip: healthy(ip), timeout=10)
    # etcdctl inside the restarted member's container, against its own "localhost"
    code, out = await sb.exec("default", "etcd-1", "etcd", ["etcdctl", "--endpoints=http://127.0.0.1:2379",
                                                            "member", "list"])
    assert code == 0 and out.count("started") == 3, out
    assert "ready to serve client requests" in sb.logs("default", "etcd-1", "etcd")
    print(f"\nmeasured: delete etcd-1 -> replacement Ready in {restart_seconds:.2f}s")


async def test_secret_update_reaches_the_mounted_files(full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox

    def secret(text: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "certs", "namespace": "default"},
                "data": {"tls.crt": base64.b64encode(text.encode()).decode()}}

    await sb.apply(secret("v1"))
    await sb.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader", "namespace": "default"},
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                        "name": "main", "image": "registry.k8s.io/etcd:3.5.1-0",
                        "command": ["/bin/sh", "-c", "exec sleep 300"],
                        "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs"}]}],
                        "volumes": [{"name": "certs", "secret": {"secretName": "certs"}}]}})
    assert sb.kubelet is not None
    pid = await aeventually(lambda: sb.kubelet.pids().get(("default", "reader", "main")), timeout=15)

    async def seen() -> str:
        code, out = await process.exec_in(pid, ["cat", "/etc/certs/tls.crt"], {"PATH": "/usr/bin:/bin"}, 5)
        return out.decode() if code == 0 else ""

    assert await aeventually(seen, timeout=10) == "v1"
    await sb.apply(secret("v2"))
    assert await aeventually(lambda: _eq(seen(), "v2"), timeout=10, what="updated Secret visible in the container")


async def _eq(value: Any, expected: str) -> bool:
    return (await value) == expected
