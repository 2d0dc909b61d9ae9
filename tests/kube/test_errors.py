"""The one error hierarchy: every failure of a call is a ``KubeError``; aiohttp's exceptions never leak.

We test these aspects: each HTTP status maps to its class (404 NotFound, 409 Conflict and AlreadyExists, 410 Gone,
422 Invalid, 403 Forbidden, 429 TooManyRequests, 5xx Unavailable) with the Status reason and message kept;
transport failures — a refused connection, a connection dropped mid-answer, a body that is not JSON, a timeout,
a watch on a dead server, a watch whose stream breaks — are ``Unavailable`` with the original chained as the
cause, and no exception type of aiohttp escapes; ``is_transient`` says retry only for 5xx/transport and 429.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from opsmanager import kube


def status(code: int, reason: str, message: str = "m") -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                              "reason": reason, "message": message}, status=code)


class Fake:
    """Answers GET /api/v1/namespaces/ns/configmaps/<name> as the name says."""

    def __init__(self) -> None:
        self.url = ""
        self.runner: web.AppRunner | None = None
        self.released = asyncio.Event()  # set at teardown: a held answer ends then, not seconds later

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name.isdigit():
            code = int(name)
            reason = {404: "NotFound", 409: "Conflict", 410: "Expired", 422: "Invalid", 403: "Forbidden",
                      429: "TooManyRequests", 401: "Unauthorized"}.get(code, "InternalError")
            return status(code, reason, f"said {code}")
        if name == "exists":
            return status(409, "AlreadyExists", "configmaps \"exists\" already exists")
        if name == "garbage":
            return web.Response(body=b"{not json", content_type="application/json")
        if name == "slow":
            await self.released.wait()  # answers only after the client's timeout: the test is about that timeout
            return web.json_response({})
        if name == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": name}})

    async def watch(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        await response.write(b'{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}}\n')
        if request.query.get("resourceVersion") == "old":
            await response.write(b'{"type": "ERROR", "object": {"kind": "Status", "code": 410, '
                                 b'"reason": "Expired", "message": "too old resource version"}}\n')
            return response
        await response.write(b'{"type": "MODIFIED", "obj')  # and the connection breaks mid-event
        assert request.transport is not None
        request.transport.close()
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/ns/configmaps/{name}", self.handle)
        app.router.add_get("/api/v1/namespaces/ns/configmaps", self.watch)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"


@pytest.fixture
async def fake() -> AsyncIterator[Fake]:
    server = Fake()
    await server.start()
    try:
        yield server
    finally:
        assert server.runner is not None
        server.released.set()
        await server.runner.cleanup()


@pytest.fixture
async def client(fake: Fake) -> AsyncIterator[kube.Kube]:
    async with kube.Kube.for_url(fake.url, timeout=1.0) as k:
        yield k


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there


@pytest.mark.parametrize(("name", "cls", "reason"), [
    ("403", kube.Forbidden, "Forbidden"),
    ("409", kube.Conflict, "Conflict"),
    ("exists", kube.AlreadyExists, "AlreadyExists"),
    ("410", kube.Gone, "Expired"),
    ("422", kube.Invalid, "Invalid"),
    ("429", kube.TooManyRequests, "TooManyRequests"),
    ("500", kube.Unavailable, "InternalError"),
    ("503", kube.Unavailable, "InternalError"),
    ("401", kube.Unauthorized, "Unauthorized"),
])
async def test_status_codes_map_to_their_class(client: kube.Kube, name: str, cls: type[kube.KubeError],
                                               reason: str) -> None:
    with pytest.raises(cls) as raised:
        await client.get("v1", "ConfigMap", "ns", name)
    assert type(raised.value) is cls
    assert raised.value.reason == reason and raised.value.status == (409 if name == "exists" else int(name))
    assert "GET /api/v1/namespaces/ns/configmaps/" in str(raised.value)
    assert raised.value.__cause__ is None  # an answer, not a transport failure
    assert issubclass(kube.AlreadyExists, kube.Conflict)


async def test_404_is_none_for_get_and_false_for_delete(client: kube.Kube) -> None:
    assert await client.get("v1", "ConfigMap", "ns", "404") is None
    with pytest.raises(kube.NotFound):
        await client.request("GET", "/api/v1/namespaces/ns/configmaps/404")


@pytest.mark.parametrize("name", ["garbage", "drop", "slow"])
async def test_broken_answers_are_unavailable_with_the_cause_chained(client: kube.Kube, name: str) -> None:
    with pytest.raises(kube.Unavailable) as raised:
        await client.get("v1", "ConfigMap", "ns", name)
    assert raised.value.status == 0
    assert raised.value.__cause__ is not None
    assert not isinstance(raised.value, aiohttp.ClientError)


async def test_refused_connection_is_unavailable_for_every_verb() -> None:
    async with kube.Kube.for_url(dead_url(), timeout=2.0) as k:
        calls = [
            k.get("v1", "ConfigMap", "ns", "a"),
            k.list("v1", "ConfigMap", None),
            k.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}),
            k.patch("v1", "ConfigMap", "ns", "a", {}),
            k.delete("v1", "ConfigMap", "ns", "a"),
            k.evict("ns", "p"),
            k.transact_status("v1", "ConfigMap", "ns", "a"),
        ]
        for call in calls:
            with pytest.raises(kube.Unavailable) as raised:
                await call
            assert isinstance(raised.value.__cause__, aiohttp.ClientError | OSError)
        with pytest.raises(kube.Unavailable):
            async for _ in k.watch("v1", "ConfigMap", "ns"):
                pass
        await k.event({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}},
                      reason="R", message="best effort: swallowed")


async def test_a_watch_error_event_raises_gone_and_a_broken_stream_unavailable(client: kube.Kube) -> None:
    seen = []
    with pytest.raises(kube.Gone):
        async for event in client.watch("v1", "ConfigMap", "ns", resource_version="old"):
            seen.append(event.type)
    assert seen == ["ADDED"]
    seen.clear()
    with pytest.raises(kube.Unavailable) as raised:
        async for event in client.watch("v1", "ConfigMap", "ns", resource_version="1"):
            seen.append(event.type)
    assert seen == ["ADDED"]
    assert raised.value.__cause__ is not None


def test_transient_is_retry_later_only() -> None:
    assert kube.is_transient(kube.Unavailable("x")) and kube.is_transient(kube.TooManyRequests("x"))
    for cls in (kube.NotFound, kube.Conflict, kube.Invalid, kube.Forbidden, kube.ConfigError, kube.Gone):
        assert not kube.is_transient(cls("x"))
