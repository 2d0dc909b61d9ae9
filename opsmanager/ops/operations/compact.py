"""``Compact``: etcd's key-value history compacted below a revision (the request's, else the current one); the
Etcd is not paused."""

from __future__ import annotations

import enum

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import plan
from opsmanager.ops.operations import base


def plan_compact(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    spec = request.spec
    revision = spec.compact.revision if spec.compact is not None else None
    compact = (plan.Compact(constants.COND_ETCD_COMPACTED, "Successfully compacted the etcd key-value history",
                            revision=revision),)
    return plan.Plan(spec.type, None, db.spec.tls, compact, pauses=False)


OPERATION = base.Operation(constants.OPS_TYPE_COMPACT, plan_compact,
                           "Successfully compacted the etcd key-value history")
