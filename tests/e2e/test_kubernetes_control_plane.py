"""The product on the real control plane (issue 24): kube-apiserver, kube-controller-manager and kube-scheduler
built from their Go modules, a real node under them (kubelet, containerd, runc) running the etcd members, the
operator and the admission webhook as child processes. (The rest of ``tests/e2e/`` runs there too, ``tests/e2e/conftest.py``; the four TLS
operations on each etcd build are ``test_ops_engine.py``'s.)

We test these aspects:
- an Etcd's members are scheduled by kube-scheduler onto the cluster's Nodes, their claims bound by the
  PersistentVolume controller to the volumes the sandbox offers, the StatefulSet run by the real controller;
- an invalid request is refused by kube-apiserver calling the webhook at its Service's ClusterIP, with KubeDB's
  message inside kube-apiserver's own ``admission webhook "…" denied the request: …``;
- ``kubectl get etcdops`` shows a waiting request's reason (the CRD's printer column, evaluated by the real API
  server);
- a PodDisruptionBudget entry the real disruption controller keeps for a member the request itself restarted does
  not hold the request for two minutes: it is proven the request's own and the roll goes on, saying so.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import pytest_asyncio
import yaml

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
    nodes = {n["metadata"]["name"] for n in await sc.k.list("v1", "Node", None)}
    assert nodes, "no Node"
    for pod in naming.pods(db, 3):
        obj = await sc.k.get("v1", "Pod", sc.namespace, pod)
        assert obj is not None and obj["spec"]["nodeName"] in nodes, (obj, nodes)
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


async def test_a_stale_budget_entry_left_by_the_requests_own_restart_does_not_hold_it(sc: scenario.Scenario) -> None:
    """kube-controller-manager's disruption controller keys ``disruptedPods`` by pod name; an entry it did not drop
    when the pod the operator evicted was recreated counts the healthy successor as disrupted for two minutes. The
    operator is stopped right after the first member's restart and checks (its crash point), the budget is given
    that entry (stamped when the member was evicted, as the controller leaves it; the real controller keeps it),
    and the operator started again: the request proves the entry its own and goes on at once, saying so."""
    db = "stale"
    await sc.fresh_etcd(db)
    name = f"{db}-restart"
    await sc.kill_operator()
    await sc.start_operator(crash_after=[(name, constants.per_pod_type(constants.STEP_ETCD_CLUSTER_HEALTHY, p))
                                         for p in naming.pods(db, 3)])
    await sc.submit(name, db, constants.OPS_TYPE_RESTART)
    await sc.wait_crashed(timeout=180)
    status = (await sc.request(name) or {}).get("status") or {}
    (first,) = [p for p in naming.pods(db, 3) if any(
        c["type"] == constants.per_pod_type(constants.STEP_ETCD_CLUSTER_HEALTHY, p) and c["status"] == "True"
        for c in status.get("conditions", []))]
    evicted = next(c for c in status["conditions"]
                   if c["type"] == constants.per_pod_type(constants.STEP_EVICT_POD, first))
    await sc.k.patch("policy/v1", "PodDisruptionBudget", sc.namespace, naming.pdb(db), {"status": {
        "disruptedPods": {first: evicted["lastTransitionTime"]}, "disruptionsAllowed": 0}}, subresource="status")

    async def held() -> bool:  # the real controller keeps the entry and counts the member out
        pdb = await sc.k.get("policy/v1", "PodDisruptionBudget", sc.namespace, naming.pdb(db)) or {}
        st = pdb.get("status") or {}
        return first in (st.get("disruptedPods") or {}) and st.get("disruptionsAllowed") == 0

    await aeventually(held, timeout=30, interval=0.5, what=f"the budget counting {first} as disrupted")
    await sc.start_operator()
    req = await sc.watch_request(name, timeout=180)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    said = [e["message"] for e in await sc.k.list("v1", "Event", sc.namespace)
            if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == "EvictPod"]
    assert any(f"stale entry for {first}, left by this request's own restart" in m for m in said), said
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


# KubeDB's admission rules for an EtcdOpsRequest (reference section 4.1), each with its exact message, as kubectl
# prints kube-apiserver's answer: (the spec beyond databaseRef, the field, the message).
BAD_REQUESTS: list[tuple[dict[str, Any], str, str]] = [
    ({"type": "StorageMigration"}, "spec.migration", "spec.migration is required for StorageMigration type"),
    ({"type": "VolumeExpansion"}, "spec.volumeExpansion",
     "spec.volumeExpansion is nil, not supported in VolumeExpansion type"),
    ({"type": "VolumeExpansion", "volumeExpansion": {"etcd": "1Gi", "mode": "Online"}}, "spec.volumeExpansion",
     "desired etcd storage size must be greater than current storage. Current storage: 1Gi"),
    ({"type": "Restart", "databaseRef": {"name": "nowhere"}}, "spec.databaseRef",
     "spec.databaseRef {ns}/nowhere is invalid or not found"),
    ({"type": "UpdateVersion"}, "spec.updateVersion", "spec.updateVersion is nil, not supported in UpdateVersion type"),
    ({"type": "UpdateVersion", "updateVersion": {}}, "spec.updateVersion",
     "spec.updateVersion.targetVersion can not be empty"),
    ({"type": "HorizontalScaling"}, "spec.horizontalScaling",
     "spec.horizontalScaling is nil, not supported in HorizontalScaling type"),
    ({"type": "HorizontalScaling", "horizontalScaling": {}}, "spec.horizontalScaling",
     "spec.horizontalScaling.replicas can not be empty"),
    ({"type": "HorizontalScaling", "horizontalScaling": {"replicas": 0}}, "spec.horizontalScaling",
     "spec.horizontalScaling.replicas must be at least 1"),
    ({"type": "VerticalScaling"}, "spec.verticalScaling",
     "spec.verticalScaling is nil, not supported in VerticalScaling type"),
    ({"type": "VerticalScaling", "verticalScaling": {"mode": "InPlace"}}, "spec.verticalScaling",
     "at least one of spec.verticalScaling.etcd or spec.verticalScaling.exporter must be specified"),
    ({"type": "Reconfigure"}, "spec.configuration", "spec.configuration is nil, not supported in Reconfigure type"),
    ({"type": "Reconfigure", "configuration": {"restart": "true"}}, "spec.configuration",
     "spec.configuration.tuning must be specified, since Etcd does not support a mounted custom config file "
     "(--config-file is mutually exclusive with etcd command-line flags)"),
    ({"type": "Reconfigure", "configuration": {"tuning": {}, "applyConfig": {"a": "b"}}}, "spec.configuration",
     "spec.configuration.applyConfig and spec.configuration.configSecret are not supported for Etcd, use "
     "spec.configuration.tuning instead"),
    ({"type": "ReconfigureTLS"}, "spec.tls", "spec.tls is nil, not supported in ReconfigureTLS type"),
    ({"type": "ReconfigureTLS", "tls": {}}, "spec.tls",
     "at least one of Remove, RotateCertificates, IssuerRef, or Certificates must be specified"),
    ({"type": "ReconfigureTLS", "tls": {"remove": True, "rotateCertificates": True}}, "spec.tls",
     "only one TLS reconfiguration operation is allowed at a time"),
    ({"type": "ReconfigureTLS", "tls": {"rotateCertificates": True}}, "spec.tls",
     "rotateCertificates requires TLS to already be enabled with issuerRef on Etcd"),
    ({"type": "ReconfigureTLS", "tls": {"certificates": [{"alias": "server", "dnsNames": ["etcd.example"]}]}},
     "spec.tls", "tls.issuerRef is required for Etcd ReconfigureTLS"),
    ({"type": "Compact"}, "spec.compact", "spec.compact is nil, not supported in Compact type"),
    ({"type": "Compact", "compact": {"revision": -1}}, "spec.compact", "spec.compact.revision can not be negative"),
    ({"type": "RotateAuth", "authentication": {"secretRef": {}}}, "spec.authentication",
     "spec.authentication.secretRef.name can not be empty"),
]


async def _kubectl_apply(sc: scenario.Scenario, manifest: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(sc.sandbox.kubeconfig), "apply", "--dry-run=server", "-f", "-",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _out, err = await asyncio.wait_for(proc.communicate(manifest.encode()), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_kubectl_shows_kubedbs_message_for_every_bad_request(sc: scenario.Scenario) -> None:
    """Each bad request of KubeDB's section 4.1, applied with kubectl (a server-side dry run: admission runs,
    nothing is stored), is refused with its field and KubeDB's exact message, through kube-apiserver."""
    db = "plain-target"
    await sc.create_etcd(db)
    failures = []
    for i, (spec, field, message) in enumerate(BAD_REQUESTS):
        manifest = yaml.safe_dump({"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
                                   "metadata": {"name": f"bad-{i}", "namespace": sc.namespace},
                                   "spec": {"databaseRef": {"name": db}, **spec}})
        code, stderr = await _kubectl_apply(sc, manifest)
        expected = message.replace("{ns}", sc.namespace)
        if code == 0 or f"{field}: Invalid value: \"bad-{i}\": {expected}" not in stderr:
            failures.append((spec, code, stderr.strip()[-400:]))
    assert not failures, failures
    await sc.drop_etcd(db)
