"""``UpdateVersion``: every member moved to another etcd version — up by at most one minor (3.5 → 3.7 goes through
3.6), or down by exactly one through etcd's own downgrade protocol (3.7 → 3.6, 3.6 → 3.5), any patch within a minor —
then the Etcd's ``spec.version``.

Which versions exist, which are deprecated and which updates each allows is the catalog's (``EtcdVersion``
objects), checked by the admission webhook; the engine checks what it needs to run the request without the webhook:
a minor it knows and a path etcd can take.

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
    """The downgrade step when ``target`` is a minor below ``start``; refused (:func:`opsmanager.api.rules.
    update_path`, the webhook's rule too) for a move etcd cannot make."""
    rules.enforce(rules.update_path(start, target))
    if versions.parse(target)[:2] < versions.parse(start)[:2]:
        minor = versions.minor(target)
        return plan.EnableDowngrade(constants.COND_DOWNGRADE_ENABLED,
                                    f"Enabled etcd's downgrade to {minor}: cluster and storage version {minor}",
                                    version=minor)
    return None


def plan_update(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """The template onto the target, the leader-aware roll, every member's version and the cluster version
    checked, then ``spec.version``. Anything else is refused when the request starts, with KubeDB's words for a
    downgrade."""
    spec = request.spec
    rules.enforce(rules.update_version(spec.update_version))
    assert spec.update_version is not None and spec.update_version.target_version  # the rule holds
    target = spec.update_version.target_version
    if not versions.supported(target):
        raise ValueError(f"spec.updateVersion.targetVersion {target} is not a supported etcd version: this operator "
                         f"runs etcd {', '.join(versions.SUPPORTED_MINORS)} (the EtcdVersion objects name the patches)")
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
