"""The informer's relist: after ``410 Gone`` it lists again and tells handlers what changed while it was away.

We test against a scripted API server: the first list has ``a`` and ``b``; the watch from that list's
resourceVersion answers with an ERROR event 410 (too old); the second list has ``a`` changed, ``b`` gone and
``c`` new and ``d`` deleted and created again under its name (another UID) — handlers get MODIFIED a, ADDED c,
DELETED and ADDED d, DELETED b (and nothing for what did not change), the cache matches the second list, and the next
watch starts from the second list's resourceVersion.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from opsmanager import kube
from tests.polling import aeventually


def cm(name: str, version: str, uid: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version, "uid": uid or f"{name}-uid"}}


class Scripted:
    def __init__(self) -> None:
        self.lists = [
            {"metadata": {"resourceVersion": "10"}, "items": [cm("a", "1"), cm("b", "2"), cm("d", "3", "d-old")]},
            {"metadata": {"resourceVersion": "20"}, "items": [cm("a", "15"), cm("c", "16"), cm("d", "17", "d-new")]},
        ]
        self.watched_from: list[str] = []
        self.hold = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response(self.lists.pop(0) if len(self.lists) > 1 else self.lists[0])
        self.watched_from.append(request.query.get("resourceVersion", ""))
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        if len(self.watched_from) == 1:
            await response.write(b'{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}\n')
            return response
        await self.hold.wait()  # the second watch stays open until the test ends
        return response


@pytest.fixture
async def server() -> AsyncIterator[tuple[Scripted, str]]:
    scripted = Scripted()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/configmaps", scripted.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield scripted, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        scripted.hold.set()
        await runner.cleanup()


async def test_a_relist_after_gone_reports_the_difference(server: tuple[Scripted, str]) -> None:
    scripted, url = server
    events: list[tuple[str, str]] = []
    async with kube.Kube.for_url(url) as client:
        informer = kube.Informer(client, "v1", "ConfigMap", namespace="ns")
        informer.add_handler(lambda t, obj, old: events.append((t, obj["metadata"]["uid"])))
        informer.start()
        try:
            await aeventually(lambda: len(scripted.watched_from) == 2, what="the informer watching again")
            assert scripted.watched_from == ["10", "20"]
            assert events == [("ADDED", "a-uid"), ("ADDED", "b-uid"), ("ADDED", "d-old"),
                              ("MODIFIED", "a-uid"), ("ADDED", "c-uid"),
                              # deleted and its name taken again while the watch was down: another object
                              ("DELETED", "d-old"), ("ADDED", "d-new"),
                              ("DELETED", "b-uid")]
            assert sorted(name for _, name in informer.cache) == ["a", "c", "d"]
            assert informer.get("ns", "a") == {**cm("a", "15"), "apiVersion": "v1", "kind": "ConfigMap"}
        finally:
            await informer.stop()
