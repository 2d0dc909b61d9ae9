"""cert-manager's own controller, built from its root module's packages behind a main of ours
(``sandbox/controlplane/cert-manager``), issues on the real control plane.

We test these aspects:
- the component pins the release whose CRDs the sandbox installs;
- a Certificate of a CA Issuer becomes Ready with a Secret whose leaf chains to that CA and carries the SANs asked
  for, issued by cert-manager's controller (not this project's issuance, which is not running here);
- its cainjector (built the same way) injects that CA into a webhook configuration that asks for it
  (``cert-manager.io/inject-ca-from``);
- stopping them leaves no process behind.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from opsmanager import pki
from opsmanager_sandbox import realcp
from tests.polling import eventually

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def kubectl(cp: realcp.KubernetesControlPlane, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kubectl", "--kubeconfig", str(cp.kubeconfig), *args], input=stdin, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_the_component_pins_the_release_of_the_crds() -> None:
    build = realcp.build_module()
    assert build.COMPONENTS["cert-manager"].pinned() == build.CERT_MANAGER[1]


@pytest.mark.asyncio
async def test_certificates_of_a_ca_issuer_are_issued_by_cert_managers_controller(tmp_path: Path) -> None:
    async with realcp.KubernetesControlPlane(tmp_path / "cp") as cp:
        crds = [d for p in sorted(realcp.cert_manager_crds().glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
                if d]
        kubectl(cp, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(crds))
        kubectl(cp, "wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io",
                "crd/issuers.cert-manager.io", "crd/certificaterequests.cert-manager.io")
        kubectl(cp, "create", "namespace", "cert-manager")
        ca = pki.make_ca("cert-manager-test-ca")
        docs = [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "default"},
             "type": "kubernetes.io/tls", "data": {"tls.crt": base64.b64encode(ca.cert_pem).decode(),
                                                   "tls.key": base64.b64encode(ca.key_pem).decode()}},
            {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "ca", "namespace": "default"},
             "spec": {"ca": {"secretName": "ca"}}},
            {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "leaf",
                                                                                      "namespace": "default"},
             "spec": {"secretName": "leaf", "commonName": "leaf", "dnsNames": ["leaf.default.svc"],
                      "usages": ["server auth", "client auth"], "issuerRef": {"name": "ca", "kind": "Issuer"}}},
        ]
        kubectl(cp, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        log = (tmp_path / "cert-manager.log").open("w")
        controller = subprocess.Popen([str(realcp.binary("cert-manager", "controller")), "--kubeconfig",
                                       str(cp.kubeconfig)], stdout=log, stderr=subprocess.STDOUT)
        try:
            def ready() -> bool:
                out = kubectl(cp, "get", "certificate", "leaf", "-o",
                              "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
                return out == "True"

            eventually(ready, timeout=60, what="Certificate leaf Ready")
            leaf_pem = base64.b64decode(kubectl(cp, "get", "secret", "leaf", "-o", "jsonpath={.data.tls\\.crt}"))
            webhook = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                       "metadata": {"name": "injected", "annotations": {"cert-manager.io/inject-ca-from": "default/leaf"}},
                       "webhooks": [{"name": "injected.example.com", "admissionReviewVersions": ["v1"],
                                     "sideEffects": "None", "failurePolicy": "Ignore",
                                     "clientConfig": {"service": {"name": "nothing", "namespace": "default"}},
                                     "rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"],
                                                "operations": ["CREATE"], "resources": ["widgets"]}]}]}
            kubectl(cp, "apply", "-f", "-", stdin=yaml.safe_dump(webhook))
            injector = subprocess.Popen([str(realcp.binary("cert-manager", "cainjector")), "--kubeconfig",
                                         str(cp.kubeconfig)], stdout=log, stderr=subprocess.STDOUT)
            try:
                def injected() -> bytes:
                    out = kubectl(cp, "get", "validatingwebhookconfiguration", "injected", "-o",
                                  "jsonpath={.webhooks[0].clientConfig.caBundle}")
                    return base64.b64decode(out) if out else b""

                bundle = eventually(injected, timeout=60, what="the caBundle injected")
            finally:
                injector.terminate()
                injector.wait(15)
        finally:
            controller.terminate()
            controller.wait(15)
            log.close()
        assert pki.cert_info(bundle).fingerprint_sha256 == pki.cert_info(ca.cert_pem).fingerprint_sha256
        info = pki.cert_info(leaf_pem)
        assert info.dns_names == ("leaf.default.svc",) and info.issuer == "CN=cert-manager-test-ca"
        leaf = x509.load_pem_x509_certificate(leaf_pem)
        leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))
        requests = kubectl(cp, "get", "certificaterequests", "-o", "jsonpath={.items[*].status.conditions[*].type}")
        assert "Approved" in requests and "Ready" in requests, requests  # cert-manager's approver and CA issuer
    assert controller.returncode is not None and injector.returncode is not None
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(realcp.binary("cert-manager", "controller")) not in running
    assert str(realcp.binary("cert-manager", "cainjector")) not in running
