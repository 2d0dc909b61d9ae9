"""``Restore``: every member replaced together from a snapshot of the Etcd's ``spec.backup`` destination — the
snapshot found and checked before anything changes, the plan for the members' init containers written, the
restored data verified — then the plan withdrawn and the restore recorded on the Etcd."""

from __future__ import annotations

import enum

from opsmanager.api import backup as backup_api
from opsmanager.api import conditions, constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import etcdstatus, naming
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base


def plan_restore(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    spec = request.spec
    rules.enforce(rules.restore_source(spec.restore))
    rules.enforce(rules.backup_policy(rules.EtcdFacts.of(db), "spec.restore"))
    assert spec.restore is not None and spec.restore.source  # the rule holds
    source = spec.restore.source
    restore = (
        plan.running(f"Etcd ops request is restoring the cluster from {source}"),
        plan.VerifySnapshot(constants.COND_SNAPSHOT_VERIFIED, "The snapshot is whole and as recorded",
                            source=source),
        plan.RestoreMembers(constants.COND_MEMBERS_RESTORED, "Every member was restored from the snapshot"),
        plan.VerifyRestore(constants.COND_RESTORE_VERIFIED, "Every member holds the snapshot's keys"),
        plan.update_database("Successfully restored the cluster from the snapshot"),
    )
    return plan.Plan(spec.type, None, db.spec.tls, restore)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """The plan is removed (a member's init container then does nothing) and the Etcd records the snapshot it was
    restored from (``status.backup.lastRestore``)."""
    await ctx.kube.delete("v1", "ConfigMap", ctx.namespace, naming.restore_plan(ctx.db_name))
    restored = backup_api.RestoreRecord(key=ctx.snapshot.key, revision=ctx.snapshot.revision, request=ctx.name,
                                        at=conditions.rfc3339(ctx.now))
    await etcdstatus.write(ctx.kube, ctx.namespace, ctx.db_name, backup_api.Restored(restored))
    return context.Done(step.message)


OPERATION = base.Operation(constants.OPS_TYPE_RESTORE, plan_restore,
                           "Successfully restored the etcd cluster from the snapshot", write_back=write_back)
