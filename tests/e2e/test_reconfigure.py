"""Reconfigure end to end on the real control plane: new etcd flags on a live cluster under the writer.

What is claimed, measured from outside: every member restarted once (leader last, after MoveLeader) and then
running with the new flags — read from each member's own ``/debug/vars`` command line by the test, and for the
quota also from the ``etcd_server_quota_backend_bytes`` metric —, 0 failed writes, every acknowledged write read
back, HashKV agreeing, the stall bounded; ``restart: "false"`` restarts nothing and leaves the running flags as they
were; a request breaking etcd's rules is refused at admission, naming the field.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager import kube
from opsmanager.api import constants

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

QUOTA = 3 * 1024 ** 3


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("reconfigure")) as s:
        yield s


async def running_flags(sc: scenario.Scenario, db: str) -> dict[str, set[str]]:
    async with await sc.plain_client(db, timeout=5.0) as client:
        return {ep.name: set(await client.flags(ep.name)) for ep in client.endpoints}


async def quota_metric(sc: scenario.Scenario, db: str) -> set[int]:
    out = set()
    async with aiohttp.ClientSession() as session:
        for ep in await sc.endpoints(db):
            async with session.get(f"{ep.metrics_url}/metrics") as resp:
                found = re.search(r"^etcd_server_quota_backend_bytes (\S+)$", await resp.text(), re.M)
            assert found is not None
            out.add(int(float(found.group(1))))
    return out


async def test_new_flags_on_a_live_cluster_under_the_writer(sc: scenario.Scenario) -> None:
    db = "tuned"
    await sc.fresh_etcd(db)
    tuning = {"quotaBackendBytes": QUOTA, "heartbeatInterval": 150, "electionTimeout": 1500, "snapshotCount": 20000,
              "autoCompactionMode": "periodic", "autoCompactionRetention": "1h"}
    async with scenario.PodTracker(sc, db) as uids:
        result = await sc.operate(f"{db}-flags", db, "Reconfigure", timeout=300, configuration={"tuning": tuning})
    assert result.phase == constants.PHASE_SUCCESSFUL, result.failure
    assert [c for c in result.conditions if "--" not in c and c != "Pending"] == [
        "Running", "UpdateStatefulSet", "RestartPods", "ConfigurationVerified", "UpdateDatabase", "Successful"]
    assert uids.restarts() == {n: 1 for n in uids.names}, uids.uids
    await sc.assert_no_loss(result)  # 0 failed writes, stall bounded, every write read back, HashKV agrees
    assert result.elections == result.leader_moves == 1
    want = {f"--quota-backend-bytes={QUOTA}", "--heartbeat-interval=150", "--election-timeout=1500",
            "--snapshot-count=20000", "--auto-compaction-mode=periodic", "--auto-compaction-retention=1h"}
    for member, flags in (await running_flags(sc, db)).items():
        assert want <= flags, (member, sorted(flags))
    assert await quota_metric(sc, db) == {QUOTA}
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and obj["spec"]["configuration"]["tuning"] == tuning
    await sc.wait_ready(db, timeout=120)

    # restart "false": recorded, not applied — the members keep running with what they started with.
    async with scenario.PodTracker(sc, db) as uids:
        later = await sc.operate(f"{db}-later", db, "Reconfigure", timeout=120,
                                 configuration={"tuning": {"maxTxnOps": 512}, "restart": "false"})
    assert later.phase == constants.PHASE_SUCCESSFUL, later.failure
    assert uids.restarts() == {n: 0 for n in uids.names}
    assert all("--max-txn-ops=512" not in flags for flags in (await running_flags(sc, db)).values())
    req = await sc.request(f"{db}-later")
    assert req is not None and "next restart" in req["status"]["warnings"][0]

    with pytest.raises(kube.Invalid) as refused:
        await sc.submit(f"{db}-bad", db, "Reconfigure", configuration={"tuning": {"electionTimeout": 400}})
    assert "spec.configuration.tuning.electionTimeout" in str(refused.value), refused.value
    await sc.drop_etcd(db)
