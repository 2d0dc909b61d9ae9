"""The storage lifecycle end to end on the real control plane: sizes scanned, published, and a Defragment filed by
the operator itself — under the live writer.

What is claimed, measured from outside: after about 20 MB written, deleted and compacted on an Etcd whose policy
asks for a defragmentation at 50% free and 8 MiB, a request labelled ``ops.opsmanager.dev/trigger:
auto-defragment`` appears by itself (owned by the Etcd, an ``AutoDefragmentRequested`` Event), succeeds, and every
member's file shrinks below a quarter of its size before; 0 failed writes, every acknowledged write read back,
HashKV agreeing, the stall bounded; once per episode (no second request after it); ``status.storage`` and the
operator's ``opsmanager_etcd_db_size_bytes`` series describe every member.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import constants
from opsmanager.cluster import naming
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

POLICY = {"scanInterval": "2s", "autoDefragment": {"reclaimablePercent": 50, "minReclaimableBytes": 8 * 1024 * 1024}}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("storage")) as s:
        yield s


async def auto_defragments(sc: scenario.Scenario, db: str) -> list[dict[str, Any]]:
    return await sc.filed_by_operator(db, constants.TRIGGER_AUTO_DEFRAGMENT)


async def test_a_fragmented_database_is_defragmented_by_the_operator_itself(sc: scenario.Scenario) -> None:
    db = "fragmented"
    await sc.fresh_etcd(db, extra={"storageLifecycle": POLICY})
    async with await sc.plain_client(db) as client:
        for i in range(320):
            await client.kv.put(f"/bulk/{i:05d}", b"x" * 65536)
        deleted, revision = await client.kv.delete_prefix("/bulk/")
        assert deleted == 320
        await client.compact(revision, physical=True)
    async with sc.live(db) as (w, _mon):
        before = w.snapshot()
        started = time.monotonic()
        filed = await aeventually(lambda: auto_defragments(sc, db), timeout=120, interval=0.5,
                                  what="an auto-defragment request filed by the operator")
        assert len(filed) == 1, [r["metadata"]["name"] for r in filed]
        request = filed[0]
        assert request["metadata"]["ownerReferences"][0]["name"] == db
        done = await sc.watch_request(request["metadata"]["name"], timeout=180)
        wall = time.monotonic() - started
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    await sc.assert_no_loss(w, db=db, since=before)
    sizes = done["status"]["databaseSizes"]
    assert set(sizes) == set(naming.pods(db, 3))
    for name, size in sizes.items():
        assert size["beforeBytes"] >= 16_000_000 and size["afterBytes"] < size["beforeBytes"] / 4, (name, size)
    events = [e for e in await sc.k.list("v1", "Event", sc.namespace)
              if e.get("reason") == "AutoDefragmentRequested" and (e.get("involvedObject") or {}).get("name") == db]
    assert events and request["metadata"]["name"] in events[0]["message"]

    async def scanned_after() -> dict[str, Any] | None:
        obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
        storage = ((obj or {}).get("status") or {}).get("storage") or {}
        small = all(m["dbSizeBytes"] < 16_000_000 for m in (storage.get("members") or {}).values())
        return storage if small and len(storage.get("members") or {}) == 3 else None

    storage = await aeventually(scanned_after, timeout=30, interval=0.5, what="a scan after the defragmentation")
    scanned = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert ((scanned or {}).get("status") or {}).get("version") == sc.etcd_version  # what every member reports
    assert all(m.get("quotaBytes") for m in storage["members"].values()), storage
    assert sc.operator is not None
    async with aiohttp.ClientSession() as session, session.get(sc.operator.metrics_url) as resp:
        exposition = await resp.text()
    for pod in naming.pods(db, 3):
        assert f'opsmanager_etcd_db_size_bytes{{etcd="{db}",member="{pod}",namespace="{sc.namespace}"}}' in exposition
    # Once per episode: the share fell below the threshold, and nothing more is filed over further scans.
    await sc.wait_storage_scans(db, 4, timeout=30)
    assert len(await auto_defragments(sc, db)) == 1
    print(f"\n{db}: auto-defragment filed and done {wall:.1f}s after the live writer started; {sizes}")
    await sc.drop_etcd(db)
