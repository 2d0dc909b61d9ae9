"""End to end in the sandbox, real etcd: ``kubectl apply`` of an Etcd gives 3 healthy members and ``phase: Ready``.

One sandbox (API server, kubelet running real etcd 3.5.1, StatefulSet controller, cert-manager) and one operator
process (``opsmanager run``, with the ops engine) for the module:

- a plaintext Etcd becomes Ready; its 3 members answer and accept writes;
- a TLS Etcd (a CA Issuer made here from a CA Secret) becomes Ready; a real client with the operator's client
  certificate reads and writes, verifying each member's certificate against the trust bundle under the pod's DNS
  name; a client without a certificate is refused;
- with ``Paused=True`` a deleted StatefulSet is not repaired; once the pause is removed it is, and the members
  come back on their volumes with the data written before.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from opsmanager import kube, pki
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming, statefulset
from opsmanager.etcd import access, client, errors
from opsmanager.provisioner import applying
from opsmanager.provisioner import status as prov_status
from tests import operator_metrics
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

NS = "e2e-prov"
WAIT = 60.0  # seconds: a real etcd cluster may take this long to become Ready here
INTERVAL = 1.0
ETCD = (constants.ETCD_API_VERSION, constants.ETCD_KIND)


class Env:
    def __init__(self, sandbox: Any, k: kube.Kube, tmp: Path) -> None:
        self.sandbox, self.k, self.tmp = sandbox, k, tmp

    async def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl in a thread: the sandbox serves from this event loop, which must keep running."""
        cmd = ["/usr/bin/kubectl", "--kubeconfig", str(self.sandbox.kubeconfig), "--cache-dir",
               str(self.tmp / "kube-cache"), *args]
        return await asyncio.to_thread(subprocess.run, cmd, input=input, capture_output=True, text=True,
                                       timeout=60)

    async def apply(self, *objs: dict[str, Any]) -> None:
        done = await self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))
        assert done.returncode == 0, done.stderr

    def operator_log(self) -> str:
        path = Path(self.sandbox.dir) / "logs" / "operator.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    from opsmanager_sandbox import (  # the tests may import the sandbox; the package never does
        cluster,
        components,
    )

    tmp = tmp_path_factory.mktemp("e2e-prov")
    component = lambda sb: components.operator(sb, interval=INTERVAL)  # noqa: E731
    async with cluster.Sandbox(dir=tmp / "sandbox", components=[component]) as sb:
        k = kube.Kube.from_kubeconfig(str(sb.kubeconfig))
        e = Env(sb, k, tmp)
        await e.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        try:
            yield e
        finally:
            print(e.operator_log()[-5000:])
            await k.close()


def etcd_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": constants.ETCD_API_VERSION, "kind": "Etcd", "metadata": {"name": name, "namespace": NS},
            "spec": {"version": "3.5.1", "replicas": 3, **spec}}


async def phase(env: Env, name: str) -> str:
    obj = await env.k.get(*ETCD, NS, name)
    return str(((obj or {}).get("status") or {}).get("phase") or "")


async def ready(env: Env, name: str) -> dict[str, Any] | None:
    obj = await env.k.get(*ETCD, NS, name)
    st = (obj or {}).get("status") or {}
    return obj if st.get("phase") == constants.DB_PHASE_READY else None


async def member_endpoints(env: Env, name: str, scheme: str) -> list[access.Endpoint]:
    pods = await env.k.list("v1", "Pod", NS, label_selector=f"app.kubernetes.io/instance={name}")
    return [access.Endpoint(name=p["metadata"]["name"], host=p["status"]["podIP"], metrics_port=None,
                            schemes=(scheme,), server_name=naming.pod_fqdn(name, NS, p["metadata"]["name"]))
            for p in sorted(pods, key=lambda p: p["metadata"]["name"])]


async def test_plaintext_etcd_becomes_ready_with_three_healthy_members(env: Env) -> None:
    await env.apply(etcd_manifest("plain"))
    obj = await aeventually(lambda: ready(env, "plain"), timeout=WAIT, what="plain Etcd Ready")
    conds = obj["status"]["conditions"]
    for type_ in (constants.COND_PROVISIONING_STARTED, constants.COND_REPLICA_READY,
                  constants.COND_ACCEPTING_CONNECTION, constants.COND_READY, constants.COND_PROVISIONED):
        assert conditions.is_true(conds, type_), (type_, conds)
    eps = await member_endpoints(env, "plain", "http")
    assert len(eps) == 3
    async with client.EtcdClient(eps) as c:
        members = await c.members()
        assert sorted(m.name for m in members) == ["plain-0", "plain-1", "plain-2"]
        assert all(m.peer_urls == (f"http://{m.name}.plain-pods.{NS}.svc:2380",) for m in members)
        for ep in eps:
            assert (await c.health(ep)).healthy
        await c.kv.put("k", "before-pause", endpoint=eps[0])
        assert await c.kv.get("k", endpoint=eps[2]) == b"before-pause"


