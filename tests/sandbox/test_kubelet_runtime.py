"""The kubelet's process runtime on real etcd processes, without an API server (``StandaloneHost``).

We test: an etcd pod comes up on its own loopback IP with downward-API env, ``$(VAR)`` expansion, ``0.0.0.0``
binds and a pod DNS name resolved through its private /etc/hosts; a crash restarts it with its data (same member
ID) and the status shows it, then back-off; an unsupported image waits visibly; a Secret update reaches the
mounted files through the ``..data`` swap; deletion honours the grace period and SIGKILLs; a failing liveness
probe restarts the container.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
import time
from typing import Any

import aiohttp
import pytest

from opsmanager_sandbox import dns, kubelet, podworker, process
from tests.polling import aeventually
from tests.timing import abaseline, allowance

pytestmark = pytest.mark.slow


def etcd_pod(name: str = "etcd-0", **extra_container: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "etcd",
        "image": "quay.io/coreos/etcd:v3.5.1",
        "command": ["/usr/local/bin/etcd"],
        "args": [
            "--name=$(POD_NAME)", "--data-dir=/var/run/etcd/data",
            "--listen-client-urls=http://0.0.0.0:2379",
            "--advertise-client-urls=http://$(POD_NAME).etcd.$(POD_NAMESPACE).svc:2379",
            "--listen-peer-urls=http://0.0.0.0:2380",
            "--initial-advertise-peer-urls=http://$(POD_NAME).etcd.$(POD_NAMESPACE).svc.cluster.local:2380",
            "--initial-cluster=$(POD_NAME)=http://$(POD_NAME).etcd.$(POD_NAMESPACE).svc.cluster.local:2380",
        ],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "volumeMounts": [{"name": "data", "mountPath": "/var/run/etcd"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}, "periodSeconds": 1},
    }
    container.update(extra_container)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "etcd"}},
        "spec": {"hostname": name, "subdomain": "etcd", "terminationGracePeriodSeconds": 5,
                 "containers": [container],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}]},
    }


def add_claim(host: kubelet.StandaloneHost, name: str) -> None:
    host.put({"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default", "uid": name}})
    host.service_records[:] = [dns.ServiceRecord("default", "etcd", {"app": "etcd"}, publish_not_ready=True)]


async def member_id(ip: str) -> str:
    async with aiohttp.ClientSession() as sess:
        async with sess.post(f"http://{ip}:2379/v3/maintenance/status", json={}) as resp:
            return str((await resp.json(content_type=None))["header"]["member_id"])


def ctr_status(host: kubelet.StandaloneHost, pod: str = "etcd-0") -> dict[str, Any]:
    return host.statuses.get(pod, {}).get("containerStatuses", [{}])[0]


async def test_etcd_pod_runs_restarts_with_its_data_and_backs_off(standalone_kubelet: kubelet.StandaloneHost) -> None:
    host = standalone_kubelet
    add_claim(host, "data-etcd-0")
    worker = host.run_pod(etcd_pod())
    await aeventually(lambda: worker.ready, timeout=15, what="etcd pod ready")
    status = host.statuses["etcd-0"]
    assert status["phase"] == "Running" and status["podIP"] == worker.ip
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "PodReadyToStartContainers": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True",
        "PodScheduled": "True"}
    async with aiohttp.ClientSession() as sess, sess.get(f"http://{worker.ip}:2379/health") as resp:
        assert (await resp.json(content_type=None))["health"] == "true"
    first_id = await member_id(worker.ip)
    first_pid = worker.pids()["etcd"]
    # the data dir is the PVC directory on the host, seen by etcd at its mountPath
    assert list((host.config.dir / "pvc" / "default").glob("data-etcd-0-*/data/member/wal"))

    os.kill(first_pid, signal.SIGKILL)
    await aeventually(lambda: ctr_status(host).get("restartCount") == 1 and worker.ready, timeout=15,
                      what="restart after a crash")
    cs = ctr_status(host)
    assert cs["lastState"]["terminated"]["exitCode"] == 137 and cs["lastState"]["terminated"]["reason"] == "Error"
    assert worker.pids()["etcd"] != first_pid
    assert await member_id(worker.ip) == first_id  # same member: the data survived the restart

    os.kill(worker.pids()["etcd"], signal.SIGKILL)  # second crash: back-off (1 s in this fixture)
    await aeventually(lambda: ctr_status(host).get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff",
                      timeout=5, interval=0.01, what="CrashLoopBackOff")
    assert "back-off 1s restarting failed container=etcd pod=etcd-0_default" in \
        ctr_status(host)["state"]["waiting"]["message"]
    assert host.statuses["etcd-0"]["conditions"][3]["status"] == "False"  # Ready
    await aeventually(lambda: ctr_status(host).get("restartCount") == 2 and worker.ready, timeout=15)


async def test_unsupported_image_waits_visibly(standalone_kubelet: kubelet.StandaloneHost) -> None:
    host = standalone_kubelet
    pod = {"metadata": {"name": "web", "namespace": "default"},
           "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}
    host.run_pod(pod)
    await aeventually(lambda: ctr_status(host, "web").get("state", {}).get("waiting", {}).get("reason")
                      == "ImageNotSupportedBySandbox", timeout=5)
    assert host.statuses["web"]["phase"] == "Pending"
    assert any(reason == "Failed" and "nginx:1.27" in msg for _, _, reason, msg in host.recorder.recorded)


async def test_secret_update_reaches_mounted_files(standalone_kubelet: kubelet.StandaloneHost) -> None:
    host = standalone_kubelet

    def secret(value: bytes) -> dict[str, Any]:
        return {"kind": "Secret", "metadata": {"name": "certs", "namespace": "default"},
                "data": {"tls.crt": base64.b64encode(value).decode()}}

    host.put(secret(b"first"))
    pod = {"metadata": {"name": "reader", "namespace": "default"},
           "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
               "name": "sh", "image": "registry.k8s.io/etcd:3.5.1-0",
               # reads the file through the container's own view of the mount
               "command": ["/bin/sh", "-c", "while true; do cat /etc/certs/tls.crt > /tmp/seen; "
                           "cp /tmp/seen /out/seen.tmp && mv /out/seen.tmp /out/seen; sleep 0.05; done"],
               "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs", "readOnly": True},
                                {"name": "out", "mountPath": "/out"}]}],
               "volumes": [{"name": "certs", "secret": {"secretName": "certs"}}, {"name": "out", "emptyDir": {}}]}}
    worker = host.run_pod(pod)
    seen = worker.dir / "volumes" / "out" / "seen"
    await aeventually(lambda: seen.exists() and seen.read_bytes() == b"first", timeout=10)
    data_before = os.readlink(worker.dir / "volumes" / "certs" / "..data")
    host.put(secret(b"second"))
    await aeventually(lambda: seen.read_bytes() == b"second", timeout=10, what="updated Secret seen inside the container")
    assert os.readlink(worker.dir / "volumes" / "certs" / "..data") != data_before


async def test_a_pod_annotated_to_hold_its_volume_refresh_keeps_its_files_until_the_hold_is_lifted(
        standalone_kubelet: kubelet.StandaloneHost) -> None:
    """The test-only knob: ``sandbox.opsmanager.dev/hold-volume-refresh: "true"`` keeps a pod's Secret volume as it
    was while another pod mounting the same Secret gets the update; lifting the hold delivers it."""
    host = standalone_kubelet

    def secret(value: bytes) -> dict[str, Any]:
        return {"kind": "Secret", "metadata": {"name": "certs", "namespace": "default"},
                "data": {"tls.crt": base64.b64encode(value).decode()}}

    def pod(name: str, hold: bool) -> dict[str, Any]:
        annotations = {kubelet.ANNOTATION_HOLD_VOLUME_REFRESH: "true"} if hold else {}
        return {"metadata": {"name": name, "namespace": "default", "annotations": annotations},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "sh", "image": "registry.k8s.io/etcd:3.5.1-0", "command": ["/bin/sh", "-c", "sleep 60"],
                    "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs", "readOnly": True}]}],
                    "volumes": [{"name": "certs", "secret": {"secretName": "certs"}}]}}

    host.put(secret(b"first"))
    held, witness = host.run_pod(pod("held", True)), host.run_pod(pod("witness", False))
    held_file = held.dir / "volumes" / "certs" / "tls.crt"
    witness_file = witness.dir / "volumes" / "certs" / "tls.crt"
    await aeventually(lambda: held_file.exists() and witness_file.exists(), timeout=10, what="volumes laid out")
    host.put(secret(b"second"))
    await aeventually(lambda: witness_file.read_bytes() == b"second", timeout=10, what="the witness refreshed")
    await aeventually(lambda: held.held_refreshes == {("Secret", "certs")}, timeout=10, what="the refresh held")
    assert held_file.read_bytes() == b"first"
    lifted = pod("held", False)
    lifted["metadata"]["uid"] = held.uid
    held.update(lifted)
    await aeventually(lambda: held_file.read_bytes() == b"second", timeout=10, what="delivered once lifted")
    assert held.held_refreshes == frozenset()


def shell_pod(name: str, script: str, **container: Any) -> dict[str, Any]:
    """A one-container pod (``sh``) running ``script`` with a 1 s grace period and an emptyDir at /out."""
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "sh", "image": "registry.k8s.io/etcd:3.5.1-0", "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "out", "mountPath": "/out"}], **container}],
                "volumes": [{"name": "out", "emptyDir": {}}]}}


async def test_deletion_waits_the_grace_period_never_under_the_kubelets_window_then_kills(
        standalone_kubelet: kubelet.StandaloneHost) -> None:
    host = standalone_kubelet
    # Baseline: deleting a pod whose process ends on TERM, here and now (the slowest of three).
    obeying = [host.run_pod(shell_pod(f"obeys-{i}", "touch /out/started; exec sleep 1000")) for i in range(3)]
    await aeventually(lambda: all((w.dir / "volumes" / "out" / "started").exists() for w in obeying), timeout=10,
                      what="the TERM-obeying pods started")
    names = iter(w.pod["metadata"]["name"] for w in obeying)
    one_deletion = await abaseline(lambda: host.delete_pod(next(names)))

    worker = host.run_pod(shell_pod("stubborn", "trap '' TERM; touch /out/trapped; while true; do sleep 0.1; done"))
    # the shell can write its file before the runner has recorded it as running: wait for both
    await aeventually(lambda: (worker.dir / "volumes" / "out" / "trapped").exists() and "sh" in worker.pids(),
                      timeout=10, what="TERM ignored")
    pid = worker.pids()["sh"]
    started = time.monotonic()
    await host.delete_pod("stubborn")
    elapsed = time.monotonic() - started
    # The pod's grace is 1 s, under the kubelet's minimal window (2 s): SIGKILL at the window's end, not before
    # and not much later.
    window = podworker.MINIMUM_GRACE_SECONDS
    assert window == 2
    assert window - 0.1 <= elapsed < window + allowance(one_deletion), (elapsed, one_deletion)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_shorter_grace_cuts_a_deletion_in_progress_short(standalone_kubelet: kubelet.StandaloneHost) -> None:
    host = standalone_kubelet
    worker = host.run_pod(shell_pod("deaf", "trap '' TERM; touch /out/trapped; while true; do sleep 0.1; done"))
    # the shell can write its file before the runner has recorded it as running: wait for both
    await aeventually(lambda: (worker.dir / "volumes" / "out" / "trapped").exists() and "sh" in worker.pids(),
                      timeout=10, what="TERM ignored")
    pid = worker.pids()["sh"]
    long_deletion = asyncio.create_task(host.delete_pod("deaf", grace=60))
    await aeventually(lambda: worker.terminating, timeout=5, what="the 60 s deletion under way")
    started = time.monotonic()
    await host.delete_pod("deaf", grace=0.2)
    elapsed = time.monotonic() - started
    # The point: the second, shorter grace ends it (SIGKILL) instead of waiting out the first one's 60 s.
    assert elapsed < 60 / 4, elapsed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    await asyncio.wait_for(long_deletion, timeout=10)  # the first deletion ends with it


async def test_failing_liveness_probe_restarts_the_container(standalone_kubelet: kubelet.StandaloneHost) -> None:
    host = standalone_kubelet
    host.run_pod(shell_pod("sick", "exec sleep 1000", livenessProbe={
        "exec": {"command": ["/bin/sh", "-c", "test -e /tmp/healthy"]}, "periodSeconds": 1, "failureThreshold": 1}))
    await aeventually(lambda: ctr_status(host, "sick").get("restartCount", 0) >= 1, timeout=15, what="liveness restart")
    assert any(reason == "Killing" and "failed liveness probe" in msg for _, _, reason, msg in host.recorder.recorded)
    assert ctr_status(host, "sick")["lastState"]["terminated"]["exitCode"] in (137, 143)
    await asyncio.sleep(0)


async def test_a_pod_of_the_operator_image_runs_this_python_with_a_refreshed_service_account(
        standalone_kubelet: kubelet.StandaloneHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's image: this interpreter and package inside the pod's root, the service-account files at the
    in-cluster paths, the token re-issued before it expires, KUBERNETES_SERVICE_HOST/PORT set."""
    host = standalone_kubelet
    host.config.api_host, host.config.api_port, host.config.api_ca_pem = "127.0.0.1", 6443, b"CA PEM"
    issued: list[str] = []

    async def token(worker: kubelet.PodWorker) -> tuple[str, float]:
        issued.append(f"token-{len(issued)}-{worker.name}")
        return issued[-1], 0.5  # re-issued at 80 %: every 0.4 s

    monkeypatch.setattr(host, "service_account_token", token)
    script = ("import opsmanager, os, pathlib; d = pathlib.Path('/var/run/secrets/kubernetes.io/serviceaccount'); "
              "print('ns', (d / 'namespace').read_text(), 'ca', (d / 'ca.crt').read_text(), "
              "'api', os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT'], flush=True); "
              "import time; time.sleep(60)")
    pod = {"metadata": {"name": "op", "namespace": "default"},
           "spec": {"serviceAccountName": "operator", "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "operator", "image": "opsmanager:test",
                                    "command": [sys.executable, "-c", script]}]}}
    worker = host.run_pod(pod)
    log = host.config.logs_dir / "default" / "op" / "operator.log"
    await aeventually(lambda: log.exists() and "ns default ca CA PEM api 127.0.0.1 6443" in log.read_text(),
                      timeout=20, what="the container's output")
    pid = worker.pids()["operator"]

    async def token_inside() -> str:
        code, out = await process.exec_in(pid, ["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"],
                                          {"PATH": "/usr/bin:/bin"}, 10)
        assert code == 0, out
        return out.decode()

    first = await token_inside()
    assert first.startswith("token-") and first.endswith("-op")
    await aeventually(lambda: len(issued) >= 3, timeout=10, what="the token re-issued before it expires")
    assert await token_inside() != first
