"""HorizontalScaling end to end on the real control plane: 3 → 5 → 3 members under the live writer.

What is claimed, measured from outside: up, each new member joins as a learner and becomes a voter (etcd's own
member list: 5 voters, no learner, every member answering Status with the same cluster ID); down, the leader (moved
to the highest ordinal first, by hand) is moved off before its member is removed, the pods and data volumes of the
removed members are gone; both ways 0 failed writes, every acknowledged write read back, HashKV agreeing on every
member that is left, the stall bounded, no election a MoveLeader did not cause, and the Etcd never paused.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.etcd import client as etcd_client
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("scaling")) as s:
        yield s


def umbrella(result: scenario.OpResult) -> list[str]:
    return [c for c in result.conditions if constants.PER_POD_SEPARATOR not in c]


async def membership(sc: scenario.Scenario, db: str, replicas: int) -> tuple[list[etcd_client.Member], set[int]]:
    """etcd's own member list, and the cluster IDs the members report (a plain-http cluster)."""
    async with await sc.plain_client(db, replicas, timeout=5.0) as client:
        listed = await client.members()
        views = await client.statuses(timeout=3.0)
    return listed, {v.cluster_id for v in views.values() if isinstance(v, etcd_client.MemberStatus)}


async def test_three_to_five_and_back_under_the_writer(sc: scenario.Scenario) -> None:
    db = "scale"
    await sc.fresh_etcd(db)
    up = await sc.operate(f"{db}-up", db, "HorizontalScaling", timeout=300, horizontalScaling={"replicas": 5})
    assert up.phase == constants.PHASE_SUCCESSFUL, up.failure
    assert umbrella(up) == [constants.COND_HORIZONTAL_SCALE_UP, constants.COND_SUCCESSFUL]
    for pod in naming.pods(db, 5)[3:]:
        for step in (constants.STEP_ETCD_MEMBER_ADDED, constants.STEP_ETCD_LEARNER_PROMOTED):
            assert constants.per_pod_type(step, pod) in up.conditions
    await sc.assert_no_loss(up, replicas=5)  # 0 failed writes, stall bounded, every write read back, HashKV on 5
    assert up.elections == 0, "adding learners causes no election"
    listed, clusters = await membership(sc, db, 5)
    assert sorted(m.name for m in listed) == naming.pods(db, 5) and not any(m.is_learner for m in listed), listed
    assert len(clusters) == 1, f"every member in one cluster: {clusters}"
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and obj["spec"]["replicas"] == 5
    assert obj["status"]["initialClusterState"] == "existing"
    await sc.wait_ready(db, timeout=120)

    # The leader on the highest ordinal, so the shrink must move it off before removing that member.
    moved = await sc.operate(f"{db}-lead", db, "MoveLeader", timeout=120,
                             moveLeader={"newLeader": naming.pods(db, 5)[4]})
    assert moved.phase == constants.PHASE_SUCCESSFUL, moved.failure
    down = await sc.operate(f"{db}-down", db, "HorizontalScaling", timeout=300, horizontalScaling={"replicas": 3})
    assert down.phase == constants.PHASE_SUCCESSFUL, down.failure
    assert [c for c in umbrella(down) if c != constants.COND_PENDING] == [constants.COND_HORIZONTAL_SCALE_DOWN,
                                                                     constants.COND_SUCCESSFUL]
    assert constants.per_pod_type(constants.STEP_MOVE_LEADER, naming.pods(db, 5)[4]) in down.conditions
    await sc.assert_no_loss(down)  # HashKV on the 3 members left
    assert down.leader_moves == 1 and down.elections <= 1, (down.elections, down.leader_moves)
    listed, clusters = await membership(sc, db, 3)
    assert sorted(m.name for m in listed) == naming.pods(db, 3), listed
    assert len(clusters) == 1

    async def gone() -> bool:
        pods = {p["metadata"]["name"] for p in await sc.k.list("v1", "Pod", sc.namespace)
                if p["metadata"]["name"].startswith(f"{db}-")}
        claims = {c["metadata"]["name"] for c in await sc.k.list("v1", "PersistentVolumeClaim", sc.namespace)
                  if c["metadata"]["name"].startswith(f"{naming.DATA_VOLUME}-{db}-")
                  and not c["metadata"].get("deletionTimestamp")}
        return pods == set(naming.pods(db, 3)) and claims <= {f"{naming.DATA_VOLUME}-{p}" for p in naming.pods(db, 3)}

    await aeventually(gone, timeout=60, interval=0.5, what="the removed members' pods and data volumes gone")
    req = await sc.request(f"{db}-down")
    assert req is not None
    for pod in naming.pods(db, 5)[3:]:
        assert conditions.is_true(req["status"]["conditions"],
                                  constants.per_pod_type(constants.STEP_ETCD_MEMBER_REMOVED, pod))
    assert not await sc.is_paused(db)
    for run in (up, down):
        print(f"\n{run.name}: {run.wall_seconds:.1f}s, {run.writes_ok} writes ok, {run.writes_failed} failed, "
              f"longest stall {run.max_gap:.3f}s, {run.elections} leader changes ({run.leader_moves} moves)")
    await sc.wait_ready(db, timeout=120)
    await sc.drop_etcd(db)
