"""``Defragment``: every member defragmented, one at a time, followers first and the leader last (after a
MoveLeader), then a ``NOSPACE`` alarm disarmed once the space is back; the Etcd is not paused."""

from __future__ import annotations

import enum

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import plan
from opsmanager.ops.operations import base


def plan_defragment(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest,
                    seen: enum.Enum | None = None) -> plan.Plan:
    defragment = (
        plan.Defragment(constants.COND_ETCD_DEFRAGMENTED, "Successfully defragmented every etcd member"),
        plan.ClearAlarms(constants.COND_ETCD_ALARM_CLEARED, "No space alarm is raised"),
    )
    return plan.Plan(request.spec.type, None, db.spec.tls, defragment, pauses=False)


OPERATION = base.Operation(constants.OPS_TYPE_DEFRAGMENT, plan_defragment,
                           "Successfully defragmented the etcd members")
