"""The one loader: kubeconfig and in-cluster settings become a base URL, an SSL context and an auth header.

We test these aspects: a kubeconfig's server and token (and kopf's split of it), without the token in ``repr``;
``$KUBECONFIG`` read when loading (not when the package was imported); a missing kubeconfig and no cluster is a
``ConfigError`` naming both; the in-cluster service account (host from the environment, token and CA files);
client certificates and ``insecure-skip-tls-verify`` in the SSL context; an exec credential plugin, whose token
the client refreshes and retries with once after a 401.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from opsmanager import kube, pki
from opsmanager.kube import config


def write_kubeconfig(path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": user}],
    }))
    return path


def test_kubeconfig_token(tmp_path: Path) -> None:
    conn = config.load(write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1234/", {"token": "s3cret"}))
    assert conn.base_url == "http://127.0.0.1:1234"
    assert conn.authorization() == "Bearer s3cret"
    assert conn.scheme_and_token() == ("Bearer", "s3cret")
    assert conn.ssl_context() is None  # plain http
    assert "s3cret" not in repr(conn)


def test_kubeconfig_env_is_read_when_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:4321", {})
    monkeypatch.setenv("KUBECONFIG", str(path))
    conn = config.load()
    assert conn.base_url == "http://127.0.0.1:4321"
    assert conn.authorization() is None


def test_no_kubeconfig_and_no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(kube.ConfigError, match="cannot load kubeconfig"):
        config.load(tmp_path / "nowhere")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(kube.ConfigError, match="no kubeconfig found .* not running in a cluster"):
        config.load(token_file=str(tmp_path / "token"), ca_file=str(tmp_path / "ca.crt"))


def test_no_home_directory_means_no_default_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container's user may have neither $HOME nor a passwd entry: then there is no ~/.kube/config (and the
    in-cluster service account is next), not a crash."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("HOME", raising=False)

    def no_passwd_entry(self: Path) -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "expanduser", no_passwd_entry)
    assert config.default_kubeconfig() is None


def test_in_cluster_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = pki.make_ca("cluster-ca")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "token").write_text("sa-token")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    conn = config.load(token_file=str(tmp_path / "token"), ca_file=str(tmp_path / "ca.crt"))
    assert conn.base_url == "https://127.0.0.1:6443"
    assert conn.authorization() == "bearer sa-token"
    context = conn.ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED


def test_client_certificate_and_insecure(tmp_path: Path) -> None:
    ca = pki.make_ca("ca")
    leaf = pki.make_leaf(ca, "me", usages=("client",))

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    conn = config.load(write_kubeconfig(
        tmp_path / "kc", "https://127.0.0.1:6443",
        {"client-certificate-data": b64(leaf.cert_pem), "client-key-data": b64(leaf.key_pem)},
        {"certificate-authority-data": b64(ca.cert_pem)}))
    assert conn.cert_path and conn.key_path and conn.ca_path
    context = conn.ssl_context()
    assert context is not None and context.check_hostname
    insecure = config.load(write_kubeconfig(tmp_path / "kc2", "https://127.0.0.1:6443", {},
                                            {"insecure-skip-tls-verify": True}))
    context = insecure.ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_NONE


EXEC_PLUGIN = """
import json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": f"exec-{n}", "expirationTimestamp": "2000-01-01T00:00:00Z"}}))
"""


class RejectsFirst:
    """An API server that answers 401 to the first request and 200 to the others, recording the headers."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.get("Authorization"))
        if len(self.seen) == 1:
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        return web.json_response({"kind": "Namespace", "metadata": {"name": request.match_info["name"]}})


@pytest.fixture
async def rejects_first() -> AsyncIterator[RejectsFirst]:
    fake = RejectsFirst()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{name}", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()


async def test_exec_plugin_token_is_refreshed_after_a_401(tmp_path: Path, rejects_first: RejectsFirst) -> None:
    (tmp_path / "plugin.py").write_text(EXEC_PLUGIN)
    kubeconfig = write_kubeconfig(tmp_path / "kc", rejects_first.url, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), str(tmp_path / "counter")], "interactiveMode": "Never"}})
    async with kube.Kube.from_kubeconfig(kubeconfig) as k:
        obj = await k.get("v1", "Namespace", None, "default")
    assert obj is not None and obj["metadata"]["name"] == "default"
    assert len(rejects_first.seen) == 2
    first, second = rejects_first.seen
    assert first is not None and second is not None and first.startswith("Bearer exec-")
    assert second.startswith("Bearer exec-") and second != first  # the plugin ran again for the retry
