"""The operator process (``opsmanager run``) against the sandbox API server alone — no kubelet, no cert-manager.

What the API server alone lets us check fast, with the test playing cert-manager (it writes the Secrets):
- TLS at creation: Certificates first; no trust bundle and no StatefulSet while a Secret is incomplete (the
  ``Reconciled`` condition names the Secret and what is missing); then the trust bundle = union of the leaves'
  ``ca.crt``, then the StatefulSet; the trust bundle is never rewritten afterwards;
- never adopt: a Certificate with our name but no owner blocks the cluster with a condition and a Warning event;
- pause: with ``Paused=True`` a deleted StatefulSet is not recreated, and is once the pause is removed;
- re-apply keeps the ops engine's ``restartedAt``; ``halted`` scales to 0 and reports ``Halted``;
- a steady cluster writes nothing (idle passes change no resourceVersion);
- deletionPolicy DoNotTerminate (kept, condition + event), Delete (volumes go, Secrets stay), WipeOut (both go).

One API server and one operator for the module; every Etcd has its own name.
"""

from __future__ import annotations

import base64
import functools
import glob
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import processes
from opsmanager import kube, pki
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.provisioner import applying
from opsmanager.provisioner import status as prov_status
from opsmanager_sandbox.apiserver import threaded
from tests import operator_metrics
from tests.polling import aeventually

pytestmark = pytest.mark.slow

NS = "prov"
WAIT = 15.0  # seconds the tests give the operator for one step (it passes every INTERVAL)
INTERVAL = 0.5
ETCD = (constants.ETCD_API_VERSION, constants.ETCD_KIND)


class Env:
    def __init__(self, api: threaded.ThreadedAPIServer, kubeconfig: Path, op: processes.OperatorProcess) -> None:
        self.api, self.kubeconfig, self.op = api, kubeconfig, op


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("prov-apiserver")
    api = threaded.ThreadedAPIServer(bookmark_interval=0.5).start()
    try:
        crds = [yaml.safe_load(Path(f).read_text()) for f in sorted(glob.glob("crds/*.yaml"))]
        api.call(api.server.apply_objects, [*crds, {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NS}}])
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        op = processes.OperatorProcess.start(kubeconfig, log_path=tmp / "operator.log", namespaces=[NS],
                                            interval=INTERVAL, with_ops=False)
        try:
            yield Env(api, kubeconfig, op)
        finally:
            code = op.stop()
            print(op.log()[-4000:])
            assert code == 0, f"the operator exited with {code}"
    finally:
        api.stop()


