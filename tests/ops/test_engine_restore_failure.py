"""A Restore that fails leaves no restore plan that a member could still act on by surprise.

The plan (ConfigMap ``<etcd>-restore``) makes a member's init container restore the snapshot at its next start.
We test: a Restore that times out at ``MembersRestored`` before any member was replaced withdraws the plan (else a
routine restart — a node drain — would roll one member alone back to the snapshot) and says so; one that times out
after the members were replaced keeps it (a member still to start must restore to the same snapshot as the others)
and says what to do; one on an Etcd with authentication whose auth Secret is missing fails before any member is
replaced (each member's init container would set that Secret's password in the restored data, and fail without
it). The request's state is written as a Restore that got that far leaves it (the fast world has no object store);
the engine's own timeout ends it.
"""

from __future__ import annotations

import datetime
from typing import Any

from opsmanager.api import auth, conditions, constants
from opsmanager.cluster import naming
from tests.ops import world as w

BACKUP = {"schedule": "0 3 * * *", "destination": {"endpoint": "http://127.0.0.1:9", "bucket": "snaps",
                                               "credentialsSecret": {"name": "s3-credentials"}}}


async def restore_stuck_at_members_restored(world: w.World, *, replaced: bool | None,
                                            spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """An Etcd with a restore plan and a Restore request whose ``MembersRestored`` has been in flight for five
    minutes; ``replaced``: the members' pods were already replaced from the plan (their recorded UIDs are gone);
    None: the step has not replaced any yet (no plan, no record). ``spec``: more of the Etcd's spec."""
    await world.etcd("db")
    await world.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, "db",
                           {"spec": {"backup": BACKUP, **(spec or {})}})
    record: dict[str, str] | None = None
    if replaced is not None:
        await world.kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": naming.restore_plan("db"), "namespace": w.NS},
                                 "data": {"plan.json": "{}"}})
        pods = {p["metadata"]["name"]: p for p in await world.kube.list("v1", "Pod", w.NS)}
        record = {n: ("a-pod-replaced-since" if replaced else pods[n]["metadata"]["uid"])
                  for n in naming.pods("db", 3)}
    await world.request("restore", "db", "Restore", timeout="2m", restore={"source": "latest"})
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    conds = None
    for type_, status in ((constants.COND_RUNNING, constants.TRUE), (constants.COND_SNAPSHOT_VERIFIED, constants.TRUE),
                          (constants.COND_MEMBERS_RESTORED, constants.FALSE)):
        conds = conditions.set_condition(conds, type_, status, reason=type_, message="as a Restore leaves it",
                                         now=long_ago if replaced is not None else None)

    def progressing(st: dict[str, Any]) -> dict[str, Any]:
        return {**st, "phase": constants.PHASE_PROGRESSING, "conditions": conds,
                "snapshot": {"key": "ops/db/20261202T000000Z-rev9.db", "sha256": "0" * 64, "revision": 9,
                             "sizeBytes": 4096, "takenAt": "2026-12-02T00:00:00Z"},
                **({"restarts": {"allTogether": record}} if record is not None else {})}

    await world.kube.transact_status(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "restore", progressing)
    return await world.run("restore")


def failed_message(req: dict[str, Any]) -> str:
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    cond = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert cond is not None
    return str(cond["message"])


async def test_a_restore_that_fails_before_any_member_was_replaced_withdraws_its_plan(world: w.World) -> None:
    req = await restore_stuck_at_members_restored(world, replaced=False)
    message = failed_message(req)
    assert message.startswith("step MembersRestored timed out"), message
    assert message.endswith("; no member was replaced and the restore plan was withdrawn"), message
    assert await world.kube.get("v1", "ConfigMap", w.NS, naming.restore_plan("db")) is None
    events = await world.kube.list("v1", "Event", w.NS)
    assert any(e.get("reason") == "RestorePlanWithdrawn" for e in events)
    assert world.record.creations == {} and world.record.deletions == []


async def test_a_restore_that_fails_after_the_members_were_replaced_keeps_its_plan_and_says_so(
        world: w.World) -> None:
    req = await restore_stuck_at_members_restored(world, replaced=True)
    message = failed_message(req)
    assert "the restore plan (ConfigMap db-restore) is kept: members were replaced from it" in message, message
    assert await world.kube.get("v1", "ConfigMap", w.NS, naming.restore_plan("db")) is not None


async def test_a_restore_with_authentication_and_no_auth_secret_fails_before_replacing_anyone(
        world: w.World) -> None:
    await world.kube.create({"apiVersion": "v1", "kind": "Secret",
                             "metadata": {"name": "s3-credentials", "namespace": w.NS},
                             "data": auth.encode({"accessKeyId": "k", "secretAccessKey": "s"})})
    req = await restore_stuck_at_members_restored(world, replaced=None, spec={"authSecret": {"name": "gone"}})
    message = failed_message(req)
    assert "the auth Secret ops/gone (spec.authSecret) does not exist" in message, message
    assert "no member was replaced" in message
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and failed["reason"] == "AuthSecretMissing"
    assert await world.kube.get("v1", "ConfigMap", w.NS, naming.restore_plan("db")) is None
    assert world.record.deletions == [] and len(await world.kube.list("v1", "Pod", w.NS)) == 3  # nobody replaced
    assert not await world.is_paused("db")
