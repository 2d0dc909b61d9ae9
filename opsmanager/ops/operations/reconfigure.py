"""``Reconfigure``: etcd's flags changed — the request's over the Etcd's, etcd's rules checked on the result —
then the Etcd's ``spec.configuration.tuning``."""

from __future__ import annotations

import dataclasses
import enum

from opsmanager.api import constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.api import tuning as tuning_api
from opsmanager.cluster import render
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuningPlan(plan.Plan):
    tuning: tuning_api.TuningConfig  # the spec.configuration.tuning the write-back sets
    pending_restart: bool  # restart "false": the members take the flags at their next restart


def _merged(db: etcd_api.Etcd, tuning: tuning_api.TuningConfig) -> tuning_api.TuningConfig:
    """The request's flags over the Etcd's; ValueError naming each flag etcd would refuse."""
    current = db.spec.configuration.tuning if db.spec.configuration is not None else None
    merged = tuning_api.merge(current, tuning)
    storage = db.status.storage if db.status is not None else None
    sizes = [m.db_size_bytes for m in (storage.members or {}).values()] if storage is not None else []
    rules.enforce(rules.tuning(merged, "spec.configuration.tuning", largest_db_bytes=max(sizes, default=0)))
    return merged


def plan_reconfigure(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest,
                     seen: enum.Enum | None = None) -> plan.Plan:
    """The template with the merged flags, the leader-aware roll and each member's own command line read back —
    or, with ``restart: "false"``, the template only (each member takes the flags at its next restart) — then
    ``spec.configuration.tuning``."""
    spec = request.spec
    configuration = spec.configuration
    rules.enforce(rules.configuration_tuning(configuration))
    assert configuration is not None and configuration.tuning is not None  # the rule holds
    merged = _merged(db, configuration.tuning)
    tls = db.spec.tls
    wiring = dataclasses.replace(render.Wiring.steady(tls), tuning=merged)
    roll = configuration.restart != "false"
    rolled = (
        plan.Roll(constants.COND_RESTART_PODS, "Successfully restarted the etcd members with the new flags",
                  wiring=wiring, tls=tls),
        plan.VerifyConfiguration(constants.COND_CONFIGURATION_VERIFIED, "Every member runs with the new flags",
                                 flags=tuple(tuning_api.flags(merged))),
    )
    steps = (
        plan.running("Etcd ops request is reconfiguring etcd"),
        plan.ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, "Successfully re-rendered the StatefulSet with the "
                                                                 "new flags", wiring=wiring, tls=tls),
        *(rolled if roll else ()),
        plan.update_database("Successfully updated the Etcd's configuration"),
    )
    return TuningPlan(spec.type, None, tls, steps, tuning=merged, pending_restart=not roll)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """``spec.configuration.tuning`` the merged flags; with ``restart: "false"``, a warning that the members still
    run the old ones."""
    assert isinstance(ctx.plan, TuningPlan)
    tuning = ctx.plan.tuning
    if ctx.db.spec.configuration is None or ctx.db.spec.configuration.tuning != tuning:
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"spec": {"configuration": {"tuning": tuning.to_dict()}}})
    if ctx.plan.pending_restart:
        ctx.record(warnings=["restart is false: the members still run with their old flags; each takes the "
                                "new ones at its next restart (a Restart request applies them to all)"])
    return context.Done(step.message)


OPERATION = base.Operation(constants.OPS_TYPE_RECONFIGURE, plan_reconfigure, "Successfully reconfigured etcd",
                           write_back=write_back)
