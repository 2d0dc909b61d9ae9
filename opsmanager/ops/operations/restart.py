"""``Restart``: every member restarted once, leader-aware, onto the template it already has (one step: stamp the
template, then the rolling restart)."""

from __future__ import annotations

import enum

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import render
from opsmanager.ops import plan
from opsmanager.ops.operations import base


def plan_restart(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    tls = db.spec.tls
    steps = (
        plan.running("Etcd ops request is restarting the members"),
        plan.Restart(constants.COND_RESTART_PODS, "Successfully restarted all the etcd members",
                     wiring=render.Wiring.steady(tls), tls=tls),
    )
    return plan.Plan(request.spec.type, None, tls, steps)


OPERATION = base.Operation(constants.OPS_TYPE_RESTART, plan_restart, "Successfully restarted the etcd members")
