"""RecoverFromQuorumLoss in the fast world: the checks of ``QuorumLossConfirmed`` that end a request with nothing
changed (the recovery itself — the forced restart, the learners, the ordinals — runs on the real control plane).

We test: a request filed while a quorum answers fails ``QuorumNotLost``; one whose confirmed survivor does not answer
fails ``SurvivorSilent`` naming the members that do; either way no pod is deleted, the StatefulSet is as it was and
the Etcd is resumed.
"""

from __future__ import annotations

from typing import Any

from opsmanager.api import conditions, constants
from tests.ops import world as w


async def recover(world: w.World, confirm: str, *down: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stop ``down``, file a recovery confirming ``confirm``; the request's end and the StatefulSet before it."""
    await world.etcd("db")
    assert world.cluster is not None
    for name in down:
        world.cluster.stop(name)
    sts = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert sts is not None
    await world.request("rec", "db", constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS, timeout="5m",
                        recoverFromQuorumLoss={"confirmMember": confirm})
    return await world.run("rec"), sts


async def assert_nothing_changed(world: w.World, req: dict[str, Any], sts: dict[str, Any], reason: str) -> str:
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and failed["reason"] == reason, failed
    assert world.record.deletions == []
    now = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert now is not None and now["spec"] == sts["spec"]
    assert not await world.is_paused("db")
    return str(failed["message"])


async def test_a_recovery_of_a_cluster_that_has_its_quorum_changes_nothing(world: w.World) -> None:
    req, sts = await recover(world, "db-0", "db-2")
    message = await assert_nothing_changed(world, req, sts, "QuorumNotLost")
    assert "quorum is back (db-0, db-1 answer with a leader): there is nothing to recover" in message, message


async def test_a_survivor_that_does_not_answer_is_not_forced(world: w.World) -> None:
    req, sts = await recover(world, "db-1", "db-1", "db-2")
    message = await assert_nothing_changed(world, req, sts, "SurvivorSilent")
    assert "db-1 does not answer (answering: db-0): only a member whose data is there can be kept" in message, message
