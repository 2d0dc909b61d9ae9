"""``ClaimTemplatesUpdated``: the StatefulSet's ``volumeClaimTemplates`` become the new claim spec, its pods kept.

The field is immutable, so the StatefulSet is deleted with ``propagationPolicy: Orphan`` (its pods and claims stay,
the garbage collector only drops their owner reference) and created again from the render of the Etcd with the new
storage, the template the members run (``restartedAt`` taken from a member pod, so the new StatefulSet's revision
is the pods' own and nothing restarts; its ``updateStrategy`` is ``OnDelete`` anyway). The new StatefulSet adopts
the pods by its selector. A member created from now on (a replacement, a scale-up) gets a claim of the new size.

Every move is read from the live object: the templates already right → done; being deleted → wait; missing →
create; else → False on record, then the orphan delete (with the live UID as its precondition, so a StatefulSet
created meanwhile is never deleted). A crash between the delete and the create finds it missing and creates it.
"""

from __future__ import annotations

from typing import Any

from opsmanager import kube
from opsmanager.api import common, constants
from opsmanager.cluster import naming, render, statefulset
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_CLAIM_TEMPLATES_UPDATED,)


def _storage_of(templates: list[dict[str, Any]] | None) -> tuple[Any, Any]:
    """(size in bytes, class) of the data claim template."""
    for t in templates or ():
        if (t.get("metadata") or {}).get("name") == naming.DATA_VOLUME:
            spec = t.get("spec") or {}
            size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
            return (common.quantity_value(size) if size is not None else None), spec.get("storageClassName")
    return None, None


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.ReplaceClaimTemplates), step  # the engine runs a step with the module its kind names
    db = ctx.db.model_copy(update={"spec": ctx.db.spec.model_copy(update={"storage": step.storage})})
    want = _storage_of(render.render_statefulset(db, step.wiring)["spec"].get("volumeClaimTemplates"))
    live = await ctx.statefulset()
    if live is not None and _storage_of(live["spec"].get("volumeClaimTemplates")) == want:
        status = live.get("status") or {}
        if status.get("observedGeneration", 0) < live["metadata"].get("generation", 0):
            return context.Progress("waiting for the StatefulSet controller to observe the new StatefulSet",
                                    delay=ctx.until_watched(0.2))
        return context.Done(step.message)
    if live is not None and live["metadata"].get("deletionTimestamp"):
        return context.Progress("waiting for the old StatefulSet to go (its pods stay)", delay=ctx.until_watched(0.5))
    if live is not None:
        ctx.set_condition(step.condition, constants.FALSE,
                          "recreating the StatefulSet with the new claim templates; its pods are kept (orphaned)")
        await ctx.flush()
        await ctx.kube.delete("apps/v1", "StatefulSet", ctx.namespace, live["metadata"]["name"],
                              uid=live["metadata"].get("uid"), propagation_policy="Orphan")
        return context.Progress("deleted the StatefulSet, keeping its pods", delay=ctx.until_watched(0.2))
    try:
        await statefulset.apply_statefulset(ctx.kube, db, step.wiring, restarted_at=await _running_token(ctx))
    except kube.AlreadyExists:
        pass  # created by a pass that stopped before it saw the answer
    ctx.announce("ClaimTemplatesUpdated", f"Recreated StatefulSet {ctx.namespace}/{naming.statefulset(ctx.db_name)} "
                                          "with the new claim templates; its pods were kept")
    return context.Progress("created the StatefulSet again with the new claim templates", delay=0.0)


async def _running_token(ctx: context.OpsContext) -> str | None:
    """The ``restartedAt`` the members were created with (the lowest ordinal's), so the new template is theirs."""
    pods = await ctx.pods()
    for name in ctx.pod_names():
        annotations = ((pods.get(name) or {}).get("metadata") or {}).get("annotations") or {}
        if naming.ANNOTATION_RESTARTED_AT in annotations:
            return str(annotations[naming.ANNOTATION_RESTARTED_AT])
    return None