@pytest.fixture
async def k(env: Env) -> Any:
    client = kube.Kube.from_kubeconfig(str(env.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


def etcd_obj(name: str, *, tls: bool = False, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"version": "3.5.1", "storageType": "Ephemeral", **spec}
    if tls:
        body["tls"] = {"issuerRef": {"name": "ca", "kind": "Issuer"}}
    return {"apiVersion": constants.ETCD_API_VERSION, "kind": "Etcd", "metadata": {"name": name, "namespace": NS},
            "spec": body}


def tls_secret(name: str, ca: pki.KeyPair, leaf: pki.KeyPair, *, key: bytes | None = None,
               certificate: str | None = None) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if certificate:
        meta["annotations"] = {"cert-manager.io/certificate-name": certificate}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": meta,
            "data": {"tls.crt": b64(leaf.cert_pem), "tls.key": b64(key or leaf.key_pem), "ca.crt": b64(ca.cert_pem)}}


async def condition(k: kube.Kube, name: str, type_: str) -> dict[str, Any] | None:
    obj = await k.get(*ETCD, NS, name)
    return conditions.get_condition(((obj or {}).get("status") or {}).get("conditions"), type_)


async def reconciled_reason(k: kube.Kube, name: str) -> tuple[str, str]:
    cond = await condition(k, name, prov_status.COND_RECONCILED)
    return (cond.get("reason", ""), cond.get("message", "")) if cond else ("", "")


async def test_tls_waits_for_complete_material_then_bundle_then_statefulset(env: Env, k: kube.Kube) -> None:
    await k.create(etcd_obj("tls", tls=True))
    certs = await aeventually(lambda: _certificates(k, "tls"), timeout=WAIT, what="three Certificates")
    db = await k.get(*ETCD, NS, "tls")
    assert db is not None
    assert {c["metadata"]["name"] for c in certs} == {"tls-server", "tls-client", "tls-peer"}
    assert all(c["metadata"]["ownerReferences"][0]["uid"] == db["metadata"]["uid"] for c in certs)
    # No Issuer "ca" exists: the wait names it, not the Secret cert-manager could not write.
    reason, message = await aeventually(lambda: _reason_is(k, "tls", applying.REASON_ISSUER_NOT_FOUND),
                                        timeout=WAIT, what="Reconciled: waiting for a missing Issuer")
    assert f"Issuer {NS}/ca (spec.tls.issuerRef) does not exist" in message, message

    ca1, ca2 = pki.make_ca("ca-one"), pki.make_ca("ca-two")
    members = [f"*.tls-pods.{NS}.svc"]
    server = pki.make_leaf(ca1, "tls", dns_names=members)
    peer = pki.make_leaf(ca2, "tls", dns_names=members)
    client = pki.make_leaf(ca1, "root", usages=("client",))
    # cert-manager writes the sources; the operator releases them into the mounted tls-<alias>-cert
    await k.create(tls_secret("tls-server-issued", ca1, server, certificate="tls-server"))
    await k.create(tls_secret("tls-peer-issued", ca2, peer, certificate="tls-peer"))
    # Half-written: the key of another certificate.
    await k.create(tls_secret("tls-client-issued", ca1, client, key=server.key_pem, certificate="tls-client"))

    async def sees_bad_client_key() -> bool:
        reason, message = await reconciled_reason(k, "tls")
        return reason == applying.REASON_WAITING_FOR_CERTIFICATES and "tls-client-issued" in message \
            and "not the private key" in message
    await aeventually(sees_bad_client_key, timeout=WAIT,
                      what="the operator names the half-written client Secret")
    assert await k.get("v1", "Secret", NS, "tls-ca-bundle") is None
    assert await k.get("apps/v1", "StatefulSet", NS, "tls") is None

    await k.apply(tls_secret("tls-client-issued", ca1, client, certificate="tls-client"))
    sts = await aeventually(lambda: k.get("apps/v1", "StatefulSet", NS, "tls"), timeout=WAIT,
                            what="StatefulSet created")
    bundle = await k.get("v1", "Secret", NS, "tls-ca-bundle")
    assert bundle is not None
    cas = pki.split_pem(base64.b64decode(bundle["data"]["ca.crt"]))
    assert {pki.cert_info(c).common_name for c in cas} == {"ca-one", "ca-two"} and len(cas) == 2
    assert bundle["metadata"]["ownerReferences"][0]["uid"] == db["metadata"]["uid"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ca-bundle"]["secret"]["secretName"] == "tls-ca-bundle"
    assert volumes["server-tls"]["secret"]["secretName"] == "tls-server-cert"
    for alias in ("server", "peer", "client"):  # released: the operator's own Secrets, the sources' material
        mounted, source = (await k.get("v1", "Secret", NS, f"tls-{alias}-cert"),
                           await k.get("v1", "Secret", NS, f"tls-{alias}-issued"))
        assert mounted is not None and source is not None and mounted["data"] == source["data"]
        assert mounted["metadata"]["ownerReferences"][0]["uid"] == db["metadata"]["uid"]
    reason, _ = await aeventually(lambda: _reason_is(k, "tls", applying.REASON_RECONCILED), timeout=WAIT,
                                  what="Reconciled")

    # The trust bundle is the ops engine's once it exists: a widened bundle is not narrowed back.
    ca3 = pki.make_ca("ca-three")
    widened = pki.bundle(ca1.cert_pem, ca2.cert_pem, ca3.cert_pem)
    await k.patch("v1", "Secret", NS, "tls-ca-bundle", {"data": {"ca.crt": base64.b64encode(widened).decode()}})
    await _passes(env, "tls", 3)
    bundle = await k.get("v1", "Secret", NS, "tls-ca-bundle")
    assert bundle is not None and base64.b64decode(bundle["data"]["ca.crt"]) == widened


async def test_a_foreign_certificate_is_never_adopted(env: Env, k: kube.Kube) -> None:
    foreign = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
               "metadata": {"name": "alien-server", "namespace": NS},
               "spec": {"secretName": "somebody-else", "issuerRef": {"name": "x", "kind": "Issuer"}}}
    await k.create(foreign)
    await k.create(etcd_obj("alien", tls=True))
    _reason, message = await aeventually(lambda: _reason_is(k, "alien", applying.REASON_FOREIGN_OBJECT),
                                         timeout=WAIT,
                                         what="ForeignObject")
    assert "Certificate prov/alien-server" in message and "never adopts" in message
    live = await k.get("cert-manager.io/v1", "Certificate", NS, "alien-server")
    assert live is not None and "ownerReferences" not in live["metadata"]
    assert live["spec"]["secretName"] == "somebody-else"
    assert await k.get("apps/v1", "StatefulSet", NS, "alien") is None

    async def warned() -> bool:  # the Event is posted after the status is written: wait for it too
        return any(e.get("reason") == applying.REASON_FOREIGN_OBJECT and e.get("type") == "Warning"
                   and e["involvedObject"]["name"] == "alien" for e in await k.list("v1", "Event", NS))
    await aeventually(warned, timeout=WAIT, what="the ForeignObject Warning Event")


async def test_pause_holds_off_repair_until_it_is_removed(env: Env, k: kube.Kube) -> None:
    await k.create(etcd_obj("paused"))
    await aeventually(lambda: k.get("apps/v1", "StatefulSet", NS, "paused"), timeout=WAIT, what="StatefulSet")
    await k.transact_status(*ETCD, NS, "paused", lambda st: {**st, "conditions": conditions.set_condition(
        st.get("conditions"), constants.COND_PAUSED, constants.TRUE, reason="manual-op", message="test pause")})
    _r, message = await aeventually(lambda: _reason_is(k, "paused", applying.REASON_PAUSED), timeout=WAIT,
                                    what="sees the pause")
    assert "manual-op" in message
    assert await k.delete("apps/v1", "StatefulSet", NS, "paused")

    async def a_pass_saw_it_gone() -> bool:
        cond = await condition(k, "paused", constants.COND_READY)
        return bool(cond and "StatefulSet prov/paused does not exist" in cond.get("message", ""))
    await aeventually(a_pass_saw_it_gone, timeout=WAIT, what="a status pass after the deletion")
    await _passes(env, "paused", 2)
    assert await k.get("apps/v1", "StatefulSet", NS, "paused") is None, "repaired while paused"
    paused = await condition(k, "paused", constants.COND_PAUSED)
    assert paused is not None and paused["reason"] == "manual-op" and paused["status"] == "True"

    await k.transact_status(*ETCD, NS, "paused", lambda st: {
        **st, "conditions": conditions.remove_condition(st.get("conditions"), constants.COND_PAUSED)})
    await aeventually(lambda: k.get("apps/v1", "StatefulSet", NS, "paused"), timeout=WAIT,
                      what="repaired after the pause")


async def test_reapply_keeps_restarted_at_and_halted_scales_to_zero(env: Env, k: kube.Kube) -> None:
    await k.create(etcd_obj("halt"))
    await aeventually(lambda: k.get("apps/v1", "StatefulSet", NS, "halt"), timeout=WAIT, what="StatefulSet")
    await k.patch("apps/v1", "StatefulSet", NS, "halt", {"spec": {"template": {"metadata": {"annotations": {
        naming.ANNOTATION_RESTARTED_AT: "2026-01-01T00:00:00Z"}}}}})
    await k.patch(*ETCD, NS, "halt", {"spec": {"halted": True}})

    async def scaled_down() -> dict[str, Any] | None:
        sts = await k.get("apps/v1", "StatefulSet", NS, "halt")
        return sts if sts and sts["spec"]["replicas"] == 0 else None
    sts = await aeventually(scaled_down, timeout=WAIT, what="replicas 0")
    assert sts["spec"]["template"]["metadata"]["annotations"][naming.ANNOTATION_RESTARTED_AT] == "2026-01-01T00:00:00Z"

    async def halted_phase() -> bool:
        obj = await k.get(*ETCD, NS, "halt")
        return bool(obj and (obj.get("status") or {}).get("phase") == constants.DB_PHASE_HALTED)
    await aeventually(halted_phase, timeout=WAIT, what="phase Halted")


async def test_a_steady_cluster_writes_nothing(env: Env, k: kube.Kube) -> None:
    await k.create(etcd_obj("steady"))
    await aeventually(lambda: _reason_is(k, "steady", applying.REASON_RECONCILED), timeout=WAIT,
                      what="Reconciled")
    await aeventually(lambda: condition(k, "steady", constants.COND_READY), timeout=WAIT, what="first status")
    await _passes(env, "steady", 2)
    before = await _versions(k, "steady")
    await _passes(env, "steady", 4)
    assert await _versions(k, "steady") == before
    sts = await k.get("apps/v1", "StatefulSet", NS, "steady")
    assert sts is not None and sts["metadata"]["generation"] == 1, "the StatefulSet was rewritten after creation"


async def test_do_not_terminate_keeps_the_etcd_until_the_policy_changes(env: Env, k: kube.Kube) -> None:
    await k.create(etcd_obj("keep", deletionPolicy="DoNotTerminate"))
    await aeventually(lambda: k.get("apps/v1", "StatefulSet", NS, "keep"), timeout=WAIT, what="StatefulSet")
    await k.delete(*ETCD, NS, "keep")
    cond = await aeventually(lambda: condition(k, "keep", prov_status.COND_DELETION_BLOCKED), timeout=WAIT,
                             what="DeletionBlocked")
    assert cond["status"] == "True" and "DoNotTerminate" in cond["message"]
    obj = await k.get(*ETCD, NS, "keep")
    assert obj is not None and obj["metadata"].get("deletionTimestamp")
    assert await k.get("apps/v1", "StatefulSet", NS, "keep") is not None
    events = await k.list("v1", "Event", NS)
    assert any(e.get("reason") == "DoNotTerminate" and e["involvedObject"]["name"] == "keep" for e in events)

    await k.patch(*ETCD, NS, "keep", {"spec": {"deletionPolicy": "Delete"}})

    async def gone() -> bool:
        return await k.get(*ETCD, NS, "keep") is None and await k.get("apps/v1", "StatefulSet", NS, "keep") is None
    await aeventually(gone, timeout=30.0, what="deleted after the policy change")


async def test_delete_removes_volumes_keeps_secrets_and_wipeout_removes_both(env: Env, k: kube.Kube) -> None:
    for name, policy in (("del", "Delete"), ("wipe", "WipeOut")):
        await k.create(etcd_obj(name, tls=True, deletionPolicy=policy, storageType="Durable"))
        ca = pki.make_ca(f"{name}-ca")
        for alias in constants.CERT_ALIASES:  # the sources; the operator releases them into <name>-<alias>-cert
            await k.create(tls_secret(f"{name}-{alias}-issued", ca,
                                      pki.make_leaf(ca, name, dns_names=[f"*.{name}-pods.{NS}.svc"]),
                                      certificate=f"{name}-{alias}"))
        await k.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": f"data-{name}-0", "namespace": NS},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        await aeventually(functools.partial(k.get, "apps/v1", "StatefulSet", NS, name), timeout=WAIT,
                          what=f"{name} StatefulSet")
        await k.delete(*ETCD, NS, name)

    async def gone(name: str) -> bool:
        return await k.get(*ETCD, NS, name) is None and await k.get("apps/v1", "StatefulSet", NS, name) is None
    for name in ("del", "wipe"):
        await aeventually(functools.partial(gone, name), timeout=30.0, what=f"{name} deleted")
        for obj in (("v1", "Service", name), ("v1", "Service", f"{name}-pods"),
                    ("policy/v1", "PodDisruptionBudget", name), ("cert-manager.io/v1", "Certificate", f"{name}-server")):
            await aeventually(functools.partial(_absent, k, *obj), timeout=WAIT, what=f"{obj} deleted")
    assert await k.get("v1", "PersistentVolumeClaim", NS, "data-del-0") is None
    for alias in constants.CERT_ALIASES:
        assert await k.get("v1", "Secret", NS, f"del-{alias}-issued") is not None
    assert await k.get("v1", "PersistentVolumeClaim", NS, "data-wipe-0") is None
    for alias in constants.CERT_ALIASES:  # WipeOut: the mounted Secrets and the sources
        assert await k.get("v1", "Secret", NS, f"wipe-{alias}-cert") is None
        assert await k.get("v1", "Secret", NS, f"wipe-{alias}-issued") is None
    assert await k.get("v1", "Secret", NS, "wipe-ca-bundle") is None


