"""``UpdateStatefulSet``: re-render the StatefulSet for the step's wiring and wait until its controller saw it.

The template is stamped for this pass (:func:`opsmanager.ops.restart.apply_template`), so each pass has its own
revision and the restart that follows knows after any crash which members still need one."""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.ops import context, plan, restart

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_UPDATE_STATEFULSET,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.ApplyStatefulSet), step  # the engine runs a step with the module its kind names
    return await restart.apply_template(ctx, step)
