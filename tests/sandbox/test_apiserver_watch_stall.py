"""Regression: a watch with bookmarks must keep delivering changes when a bookmark falls due while changes are
queued (it used to spin on a zero-timeout wait and never deliver again — the kubelet then missed pod deletions)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from opsmanager_sandbox.apiserver import APIServer

pytestmark = pytest.mark.slow


async def test_bookmarks_never_starve_queued_changes() -> None:
    srv = APIServer(port=0, bookmark_interval=0.01)
    await srv.start()
    try:
        async with aiohttp.ClientSession() as session:
            url = f"{srv.url}/api/v1/namespaces/default/configmaps"
            async with session.get(url, params={"watch": "true", "allowWatchBookmarks": "true",
                                                "resourceVersion": "0"}) as resp:
                seen: set[str] = set()

                async def read() -> None:
                    buf = b""
                    async for chunk in resp.content.iter_any():
                        buf += chunk
                        while b"\n" in buf:
                            line, buf = buf.split(b"\n", 1)
                            event = json.loads(line)
                            if event["type"] == "ADDED":
                                seen.add(event["object"]["metadata"]["name"])
                            if len(seen) == 200:
                                return

                reader = asyncio.create_task(read())
                for i in range(200):
                    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}}
                    async with session.post(url, json=body) as created:
                        assert created.status == 201
                    if i % 20 == 0:
                        await asyncio.sleep(0.02)  # let bookmarks fall due between bursts
                await asyncio.wait_for(reader, timeout=20)
                assert len(seen) == 200
    finally:
        await srv.stop()
