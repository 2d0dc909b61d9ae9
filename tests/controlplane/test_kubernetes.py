"""The real control plane (issue 24): kube-apiserver, kube-controller-manager, kube-scheduler and etcd built from
their Go modules (``make controlplane``), run as local processes.

We test these aspects:
- ``kubectl version`` shows the pinned release and ``/readyz?verbose`` passes every check;
- the controller manager and the scheduler work (a namespace gets its ``default`` ServiceAccount, a Deployment its
  ReplicaSet and pods, which wait for a node: there is none);
- cert-manager's real CRDs and ours are established by the real API server, and every CEL rule of our CRDs is
  evaluated by it: one case per rule, a case for every rule in ``crds/`` (so a new rule needs a case);
- the pinned go.mod's replace list is what the release's own go.mod calls for;
- stopping leaves no process behind.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import yaml

from opsmanager import kube
from opsmanager.api import constants
from opsmanager_sandbox import realcp
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

REPO = pathlib.Path(__file__).resolve().parents[2]
NS = "cel"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[realcp.KubernetesControlPlane]:
    async with realcp.KubernetesControlPlane(tmp_path_factory.mktemp("kubernetes")) as plane:
        yield plane


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def k(cp: realcp.KubernetesControlPlane) -> AsyncIterator[kube.Kube]:
    client = kube.Kube.for_url(cp.url, token=cp.admin_token, ca_path=str(cp.ca_file))
    yield client
    await client.close()


async def kubectl(cp: realcp.KubernetesControlPlane, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec("kubectl", "--kubeconfig", str(cp.kubeconfig), *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_kubectl_shows_the_pinned_release_and_readyz_passes_every_check(cp: realcp.KubernetesControlPlane) -> None:
    pinned = realcp.build_module().COMPONENTS["kubernetes"].version()
    code, out, err = await kubectl(cp, "version", "-o", "yaml")
    assert code == 0, err
    assert yaml.safe_load(out)["serverVersion"]["gitVersion"] == pinned
    code, out, err = await kubectl(cp, "get", "--raw", "/readyz?verbose")
    assert code == 0, err
    checks = [line for line in out.splitlines() if line.startswith("[")]
    assert len(checks) > 20 and all(line.startswith("[+]") for line in checks), out
    assert out.strip().endswith("readyz check passed")


async def test_the_controller_manager_and_the_scheduler_run(k: kube.Kube) -> None:
    await k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "controllers"}})
    await aeventually(lambda: k.get("v1", "ServiceAccount", "controllers", "default"), timeout=60,
                      what="the ServiceAccount controller's default ServiceAccount")
    labels = {"app": "probe"}
    await k.create({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "probe", "namespace": "controllers"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                             "template": {"metadata": {"labels": labels},
                                          "spec": {"containers": [{"name": "c", "image": "none"}]}}}})

    async def unschedulable() -> bool:
        pods = await k.list("v1", "Pod", "controllers", label_selector="app=probe")
        return any(c.get("reason") == "Unschedulable" for p in pods
                   for c in (p.get("status") or {}).get("conditions") or ())

    await aeventually(unschedulable, timeout=60, what="a Deployment's pod, judged by the scheduler (no node)")


CRD_NAMES = ["certificates.cert-manager.io", "issuers.cert-manager.io", "clusterissuers.cert-manager.io",
             f"{constants.ETCD_PLURAL}.{constants.ETCD_GROUP}", f"{constants.OPS_PLURAL}.{constants.OPS_GROUP}"]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def crds(cp: realcp.KubernetesControlPlane) -> list[str]:
    """cert-manager's CRDs and ours, applied with kubectl (server-side: the largest exceed the annotation limit)."""
    for path in (realcp.cert_manager_crds(), REPO / "crds"):
        code, _, err = await kubectl(cp, "apply", "--server-side", "-f", str(path))
        assert code == 0, err
    return CRD_NAMES


