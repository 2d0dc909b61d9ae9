"""VerticalScaling end to end on the real control plane, under the live writer.

What is claimed, measured from outside: ``Restart`` mode restarts every member once (leader last, after MoveLeader)
onto pods whose etcd container has the new resources; ``InPlace`` resizes the running pods through kube-apiserver's
``pods/resize`` with no pod recreated and no etcd process restarted (pod UIDs and etcd PIDs unchanged), each pod's
status reporting the new resources (the node agent answers as the kubelet does); both ways 0 failed writes, every
acknowledged write read back, HashKV agreeing, the stall bounded, and the Etcd's ``spec.podTemplate`` following.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import common, constants

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SMALL = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
LARGER = {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("vertical")) as s:
        yield s


def etcd_container(pod: dict[str, Any], key: str) -> dict[str, Any]:
    items = pod["spec"]["containers"] if key == "spec" else pod["status"].get("containerStatuses") or []
    return next(c for c in items if c["name"] == "etcd")


async def test_restart_then_in_place_under_the_writer(sc: scenario.Scenario) -> None:
    db = "vertical"
    await sc.fresh_etcd(db)
    async with scenario.PodTracker(sc, db) as uids:
        rolled = await sc.operate(f"{db}-restart", db, "VerticalScaling", timeout=300,
                                  verticalScaling={"etcd": {"resources": SMALL}})
    assert rolled.phase == constants.PHASE_SUCCESSFUL, rolled.failure
    assert uids.restarts() == {n: 1 for n in uids.names}, uids.uids
    await sc.assert_no_loss(rolled)
    assert rolled.elections == rolled.leader_moves == 1
    for pod in await sc.k.list("v1", "Pod", sc.namespace):
        if pod["metadata"]["name"].startswith(f"{db}-"):
            assert common.same_resources(etcd_container(pod, "spec")["resources"], SMALL), pod["metadata"]["name"]
    await sc.wait_ready(db, timeout=120)

    async with scenario.PodTracker(sc, db) as uids, scenario.PidTracker(sc, db, interval=0.05) as pids:
        live = await sc.operate(f"{db}-inplace", db, "VerticalScaling", timeout=300,
                                verticalScaling={"etcd": {"resources": LARGER}, "mode": "InPlace"})
    assert live.phase == constants.PHASE_SUCCESSFUL, live.failure
    assert [c for c in live.conditions if "--" not in c and c != "Pending"] == [
        "Running", "UpdateStatefulSet", "InPlaceResized", "UpdateDatabase", "Successful"]
    assert uids.restarts() == {n: 0 for n in uids.names}, uids.uids
    assert pids.restarts() == {n: 0 for n in pids.names}, pids.pids
    await sc.assert_no_loss(live)
    assert live.elections == live.leader_moves == 0
    for pod in await sc.k.list("v1", "Pod", sc.namespace):
        if pod["metadata"]["name"].startswith(f"{db}-"):
            assert common.same_resources(etcd_container(pod, "spec")["resources"], LARGER)
            assert common.same_resources(etcd_container(pod, "status").get("resources"), LARGER), pod["status"]
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and common.same_resources(obj["spec"]["podTemplate"]["spec"]["resources"], LARGER)
    for run in (rolled, live):
        print(f"\n{run.name}: {run.wall_seconds:.1f}s, {run.writes_ok} writes ok, {run.writes_failed} failed, "
              f"longest stall {run.max_gap:.3f}s, {run.elections} leader changes ({run.leader_moves} moves)")
    await sc.drop_etcd(db)
