"""``opsmanager sandbox up`` as a user runs it: a separate process, a 3-member etcd StatefulSet applied from a
file, healthy (the time it took is printed, not asserted), visible to kubectl, and nothing left running after SIGTERM (checked by PID).
Also: ``Sandbox`` stops every process when the body of ``async with`` raises."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from opsmanager.backup import store
from opsmanager_sandbox import cluster
from tests.fixtures.sandbox_controllers import plain_etcd_statefulset
from tests.polling import aeventually, eventually

pytestmark = pytest.mark.slow


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return dict(json.load(resp))


def _healthy(ip: str) -> bool:
    try:
        return _get(f"http://{ip}:2379/health").get("health") == "true"
    except OSError:
        return False


def _pids_under(root: Path) -> list[int]:
    """Processes whose root directory or working directory lies under ``root`` (sandbox containers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for link in ("root", "cwd"):
            try:
                if os.readlink(f"/proc/{entry}/{link}").startswith(str(root)):
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_sandbox_up_runs_a_healthy_cluster_and_leaves_nothing_behind(tmp_path: Path) -> None:
    manifest = tmp_path / "etcd.yaml"
    manifest.write_text(yaml.safe_dump_all(plain_etcd_statefulset()))
    state = tmp_path / "state"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "opsmanager", "sandbox", "up", "--dir", str(state),
                             "--no-operator", "--apply", str(manifest)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    container_pids: list[int] = []
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "stop with Ctrl-C" in line:
                break
        output = "".join(lines)
        assert f"export KUBECONFIG={state / 'kubeconfig'}" in output, output
        kubeconfig = yaml.safe_load((state / "kubeconfig").read_text())
        url = kubeconfig["clusters"][0]["cluster"]["server"]

        def healthy_ips() -> list[str]:
            pods = _get(f"{url}/api/v1/namespaces/default/pods")["items"]
            ips = [p["status"]["podIP"] for p in pods if p.get("status", {}).get("podIP")]
            return ips if len(ips) == 3 and all(_healthy(ip) for ip in ips) else []

        ips = eventually(healthy_ips, timeout=60, interval=0.1, what="3 pods with healthy etcd")
        print(f"\nmeasured: `sandbox up` to a healthy 3-member etcd cluster in {time.monotonic() - started:.2f}s")
        pods = _get(f"{url}/api/v1/namespaces/default/pods")["items"]
        container_pids = [int(cs["containerID"].split("://")[1]) for p in pods
                          for cs in p["status"]["containerStatuses"]]
        assert len(container_pids) == 3 and all(_alive(pid) for pid in container_pids)
        assert len(ips) == 3

        def kubectl_sees_3_of_3() -> bool:  # READY comes from the pods' readiness probes (period 1 s)
            out = subprocess.run(["/usr/bin/kubectl", "--kubeconfig", str(state / "kubeconfig"), "--cache-dir",
                                  str(tmp_path / "kube-cache"), "get", "statefulset", "etcd", "--no-headers"],
                                 capture_output=True, text=True, timeout=30, env=dict(os.environ, HOME=str(tmp_path)))
            assert out.returncode == 0, out.stderr
            return "3/3" in out.stdout

        eventually(kubectl_sees_3_of_3, timeout=10, interval=0.1, what="kubectl showing 3/3 READY")
        logs = subprocess.run(["/usr/bin/kubectl", "--kubeconfig", str(state / "kubeconfig"), "--cache-dir",
                               str(tmp_path / "kube-cache"), "logs", "etcd-0", "--tail", "50"],
                              capture_output=True, text=True, timeout=30, env=dict(os.environ, HOME=str(tmp_path)))
        assert logs.returncode == 0 and '"msg":"ready to serve client requests"' in logs.stdout, logs.stderr
    finally:
        rc = _terminate(proc, timeout=30)
    assert rc == 0, proc.stderr.read() if proc.stderr else ""
    assert [pid for pid in container_pids if _alive(pid)] == []
    assert _pids_under(state) == []


async def test_sandbox_stops_its_pods_when_the_body_raises(tmp_path: Path) -> None:
    pids: dict[Any, int] = {}
    with pytest.raises(RuntimeError, match="boom"):
        async with cluster.Sandbox(dir=tmp_path / "sb", crds_dir=None, shutdown_grace=1.0) as sb:
            await sb.apply(plain_etcd_statefulset(replicas=1))
            assert sb.kubelet is not None
            pids = await aeventually(lambda: sb.kubelet.pids() if sb.kubelet else None, timeout=15)
            raise RuntimeError("boom")
    assert pids and [pid for pid in pids.values() if _alive(pid)] == []
    assert _pids_under(tmp_path / "sb") == []


@pytest.mark.parametrize("extra,message", [
    (["--install", "nowhere"], "--install nowhere: no kustomization.yaml there; give the bundle's directory"),
    (["--install", "deploy", "--no-operator"], "--install and --no-operator exclude each other"),
])
def test_sandbox_up_install_refuses_bad_arguments_naming_the_fix(tmp_path: Path, extra: list[str],
                                                                  message: str) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "opsmanager", "sandbox", "up", "--dir", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr


def test_sandbox_up_install_runs_the_bundle_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """``opsmanager sandbox up --install deploy/``: the README's command, as a user runs it."""
    root = Path(__file__).resolve().parents[2]
    state = tmp_path / "state"
    proc = _up(state, "--install", str(root / "deploy"), cwd=tmp_path)
    try:
        output = _until_up(proc)
        assert "https://" in output and "install(" in output, output
        out = subprocess.run(["/usr/bin/kubectl", "--kubeconfig", str(state / "kubeconfig"), "--cache-dir",
                              str(tmp_path / "kube-cache"), "-n", "opsmanager-system", "get", "deployments",
                              "--no-headers"], capture_output=True, text=True, timeout=30,
                             env=dict(os.environ, HOME=str(tmp_path)))
        assert out.returncode == 0, out.stderr
        ready = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()}
        assert ready == {"opsmanager-operator": "2/2", "opsmanager-webhook": "2/2"}, out.stdout
        endpoints = json.loads((state / "endpoints.json").read_text())
        assert _get_text(endpoints["operatorMetrics"]).count("# TYPE") > 0  # served on the pod's IP
    finally:
        rc = _terminate(proc, timeout=60)
    assert rc == 0, proc.stderr.read() if proc.stderr else ""
    assert _pids_under(state) == []


