"""``MembersRestored``: every member's data replaced by the snapshot, and a new cluster formed from it.

How: the Etcd's member pods carry the ``restore`` init container whenever ``spec.backup`` is set (the operator's
image, ``opsmanager restore-member``), which does nothing unless the ``<etcd>-restore`` ConfigMap holds a plan. This
step writes that plan — the verified snapshot's key, SHA-256 and revision, every member's name and peer URL, and a
new ``--initial-cluster-token`` named after the request, so the restored cluster gets new cluster and member IDs —,
applies the StatefulSet (the init container is in its template), records the member pods' UIDs and deletes them all
together. Each new pod's init container downloads the snapshot, checks it again, runs ``etcdutl snapshot restore``
into a directory beside the data dir, sets the auth Secret's password as the root user's in it when the Etcd has
authentication (the snapshot's own may be one a RotateAuth has since rotated away), swaps the two and marks the
member restored (a restart does not restore again). The step ends when every member answers with a leader, the same cluster ID as the others, and not the
cluster ID they had before.

A Restore that fails before any member was replaced withdraws its plan (:func:`withdraw_after_failure`): left in
place, the next routine restart of any member (a node drain) would roll that member back to the snapshot. Once
members were replaced the plan stays, so a member still to start restores to the same snapshot as the others.

Failures prevented: members restored from different data (one plan, one checksum, checked in every pod); a member
that keeps its old data and joins the restored ones (every pod is replaced; the old cluster ID is refused); a pod
restored twice (the marker); a restore that half-replaces a data dir (the init container swaps atomically and
keeps the old data dir until the new one is in place); a restore that brings back a leaked root password, or locks
the operator out with a password nobody holds any more.
"""

from __future__ import annotations

from opsmanager.api import auth, constants
from opsmanager.api import opsrequest as ops_api
from opsmanager.backup import restoreplan
from opsmanager.cluster import credentials, members, naming, render, statefulset
from opsmanager.ops import context, plan, restart

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_MEMBERS_RESTORED,)


def restore_plan(ctx: context.OpsContext) -> restoreplan.RestorePlan:
    """The plan every member's init container follows (from the snapshot SnapshotVerified recorded)."""
    policy = ctx.db.spec.backup
    assert policy is not None
    record = ctx.snapshot
    wiring = render.Wiring.steady(ctx.db.spec.tls)
    cluster = render.initial_cluster(ctx.db, wiring)
    peers = dict(part.split("=", 1) for part in cluster.split(","))
    uid = str(ctx.request["metadata"].get("uid") or ctx.name)
    dest = policy.destination
    return restoreplan.RestorePlan(
        id=uid, bucket=dest.bucket, key=record.key, endpoint=dest.endpoint, region=dest.region,
        prefix=dest.prefix, ca_file=f"{naming.RESTORE_CA_MOUNT}/{dest.ca.key}" if dest.ca is not None else None,
        sha256=record.sha256, revision=record.revision, initial_cluster=cluster,
        token=f"{ctx.namespace}-{ctx.db_name}-restore-{uid[:8]}", peer_urls=peers, data_dir=naming.DATA_DIR,
        etcd_version=ctx.db.spec.version,
        root_password_file=(f"{naming.RESTORE_AUTH_MOUNT}/{auth.KEY_PASSWORD}" if ctx.db.spec.auth_secret is not None
                            else None))


def config_map(ctx: context.OpsContext, the_plan: restoreplan.RestorePlan) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": naming.restore_plan(ctx.db_name), "namespace": ctx.namespace,
                         "labels": naming.labels(ctx.db_name),
                         "ownerReferences": [{"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
                                              "name": ctx.name, "uid": ctx.request["metadata"].get("uid")}]},
            "data": {naming.RESTORE_PLAN_FILE: the_plan.to_json()}}


