"""The product on the real control plane (issue 24): kube-apiserver, kube-controller-manager and kube-scheduler
built from their Go modules, this project's node agent running real etcd members, the operator and the admission
webhook as child processes. (The rest of ``tests/e2e/`` runs there too, ``tests/e2e/conftest.py``; the four TLS
operations on each etcd build are ``test_ops_engine.py``'s.)

We test these aspects:
- an Etcd's members are scheduled by kube-scheduler onto the node agent's Node, their claims bound by the
  PersistentVolume controller to the volumes the node agent offers, the StatefulSet run by the real controller;
- an invalid request is refused by kube-apiserver calling the webhook at its Service's ClusterIP, with KubeDB's
  message inside kube-apiserver's own ``admission webhook "…" denied the request: …``;
- ``kubectl get etcdops`` shows a waiting request's reason (the CRD's printer column, evaluated by the real API
  server).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager import kube
from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager_sandbox import realcp
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("kubernetes"), control_plane="kubernetes") as s:
        await s.ca_issuer("ca-a")
        await s.ca_issuer("ca-b")
        yield s


async def test_members_are_scheduled_bound_and_run_by_the_real_controllers(sc: scenario.Scenario) -> None:
    assert await sc.server_version() == realcp.build_module().COMPONENTS["kubernetes"].version()
    db = "placed"
    await sc.fresh_etcd(db)
    for pod in naming.pods(db, 3):
        obj = await sc.k.get("v1", "Pod", sc.namespace, pod)
        assert obj is not None and obj["spec"]["nodeName"] == "sandbox"
        owner = obj["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("StatefulSet", db)
        claim = await sc.k.get("v1", "PersistentVolumeClaim", sc.namespace, f"data-{pod}")
        assert claim is not None and claim["status"]["phase"] == "Bound", claim
    await sc.drop_etcd(db)


async def test_an_invalid_request_is_refused_by_kube_apiserver_through_the_webhook(sc: scenario.Scenario) -> None:
    db = "refused"
    await sc.create_etcd(db)
    with pytest.raises(kube.Invalid) as refused:
        await sc.submit("two-at-once", db, "ReconfigureTLS", tls={"remove": True, "rotateCertificates": True})
    text = str(refused.value)
    assert 'admission webhook "validate-etcdopsrequest.ops.opsmanager.dev" denied the request: ' in text, text
    assert "only one TLS reconfiguration operation is allowed at a time" in text, text
    await sc.drop_etcd(db)


async def test_kubectl_shows_why_a_request_waits(sc: scenario.Scenario) -> None:
    db = "halted"
    await sc.fresh_etcd(db)
    await sc.k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db, {"spec": {"halted": True}})

    async def halted() -> bool:
        return await sc.etcd_phase(db) == constants.DB_PHASE_HALTED

    await aeventually(halted, timeout=60, what="the Etcd Halted")
    await sc.submit("waits", db, "Restart")

    async def shown() -> str | None:
        proc = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", str(sc.sandbox.kubeconfig), "get", "etcdops", "waits", "-n", sc.namespace,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        return out.decode() if "WaitingForReady" in out.decode() else None

    table = await aeventually(shown, timeout=60, interval=0.5, what="kubectl get etcdops showing WaitingForReady")
    assert "REASON" in table.splitlines()[0] and "Pending" in table, table
    await sc.k.delete(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace, "waits")
    await sc.drop_etcd(db)
