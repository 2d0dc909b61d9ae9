"""``SnapshotsPruned``: the store keeps ``spec.backup.retention`` snapshots of the Etcd, and its
``status.backup.lastSuccess`` names the one just written.

Only keys this operator writes (``<prefix>/<namespace>/<etcd>/<time>-rev<revision>.db``) are counted and deleted,
oldest first; anything else under the folder is left alone. The new snapshot is recorded on the Etcd after the
prune, so ``lastSuccess`` never names an object the prune could delete.

Failures prevented: a bucket that grows without bound; a status that names a backup the store no longer has.
"""

from __future__ import annotations

from opsmanager.api import backup as backup_api
from opsmanager.api import constants
from opsmanager.backup import store
from opsmanager.cluster import etcdstatus
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_SNAPSHOTS_PRUNED,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.PruneSnapshots), step  # the engine runs a step with the module its kind names
    policy = ctx.db.spec.backup
    record = ctx.records.snapshot
    if policy is None or record is None:
        return context.Fail("no snapshot was recorded by SnapshotUploaded, or spec.backup was removed meanwhile",
                            reason="NothingToPrune")
    objects = await ctx.backup_store()
    if isinstance(objects, context.Fail):
        return objects
    with objects:
        try:
            deleted = await objects.aio.prune(ctx.namespace, ctx.db_name, policy.retention)
            kept = len(await objects.aio.list(f"{ctx.namespace}/{ctx.db_name}"))
        except store.StoreError as err:
            return context.Fail(str(err), reason=type(err).__name__)
    await etcdstatus.write(ctx.kube, ctx.namespace, ctx.db_name, backup_api.BackupSucceeded(record, kept))
    gone = f"; deleted {len(deleted)} older: {', '.join(k.rsplit('/', 1)[-1] for k in deleted)}" if deleted else ""
    return context.Done(f"{kept} snapshot(s) kept (retention {policy.retention}){gone}")
