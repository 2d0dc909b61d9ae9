"""``RescuePlanChosen`` (rescue): say that the rescue plan runs and why.

The reason is what the engine observed when the request started (expired served leaves, member/port/notAfter, or
an expired loaded CA; :func:`opsmanager.ops.operations.reconfigure_tls.plans.rescue_reason`), recorded in the request's
``status.origin`` with the plan itself, so an operator restarted mid-run says the same. The
step changes nothing in the cluster.
"""

from __future__ import annotations

from opsmanager.api import constants, tlschange
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_RESCUE_PLAN_CHOSEN,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    reason = tlschange.rescue_reason(ctx.request)
    message = f"{step.message}: {reason}" if reason else step.message
    return context.Done(message)  # its transition Event is a Warning (engine.WARNING_STEPS)
