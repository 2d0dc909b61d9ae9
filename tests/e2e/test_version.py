"""UpdateVersion end to end on the real control plane: etcd 3.5 → 3.6 and back to 3.5 under the live writer, and
3.6 → 3.7 and back to 3.6 (etcd's downgrade protocol again), the 3.5 → 3.7 shortcut refused by the catalog's
admission.

What is claimed, measured from outside: up, every member restarted once onto the 3.6 build (followers first, the
leader last after MoveLeader), each reporting 3.6.16 in its own Status, the cluster version (each member's
``etcd_cluster_version`` metric) 3.6; down, etcd's downgrade protocol enabled before any member restarts (the
storage version 3.5.0 on every member first), each member restarted once onto 3.5, the cluster version back to 3.5
and downgrade mode ended; both ways 0 failed writes, every acknowledged write read back (the writes of the whole
round trip included), HashKV agreeing, the stall bounded, no election a MoveLeader did not cause, spec.version
following, and no pause left behind. A TLS cluster takes the same round trip (its members keep serving their
certificates).
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager_sandbox import realcp
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ETCD_35 = scenario.BUILT_ETCD_VERSION
ETCD_36 = realcp.build_module().COMPONENTS["etcd-3.6"].version().removeprefix("v")
ETCD_37 = realcp.build_module().COMPONENTS["etcd-3.7"].version().removeprefix("v")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("version")) as s:
        yield s


def umbrella(result: scenario.OpResult) -> list[str]:
    return [c for c in result.conditions if constants.PER_POD_SEPARATOR not in c and c != constants.COND_PENDING]


async def cluster_versions(sc: scenario.Scenario, db: str) -> set[str]:
    async with await sc.plain_client(db, timeout=5.0) as client:
        return {await client.cluster_version(ep.name) for ep in client.endpoints}


async def test_up_to_3_6_and_back_to_3_5_under_the_writer(sc: scenario.Scenario) -> None:
    db = "version"
    await sc.fresh_etcd(db, version=ETCD_35)

    async def decided() -> bool:  # a new cluster reports 3.0 until its leader has decided the cluster version
        return await cluster_versions(sc, db) == {"3.5"}

    await aeventually(decided, timeout=30, interval=0.5, what="the cluster version 3.5 decided")
    async with scenario.PodTracker(sc, db) as uids:
        up = await sc.operate(f"{db}-up", db, "UpdateVersion", timeout=300, updateVersion={"targetVersion": ETCD_36})
    assert up.phase == constants.PHASE_SUCCESSFUL, up.failure
    assert umbrella(up) == ["Running", "UpdateStatefulSet", "RestartPods", "VersionVerified", "UpdateDatabase",
                            "Successful"]
    assert uids.restarts() == {n: 1 for n in uids.names}, uids.uids
    await sc.assert_no_loss(up)  # 0 failed writes, stall bounded, every write read back, HashKV agrees
    assert up.elections == up.leader_moves == 1, "one planned leader move, no election"
    assert await sc.served_version(db) == {ETCD_36}
    assert await cluster_versions(sc, db) == {"3.6"}
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and obj["spec"]["version"] == ETCD_36 and obj["status"]["version"] == ETCD_36
    await sc.wait_ready(db, timeout=120)

    async with scenario.PodTracker(sc, db) as uids:
        down = await sc.operate(f"{db}-down", db, "UpdateVersion", timeout=300,
                                updateVersion={"targetVersion": ETCD_35})
    assert down.phase == constants.PHASE_SUCCESSFUL, down.failure
    assert umbrella(down) == ["Running", "DowngradeEnabled", "UpdateStatefulSet", "RestartPods", "VersionVerified",
                              "UpdateDatabase", "Successful"]
    assert uids.restarts() == {n: 1 for n in uids.names}, uids.uids
    await sc.assert_no_loss(down)
    assert down.elections == down.leader_moves == 1
    assert await sc.served_version(db) == {ETCD_35}
    assert await cluster_versions(sc, db) == {"3.5"}
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and obj["spec"]["version"] == ETCD_35 and obj["status"]["version"] == ETCD_35
    assert not await sc.is_paused(db)
    for run in (up, down):
        print(f"\n{run.name}: {run.wall_seconds:.1f}s, {run.writes_ok} writes ok, {run.writes_failed} failed, "
              f"longest stall {run.max_gap:.3f}s, {run.elections} leader changes ({run.leader_moves} moves)")
    await sc.drop_etcd(db)


async def test_a_tls_cluster_takes_the_same_round_trip(sc: scenario.Scenario) -> None:
    db, issuer = "version-tls", "ca-version"
    await sc.ca_issuer(issuer)
    await sc.fresh_etcd(db, issuer=issuer, version=ETCD_35)
    for name, target in (("up", ETCD_36), ("down", ETCD_35)):
        result = await sc.operate(f"{db}-{name}", db, "UpdateVersion", timeout=300,
                                  updateVersion={"targetVersion": target})
        assert result.phase == constants.PHASE_SUCCESSFUL, (name, result.failure)
        await sc.assert_no_loss(result)
        assert await sc.served_version(db) == {target}
        assert await sc.served_serials(db) and len(naming.pods(db, 3)) == 3
    await sc.drop_etcd(db)


async def test_up_to_3_7_and_back_to_3_6_under_the_writer(sc: scenario.Scenario) -> None:
    db = "version-37"
    await sc.fresh_etcd(db, version=ETCD_36)

    async def decided() -> bool:
        return await cluster_versions(sc, db) == {"3.6"}

    await aeventually(decided, timeout=30, interval=0.5, what="the cluster version 3.6 decided")
    for name, target, minor, steps in (
        ("up", ETCD_37, "3.7", ["Running", "UpdateStatefulSet", "RestartPods", "VersionVerified", "UpdateDatabase",
                                "Successful"]),
        ("down", ETCD_36, "3.6", ["Running", "DowngradeEnabled", "UpdateStatefulSet", "RestartPods",
                                  "VersionVerified", "UpdateDatabase", "Successful"]),
    ):
        async with scenario.PodTracker(sc, db) as uids:
            result = await sc.operate(f"{db}-{name}", db, "UpdateVersion", timeout=300,
                                      updateVersion={"targetVersion": target})
        assert result.phase == constants.PHASE_SUCCESSFUL, (name, result.failure)
        assert umbrella(result) == steps
        assert uids.restarts() == {n: 1 for n in uids.names}, uids.uids
        await sc.assert_no_loss(result)
        assert await sc.served_version(db) == {target}
        assert await cluster_versions(sc, db) == {minor}
        await sc.wait_ready(db, timeout=120)
    assert not await sc.is_paused(db)
    await sc.drop_etcd(db)
