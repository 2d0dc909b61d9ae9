"""The webhook over real HTTPS: routes, AdmissionReview responses, 400/404/405, certificate hot reload, the CLI.

We test these aspects: an allowed and a denied review for each path (422 and the exact KubeDB text in
``status.message``); the mutating patch decodes and applies; malformed envelopes get 400 with a message saying what
is wrong; unknown paths 404, wrong methods 405; a crashing rule is a denial in a 200, not a 500; the server serves
a new certificate to fresh handshakes after the files change, and keeps the old one when the new pair is broken;
``opsmanager webhook serve`` runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import pathlib
import signal
import ssl
import subprocess
import sys
from typing import Any

import aiohttp
import jsonpatch
import pytest

from opsmanager import pki
from opsmanager.webhook import server, validation
from tests.polling import aeventually, eventually
from tests.webhook import conftest

OPS = {
    "apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
    "metadata": {"name": "rotate", "namespace": "demo"},
    "spec": {"type": "ReconfigureTLS", "databaseRef": {"name": "etcd-cluster"}, "tls": {"rotateCertificates": True}},
}


async def post(http: aiohttp.ClientSession, srv: server.WebhookServer, path: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(srv.url + path, data=data, headers={"Content-Type": "application/json"}) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except json.JSONDecodeError:
            return resp.status, text


async def test_healthz_over_verified_tls(webhook: server.WebhookServer, http: aiohttp.ClientSession) -> None:
    async with http.get(webhook.url + "/healthz") as resp:
        assert resp.status == 200 and await resp.text() == "ok"


async def test_plain_http_and_unverified_clients_are_refused(webhook: server.WebhookServer) -> None:
    async with aiohttp.ClientSession() as session:  # system trust store: our test CA is not in it
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(webhook.url + "/healthz")
        with pytest.raises(aiohttp.ClientError):
            await session.get(f"http://127.0.0.1:{webhook.port}/healthz")


async def test_valid_ops_request_is_allowed(webhook: server.WebhookServer, http: aiohttp.ClientSession) -> None:
    status, body = await post(http, webhook, "/validate-etcdopsrequest", conftest.review(OPS, uid="abc"))
    assert status == 200
    assert body == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": "abc", "allowed": True}}


async def test_invalid_ops_request_is_denied_with_the_kubedb_message(
    webhook: server.WebhookServer, http: aiohttp.ClientSession
) -> None:
    obj = copy.deepcopy(OPS)
    obj["spec"]["tls"] = {"rotateCertificates": True, "remove": True}
    status, body = await post(http, webhook, "/validate-etcdopsrequest", conftest.review(obj))
    assert status == 200
    resp = body["response"]
    assert resp["uid"] == "uid-1" and resp["allowed"] is False
    assert resp["status"]["code"] == 422 and resp["status"]["reason"] == "Invalid"
    assert resp["status"]["message"] == (
        'EtcdOpsRequest.ops.opsmanager.dev "rotate" is invalid: spec.tls: Invalid value: "rotate": '
        "only one TLS reconfiguration operation is allowed at a time"
    )
    assert resp["status"]["details"]["causes"][0]["field"] == "spec.tls"


async def test_missing_database_is_denied(webhook: server.WebhookServer, http: aiohttp.ClientSession,
                                          lookup: validation.InMemoryEtcdLookup) -> None:
    lookup.delete("demo", "etcd-cluster")
    status, body = await post(http, webhook, "/validate-etcdopsrequest", conftest.review(OPS))
    assert status == 200
    assert body["response"]["status"]["message"].endswith(
        "spec.databaseRef demo/etcd-cluster is invalid or not found")


async def test_spec_change_on_update_is_denied(webhook: server.WebhookServer, http: aiohttp.ClientSession) -> None:
    new = copy.deepcopy(OPS)
    new["spec"]["timeout"] = "20m"
    _, body = await post(http, webhook, "/validate-etcdopsrequest",
                         conftest.review(new, operation="UPDATE", old=OPS))
    assert body["response"]["allowed"] is False
    assert "precondition failed for: map[spec:map[timeout:20m]]" in body["response"]["status"]["message"]


async def test_etcd_validation_and_warnings(webhook: server.WebhookServer, http: aiohttp.ClientSession) -> None:
    db = copy.deepcopy(conftest.DB)
    db["spec"]["replicas"] = 0
    _, body = await post(http, webhook, "/validate-etcd", conftest.review(db))
    assert body["response"]["status"]["message"] == (
        'Etcd.opsmanager.dev "etcd-cluster" is invalid: spec.replicas: Invalid value: 0: '
        "number of replicas can not be less than 1"
    )
    db["spec"]["replicas"] = 2
    _, body = await post(http, webhook, "/validate-etcd", conftest.review(db))
    assert body["response"]["allowed"] is True
    assert body["response"]["warnings"] == [validation.MSG_EVEN_REPLICAS]


async def test_delete_of_a_do_not_terminate_etcd_is_denied(
    webhook: server.WebhookServer, http: aiohttp.ClientSession
) -> None:
    db = copy.deepcopy(conftest.DB)
    db["spec"]["deletionPolicy"] = "DoNotTerminate"
    _, body = await post(http, webhook, "/validate-etcd", conftest.review(None, operation="DELETE", old=db))
    assert body["response"]["status"]["message"].endswith(
        'can not delete as deletionPolicy is set to "DoNotTerminate"')


async def test_mutate_returns_a_json_patch_of_the_defaults(
    webhook: server.WebhookServer, http: aiohttp.ClientSession
) -> None:
    db = {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd",
          "metadata": {"name": "e", "namespace": "demo"}, "spec": {"version": "3.5.1"}}
    _, body = await post(http, webhook, "/mutate-etcd", conftest.review(db))
    resp = body["response"]
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(db, json.loads(base64.b64decode(resp["patch"])))
    assert patched["spec"] == {"version": "3.5.1", "replicas": 3, "storageType": "Durable",
                               "deletionPolicy": "Delete", "halted": False}
    db["spec"] = {}
    _, body = await post(http, webhook, "/mutate-etcd", conftest.review(db))
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"] == "'spec.version' is missing"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "request body is not valid JSON"),
        (b"\xff\xfe", "request body is not valid JSON"),
        (b"", "request body is not valid JSON"),
        ([1, 2], "must be a JSON object (an AdmissionReview), got array"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}},
         "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}, "expected apiVersion admission.k8s.io/v1"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "AdmissionReview has no request object"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"},
         "AdmissionReview.request must be an object, got string"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}},
         "request.uid must be a non-empty string"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "operation": "MAKE"}},
         "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got 'MAKE'"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "CREATE"}}, "request.object is required for CREATE"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "CREATE", "object": [1]}}, "request.object must be an object or null"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "UPDATE", "object": {}}}, "request.oldObject is required for UPDATE"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "CREATE", "object": {}, "namespace": 3}},
         "request.namespace must be a string, got number"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "CREATE", "object": {"apiVersion": "v1", "kind": "Pod"}}},
         "request.object is v1/Pod; /validate-etcdopsrequest admits only ops.opsmanager.dev/v1alpha1 EtcdOpsRequest"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "CREATE", "object": {}, "kind": {"kind": "Etcd"}}},
         "request.kind is Etcd; /validate-etcdopsrequest admits only EtcdOpsRequest"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "CREATE", "object": {"metadata": []}}},
         "request.object.metadata must be an object, got array"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "operation": "CREATE", "object": {}, "dryRun": "yes"}},
         "request.dryRun must be a boolean, got string"),
    ],
)
async def test_malformed_reviews_get_400_with_a_clear_error(
    webhook: server.WebhookServer, http: aiohttp.ClientSession, body: Any, fragment: str
) -> None:
    status, answer = await post(http, webhook, "/validate-etcdopsrequest", body)
    assert status == 400
    assert fragment in answer["error"], answer


async def test_unknown_paths_are_404_and_wrong_methods_405(
    webhook: server.WebhookServer, http: aiohttp.ClientSession
) -> None:
    status, _ = await post(http, webhook, "/validate-pod", conftest.review(OPS))
    assert status == 404
    status, _ = await post(http, webhook, "/", conftest.review(OPS))
    assert status == 404
    async with http.get(webhook.url + "/validate-etcd") as resp:
        assert resp.status == 405


async def test_a_crashing_rule_is_a_denial_not_a_500(
    cert_dir: pathlib.Path, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
            raise RuntimeError("boom")

    async with server.WebhookServer(cert_file=cert_dir / "tls.crt", key_file=cert_dir / "tls.key",
                                    lookup=Broken()) as srv:
        status, body = await post(http, srv, "/validate-etcdopsrequest", conftest.review(OPS))
    assert status == 200
    assert body["response"]["allowed"] is False and body["response"]["status"]["code"] == 500
    assert "internal error" in body["response"]["status"]["message"]
    assert "boom" in caplog.text


async def served_serial(srv: server.WebhookServer, ctx: ssl.SSLContext) -> int:
    """The serial of the certificate a fresh TLS handshake gets."""
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return pki.cert_info(der).serial
    finally:
        writer.close()
        await writer.wait_closed()


async def serves(srv: server.WebhookServer, ctx: ssl.SSLContext, serial: int) -> bool:
    """Whether a fresh TLS handshake gets the certificate with this serial."""
    return await served_serial(srv, ctx) == serial


async def test_certificate_files_are_reloaded_for_new_handshakes(
    webhook: server.WebhookServer, cert_dir: pathlib.Path, webhook_ca: pki.KeyPair,
    client_ssl: ssl.SSLContext, http: aiohttp.ClientSession,
) -> None:
    assert await served_serial(webhook, client_ssl) == 1001
    conftest.write_serving_pair(webhook_ca, cert_dir, serial=2002)
    await aeventually(lambda: serves(webhook, client_ssl, 2002), timeout=10, what="new handshakes get serial 2002")
    assert webhook.reloads == 1
    status, _ = await post(http, webhook, "/validate-etcdopsrequest", conftest.review(OPS))
    assert status == 200


async def test_a_broken_pair_is_not_loaded_and_the_old_certificate_stays(
    webhook: server.WebhookServer, cert_dir: pathlib.Path, webhook_ca: pki.KeyPair, client_ssl: ssl.SSLContext,
) -> None:
    other = pki.make_leaf(webhook_ca, "x", ip_addresses=["127.0.0.1"], serial=3003)
    (cert_dir / "tls.crt").write_bytes(other.cert_pem)  # the key file still holds the old key: a mismatch
    await aeventually(lambda: webhook._failed_stamps is not None, timeout=10,  # the reloader has looked at them
                      what="the reloader refused the mismatched pair")
    assert await served_serial(webhook, client_ssl) == 1001
    (cert_dir / "tls.key").write_bytes(other.key_pem)  # now the pair matches
    await aeventually(lambda: serves(webhook, client_ssl, 3003), timeout=10, what="new handshakes get serial 3003")
    (cert_dir / "tls.crt").write_bytes(b"not a certificate")
    (cert_dir / "tls.key").write_bytes(b"")
    assert not webhook.reload_if_changed()
    assert await served_serial(webhook, client_ssl) == 3003


async def test_start_fails_clearly_without_certificate(tmp_path: pathlib.Path) -> None:
    srv = server.WebhookServer(cert_file=tmp_path / "none.crt", key_file=tmp_path / "none.key",
                               lookup=validation.InMemoryEtcdLookup())
    with pytest.raises(FileNotFoundError):
        await srv.start()
    with pytest.raises(RuntimeError, match="not started"):
        _ = srv.port
    await srv.stop()


def test_cli_serves_until_sigterm(cert_dir: pathlib.Path, client_ssl: ssl.SSLContext, tmp_path: pathlib.Path) -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"  # never used: no ops request is posted
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "opsmanager", "webhook", "serve", "--port", str(port),
         "--tls-cert", str(cert_dir / "tls.crt"), "--tls-key", str(cert_dir / "tls.key"),
         "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=pathlib.Path(__file__).parents[2],
    )

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=client_ssl, timeout=1) as r:
                return r.read() == b"ok"
        except OSError:
            assert proc.poll() is None, proc.communicate()
            return False

    try:
        eventually(healthy, timeout=20, interval=0.1, what="the webhook serving /healthz")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert f"serving on https://127.0.0.1:{port}" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_refuses_missing_files(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert server.main(["serve", "--tls-cert", str(tmp_path / "x"), "--tls-key", str(tmp_path / "y")]) == 2
    assert "--tls-cert" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x")