# --- helpers ---------------------------------------------------------------------------------------------------


async def _certificates(k: kube.Kube, name: str) -> list[dict[str, Any]]:
    certs = await k.list("cert-manager.io/v1", "Certificate", NS)
    mine = [c for c in certs if c["metadata"]["name"].startswith(f"{name}-")]
    return mine if len(mine) == 3 else []


async def _reason_is(k: kube.Kube, name: str, reason: str) -> tuple[str, str] | None:
    got = await reconciled_reason(k, name)
    return got if got[0] == reason else None


async def _absent(k: kube.Kube, api_version: str, kind: str, name: str) -> bool:
    return await k.get(api_version, kind, NS, name) is None


async def _passes(env: Env, name: str, count: int) -> None:
    """Wait until the operator has made ``count`` more passes over the Etcd (its reconcile counter)."""
    await operator_metrics.wait_passes(env.op.metrics_url, NS, name, count, timeout=10.0 + count * INTERVAL * 4)


async def _versions(k: kube.Kube, name: str) -> str:
    parts = []
    for api_version, kind, obj_name in (ETCD + (name,), ("apps/v1", "StatefulSet", name), ("v1", "Service", name),
                                        ("v1", "Service", f"{name}-pods"), ("policy/v1", "PodDisruptionBudget", name)):
        obj = await k.get(api_version, kind, NS, obj_name)
        parts.append(f"{kind}:{(obj or {}).get('metadata', {}).get('resourceVersion')}")
    return json.dumps(parts)
