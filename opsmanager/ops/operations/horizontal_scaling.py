"""``HorizontalScaling``: the member count changed one member at a time — a new member added as a learner and
promoted, or a member removed — toward the request's ``replicas``; the Etcd is not paused.

The direction is fixed by the count the Etcd had when the request started (``status.origin.replicas``): the step
changes ``spec.replicas`` as it goes, and a plan recomputed after it must stay the same.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from opsmanager.api import constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import render
from opsmanager.ops import plan
from opsmanager.ops.operations import base


def plan_scaling(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    spec = request.spec
    rules.enforce(rules.horizontal_scaling(spec.horizontal_scaling))
    assert spec.horizontal_scaling is not None and spec.horizontal_scaling.replicas is not None  # the rule holds
    target = spec.horizontal_scaling.replicas
    origin = request.status.origin if request.status is not None else None
    start = origin.replicas if origin is not None and origin.replicas is not None else db.spec.replicas
    wiring = render.Wiring.steady(db.spec.tls)
    if target < start:
        scale = plan.ScaleMembers(constants.COND_HORIZONTAL_SCALE_DOWN,
                                  f"Successfully scaled the cluster down from {start} to {target} members",
                                  replicas=target, wiring=wiring)
    else:
        scale = plan.ScaleMembers(constants.COND_HORIZONTAL_SCALE_UP,
                                  f"Successfully scaled the cluster up from {start} to {target} members",
                                  replicas=target, wiring=wiring)
    return plan.Plan(spec.type, None, db.spec.tls, (scale,), pauses=False)


def _success(p: plan.Plan) -> str:
    return p.steps[-1].message  # names where the cluster ended


def _origin(spec: Mapping[str, Any]) -> ops_api.RequestOrigin:
    return base.origin_field("replicas", spec.get("replicas"), int)  # the direction, fixed before it changes


OPERATION = base.Operation(constants.OPS_TYPE_HORIZONTAL_SCALING, plan_scaling, _success, origin=_origin)
