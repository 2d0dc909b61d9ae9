"""``UpdateVersion``: every member moved to another etcd version — up by at most one minor, or down by exactly one
through etcd's own downgrade protocol, any patch within a minor — then the Etcd's ``spec.version``.

The direction is fixed by the version the Etcd ran when the request started (``status.origin.version``): the
write-back changes ``spec.version`` near the end, and a plan recomputed after it must stay the same.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from opsmanager.api import constants, rules, versions
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import etcdstatus, render
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base


@dataclasses.dataclass(frozen=True, kw_only=True)
class VersionPlan(plan.Plan):
    version: str  # the spec.version the write-back sets


def _downgrade(start: str, target: str) -> plan.Step | None:
    """The downgrade step when ``target`` is a minor below ``start``; ValueError for a move etcd cannot make."""
    current, wanted = versions.parse(start), versions.parse(target)
    if wanted[:2] < current[:2]:
        if wanted[0] != current[0] or current[1] - wanted[1] != 1 or current[:2] < (3, 6):
            raise ValueError(f"downgrades are not supported from {start} to {target}: only one minor version down, "
                             "from etcd 3.6 on (etcd's own downgrade protocol)")
        minor = f"{wanted[0]}.{wanted[1]}"
        return plan.EnableDowngrade(constants.COND_DOWNGRADE_ENABLED,
                                    f"Enabled etcd's downgrade to {minor}: cluster and storage version {minor}",
                                    version=minor)
    if wanted[0] != current[0] or wanted[1] > current[1] + 1:
        raise ValueError(f"upgrading from {start} to {target} skips a minor version: upgrade one minor at a time")
    return None


def plan_update(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """The template onto the target, the leader-aware roll, every member's version and the cluster version
    checked, then ``spec.version``. Anything else is refused when the request starts, with KubeDB's words for a
    downgrade."""
    spec = request.spec
    rules.enforce(rules.update_version(spec.update_version))
    assert spec.update_version is not None and spec.update_version.target_version  # the rule holds
    target = spec.update_version.target_version
    if target not in constants.SUPPORTED_ETCD_VERSIONS:
        raise ValueError(f"spec.updateVersion.targetVersion {target} is not a supported etcd version: use one of "
                         f"{', '.join(constants.SUPPORTED_ETCD_VERSIONS)}")
    origin = request.status.origin if request.status is not None else None
    start = origin.version if origin is not None and origin.version else db.spec.version
    downgrade = _downgrade(start, target)
    tls = db.spec.tls
    wiring = dataclasses.replace(render.Wiring.steady(tls), version=target)
    steps = (
        plan.running(f"Etcd ops request is updating etcd from {start} to {target}"),
        *((downgrade,) if downgrade is not None else ()),
        plan.ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, f"Successfully re-rendered the StatefulSet for "
                                                                  f"etcd {target}", wiring=wiring, tls=tls),
        plan.Roll(constants.COND_RESTART_PODS, f"Successfully restarted the etcd members onto {target}",
                  wiring=wiring, tls=tls),
        plan.VerifyVersion(constants.COND_VERSION_VERIFIED, f"Every member runs etcd {target}", version=target),
        plan.update_database(f"Successfully updated the Etcd's version to {target}"),
    )
    return VersionPlan(spec.type, None, tls, steps, version=target)


@dataclasses.dataclass(frozen=True)
class VersionVerified:
    """The Etcd's ``status.version``: what ``VersionVerified`` saw every member report (a change for
    :func:`opsmanager.cluster.etcdstatus.write`)."""

    version: str

    def apply(self, status: Mapping[str, Any]) -> dict[str, Any]:
        return {**status, "version": self.version}


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """``spec.version`` the target, and ``status.version`` what ``VersionVerified`` saw every member report."""
    assert isinstance(ctx.plan, VersionPlan)
    version = ctx.plan.version
    if ctx.db.spec.version != version:
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"spec": {"version": version}})
    await etcdstatus.write(ctx.kube, ctx.namespace, ctx.db_name, VersionVerified(version))
    return context.Done(step.message)


def _success(p: plan.Plan) -> str:
    assert isinstance(p, VersionPlan)
    return f"Successfully updated the etcd version to {p.version}"


def _origin(spec: Mapping[str, Any]) -> ops_api.RequestOrigin:
    return base.origin_field("version", spec.get("version"), str)  # the direction, fixed before it changes


OPERATION = base.Operation(constants.OPS_TYPE_UPDATE_VERSION, plan_update, _success, write_back=write_back,
                           origin=_origin)
