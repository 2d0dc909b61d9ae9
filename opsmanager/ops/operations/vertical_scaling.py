"""``VerticalScaling``: the etcd container's new resources — through the leader-aware roll (``Restart``) or each
running pod resized in place (``InPlace``) — then the Etcd's ``spec.podTemplate.spec.resources``."""

from __future__ import annotations

import dataclasses
import enum

from opsmanager.api import common, constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import render
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourcesPlan(plan.Plan):
    resources: etcd_api.ResourceRequirements  # the etcd container's, which the write-back sets


def plan_scaling(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """The template first (every pod created from now on has the resources), then the roll or the in-place
    resize, then the Etcd's spec."""
    scaling = request.spec.vertical_scaling
    rules.enforce(rules.vertical_scaling(scaling))
    assert scaling is not None  # the rule holds
    resources = scaling.etcd.resources if scaling.etcd is not None else None
    if resources is None:  # the engine's own: KubeDB's rule admits the exporter alone, which changes nothing here
        raise ValueError("spec.verticalScaling.etcd.resources must be specified: the exporter is inert")
    tls = db.spec.tls
    wiring = dataclasses.replace(render.Wiring.steady(tls), resources=resources)
    applied: plan.Step
    if scaling.mode == "InPlace":
        applied = plan.ResizeInPlace(constants.COND_IN_PLACE_RESIZED, "Every member's pod was resized in place",
                                     resources=resources)
    else:
        applied = plan.Roll(constants.COND_RESTART_PODS, "Successfully restarted the etcd members with the new "
                                                         "resources", wiring=wiring, tls=tls)
    steps = (
        plan.running("Etcd ops request is scaling the etcd container's resources"),
        plan.ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, "Successfully re-rendered the StatefulSet with the "
                                                                 "new resources", wiring=wiring, tls=tls),
        applied,
        plan.update_database("Successfully updated the Etcd's resources"),
    )
    return ResourcesPlan(request.spec.type, None, tls, steps, resources=resources)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """``spec.podTemplate.spec.resources`` the new ones."""
    assert isinstance(ctx.plan, ResourcesPlan)
    template = ctx.db.spec.pod_template
    current = template.spec.resources if template is not None and template.spec is not None else None
    if current != ctx.plan.resources:
        change = common.replacing_resources(current.to_dict() if current is not None else None,
                                            ctx.plan.resources.to_dict())
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"spec": {"podTemplate": {"spec": {"resources": change}}}})
    return context.Done(step.message)


OPERATION = base.Operation(constants.OPS_TYPE_VERTICAL_SCALING, plan_scaling,
                           "Successfully scaled the etcd container's resources", write_back=write_back)
