"""The product installed with ``kubectl apply -k deploy/`` on real nodes: the operator and the webhook run as
containers of the operator's own image (made from the Dockerfile's recipe, ``realnodes/operator_image.py``), under
their ServiceAccounts with the kubelet's projected tokens, reaching kube-apiserver through the ``kubernetes``
Service (kube-proxy) and the members through the pod network.

We test these aspects:
- the operator's pods run the image (a sha256 image ID) with its own root file system (Debian's python3, the product
  installed in it, not this machine's interpreter);
- the operator resolves a member's DNS name through cluster DNS, and a name outside the cluster is refused at once
  as no such name;
- an add-TLS through the installed operator under a live writer: 0 failed writes, every write read back, HashKV
  agreeing.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager_sandbox import install as sandbox_install
from tests.e2e import rbac

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # One node: what is tested here is the image and the pod network, not spreading (test_real_nodes.py does
    # that); a node's kubelet, containerd and CoreDNS less keep the machine's other test workers on time.
    async with scenario.Scenario(tmp_path_factory.mktemp("real-install"), install=rbac.BUNDLE, control_plane="kubernetes",
                                 nodes=1) as s:
        await s.ca_issuer("ca-a")
        yield s


def _kubectl(sc: scenario.Scenario, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(sc.sandbox.kubeconfig), *args], capture_output=True,
                          text=True, timeout=60)


def kubectl(sc: scenario.Scenario, *args: str) -> str:
    done = _kubectl(sc, *args)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def _operator_exec(pod: str, *argv: str) -> tuple[str, ...]:
    return ("exec", "-n", sandbox_install.NAMESPACE, pod, "-c", "operator", "--", *argv)


async def _operator_pod(sc: scenario.Scenario) -> dict[str, Any]:
    pods = await sandbox_install.operator_pods(sc.sandbox.client)
    assert pods, "no Ready operator pod"
    return pods[0]


def _in_operator(sc: scenario.Scenario, pod: str, *argv: str) -> str:
    return kubectl(sc, *_operator_exec(pod, *argv))


async def test_the_operator_runs_from_its_image_with_its_own_root_file_system(sc: scenario.Scenario) -> None:
    pod = await _operator_pod(sc)
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == "operator"]
    assert status["image"].endswith("opsmanager:0.1.0"), status
    assert "sha256:" in status["imageID"], status
    name = pod["metadata"]["name"]
    release = _in_operator(sc, name, "cat", "/etc/os-release")
    assert "bookworm" in release, release
    where = _in_operator(sc, name, "python3", "-c", "import opsmanager, sys; print(opsmanager.__file__, sys.executable)")
    assert where.startswith("/usr/local/lib/python3.11/dist-packages/opsmanager/"), where
    assert str(Path(__file__).resolve().parents[2]) not in where
    uid = _in_operator(sc, name, "id", "-u")
    assert uid.strip() == "65532", uid


async def test_the_operator_resolves_a_members_dns_name(sc: scenario.Scenario) -> None:
    db = "named"
    await sc.fresh_etcd(db)
    member = naming.pods(db, 3)[0]
    want = (await sc.k.get("v1", "Pod", sc.namespace, member))["status"]["podIP"]  # type: ignore[index]
    fqdn = naming.pod_fqdn(db, sc.namespace, member)
    pod = (await _operator_pod(sc))["metadata"]["name"]
    answers: list[str] = []

    async def resolved() -> bool:
        # A Ready member is in its Service's EndpointSlice a moment before CoreDNS's watch has it: poll. The
        # resolver's error is kept, so a name that never resolves says why (NXDOMAIN, or DNS unreachable).
        done = await asyncio.to_thread(_kubectl, sc, *_operator_exec(
            pod, "python3", "-c", f"import socket; print(socket.gethostbyname({fqdn!r}))"))
        answers.append((done.stdout or done.stderr).strip().splitlines()[-1] if (done.stdout or done.stderr) else "")
        return done.returncode == 0

    try:
        await sc.wait_for(f"{fqdn} resolving in the operator's pod", resolved, timeout=30, interval=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}; the resolver said: {answers[-3:]}") from None
    assert answers[-1] == want, (fqdn, answers)
    # Outside the cluster's zones the answer is "no such name", not "try again": nothing is forwarded out, and a
    # resolver that got SERVFAIL would retry and report a temporary failure instead.
    outside = _in_operator(sc, pod, "python3", "-c", "import socket\ntry:\n socket.gethostbyname('nowhere.example')"
                           "\nexcept socket.gaierror as e:\n print(e.errno == socket.EAI_NONAME, e)")
    assert outside.startswith("True"), outside
    await sc.drop_etcd(db)


async def test_add_tls_through_the_installed_operator_loses_no_write(sc: scenario.Scenario) -> None:
    db = "secured"
    await sc.fresh_etcd(db)
    result = await sc.operate(f"{db}-add-tls", db, "ReconfigureTLS", timeout=300,
                              tls={"issuerRef": {**ISSUER, "name": "ca-a"}})
    assert result.phase == constants.PHASE_SUCCESSFUL, result.failure
    await sc.assert_no_loss(result, db=db)
