"""httpGet probes against a real local HTTP(S) server (aiohttp on 127.0.0.1): 200–399 succeed, others fail with
the status and the start of the body, redirects are followed, a server that does not answer in time gives the
kubelet's timeout message, a closed port "connection refused"; HTTPS is not verified; the probe's headers and
the kubelet's User-Agent are sent on a fresh connection each time."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from opsmanager import pki
from opsmanager_sandbox import probes

Obj = dict[str, Any]


class Server:
    def __init__(self) -> None:
        self.seen: list[web.Request] = []
        self.peers: set[tuple[str, int]] = set()
        self.never = asyncio.Event()
        self.ports: dict[str, int] = {}

    def app(self) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            self.seen.append(request)
            if request.transport is not None:
                self.peers.add(request.transport.get_extra_info("peername"))
            path = request.path
            if path == "/ok":
                return web.Response(text='{"health":"true"}')
            if path == "/fail":
                return web.Response(status=500, text="etcd is unhealthy: " + "x" * 300)
            if path == "/chunked":
                resp = web.StreamResponse(status=503)
                resp.enable_chunked_encoding()
                await resp.prepare(request)
                await resp.write(b"part one, ")
                await resp.write(b"part two")
                await resp.write_eof()
                return resp
            if path == "/redirect":
                raise web.HTTPFound("/ok")
            if path == "/redirect-fail":
                raise web.HTTPTemporaryRedirect("/fail")
            if path == "/loop":
                raise web.HTTPFound("/loop")
            if path == "/hang":
                await self.never.wait()
            if path == "/headers":
                ok = request.headers.get("X-Probe") == "yes" and request.headers.get("User-Agent") == "kube-probe/1.32"
                return web.Response(status=200 if ok else 400, text=str(dict(request.headers)))
            return web.Response(status=404, text="not found")

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handle)
        return app


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server()
    runner = web.AppRunner(srv.app(), access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    ca = pki.make_ca("probe-test-ca")
    leaf = pki.make_leaf(ca, "probe-test", usages=("server",), ip_addresses=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    for scheme, ctx in (("http", None), ("https", context)):
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        srv.ports[scheme] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield srv
    finally:
        srv.never.set()
        await runner.cleanup()


async def probe(port: int, path: str, *, scheme: str = "HTTP", timeout: float = 2.0, **extra: Any) -> probes.ProbeResult:
    spec = {"httpGet": {"path": path, "port": port, "scheme": scheme, **extra}}
    return await probes.run_probe(spec, container={}, pod_ip="127.0.0.1", pid=None, env={}, timeout=timeout)


async def test_200_is_ok_and_500_fails_with_the_status_and_the_start_of_the_body(server: Server) -> None:
    assert await probe(server.ports["http"], "/ok") == probes.ProbeResult(True)
    failed = await probe(server.ports["http"], "/fail")
    assert not failed.ok
    assert failed.message == ("HTTP probe failed with statuscode: 500 "
                              f"({(b'etcd is unhealthy: ' + b'x' * 300)[:200]!r})")
    chunked = await probe(server.ports["http"], "/chunked")
    assert chunked.message == "HTTP probe failed with statuscode: 503 (b'part one, part two')"
    assert (await probe(server.ports["http"], "/missing")).message.startswith("HTTP probe failed with statuscode: 404")


async def test_redirects_are_followed_to_the_final_status(server: Server) -> None:
    port = server.ports["http"]
    assert await probe(port, "/redirect") == probes.ProbeResult(True)
    assert (await probe(port, "/redirect-fail")).message.startswith("HTTP probe failed with statuscode: 500")
    looping = await probe(port, "/loop")
    assert not looping.ok and looping.message == f'Get "http://127.0.0.1:{port}/loop": stopped after 10 redirects'


async def test_a_server_that_does_not_answer_times_out_with_the_kubelets_message(server: Server) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await probe(server.ports["http"], "/hang", timeout=0.3)
    assert loop.time() - started < 2.0
    assert result == probes.ProbeResult(False, f'Get "http://127.0.0.1:{server.ports["http"]}/hang": context deadline '
                                               "exceeded (Client.Timeout exceeded while awaiting headers)")


async def test_a_closed_port_is_connection_refused() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await probe(port, "/health")
    assert result == probes.ProbeResult(
        False, f'Get "http://127.0.0.1:{port}/health": dial tcp 127.0.0.1:{port}: connect: connection refused')


async def test_https_is_not_verified_and_headers_reach_the_server_on_fresh_connections(server: Server) -> None:
    assert await probe(server.ports["https"], "/ok", scheme="HTTPS") == probes.ProbeResult(True)
    plain_to_tls = await probe(server.ports["https"], "/ok")
    assert plain_to_tls == probes.ProbeResult(False, f'Get "http://127.0.0.1:{server.ports["https"]}/ok": EOF (the server '
                                                     "closed the connection without a response)")
    headers = [{"name": "X-Probe", "value": "yes"}]
    assert await probe(server.ports["http"], "/headers", httpHeaders=headers) == probes.ProbeResult(True)
    assert (await probe(server.ports["http"], "/headers")).message.startswith("HTTP probe failed with statuscode: 400")
    before = len(server.peers)
    for _ in range(3):
        assert (await probe(server.ports["http"], "/ok")).ok
    assert len(server.peers) == before + 3, "every probe opens its own connection (no keep-alive, like the kubelet)"
