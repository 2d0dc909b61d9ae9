"""The fast engine suite's fixture: ``world`` — the sandbox API server in-process (no kubelet, no etcd
processes), the operator's ``kube.Kube`` client over loopback HTTP, and the in-test controllers and fake etcd
of :mod:`tests.ops.world`. Nothing inside the engine is mocked; its two doors (Kubernetes, etcd) are fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.ops import world as world_mod


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[world_mod.World]:
    server, client = await world_mod.start(tmp_path)
    try:
        yield world_mod.World(server, client)
    finally:
        client.close()
        await server.stop()
