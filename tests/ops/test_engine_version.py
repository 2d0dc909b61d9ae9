"""The UpdateVersion request in the fast world (the in-process API server and the fake etcd).

We test these aspects: an upgrade by one minor rolls every member onto the new image (followers first, the leader
last after MoveLeader), checks each member's version and the cluster version, then writes ``spec.version``; a
downgrade by one minor enables etcd's downgrade protocol (validate, enable) before any member restarts, and ends
with the cluster out of downgrade mode; a skipped minor, a downgrade of more than one minor and an unsupported
version fail at once with the reason, touching nothing.
"""

from __future__ import annotations

import pytest

from opsmanager.api import conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.api import versions as version_logic
from opsmanager.ops import operations, plan
from tests.ops import world as w

PODS = ("db-0", "db-1", "db-2")


async def versions(world: w.World) -> dict[str, str]:
    assert world.cluster is not None
    return {name: m.version for name, m in world.cluster.members.items()}


async def test_up_one_minor_then_down_one_minor_through_the_downgrade_protocol(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    await world.request("up", "db", "UpdateVersion", updateVersion={"targetVersion": "3.6.16"})
    req = await world.run("up")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == [constants.COND_RUNNING, constants.COND_UPDATE_STATEFULSET, constants.COND_RESTART_PODS,
                               constants.COND_VERSION_VERIFIED, constants.COND_UPDATE_DATABASE,
                               constants.COND_SUCCESSFUL]
    assert await versions(world) == {p: "3.6.16" for p in PODS}
    assert world.cluster.cluster_version() == "3.6"
    assert (await world.get_etcd("db"))["spec"]["version"] == "3.6.16"
    assert (await world.get_etcd("db"))["status"]["version"] == "3.6.16"  # status follows
    assert world.record.restarted_while_leader == [] and world.cluster.elections == []
    for pod in PODS:
        assert conditions.is_true(req["status"]["conditions"],
                                  constants.per_pod_type(constants.STEP_VERIFY_VERSION, pod))
    assert not [c for c in world.cluster.calls if c.startswith("downgrade")]

    await world.request("down", "db", "UpdateVersion", updateVersion={"targetVersion": "3.5.35"})
    req = await world.run("down")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req)[:3] == [constants.COND_RUNNING, constants.COND_DOWNGRADE_ENABLED,
                                   constants.COND_UPDATE_STATEFULSET]
    assert [c for c in world.cluster.calls if c.startswith("downgrade")] == ["downgrade VALIDATE 3.5",
                                                                             "downgrade ENABLE 3.5"]
    assert await versions(world) == {p: "3.5.35" for p in PODS}
    assert world.cluster.downgrade_target == "" and world.cluster.cluster_version() == "3.5"
    assert (await world.get_etcd("db"))["spec"]["version"] == "3.5.35"
    assert (await world.get_etcd("db"))["status"]["version"] == "3.5.35"
    assert world.cluster.elections == []
    assert not await world.is_paused("db")


async def test_an_unsupported_target_fails_at_once_touching_nothing(world: w.World) -> None:
    await world.etcd("db")
    await world.request("bad", "db", "UpdateVersion", updateVersion={"targetVersion": "3.4.0"})
    req = await world.run("bad")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and "3.4.0 is not a supported etcd version" in failed["message"], failed
    assert world.record.evictions == [] and (await world.get_etcd("db"))["spec"]["version"] == "3.5.1"
    assert not await world.is_paused("db")


def version_request(target: str, start: str | None = None) -> ops_api.EtcdOpsRequest:
    status = {"origin": {"version": start}} if start else {}
    return ops_api.EtcdOpsRequest.model_validate({
        "metadata": {"name": "v", "namespace": w.NS},
        "spec": {"type": "UpdateVersion", "databaseRef": {"name": "db"}, "updateVersion": {"targetVersion": target}},
        "status": status})


@pytest.mark.parametrize(("start", "target", "refused"), [
    ("3.5.1", "3.6.16", None),
    ("3.5.35", "3.5.1", None),  # a patch version within the minor: a plain roll (the catalog may deny it)
    ("3.6.16", "3.5.35", None),  # one minor down from 3.6: the downgrade protocol
    ("3.6.16", "3.7.3", None),  # one minor up
    ("3.7.3", "3.6.16", None),  # one minor down from 3.7: the downgrade protocol
    ("3.5.35", "3.7.3", "skips a minor version: upgrade one minor at a time, through etcd 3.6 first"),
    ("3.7.3", "3.5.35", "downgrades are not supported"),  # one minor down at most
    ("3.5.1", "4.0.0", "is not a supported etcd version"),  # a minor the operator does not run
    ("3.6.16", "3.4.0", "is not a supported etcd version"),
])
def test_the_upgrade_path(start: str, target: str, refused: str | None) -> None:
    db = etcd_api.Etcd.model_validate({"metadata": {"name": "db", "namespace": w.NS},
                                       "spec": {"version": target, "replicas": 3}})  # spec.version already written
    if refused is not None:
        with pytest.raises(ValueError, match=refused):
            operations.plan_for(db, version_request(target, start))
        return
    steps = operations.plan_for(db, version_request(target, start)).steps
    downgrade = [s for s in steps if isinstance(s, plan.EnableDowngrade)]
    down = version_logic.parse(target)[:2] < version_logic.parse(start)[:2]
    assert [s.version for s in downgrade] == ([version_logic.minor(target)] if down else [])
    apply = next(s for s in steps if isinstance(s, plan.ApplyStatefulSet))
    assert apply.wiring.version == target


def test_the_downgrade_protocol_starts_at_3_6() -> None:
    assert version_logic.path_problem("3.5.35", "3.4.0") is not None
    assert version_logic.path_problem("3.6.16", "3.5.35") is None and version_logic.path_problem("3.7.3", "3.6.16") is None


async def test_a_failed_downgrade_cancels_etcds_downgrade_mode(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    await world.request("up", "db", "UpdateVersion", updateVersion={"targetVersion": "3.6.16"})
    assert (await world.run("up"))["status"]["phase"] == constants.PHASE_SUCCESSFUL
    world.held.add("db-0")  # the first member the roll restarts never comes back

    async def tick(_i: int) -> None:
        world.clock.advance(2)

    await world.request("down", "db", "UpdateVersion", updateVersion={"targetVersion": "3.5.35"}, timeout="30s")
    req = await world.run("down", between=tick)
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    assert "downgrade CANCEL 3.5" in world.cluster.calls
    assert world.cluster.downgrade_target == ""
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and "etcd's downgrade to 3.5 was cancelled" in failed["message"], failed