async def test_cert_managers_crds_and_ours_are_established(cp: realcp.KubernetesControlPlane,
                                                           crds: list[str]) -> None:
    code, _, err = await kubectl(cp, "wait", "--for=condition=Established", "--timeout=60s",
                                 *[f"crd/{n}" for n in crds])
    assert code == 0, err


def etcd(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
            "metadata": {"name": name, "namespace": NS},
            "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3, "storageType": "Durable",
                     "deletionPolicy": "WipeOut", **spec}}


ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}
SECRETS = {"server": "s", "peer": "p", "client": "c"}
# One case per CEL rule of crds/: (rule message, object to create, merge patch to apply after it or None).
CEL_CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("spec is immutable",
     {"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND, "metadata": {"name": "r", "namespace": NS},
      "spec": {"type": "Restart", "databaseRef": {"name": "db"}}},
     {"spec": {"type": "MoveLeader"}}),
    ("number of replicas can not be less than 1", etcd("zero", replicas=0), None),
    ("spec.storageType is immutable", etcd("storage"), {"spec": {"storageType": "Ephemeral"}}),
    ("spec.tls.issuerRef is missing", etcd("noissuer", tls={}), None),
    ("spec.tls.issuerRef and spec.tls.externalSecrets are mutually exclusive",
     etcd("both", tls={"issuerRef": ISSUER, "externalSecrets": SECRETS}), None),
    ("spec.tls.certificates cannot be used with spec.tls.externalSecrets",
     etcd("certs", tls={"externalSecrets": SECRETS, "certificates": [{"alias": "server", "duration": "10m"}]}), None),
]


def crd_rules() -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.extend(r.get("message", r["rule"]) for r in node.get("x-kubernetes-validations") or ())
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted((REPO / "crds").glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()))
    return found


async def test_every_cel_rule_of_the_crds_has_a_case() -> None:
    rules = crd_rules()
    assert rules
    cased = [message for message, _, _ in CEL_CASES]
    assert [r for r in rules if not any(r.startswith(c) for c in cased)] == [], "a CEL rule without a case"


@pytest.mark.parametrize(("message", "obj", "patch"), CEL_CASES, ids=[c[0][:40] for c in CEL_CASES])
async def test_the_real_api_server_evaluates_each_cel_rule(cp: realcp.KubernetesControlPlane, k: kube.Kube,
                                                           crds: list[str], message: str, obj: dict[str, Any],
                                                           patch: dict[str, Any] | None) -> None:
    code, _, err = await kubectl(cp, "wait", "--for=condition=Established", "--timeout=60s",
                                 *[f"crd/{n}" for n in crds])
    assert code == 0, err
    if await k.get("v1", "Namespace", None, NS) is None:
        await k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    k.resources.add_crd(yaml.safe_load((REPO / "crds" / "opsmanager.dev_etcds.yaml").read_text()))
    k.resources.add_crd(yaml.safe_load((REPO / "crds" / "ops.opsmanager.dev_etcdopsrequests.yaml").read_text()))
    meta = obj["metadata"]
    with pytest.raises(kube.Invalid) as refused:
        if patch is None:
            await k.create(obj)
        else:
            await k.create(obj)
            try:
                await k.patch(obj["apiVersion"], obj["kind"], NS, meta["name"], patch)
            finally:
                await k.delete(obj["apiVersion"], obj["kind"], NS, meta["name"])
    assert message in str(refused.value), str(refused.value)


async def test_the_replace_list_is_what_the_pinned_release_calls_for() -> None:
    proc = await asyncio.create_subprocess_exec(
        "python3", str(realcp.BUILD_SCRIPT), "replaces", "--check", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, (out + err).decode()


async def test_stopping_leaves_no_process_behind(tmp_path: pathlib.Path) -> None:
    plane = realcp.KubernetesControlPlane(tmp_path / "cp", controllers=False)
    await plane.start()
    pids = plane.pids()
    assert set(pids) == {"etcd", "kube-apiserver"}
    await plane.stop()
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
