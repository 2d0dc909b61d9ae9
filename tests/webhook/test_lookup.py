"""The Kubernetes-API lookup, through the one client (``opsmanager.kube``) against a small HTTP API server.

We test these aspects: an existing Etcd is returned (the client hits the right group/version/plural/namespace
path), from a worker thread (what the rules do) and from the loop, and so is an EtcdOpsRequest; 404 is "no such
object"; 403 and a refused connection raise ``EtcdLookupError`` (never "not found"); a kubeconfig file works and
its token is sent; calling the blocking form on the loop is refused (it would deadlock); and the whole chain —
HTTPS webhook → lookup → API server — denies and allows correctly.
"""

from __future__ import annotations

import asyncio
import copy
import json
import pathlib
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from opsmanager import kube
from opsmanager.webhook import lookup as lookup_module
from opsmanager.webhook import server, validation
from tests.webhook import conftest


class FakeApi:
    """Serves GET of namespaced ``etcds.opsmanager.dev`` and ``etcdopsrequests.ops.opsmanager.dev`` objects;
    records the paths it was asked for."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.opsrequests: dict[tuple[str, str], dict[str, Any]] = {}
        self.paths: list[str] = []
        self.authorization: list[str | None] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        self.authorization.append(request.headers.get("Authorization"))
        ns, name = request.match_info["ns"], request.match_info["name"]
        if name == "forbidden":
            return web.json_response({"kind": "Status", "code": 403, "reason": "Forbidden"}, status=403)
        ops = "/etcdopsrequests/" in request.path
        obj = (self.opsrequests if ops else self.objects).get((ns, name))
        if obj is None:
            what = "etcdopsrequests.ops.opsmanager.dev" if ops else "etcds.opsmanager.dev"
            return web.json_response({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound",
                                      "message": f'{what} "{name}" not found'}, status=404)
        return web.json_response(obj)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/apis/opsmanager.dev/v1alpha1/namespaces/{ns}/etcds/{name}", self.handle)
        app.router.add_get("/apis/ops.opsmanager.dev/v1alpha1/namespaces/{ns}/etcdopsrequests/{name}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def api() -> AsyncIterator[FakeApi]:
    fake = FakeApi()
    fake.objects[("demo", "etcd-cluster")] = copy.deepcopy(conftest.DB)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def client(api: FakeApi) -> AsyncIterator[kube.Kube]:
    async with kube.Kube.for_url(api.url) as k:
        yield k


async def test_existing_etcd_is_returned_from_the_right_path(api: FakeApi, client: kube.Kube) -> None:
    look = lookup_module.KubernetesEtcdLookup(client)
    obj = await asyncio.to_thread(look.get_etcd, "demo", "etcd-cluster")
    assert obj == conftest.DB
    assert await look.aget_etcd("demo", "etcd-cluster") == conftest.DB
    assert api.paths == ["/apis/opsmanager.dev/v1alpha1/namespaces/demo/etcds/etcd-cluster"] * 2
    assert api.authorization == [None, None]  # no credentials configured, none sent


async def test_404_is_none_and_other_errors_raise(api: FakeApi, client: kube.Kube) -> None:
    look = lookup_module.KubernetesEtcdLookup(client)
    assert await asyncio.to_thread(look.get_etcd, "other", "etcd-cluster") is None
    with pytest.raises(validation.EtcdLookupError, match="HTTP 403") as raised:
        await asyncio.to_thread(look.get_etcd, "demo", "forbidden")
    assert isinstance(raised.value.__cause__, kube.Forbidden)


async def test_an_ops_request_is_read_the_same_way(api: FakeApi, client: kube.Kube) -> None:
    ops = {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
           "metadata": {"name": "add-tls", "namespace": "demo"}, "status": {"phase": "Progressing"}}
    api.opsrequests[("demo", "add-tls")] = ops
    look = lookup_module.KubernetesEtcdLookup(client)
    assert await asyncio.to_thread(look.get_opsrequest, "demo", "add-tls") == ops
    assert await look.aget_opsrequest("demo", "gone") is None
    assert api.paths == ["/apis/ops.opsmanager.dev/v1alpha1/namespaces/demo/etcdopsrequests/add-tls",
                         "/apis/ops.opsmanager.dev/v1alpha1/namespaces/demo/etcdopsrequests/gone"]
    with pytest.raises(validation.EtcdLookupError, match="GET etcdopsrequests demo/forbidden: HTTP 403"):
        await asyncio.to_thread(look.get_opsrequest, "demo", "forbidden")


async def test_unreachable_api_raises_lookup_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    async with kube.Kube.for_url(f"http://127.0.0.1:{port}") as k:
        look = lookup_module.KubernetesEtcdLookup(k, timeout=2)
        with pytest.raises(validation.EtcdLookupError, match="GET etcds demo/x") as raised:
            await asyncio.to_thread(look.get_etcd, "demo", "x")
    assert isinstance(raised.value.__cause__, kube.Unavailable)


async def test_blocking_form_on_the_loop_is_refused(client: kube.Kube) -> None:
    look = lookup_module.KubernetesEtcdLookup(client)
    with pytest.raises(RuntimeError, match="worker thread"):
        look.get_etcd("demo", "etcd-cluster")


async def test_kubeconfig_file_is_used(api: FakeApi, tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sandbox",
        "clusters": [{"name": "sandbox", "cluster": {"server": api.url}}],
        "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "me"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
    }))
    look = lookup_module.KubernetesEtcdLookup(kubeconfig=str(kubeconfig))
    try:
        assert (await asyncio.to_thread(look.get_etcd, "demo", "etcd-cluster")) == conftest.DB
    finally:
        await look.aclose()
    assert api.authorization == ["Bearer t"]


async def test_a_missing_kubeconfig_is_a_lookup_error(tmp_path: pathlib.Path) -> None:
    look = lookup_module.KubernetesEtcdLookup(kubeconfig=str(tmp_path / "nowhere"))
    with pytest.raises(validation.EtcdLookupError, match="cannot load kubeconfig"):
        await look.aget_etcd("demo", "etcd-cluster")


async def test_webhook_through_the_api_lookup(
    api: FakeApi, client: kube.Kube, cert_dir: pathlib.Path, client_ssl: ssl.SSLContext
) -> None:
    look = lookup_module.KubernetesEtcdLookup(client)
    ops = {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
           "metadata": {"name": "r", "namespace": "demo"},
           "spec": {"type": "Restart", "databaseRef": {"name": "etcd-cluster"}}}
    missing = copy.deepcopy(ops)
    missing["spec"]["databaseRef"]["name"] = "nope"
    forbidden = copy.deepcopy(ops)
    forbidden["spec"]["databaseRef"]["name"] = "forbidden"
    async with server.WebhookServer(cert_file=cert_dir / "tls.crt", key_file=cert_dir / "tls.key",
                                    lookup=look) as srv, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as http:
        answers = []
        for obj in (ops, missing, forbidden):
            async with http.post(srv.url + "/validate-etcdopsrequest", json=conftest.review(obj)) as resp:
                assert resp.status == 200
                answers.append((await resp.json())["response"])
    assert answers[0]["allowed"] is True
    assert answers[1]["status"]["message"].endswith("spec.databaseRef demo/nope is invalid or not found")
    assert answers[2]["status"]["code"] == 503
    assert "looking up Etcd demo/forbidden failed" in answers[2]["status"]["message"]
