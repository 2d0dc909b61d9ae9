"""``VersionVerified``: every member runs the target etcd (its own ``Status``), and the cluster version — what
etcd has decided the cluster runs at, read from a member's ``etcd_cluster_version`` metric — is the target's minor.

After an upgrade the cluster version rises only once every member runs the new minor (etcd checks every few
seconds); after a downgrade etcd leaves downgrade mode once every member runs the target. ``VerifyVersion--<pod>``
is set per member. Failure prevented: calling an upgrade done while a member still runs the old binary (a pod that
kept its old image) or while the cluster still speaks the old minor's protocol.
"""

from __future__ import annotations

from opsmanager.api import constants, versions
from opsmanager.cluster import members
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_VERSION_VERIFIED,)

T = constants.TRUE


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.VerifyVersion), step  # the engine runs a step with the module its kind names
    minor = versions.minor(step.version)
    async with await ctx.etcd() as client:
        statuses = await members.answering(client)
        wrong = []
        for name in ctx.pod_names():
            status = statuses.get(name)
            if status is None or status.version != step.version:
                wrong.append(f"{name} runs {status.version if status is not None else 'nothing that answers'}")
            else:
                ctx.set_condition(constants.per_pod_type(constants.STEP_VERIFY_VERSION, name), T,
                                  f"{name} runs etcd {status.version}")
        if wrong:
            return context.Progress(f"waiting for every member to run etcd {step.version} ({'; '.join(wrong)})",
                                    delay=0.5)
        leader = next((v for v in statuses.values() if v.is_leader), None)
        cluster = await client.cluster_version(leader.endpoint.name) if leader is not None else ""
        pending = sorted(n for n, v in statuses.items() if v.downgrade_target)
    if cluster != minor or pending:
        why = f"the cluster version is {cluster or 'unknown'}" + (
            f", {', '.join(pending)} still in downgrade mode" if pending else "")
        return context.Progress(f"waiting for the cluster version to be {minor} ({why})", delay=1.0)
    return context.Done(f"{step.message}; the cluster version is {cluster}")
