"""End to end in the sandbox: kubectl → sandbox API server (our CRDs) → our HTTPS webhook → kubectl's error.

We test these aspects, as a user sees them: the CRDs install and default; the mutating webhook defaults an Etcd;
``kubectl apply`` of an invalid EtcdOpsRequest fails at once with KubeDB's message (not a request stuck in
Pending); a missing Etcd is named; a valid request is stored and listed with Type/Status/Age columns; the spec of
a stored request cannot be changed; deleting a DoNotTerminate Etcd is refused. The webhook's Etcd lookup goes
through the one Kubernetes client (``opsmanager.kube``, from the kubeconfig) to the same API server, and the
webhook is reached through a ``service`` clientConfig verified against an embedded caBundle.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Callable, Iterator

import pytest
import yaml

from opsmanager import pki
from opsmanager.api import catalog
from opsmanager.webhook import config, lookup, server
from tests.fixtures import sandbox as sandbox_fixtures

REPO = pathlib.Path(__file__).resolve().parents[2]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]

ETCD = """
apiVersion: opsmanager.dev/v1alpha1
kind: Etcd
metadata: {name: etcd-cluster, namespace: default}
spec: {version: "3.5.1", tls: {issuerRef: {name: ca}}}
"""


@pytest.fixture
def wired(apiserver: sandbox_fixtures.SandboxAPI, tmp_path: pathlib.Path) -> Iterator[server.WebhookServer]:
    crds = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml"))]
    apiserver.call(apiserver.server.apply_objects, crds)
    apiserver.call(apiserver.server.apply_objects, catalog.objects())  # the bundle's version catalog
    ca = pki.make_ca("sandbox-webhook-ca")
    pair = pki.make_leaf(ca, "opsmanager-webhook", usages=["server"],
                         dns_names=[f"{config.SERVICE}.{config.NAMESPACE}.svc"])
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    async def bound_lookup() -> lookup.KubernetesEtcdLookup:  # on the server's loop, where the webhook runs
        return lookup.KubernetesEtcdLookup(kubeconfig=apiserver.kubeconfig)

    etcd_lookup = apiserver.call(bound_lookup)
    srv = server.WebhookServer(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key", lookup=etcd_lookup)
    apiserver.call(srv.start)
    try:
        apiserver.threaded.call_soon(apiserver.server.register_service_address, config.NAMESPACE, config.SERVICE,
                            config.PORT, "127.0.0.1", srv.port)
        apiserver.call(apiserver.server.apply_objects, config.render(ca_bundle=ca.cert_pem))
        yield srv
    finally:
        apiserver.call(srv.stop)
        apiserver.call(etcd_lookup.aclose)


def apply(kubectl: Kubectl, manifest: str) -> subprocess.CompletedProcess[str]:
    return kubectl("apply", "-f", "-", input=manifest)


def ops(name: str, spec: str) -> str:
    return f"""
