"""``EtcdAlarmCleared``: after a defragmentation, disarm every ``NOSPACE`` alarm — a cluster that hit its quota
takes no writes until the alarm is disarmed, even once the space is back.

Failure prevented: a cluster left read-only after its space was given back. A ``NOSPACE`` disarmed while the
database is still over its quota is raised again by etcd at the next write, so nothing is hidden; ``CORRUPT`` is
never disarmed here (it needs a person).
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_ETCD_ALARM_CLEARED,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.ClearAlarms), step  # the engine runs a step with the module its kind names
    async with await ctx.etcd() as client:
        raised = await client.alarms(timeout=5.0)
        cleared = []
        for alarm in raised:
            if alarm.alarm == "NOSPACE":
                await client.set_alarm(alarm.member_id, alarm.alarm, raised=False, timeout=5.0)
                cleared.append(f"{alarm.member_id:x}")
    others = [f"{a.alarm} on {a.member_id:x}" for a in raised if a.alarm != "NOSPACE"]
    message = f"Disarmed NOSPACE on {', '.join(cleared)}" if cleared else step.message
    if others:
        message += f"; left for a person: {', '.join(others)}"
    return context.Done(message)
