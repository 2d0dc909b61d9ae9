"""The StorageMigration request in the fast world (the in-process API server, the fake etcd, the world's claims).

We test these aspects: every member ends on a claim of the new class with its old claim gone, the member count is
what it was, each member's pod is replaced exactly once (and the extra member's once), the cluster never has fewer
voters than the Etcd's replicas, the leader is never removed while it leads, the Etcd's ``spec.storage`` names the
new class at the end; a crash at every step boundary and around every disruptive action resumes without losing a
member or quorum; a move to the class the volumes are already on is refused with the webhook's words.
"""

from __future__ import annotations

import pytest

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import volumes
from opsmanager.ops import operations, plan
from tests.ops import world as w

PODS = ("db-0", "db-1", "db-2")
STEPS = [constants.COND_RUNNING, constants.COND_CLAIM_TEMPLATES_UPDATED, constants.COND_SURGE_MEMBER_ADDED,
         constants.COND_MIGRATE_STORAGE, constants.COND_SURGE_MEMBER_REMOVED, constants.COND_UPDATE_DATABASE,
         constants.COND_SUCCESSFUL]


async def standard_etcd(world: w.World) -> None:
    await world.volumes.storage_class("standard")
    await world.volumes.storage_class("fast")
    await world.etcd("db", extra={"storage": {"storageClassName": "standard",
                                              "resources": {"requests": {"storage": "1Gi"}}}})


async def migrate(world: w.World, name: str = "move", **options: str) -> tuple[w.Obj, list[int]]:
    """Run the request; the request at the end and the voter count after every reconcile (a leader each time)."""
    await world.request(name, "db", "StorageMigration", migration={"storageClassName": "fast", **options},
                        timeout="30m")
    voters: list[int] = []

    async def watch(_: int) -> None:
        assert world.cluster is not None
        voters.append(len(world.cluster.voters))
        assert world.cluster.leader is not None, "quorum and a leader throughout"

    return await world.run(name, between=watch), voters


async def claim_classes(world: w.World) -> dict[str, str | None]:
    return {c["metadata"]["name"]: c["spec"].get("storageClassName")
            for c in await world.kube.list("v1", "PersistentVolumeClaim", w.NS)}


async def assert_migrated(world: w.World, req: w.Obj) -> None:
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert await claim_classes(world) == {volumes.claim_name(p): "fast" for p in PODS}, "old claims gone"
    assert world.cluster is not None
    assert sorted(m.name for m in world.cluster.members.values()) == list(PODS)
    assert all(not m.is_learner and m.up for m in world.cluster.members.values())
    assert sorted(p["metadata"]["name"] for p in await world.kube.list("v1", "Pod", w.NS)) == list(PODS)
    sts = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert sts is not None and sts["spec"]["replicas"] == 3
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast"
    db = await world.get_etcd("db")
    assert db["spec"]["storage"]["storageClassName"] == "fast"
    assert db["spec"]["storage"]["resources"]["requests"]["storage"] == "1Gi"
    assert db["spec"]["replicas"] == 3
    assert not await world.is_paused("db")


async def test_every_member_moves_to_the_new_class_one_at_a_time_with_n_voters_throughout(world: w.World) -> None:
    await standard_etcd(world)
    req, voters = await migrate(world)
    await assert_migrated(world, req)
    assert w.umbrella(req) == STEPS
    assert world.record.creations == {"db-0": 1, "db-1": 1, "db-2": 1, "db-3": 1}, "each pod replaced once"
    assert sorted(world.record.deletions) == list(PODS)
    assert world.record.restarted_while_leader == [], "leadership moved off before a member left"
    assert min(voters) >= 3, "never fewer voters than the Etcd's replicas"
    assert world.record.evictions == []
    assert world.cluster is not None
    changes = [c for c in world.cluster.calls if c.startswith(("member_add", "member_remove", "member_promote"))]
    assert changes == ["member_add db-3", "member_promote db-3",
                    "member_remove db-0", "member_add db-0", "member_promote db-0",
                    "member_remove db-1", "member_add db-1", "member_promote db-1",
                    "member_remove db-2", "member_add db-2", "member_promote db-2",
                    "member_remove db-3"]
    per_pod = {c["type"]: c for c in req["status"]["conditions"]}
    for pod in (*PODS, "db-3"):
        assert per_pod[constants.per_pod_type(constants.STEP_ETCD_MEMBER_REMOVED, pod)]["status"] == constants.TRUE
        assert per_pod[constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, pod)]["status"] == constants.TRUE
    assert set(req["status"]["migration"]["replacedFrom"]) == set(PODS)


CRASHES = [
    *(f"done {c}" for c in STEPS[1:-2]),
    f"in-flight {constants.COND_CLAIM_TEMPLATES_UPDATED}",
    "after member_add db-3", "after member_add db-1", "after member_remove db-1", "after move_leader db-1",
    "before delete db-1", "after delete db-1", "after member_remove db-3",
]


@pytest.mark.parametrize("point", CRASHES)
async def test_a_crash_resumes_without_losing_a_member_or_quorum(world: w.World, point: str) -> None:
    await standard_etcd(world)
    world.crash_points.add(point)
    req, voters = await migrate(world)
    assert world.crashes == [point]
    await assert_migrated(world, req)
    assert min(voters) >= 3
    assert all(n == 1 for n in world.record.creations.values()), world.record.creations
    assert sorted(world.record.deletions) == list(PODS)


async def test_a_leftover_claim_of_the_extra_ordinal_is_deleted_before_it_joins(world: w.World) -> None:
    await standard_etcd(world)
    await world.kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "metadata": {"name": volumes.claim_name("db-3"), "namespace": w.NS},
                             "spec": {"storageClassName": "standard", "accessModes": ["ReadWriteOnce"],
                                      "resources": {"requests": {"storage": "1Gi"}}}})
    req, _ = await migrate(world)
    await assert_migrated(world, req)


async def test_a_move_to_the_class_in_use_fails_with_the_webhooks_words(world: w.World) -> None:
    await standard_etcd(world)
    await world.request("same", "db", "StorageMigration", migration={"storageClassName": "standard"}, timeout="5m")
    req = await world.run("same")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = next(c for c in req["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    assert failed["message"] == ("spec.migration.storageClassName standard is the StorageClass the members' volumes "
                                 "already use: nothing to migrate")


def test_the_plan_recomputed_after_its_write_back_stays_the_same() -> None:
    db = etcd_api.Etcd.model_validate({"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                                       "metadata": {"name": "db", "namespace": w.NS},
                                       "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3,
                                                "storage": {"storageClassName": "standard"}}})
    request = ops_api.EtcdOpsRequest.model_validate({
        "apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND, "metadata": {"name": "move"},
        "spec": {"type": "StorageMigration", "databaseRef": {"name": "db"},
                 "migration": {"storageClassName": "fast", "oldPVReclaimPolicy": "Retain"}},
        "status": {"origin": {"storageClass": "standard"}}})
    before = operations.plan_for(db, request)
    written = db.model_copy(update={"spec": db.spec.model_copy(update={
        "storage": db.spec.storage.model_copy(update={"storage_class_name": "fast"}) if db.spec.storage else None})})
    after = operations.plan_for(written, request)
    assert before == after
    assert [s.condition for s in before.steps] == STEPS[:-1]
    migrate_step = before.steps[3]
    assert isinstance(migrate_step, plan.MigrateMembers)
    assert migrate_step.retain_old and migrate_step.storage_class == "fast" and migrate_step.replicas == 3
