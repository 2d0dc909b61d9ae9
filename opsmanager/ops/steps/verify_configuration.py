"""``ConfigurationVerified``: every member started with the new flags, read back from the member itself — its own
command line, as Go's ``expvar`` publishes it on etcd's ``/debug/vars`` — not assumed from the template.

``VerifyConfiguration--<pod>`` is set per member. Failure prevented: a Reconfigure reported done while a member
still runs the old flags (a pod recreated from an older template, or a node that ignored the change): a quota or an
election timeout that differs between members fails in ways that are hard to trace back (one member raising NOSPACE
alone, elections started by the impatient one).
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_CONFIGURATION_VERIFIED,)

T = constants.TRUE


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.VerifyConfiguration), step  # the engine runs a step with the module its kind names
    wrong = []
    async with await ctx.etcd() as client:
        reachable = {ep.name for ep in client.endpoints}
        for name in ctx.pod_names():
            if name not in reachable:
                wrong.append(f"{name}: no pod address")
                continue
            try:
                started_with = set(await client.flags(name))
            except etcd_errors.EtcdError as err:
                wrong.append(f"{name}: {err}")
                continue
            missing = [f for f in step.flags if f not in started_with]
            if missing:
                wrong.append(f"{name} runs without {', '.join(missing)}")
            else:
                ctx.set_condition(constants.per_pod_type(constants.STEP_VERIFY_CONFIGURATION, name), T,
                                  f"{name} runs with {', '.join(step.flags) or 'etcd defaults'}")
    if wrong:
        return context.Progress(f"waiting for every member to run with the new flags ({'; '.join(wrong)})",
                                delay=0.5)
    return context.Done(step.message)