apiVersion: ops.opsmanager.dev/v1alpha1
kind: EtcdOpsRequest
metadata: {{name: {name}, namespace: default}}
spec: {spec}
"""


@pytest.mark.slow
def test_kubectl_sees_kubedb_messages_at_once(wired: server.WebhookServer, kubectl: Kubectl) -> None:
    created = apply(kubectl, ETCD)
    assert created.returncode == 0, created.stderr
    got = json.loads(kubectl("get", "etcd", "etcd-cluster", "-o", "json", check=True).stdout)
    assert got["spec"]["replicas"] == 3 and got["spec"]["storageType"] == "Durable"
    assert got["spec"]["deletionPolicy"] == "Delete"
    assert got["spec"]["tls"]["issuerRef"] == {"name": "ca", "apiGroup": "cert-manager.io", "kind": "Issuer"}

    both = apply(kubectl, ops("both", "{type: ReconfigureTLS, databaseRef: {name: etcd-cluster}, "
                                      "tls: {remove: true, rotateCertificates: true}}"))
    assert both.returncode != 0
    # kubectl renders a 422 with details from its causes, as it does with a real API server
    assert both.stderr.strip() == ('The EtcdOpsRequest "both" is invalid: spec.tls: Invalid value: "both": '
                                   "only one TLS reconfiguration operation is allowed at a time")

    missing = apply(kubectl, ops("lost", "{type: Restart, databaseRef: {name: nowhere}}"))
    assert missing.returncode != 0
    assert "spec.databaseRef default/nowhere is invalid or not found" in missing.stderr

    nil = apply(kubectl, ops("nil", "{type: ReconfigureTLS, databaseRef: {name: etcd-cluster}}"))
    assert "spec.tls is nil, not supported in ReconfigureTLS type" in nil.stderr

    good = apply(kubectl, ops("rotate", "{type: ReconfigureTLS, databaseRef: {name: etcd-cluster}, "
                                        "tls: {rotateCertificates: true}}"))
    assert good.returncode == 0, good.stderr
    listing = kubectl("get", "etcdops", check=True).stdout
    assert listing.split("\n")[0].split() == ["NAME", "TYPE", "STATUS", "REASON", "AGE"]
    assert listing.split("\n")[1].split()[:2] == ["rotate", "ReconfigureTLS"]
    stored = json.loads(kubectl("get", "etcdops", "rotate", "-o", "json", check=True).stdout)
    assert stored["spec"]["timeout"] == "10m" and stored["spec"]["apply"] == "IfReady"

    changed = kubectl("patch", "etcdops", "rotate", "--type", "merge", "-p", '{"spec": {"timeout": "20m"}}')
    assert changed.returncode != 0
    assert "spec is immutable" in changed.stderr or "precondition failed" in changed.stderr


@pytest.mark.slow
def test_etcd_rules_and_delete_protection(wired: server.WebhookServer, kubectl: Kubectl) -> None:
    bad = apply(kubectl, """
apiVersion: opsmanager.dev/v1alpha1
kind: Etcd
metadata: {name: bad, namespace: default}
spec: {version: "3.5.1", tls: {issuerRef: {name: ca}, certificates: [{alias: server}, {alias: server}]}}
""")
    assert bad.returncode != 0
    assert "Duplicate value" in bad.stderr and "server" in bad.stderr
    unknown = apply(kubectl, ETCD.replace('"3.5.1"', '"3.4.0"'))
    assert 'failed to get EtcdVersion "3.4.0"' in unknown.stderr
    keep = apply(kubectl, ETCD.replace("tls: {issuerRef: {name: ca}}", "deletionPolicy: DoNotTerminate"))
    assert keep.returncode == 0, keep.stderr
    refused = kubectl("delete", "etcd", "etcd-cluster")
    assert refused.returncode != 0
    assert 'can not delete as deletionPolicy is set to "DoNotTerminate"' in refused.stderr


@pytest.mark.slow
def test_external_secrets_through_kubectl(wired: server.WebhookServer, kubectl: Kubectl) -> None:
    """Issue 12: an Etcd on the user's own Secrets is stored; with an issuerRef too it is refused naming both fields
    and the fix; a rotate on it is refused (the user rotates their Secrets), the handover to an issuer is stored."""
    byo = """
apiVersion: opsmanager.dev/v1alpha1
kind: Etcd
metadata: {name: byo, namespace: default}
spec: {version: "3.5.1", tls: {externalSecrets: {server: s-tls, peer: p-tls, client: c-tls}}}
"""
    both = apply(kubectl, byo.replace("tls: {", "tls: {issuerRef: {name: ca}, ").replace("name: byo", "name: both"))
    assert both.returncode != 0
    assert ("spec.tls.externalSecrets: Forbidden: spec.tls.issuerRef and spec.tls.externalSecrets are mutually "
            "exclusive: use issuerRef for cert-manager, externalSecrets for your own Secrets") in both.stderr
    stored = apply(kubectl, byo)
    assert stored.returncode == 0, stored.stderr
    rotate = apply(kubectl, ops("rot", "{type: ReconfigureTLS, databaseRef: {name: byo}, "
                                       "tls: {rotateCertificates: true}}"))
    assert rotate.returncode != 0
    assert "rotateCertificates does not apply to Etcd byo: it runs on spec.tls.externalSecrets" in rotate.stderr
    handover = apply(kubectl, ops("handover", "{type: ReconfigureTLS, databaseRef: {name: byo}, "
                                             "tls: {issuerRef: {name: ca}}}"))
    assert handover.returncode == 0, handover.stderr
