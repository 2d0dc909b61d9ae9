"""``Backup``: a snapshot taken from a follower, checked and uploaded to the Etcd's ``spec.backup`` destination
with its SHA-256, then the store pruned to the retention; the Etcd is not paused."""

from __future__ import annotations

import enum

from opsmanager.api import constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import plan
from opsmanager.ops.operations import base


def plan_backup(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    rules.enforce(rules.backup_policy(rules.EtcdFacts.of(db), "spec.backup"))
    backup = (plan.UploadSnapshot(constants.COND_SNAPSHOT_UPLOADED, "Successfully uploaded a snapshot"),
              plan.PruneSnapshots(constants.COND_SNAPSHOTS_PRUNED, "The store keeps the retention's snapshots"))
    return plan.Plan(request.spec.type, None, db.spec.tls, backup, pauses=False)


OPERATION = base.Operation(constants.OPS_TYPE_BACKUP, plan_backup, "Successfully backed up the etcd cluster")
