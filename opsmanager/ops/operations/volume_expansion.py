"""``VolumeExpansion``: every member's data volume grown to the request's size — ``Online`` under the running
members, ``Offline`` with each member restarted (one at a time, behind the health gate) so its filesystem grows as
it is mounted again — each member's filesystem read back, the backend quota raised when the Etcd ties it to the
volume (``spec.storageLifecycle.quotaVolumePercent``), the StatefulSet's claim templates the new size (recreated,
its pods kept), then the Etcd's ``spec.storage`` (and ``spec.configuration.tuning`` for the quota).

The size it grows from is the one the Etcd had when the request started (``status.origin.storage``): the
write-back changes ``spec.storage``, and a plan recomputed after it must stay the same (and not refuse itself as a
"shrink" to the size it just wrote).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from opsmanager.api import common, constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.api import tuning as tuning_api
from opsmanager.cluster import render
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base

ETCD_DEFAULT_QUOTA_BYTES = 2 * 1024 * 1024 * 1024  # what etcd runs with when --quota-backend-bytes is 0 or unset


@dataclasses.dataclass(frozen=True, kw_only=True)
class VolumePlan(plan.Plan):
    storage: etcd_api.PersistentVolumeClaimSpec  # the spec.storage the write-back sets
    tuning: tuning_api.TuningConfig | None  # the spec.configuration.tuning it sets (a raised quota); None: unchanged


def raised_quota(db: etcd_api.Etcd, size: str) -> tuning_api.TuningConfig | None:
    """The Etcd's flags with ``--quota-backend-bytes`` at ``quotaVolumePercent`` of ``size`` (at most etcd's
    maximum), when the Etcd ties its quota to the volume and that raises it; None otherwise (never lowered)."""
    percent = db.storage_lifecycle.quota_volume_percent
    if percent is None:
        return None
    current = db.spec.configuration.tuning if db.spec.configuration is not None else None
    have = current.quota_backend_bytes if current is not None and current.quota_backend_bytes else \
        ETCD_DEFAULT_QUOTA_BYTES
    want = min(int(common.quantity_value(size)) * percent // 100, tuning_api.MAX_QUOTA_BYTES)
    if want <= have:
        return None
    return tuning_api.merge(current, tuning_api.TuningConfig(quota_backend_bytes=want))


def _grown_storage(db: etcd_api.Etcd, size: str) -> etcd_api.PersistentVolumeClaimSpec:
    storage = db.spec.storage or etcd_api.PersistentVolumeClaimSpec()
    resources = storage.resources or etcd_api.VolumeResourceRequirements()
    requests = {**(resources.requests or {}), "storage": size}
    return storage.model_copy(update={"resources": resources.model_copy(update={"requests": requests})})


def plan_expansion(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """The claims, the roll (offline, or for a raised quota), every filesystem read back, the claim templates,
    then the Etcd's spec."""
    spec = request.spec
    origin = request.status.origin if request.status is not None else None
    start = origin.storage if origin is not None and origin.storage else None
    rules.enforce(rules.volume_expansion(spec.volume_expansion, rules.EtcdFacts.of(db), current=start))
    assert spec.volume_expansion is not None and spec.volume_expansion.etcd is not None  # the rule holds
    size, online = str(spec.volume_expansion.etcd), spec.volume_expansion.mode == "Online"
    tuning = raised_quota(db, size)
    tls = db.spec.tls
    wiring = dataclasses.replace(render.Wiring.steady(tls), tuning=tuning)
    rolled: tuple[plan.Step, ...] = ()
    if not online or tuning is not None:
        why = "the new quota" if online else "their filesystems grown"
        rolled = (plan.ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, "Successfully re-rendered the "
                                        "StatefulSet for the restart", wiring=wiring, tls=tls),
                  plan.Roll(constants.COND_RESTART_PODS, f"Successfully restarted the etcd members with {why}",
                            wiring=wiring, tls=tls))
    if tuning is not None:
        rolled += (plan.VerifyConfiguration(constants.COND_CONFIGURATION_VERIFIED, "Every member runs with the new "
                                            "quota", flags=tuple(tuning_api.flags(tuning))),)
    storage = _grown_storage(db, size)
    steps = (
        plan.running(f"Etcd ops request is expanding the members' data volumes to {size} ({spec.volume_expansion.mode})"),
        plan.ExpandVolumes(constants.COND_UPDATE_NODE_PVCS, f"Successfully resized every member's data volume to "
                                                            f"{size}", size=size, online=online),
        *rolled,
        plan.VerifyVolumes(constants.COND_VOLUMES_VERIFIED, f"Every member's data filesystem has {size}", size=size),
        plan.ReplaceClaimTemplates(constants.COND_CLAIM_TEMPLATES_UPDATED, "Successfully recreated the StatefulSet "
                                   f"with {size} claim templates, its pods kept", storage=storage, wiring=wiring),
        plan.update_database(f"Successfully updated the Etcd's storage to {size}"),
    )
    return VolumePlan(spec.type, None, tls, steps, storage=storage, tuning=tuning)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """``spec.storage`` the new size (and ``spec.configuration.tuning`` the raised quota)."""
    assert isinstance(ctx.plan, VolumePlan)
    patch: dict[str, Any] = {}
    if ctx.db.spec.storage != ctx.plan.storage:
        patch["storage"] = ctx.plan.storage.to_dict()
    current = ctx.db.spec.configuration.tuning if ctx.db.spec.configuration is not None else None
    if ctx.plan.tuning is not None and current != ctx.plan.tuning:
        patch["configuration"] = {"tuning": ctx.plan.tuning.to_dict()}
    if patch:
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"spec": patch})
    return context.Done(step.message)


def _origin(spec: Mapping[str, Any]) -> ops_api.RequestOrigin:
    """The data volume's size before it grows (the plan compares with it, not with the written-back size)."""
    requests = (((spec.get("storage") or {}).get("resources") or {}).get("requests") or {})
    return base.origin_field("storage", str(requests.get("storage") or constants.DEFAULT_STORAGE_SIZE), str)


OPERATION = base.Operation(constants.OPS_TYPE_VOLUME_EXPANSION, plan_expansion,
                           "Successfully expanded the members' data volumes", write_back=write_back, origin=_origin)
