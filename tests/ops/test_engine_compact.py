"""The Compact request in the fast world (the in-process API server and the fake etcd).

We test these aspects: a Compact with no revision compacts at the current revision, never pauses the Etcd and says
the revision in its condition; one with an earlier revision compacts there; a revision beyond the current one
fails naming both numbers and compacts nothing; a revision at or below an earlier compaction is done at once (etcd
answers "compacted": an operator that crashed after sending it finishes the same way).
"""

from __future__ import annotations

from opsmanager.api import conditions, constants
from tests.ops import world as w


async def compact(world: w.World, name: str, **spec: object) -> dict:
    await world.request(name, "db", "Compact", compact=spec)
    return await world.run(name)


def condition(req: dict) -> dict:
    found = conditions.get_condition(req["status"]["conditions"], constants.COND_ETCD_COMPACTED)
    assert found is not None, req["status"]
    return found


async def test_a_compact_without_a_revision_compacts_at_the_current_one_without_a_pause(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    world.cluster.write(40)
    current = world.cluster.raft_index
    req = await compact(world, "now")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert world.cluster.compacted == current
    assert f"below revision {current}" in condition(req)["message"]
    assert [c["type"] for c in req["status"]["conditions"]] == [constants.COND_ETCD_COMPACTED,
                                                                 constants.COND_SUCCESSFUL]
    assert not await world.is_paused("db")


async def test_an_earlier_revision_then_one_already_compacted(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    world.cluster.write(40)
    req = await compact(world, "earlier", revision=20)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL and world.cluster.compacted == 20
    again = await compact(world, "again", revision=15)
    assert again["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert "compacted already" in condition(again)["message"] and world.cluster.compacted == 20


async def test_a_future_revision_fails_naming_both_numbers(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    current = world.cluster.raft_index
    req = await compact(world, "future", revision=current + 1000)
    assert req["status"]["phase"] == constants.PHASE_FAILED
    message = condition(req)["message"]
    assert f"{current + 1000} is beyond the current revision {current}" in message, message
    assert world.cluster.compacted == 0