async def test_tls_etcd_from_a_ca_issuer_needs_the_client_certificate(env: Env) -> None:
    ca = pki.make_ca("e2e-root")
    await env.apply(
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": "e2e-ca", "namespace": NS},
         "data": {"tls.crt": base64.b64encode(ca.cert_pem).decode(),
                  "tls.key": base64.b64encode(ca.key_pem).decode()}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "e2e-ca", "namespace": NS},
         "spec": {"ca": {"secretName": "e2e-ca"}}},
        etcd_manifest("secure", tls={"issuerRef": {"name": "e2e-ca", "kind": "Issuer"}}),
    )
    await aeventually(lambda: ready(env, "secure"), timeout=WAIT, what="TLS Etcd Ready")

    sts = await env.k.get("apps/v1", "StatefulSet", NS, "secure")
    assert sts is not None and statefulset.client_schemes(sts) == ("https",)
    secret = await env.k.get("v1", "Secret", NS, "secure-client-cert")
    bundle = await env.k.get("v1", "Secret", NS, "secure-ca-bundle")
    assert secret is not None and bundle is not None
    assert base64.b64decode(bundle["data"]["ca.crt"]).strip() == ca.cert_pem.strip()
    assert pki.cert_info(base64.b64decode(secret["data"]["tls.crt"])).common_name == "root"

    eps = await member_endpoints(env, "secure", "https")
    with_cert = access.TLSIdentity.from_secret_data(secret["data"], ca=bundle["data"], name="root")
    async with client.EtcdClient(eps, tls=with_cert) as c:
        assert len(await c.members()) == 3
        await c.kv.put("greeting", "hello over mTLS", endpoint=eps[1])
        for ep in eps:
            assert await c.kv.get("greeting", endpoint=ep) == b"hello over mTLS"

    no_cert = access.TLSIdentity(ca_pem=base64.b64decode(bundle["data"]["ca.crt"]), name="anonymous")
    async with client.EtcdClient(eps, tls=no_cert, timeout=2.0) as c:
        with pytest.raises(errors.EtcdError) as refused:
            await c.kv.put("greeting", "anonymous write", endpoint=eps[0])
        # etcd (--client-cert-auth) ends the handshake with a bad_certificate alert: no certificate, no service.
        assert isinstance(refused.value, errors.TLSHandshakeFailed), repr(refused.value)
    # Plain HTTP is not served at all.
    plain = [ep.with_schemes("http") for ep in eps]
    async with client.EtcdClient(plain, timeout=2.0) as c:
        with pytest.raises(errors.EtcdError):
            await c.kv.get("greeting", endpoint=plain[0])


async def test_paused_etcd_is_not_repaired_until_the_pause_is_removed(env: Env) -> None:
    await aeventually(lambda: ready(env, "plain"), timeout=WAIT, what="plain Etcd Ready")
    await env.k.transact_status(*ETCD, NS, "plain", lambda st: {**st, "conditions": conditions.set_condition(
        st.get("conditions"), constants.COND_PAUSED, constants.TRUE, reason="manual-pause", message="e2e")})

    async def sees_pause() -> bool:
        cond = conditions.get_condition(((await env.k.get(*ETCD, NS, "plain")) or {}).get("status", {})
                                        .get("conditions"), prov_status.COND_RECONCILED)
        return bool(cond and cond.get("reason") == applying.REASON_PAUSED)
    await aeventually(sees_pause, timeout=WAIT, what="the provisioner sees the pause")
    assert await env.k.delete("apps/v1", "StatefulSet", NS, "plain")

    async def status_saw_it_gone() -> bool:
        obj = await env.k.get(*ETCD, NS, "plain")
        cond = conditions.get_condition(((obj or {}).get("status") or {}).get("conditions"), constants.COND_READY)
        return bool(cond and "StatefulSet e2e-prov/plain does not exist" in cond.get("message", ""))
    await aeventually(status_saw_it_gone, timeout=WAIT, what="a timer pass after the deletion")
    await operator_metrics.wait_passes(operator_metrics.sandbox_metrics_url(env.sandbox.dir), NS, "plain", 2,
                                       timeout=20.0)
    assert await env.k.get("apps/v1", "StatefulSet", NS, "plain") is None, "repaired while paused"
    assert await phase(env, "plain") != constants.DB_PHASE_READY

    await env.k.transact_status(*ETCD, NS, "plain", lambda st: {
        **st, "conditions": conditions.remove_condition(st.get("conditions"), constants.COND_PAUSED)})
    await aeventually(lambda: env.k.get("apps/v1", "StatefulSet", NS, "plain"), timeout=WAIT,
                      what="repaired after the pause")
    await aeventually(lambda: ready(env, "plain"), timeout=WAIT, what="Ready again")
    eps = await member_endpoints(env, "plain", "http")
    async with client.EtcdClient(eps) as c:
        assert await c.kv.get("k", endpoint=eps[1]) == b"before-pause"
