"""``UpdateStatefulSet``: re-render the StatefulSet for the step's wiring and wait until its controller saw it.

The pod template is replaced as a whole (the provisioner's apply: PUT only when the render or the restart token
differs from what is live) and stamped ``opsmanager.dev/restartedAt: <request>/<pass>``, so every pass has its
own StatefulSet revision — that is how :mod:`~opsmanager.ops.steps.roll` knows, after any crash, which members
still need a restart. So the request's queued record (the step before, done in the same reconcile) is written
before the template is: re-run after a crash, an earlier pass would otherwise re-apply its own template. Failure prevented: a roll that starts before the StatefulSet controller has computed the
new ``updateRevision`` and so restarts members onto the old template.
"""

from __future__ import annotations

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.ops import context, plan
from opsmanager.provisioner import applying


def restart_token(ctx: context.OpsContext, step: plan.Step) -> str:
    if step.kind is plan.StepKind.ROLL_PASS:
        return f"{ctx.name}/{step.condition}"
    return f"{ctx.name}/{constants.COND_RESTART_PODS}"


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert step.wiring is not None
    if await ctx.statefulset() is None:
        return context.Fail(f"StatefulSet {ctx.namespace}/{ctx.db_name} does not exist", reason="NoStatefulSet")
    try:
        sts = await applying.apply_statefulset(ctx.kube, ctx.db, step.wiring, restarted_at=restart_token(ctx, step),
                                               before_write=lambda: _before_write(ctx, step))
    except kube.Conflict:
        return context.Progress("the StatefulSet changed while it was updated; retrying", delay=0.1)
    status = sts.get("status") or {}
    if status.get("observedGeneration", 0) < sts["metadata"].get("generation", 0) or not status.get("updateRevision"):
        return context.Progress(WAITING_FOR_CONTROLLER, delay=ctx.until_watched(0.2))
    return context.Done()


WAITING_FOR_CONTROLLER = "waiting for the StatefulSet controller to observe the new template"


async def _before_write(ctx: context.OpsContext, step: plan.Step) -> None:
    """Record the request before the template changes (see the module doc), saying already what the step waits for
    next — the write that follows the template's then has nothing to add."""
    ctx.set_condition(step.condition, constants.FALSE, WAITING_FOR_CONTROLLER)
    await ctx.flush()
