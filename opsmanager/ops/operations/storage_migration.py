"""``StorageMigration``: every member's data volume moved to another StorageClass (KubeDB's ``spec.migration``),
member by member with at least N voters throughout (``docs/decisions.md``, D37.2): the StatefulSet's claim templates
on the new class first (recreated, its pods kept), then one extra member on the new class (ordinal N, a learner
promoted once caught up), then each member replaced — leadership moved off, removed, re-added as a learner on a new
claim, promoted —, then the extra member removed again; last the Etcd's ``spec.storage.storageClassName``.

The class it moves from is the one the Etcd had when the request started (``status.origin.storageClass``): the
write-back changes ``spec.storage``, and a plan recomputed after it must stay the same (and not refuse itself as a
move to the class it is already on).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from opsmanager.api import constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import render
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base


@dataclasses.dataclass(frozen=True, kw_only=True)
class MigrationPlan(plan.Plan):
    storage: etcd_api.PersistentVolumeClaimSpec  # the spec.storage the write-back sets (the new class)


def _storage_on(db: etcd_api.Etcd, storage_class: str) -> etcd_api.PersistentVolumeClaimSpec:
    storage = db.spec.storage or etcd_api.PersistentVolumeClaimSpec()
    return storage.model_copy(update={"storage_class_name": storage_class})


def plan_migration(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """The claim templates, the extra member, every member replaced, the extra member removed, the Etcd's spec."""
    spec = request.spec
    origin = request.status.origin if request.status is not None else None
    start = origin.storage_class if origin is not None and origin.storage_class is not None else None
    rules.enforce(rules.storage_migration(spec.migration, rules.EtcdFacts.of(db), current=start))
    assert spec.migration is not None and spec.migration.storage_class_name  # the rule holds
    target, n = spec.migration.storage_class_name, db.spec.replicas
    surge = f"{db.metadata.name}-{n}"
    storage = _storage_on(db, target)
    steps = (
        plan.running(f"Etcd ops request is moving the members' data volumes to StorageClass {target}"),
        plan.ReplaceClaimTemplates(constants.COND_CLAIM_TEMPLATES_UPDATED, "Successfully recreated the StatefulSet "
                                   f"with claim templates on StorageClass {target}, its pods kept", storage=storage,
                                   wiring=render.Wiring.steady(db.spec.tls)),
        plan.SurgeMember(constants.COND_SURGE_MEMBER_ADDED, f"Successfully added an extra member on StorageClass "
                                                            f"{target}", replicas=n),
        plan.MigrateMembers(constants.COND_MIGRATE_STORAGE, f"Successfully replaced every member on StorageClass "
                                                            f"{target}", replicas=n, storage_class=target,
                            retain_old=spec.migration.old_pv_reclaim_policy == "Retain"),
        plan.RemoveSurge(constants.COND_SURGE_MEMBER_REMOVED, f"Successfully removed the extra member {surge}",
                         replicas=n),
        plan.update_database(f"Successfully updated the Etcd's storage class to {target}"),
    )
    return MigrationPlan(spec.type, None, db.spec.tls, steps, storage=storage)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """``spec.storage.storageClassName`` the new class."""
    assert isinstance(ctx.plan, MigrationPlan)
    if ctx.db.spec.storage != ctx.plan.storage:
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"spec": {"storage": ctx.plan.storage.to_dict()}})
    return context.Done(step.message)


def _origin(spec: Mapping[str, Any]) -> ops_api.RequestOrigin:
    """The class the volumes are on before the move ("": the cluster's default)."""
    return base.origin_field("storageClass", str((spec.get("storage") or {}).get("storageClassName") or ""), str)


OPERATION = base.Operation(constants.OPS_TYPE_STORAGE_MIGRATION, plan_migration,
                           "Successfully migrated the members' data volumes", write_back=write_back, origin=_origin)
