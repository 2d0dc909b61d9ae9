"""``MoveLeader``: etcd's leadership moved to another voter (the request's, else the most caught-up follower); the
Etcd is not paused, nothing restarts."""

from __future__ import annotations

import enum

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import plan
from opsmanager.ops.operations import base


def plan_move(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    move = (plan.MoveLeader(constants.COND_ETCD_LEADER_MOVED, "Successfully moved the leader"),)
    return plan.Plan(request.spec.type, None, db.spec.tls, move, pauses=False)


OPERATION = base.Operation(constants.OPS_TYPE_MOVE_LEADER, plan_move, "Successfully moved the etcd leader")
