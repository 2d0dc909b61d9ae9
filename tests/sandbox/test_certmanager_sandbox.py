"""cert-manager in the running sandbox (API server over HTTP), and a TLS etcd StatefulSet using its certificates.

We test: a CA Issuer issues a Certificate whose Secret verifies against the CA with a matching key and the
status cert-manager writes; ``Issuing=True`` (what ``cmctl renew`` sets) gives a higher revision and a new serial
and is removed; a spec change re-issues; renewal happens at renewBefore; deleting the Certificate leaves the
Secret; an Issuer whose CA Secret is missing never issues (clear reasons) until the Secret appears; SelfSigned
bootstraps a CA; two Certificates cannot share a Secret. Then an etcd StatefulSet with peer and client mTLS,
whose certificates carry only the wildcard pod DNS names, comes up healthy — etcd's peer SAN check (a reverse
lookup of the peer address) passes through the pod hosts files — while a peer certificate lacking the
``.svc.cluster.local`` form is rejected, as on a real cluster.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from opsmanager import pki
from opsmanager_sandbox import cluster
from tests.fixtures.sandbox_controllers import plain_etcd_statefulset
from tests.polling import aeventually

pytestmark = pytest.mark.slow

NS = "default"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def install_ca_issuer(sb: cluster.Sandbox, name: str = "ca", ca: pki.KeyPair | None = None) -> pki.KeyPair:
    ca = ca or pki.make_ca("sandbox-test-ca")
    await sb.apply([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-key-pair", "namespace": NS},
         "type": "kubernetes.io/tls", "data": {"tls.crt": b64(ca.cert_pem), "tls.key": b64(ca.key_pem)}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": name, "namespace": NS},
         "spec": {"ca": {"secretName": f"{name}-key-pair"}}},
    ])
    return ca


def certificate(name: str, secret: str, issuer: str = "ca", **spec: Any) -> dict[str, Any]:
    body = {"secretName": secret, "issuerRef": {"name": issuer, "kind": "Issuer"}, **spec}
    return {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": name, "namespace": NS},
            "spec": body}


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


async def get_cert(sb: cluster.Sandbox, name: str) -> dict[str, Any]:
    return await sb.client.get("cert-manager.io/v1", "Certificate", NS, name)


async def issued_at(sb: cluster.Sandbox, name: str, revision: int) -> dict[str, Any] | None:
    c = await get_cert(sb, name)
    st = c.get("status") or {}
    ok = st.get("revision", 0) >= revision and cond(c, "Ready").get("status") == "True" and not cond(c, "Issuing")
    return c if ok else None


async def secret_files(sb: cluster.Sandbox, name: str) -> dict[str, bytes]:
    s = await sb.client.get("v1", "Secret", NS, name)
    return {k: base64.b64decode(v) for k, v in s["data"].items()}


async def renew(sb: cluster.Sandbox, name: str) -> None:
    """What ``cmctl renew`` does: set Issuing=True on the status subresource."""
    c = await get_cert(sb, name)
    status = c.setdefault("status", {})
    conds = [x for x in status.get("conditions") or [] if x.get("type") != "Issuing"]
    conds.append({"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                  "message": "Certificate re-issuance manually triggered",
                  "observedGeneration": c["metadata"].get("generation"), "lastTransitionTime": "2026-01-01T00:00:00Z"})
    status["conditions"] = conds
    await sb.client.replace(c, subresource="status")


async def test_ca_issuer_issues_renews_reissues_and_leaves_the_secret(full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox
    ca = await install_ca_issuer(sb)
    issuer = await aeventually(lambda: _ready_issuer(sb, "ca"), timeout=10)
    assert cond(issuer, "Ready")["reason"] == "KeyPairVerified"
    await sb.apply(certificate("peer", "peer-tls", dnsNames=["*.etcd.default.svc"], usages=["server auth",
                                                                                        "client auth"]))
    c = await aeventually(lambda: issued_at(sb, "peer", 1), timeout=10, what="first issuance")
    files = await secret_files(sb, "peer-tls")
    assert pki.signed_by(files["tls.crt"], ca.cert_pem) and pki.key_matches_cert(files["tls.crt"], files["tls.key"])
    assert files["ca.crt"] == pki.split_pem(ca.cert_pem)[0]
    info = pki.cert_info(files["tls.crt"])
    assert info.dns_names == ("*.etcd.default.svc",)
    st = c["status"]
    assert st["revision"] == 1 and st["notAfter"].startswith(info.not_after.strftime("%Y-%m-%dT%H:%M"))
    assert st["notBefore"] and st["renewalTime"] and cond(c, "Ready")["reason"] == "Ready"
    secret = await sb.client.get("v1", "Secret", NS, "peer-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["annotations"]["cert-manager.io/certificate-name"] == "peer"

    await renew(sb, "peer")
    await aeventually(lambda: issued_at(sb, "peer", 2), timeout=10, what="re-issuance after Issuing=True")
    again = await secret_files(sb, "peer-tls")
    assert pki.cert_info(again["tls.crt"]).serial != info.serial
    assert again["tls.key"] != files["tls.key"] and pki.key_matches_cert(again["tls.crt"], again["tls.key"])

    c = await get_cert(sb, "peer")
    c["spec"]["dnsNames"] = ["*.etcd.default.svc", "*.etcd.default.svc.cluster.local"]
    await sb.client.replace(c)
    await aeventually(lambda: issued_at(sb, "peer", 3), timeout=10, what="re-issuance after a spec change")
    assert pki.cert_info((await secret_files(sb, "peer-tls"))["tls.crt"]).dns_names == (
        "*.etcd.default.svc", "*.etcd.default.svc.cluster.local")

    await sb.client.delete("cert-manager.io/v1", "Certificate", NS, "peer")
    await aeventually(lambda: _gone(sb, "peer"), timeout=5)
    assert (await sb.client.get("v1", "Secret", NS, "peer-tls")) is not None


async def test_renewal_at_renew_before(full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox
    await install_ca_issuer(sb)
    await sb.apply(certificate("short", "short-tls", commonName="short", duration="6s", renewBefore="5s"))
    first = await aeventually(lambda: issued_at(sb, "short", 1), timeout=10)
    # renewal time is notAfter - 5s, i.e. 1 s after issuance (notBefore is the issuance time, notAfter 6 s later)
    assert first["status"]["renewalTime"] < first["status"]["notAfter"]
    await aeventually(lambda: issued_at(sb, "short", 2), timeout=10, what="automatic renewal")


async def test_issuer_without_its_secret_never_issues_until_the_secret_appears(full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox
    await sb.apply({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "late", "namespace": NS},
                    "spec": {"ca": {"secretName": "late-key-pair"}}})
    await sb.apply(certificate("pending", "pending-tls", issuer="late", commonName="pending"))

    async def stuck() -> dict[str, Any] | None:
        c = await get_cert(sb, "pending")
        return c if cond(c, "Ready").get("reason") == "IssuerNotReady" else None

    c = await aeventually(stuck, timeout=10)
    assert 'secrets "late-key-pair" not found' in cond(c, "Ready")["message"]
    assert cond(c, "Issuing")["status"] == "True" and cond(c, "Issuing")["reason"] == "DoesNotExist"
    issuer = await sb.client.get("cert-manager.io/v1", "Issuer", NS, "late")
    assert cond(issuer, "Ready")["status"] == "False" and cond(issuer, "Ready")["reason"] == "ErrGetKeyPair"
    assert await sb.client.get("v1", "Secret", NS, "pending-tls") is None
    ca = pki.make_ca("late")
    await sb.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late-key-pair", "namespace": NS},
                    "data": {"tls.crt": b64(ca.cert_pem), "tls.key": b64(ca.key_pem)}})
    await aeventually(lambda: issued_at(sb, "pending", 1), timeout=10, what="issued once the CA Secret exists")
    assert pki.signed_by((await secret_files(sb, "pending-tls"))["tls.crt"], ca.cert_pem)


async def test_self_signed_bootstraps_a_ca_and_secrets_are_not_shared(full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox
    await sb.apply([
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "selfsigned", "namespace": NS},
         "spec": {"selfSigned": {}}},
        certificate("root", "root-ca", issuer="selfsigned", commonName="root", isCA=True),
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "boot", "namespace": NS},
         "spec": {"ca": {"secretName": "root-ca"}}},
        certificate("leaf", "leaf-tls", issuer="boot", dnsNames=["leaf.default.svc"]),
    ])
    await aeventually(lambda: issued_at(sb, "leaf", 1), timeout=15, what="leaf from a bootstrapped CA")
    root, leaf = await secret_files(sb, "root-ca"), await secret_files(sb, "leaf-tls")
    assert root["ca.crt"] == root["tls.crt"] and pki.signed_by(leaf["tls.crt"], root["tls.crt"])
    await sb.apply(certificate("thief", "leaf-tls", issuer="boot", dnsNames=["other"]))

    async def refused() -> dict[str, Any] | None:
        c = await get_cert(sb, "thief")
        return c if cond(c, "Ready").get("reason") == "SecretInUse" else None

    c = await aeventually(refused, timeout=10)
    assert 'Certificate "leaf"' in cond(c, "Ready")["message"]
    assert (await secret_files(sb, "leaf-tls"))["tls.crt"] == leaf["tls.crt"]


async def _ready_issuer(sb: cluster.Sandbox, name: str) -> dict[str, Any] | None:
    issuer = await sb.client.get("cert-manager.io/v1", "Issuer", NS, name)
    return issuer if cond(issuer, "Ready").get("status") == "True" else None


async def _gone(sb: cluster.Sandbox, name: str) -> bool:
    return await sb.client.get("cert-manager.io/v1", "Certificate", NS, name) is None


# -- TLS StatefulSet ------------------------------------------------------------------------------------------------


async def https_healthy(ip: str, ctx: ssl.SSLContext, server_name: str) -> bool:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as sess:
            async with sess.get(f"https://{ip}:2379/health", ssl=ctx, server_hostname=server_name) as resp:
                return resp.status == 200 and (await resp.json(content_type=None)).get("health") == "true"
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False


async def test_tls_statefulset_with_wildcard_dns_sans_passes_etcd_peer_san_check(
        full_sandbox: cluster.Sandbox, tmp_path: Path) -> None:
    sb = full_sandbox
    ca = await install_ca_issuer(sb)
    wildcards = ["*.etcd.default.svc", "*.etcd.default.svc.cluster.local"]
    both = ["server auth", "client auth"]
    await sb.apply([
        certificate("etcd-peer", "etcd-peer-tls", dnsNames=wildcards, usages=both),
        certificate("etcd-server", "etcd-server-tls", dnsNames=wildcards + ["etcd.default.svc"], usages=both),
        certificate("etcd-client", "etcd-client-tls", commonName="root", usages=["client auth"]),
    ])
    for name in ("etcd-peer", "etcd-server", "etcd-client"):
        await aeventually(lambda name=name: issued_at(sb, name, 1), timeout=10)
    await sb.apply(plain_etcd_statefulset(tls_secrets=("etcd-peer-tls", "etcd-server-tls")))
    pods = await sb.wait_ready_pods(NS, "app.kubernetes.io/name=etcd", 3, timeout=30)

    client = await secret_files(sb, "etcd-client-tls")
    (tmp_path / "c.crt").write_bytes(client["tls.crt"])
    (tmp_path / "c.key").write_bytes(client["tls.key"])
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    ctx.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
    for pod in pods:
        name = pod["metadata"]["name"]
        assert await aeventually(lambda pod=pod, name=name: https_healthy(pod["status"]["podIP"], ctx,
                                                                          f"{name}.etcd.default.svc"), timeout=10)
    # the peer listener did check SANs by reverse lookup: no rejection, and the SANs have no IP at all
    logs = "".join((sb.dir / "logs" / NS / p["metadata"]["name"] / "etcd.log").read_text() for p in pods)
    assert "rejected connection" not in logs
    assert pki.cert_info((await secret_files(sb, "etcd-peer-tls"))["tls.crt"]).ip_addresses == ()


async def test_peer_certificate_without_the_cluster_local_form_is_rejected(full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox
    await install_ca_issuer(sb)
    both = ["server auth", "client auth"]
    await sb.apply([
        certificate("etcd-peer", "etcd-peer-tls", dnsNames=["*.etcd.default.svc"], usages=both),
        certificate("etcd-server", "etcd-server-tls", dnsNames=["*.etcd.default.svc"], usages=both),
    ])
    for name in ("etcd-peer", "etcd-server"):
        await aeventually(lambda name=name: issued_at(sb, name, 1), timeout=10)
    await sb.apply(plain_etcd_statefulset(tls_secrets=("etcd-peer-tls", "etcd-server-tls")))

    def rejected() -> bool:
        for i in range(3):
            log = sb.dir / "logs" / NS / f"etcd-{i}" / "etcd.log"
            if log.exists() and "does not match any of DNSNames" in log.read_text():
                return True
        return False

    await aeventually(rejected, timeout=15, interval=0.1, what="etcd rejecting a peer whose PTR name is not in its SANs")


async def test_cluster_issuer_reads_its_ca_from_the_cert_manager_namespace(full_sandbox: cluster.Sandbox) -> None:
    sb = full_sandbox
    ca = pki.make_ca("cluster-ca")
    await sb.apply([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cluster-ca", "namespace": "cert-manager"},
         "data": {"tls.crt": b64(ca.cert_pem), "tls.key": b64(ca.key_pem)}},
        {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": "cluster-ca"},
         "spec": {"ca": {"secretName": "cluster-ca"}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "client", "namespace": NS},
         "spec": {"secretName": "client-tls", "commonName": "root", "usages": ["client auth"],
                  "issuerRef": {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}},
    ])
    await aeventually(lambda: issued_at(sb, "client", 1), timeout=10)
    secret = await sb.client.get("v1", "Secret", NS, "client-tls")
    assert secret["metadata"]["annotations"]["cert-manager.io/issuer-kind"] == "ClusterIssuer"
    assert pki.signed_by(base64.b64decode(secret["data"]["tls.crt"]), ca.cert_pem)
    issuer = await sb.client.get("cert-manager.io/v1", "ClusterIssuer", None, "cluster-ca")
    assert cond(issuer, "Ready")["status"] == "True"