def test_sandbox_up_object_store_serves_the_printed_bucket_with_the_secrets_keys(tmp_path: Path) -> None:
    """``opsmanager sandbox up --object-store`` (the demo's way to try backups): the S3 endpoint it prints serves
    the bucket ``backups`` to the keys in Secret ``default/s3`` — an object written there reads back — and the
    server stops with the sandbox."""
    state = tmp_path / "state"
    proc = _up(state, "--no-operator", "--object-store", cwd=tmp_path)
    try:
        output = _until_up(proc)
        found = re.search(r"S3 store: (http://127\.0\.0\.1:\d+) \(bucket backups; Secret default/s3", output)
        assert found is not None, output
        url = yaml.safe_load((state / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
        data = _get(f"{url}/api/v1/namespaces/default/secrets/s3")["data"]
        keys = {k: base64.b64decode(v).decode() for k, v in data.items()}
        with store.ObjectStore(found.group(1), "backups", access_key_id=keys["accessKeyId"],
                               secret_access_key=keys["secretAccessKey"], prefix="try") as bucket:
            sample = tmp_path / "sample"
            sample.write_bytes(b"snapshot bytes")
            bucket.upload(sample, bucket.key("sample.db"))
            bucket.download(bucket.key("sample.db"), tmp_path / "back")
            assert (tmp_path / "back").read_bytes() == b"snapshot bytes"
        assert _pids_under(state), "the S3 server runs under the sandbox's directory"
    finally:
        rc = _terminate(proc, timeout=60)
    assert rc == 0, proc.stderr.read() if proc.stderr else ""
    assert _pids_under(state) == []


def _up(state: Path, *args: str, cwd: Path) -> subprocess.Popen[str]:
    """``opsmanager sandbox up --dir <state> <args>`` as a separate process, its output piped."""
    return subprocess.Popen([sys.executable, "-m", "opsmanager", "sandbox", "up", "--dir", str(state), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)


def _until_up(proc: subprocess.Popen[str]) -> str:
    """What it printed up to the line that says how to stop it (it is up then)."""
    assert proc.stdout is not None
    output = ""
    for line in proc.stdout:
        output += line
        if "stop with Ctrl-C" in line:
            break
    return output


def _terminate(proc: subprocess.Popen[str], timeout: float) -> int:
    """SIGTERM (what Ctrl-C or a service manager sends), then the exit code; SIGKILL if it does not stop."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return str(resp.read().decode())