async def _auth_secret_problem(ctx: context.OpsContext) -> context.Fail | None:
    """With authentication, the auth Secret must hold a password before any member is replaced: each member's init
    container sets it in the restored data, and fails (the member with it) without one."""
    if ctx.db.spec.auth_secret is None:
        return None
    name = ctx.db.spec.auth_secret.name
    data = await credentials.read(ctx.kube, ctx.namespace, name)
    if data is None or not data.get(auth.KEY_PASSWORD):
        what = "does not exist" if data is None else "has no 'password'"
        return context.Fail(f"the auth Secret {ctx.namespace}/{name} (spec.authSecret) {what}: the restored members "
                            "take its password as root's; no member was replaced — put the Secret back with the "
                            "password clients use and file the Restore again", reason="AuthSecretMissing")
    return None


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.RestoreMembers), step  # the engine runs a step with the module its kind names
    pods = await ctx.pods()
    names = ctx.pod_names()
    deleted_record = ctx.restarts.all_together
    if deleted_record is None:
        objects = await ctx.backup_store()  # the credentials Secret is there (the pods read it)
        if isinstance(objects, context.Fail):
            return objects
        objects.close()
        missing = await _auth_secret_problem(ctx)
        if missing is not None:
            return missing
        await ctx.kube.apply(config_map(ctx, restore_plan(ctx)))
        sts = await statefulset.apply_statefulset(ctx.kube, ctx.db, render.Wiring.steady(ctx.db.spec.tls),
                                               restarted_at=f"{ctx.name}/{step.condition}")
        status = sts.get("status") or {}
        if status.get("observedGeneration", 0) < sts["metadata"].get("generation", 0):
            return context.Progress("waiting for the StatefulSet controller to observe the template",
                                    delay=ctx.until_watched(0.2))
        deleted_record = {n: str(pods[n]["metadata"].get("uid") or "") for n in names if n in pods}
        ctx.record(restarts=ctx.restarts.model_copy(update={"all_together": deleted_record}))
        await ctx.flush()  # the record is written before any member is deleted
    deleted = await restart.delete_recorded(ctx, deleted_record, pods)
    if deleted:
        ctx.announce("RestoreMembers", f"Replaced every member to restore it from {ctx.snapshot.key}: "
                                       f"{', '.join(deleted)}")
        return context.Progress(f"replaced {', '.join(deleted)}; each restores its data before etcd starts",
                                delay=ctx.until_watched(0.5))
    waiting = restart.not_replaced(names, deleted_record, pods)
    if waiting:
        return context.Progress(f"waiting for {', '.join(waiting)} to restore and become Ready",
                                delay=ctx.until_watched(0.5))
    restore_record = ctx.records.restore or ops_api.RestoreProgress()
    if not restore_record.logins_forgotten:
        # Every member now runs the restored data: a token the old cluster issued names a raft index the new, shorter
        # log has not reached, and etcd would hold each call carrying it to its deadline. Once, after the last old
        # member is gone, so that no new login can reach one.
        if ctx.etcd_pool is not None:
            ctx.etcd_pool.forget_logins(ctx.namespace, ctx.db_name)
        ctx.record(restore=restore_record.model_copy(update={"logins_forgotten": True}))
    before = set(restore_record.cluster_ids_before or ())
    async with await ctx.etcd(pods) as client:
        up = await members.answering(client, timeout=2.0)
    why = members.not_answering(names, up)
    if why:
        return context.Progress(f"waiting for the restored cluster: {why}", delay=0.5)
    ids = {format(v.cluster_id, "x") for v in up.values()}
    if len(ids) != 1:
        return context.Progress(f"the members report different cluster IDs {sorted(ids)}", delay=0.5)
    if ids & before:
        return context.Fail(f"the members still report the cluster ID {sorted(ids)[0]} they had before the restore: "
                            "their data was not replaced; read the restore init container's log of each pod",
                            reason="NotRestored")
    return context.Done(f"Every member was restored from {ctx.snapshot.key}: a new cluster "
                        f"{sorted(ids)[0]} of {len(up)} members formed")


async def withdraw_after_failure(ctx: context.OpsContext) -> str:
    """A failed Restore whose plan no member has used yet: delete the plan (else a member's next start would restore
    from it). Members already replaced keep it. The text is appended to the failure message."""
    if not any(isinstance(s, plan.RestoreMembers) for s in ctx.plan.steps):
        return ""
    name = naming.restore_plan(ctx.db_name)
    record = ctx.restarts.all_together
    pods = await ctx.pods()
    untouched = record is None or all(
        (pod := pods.get(n)) is not None and not members.terminating(pod) and pod["metadata"].get("uid") == uid
        for n, uid in record.items())
    if not untouched:
        return (f"; the restore plan (ConfigMap {name}) is kept: members were replaced from it, and a member not "
                "restored yet restores from it at its next start — file the Restore again, or delete the ConfigMap "
                "to keep the members as they are")
    if await ctx.kube.delete("v1", "ConfigMap", ctx.namespace, name):
        ctx.announce("RestorePlanWithdrawn", f"Deleted the restore plan {name}: the Restore failed before any "
                                             "member was replaced")
        return "; no member was replaced and the restore plan was withdrawn"
    return ""
