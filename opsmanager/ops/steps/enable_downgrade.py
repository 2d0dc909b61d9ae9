"""``DowngradeEnabled``: put the cluster into etcd's own downgrade mode before any member runs the older minor.

etcd refuses to start a binary older than the cluster version, and a 3.6 member's data carries a 3.6 storage
version that 3.5 cannot read. etcd's downgrade protocol lowers both first: ``VALIDATE`` the target (etcd checks it
is exactly one minor down), ``ENABLE`` it (the cluster version becomes the target at once and every member
rewrites its storage version), then members may be rolled onto the older binary one at a time. Failure prevented:
a bare binary swap across a minor version, which the older member refuses (or, worse, half-reads). Each part is
observed first (a downgrade already enabled to this target is not enabled twice), so a crash anywhere resumes.
"""

from __future__ import annotations

from opsmanager import kube
from opsmanager.api import constants, versions
from opsmanager.cluster import members
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_DOWNGRADE_ENABLED,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.EnableDowngrade), step  # the engine runs a step with the module its kind names
    target = step.version
    async with await ctx.etcd() as client:
        statuses = await members.answering(client)
        if (why := members.not_answering(ctx.pod_names(), statuses, leader=False)) is not None:
            return context.Progress(f"waiting for every member before enabling the downgrade ({why})", delay=0.5)
        enabled = {versions.minor(v.downgrade_target) for v in statuses.values() if v.downgrade_target}  # etcd says 3.5.0
        other = enabled - {target}
        if other:
            return context.Fail(f"a downgrade to {', '.join(sorted(other))} is in progress; cancel it (etcdctl "
                                "downgrade cancel) or file the request for that version", reason="DowngradeInProgress")
        if target not in enabled:
            try:
                await client.downgrade("VALIDATE", target)
                await client.downgrade("ENABLE", target)
            except etcd_errors.EtcdError as err:
                if etcd_errors.is_transient(err):
                    raise
                return context.Fail(f"etcd refused the downgrade to {target}: {err}", reason="DowngradeRefused")
            ctx.announce("DowngradeEnabled", f"Enabled etcd's downgrade to {target}")
            return context.Progress(f"enabled the downgrade to {target}; waiting for the storage version",
                                    delay=0.5)
        behind = sorted(n for n, v in statuses.items() if not v.storage_version.startswith(f"{target}."))
        leader = next((v for v in statuses.values() if v.is_leader), None)
        cluster = await client.cluster_version(leader.endpoint.name) if leader is not None else ""
        if behind or cluster != target:
            return context.Progress(f"waiting for the cluster version ({cluster or 'unknown'}) and every member's "
                                    f"storage version to be {target}"
                                    + (f" (not yet: {', '.join(behind)})" if behind else ""), delay=0.5)
    return context.Done(step.message)


async def cancel_after_failure(ctx: context.OpsContext) -> str:
    """A request that enabled the downgrade and then failed (or timed out) leaves etcd in downgrade mode: the
    cluster version stays at the target until every member runs it, so no later request could verify another
    version. Cancel it (best effort); the text is appended to the failure message."""
    step = next((s for s in ctx.plan.steps if isinstance(s, plan.EnableDowngrade)), None)
    if step is None or not ctx.is_true(constants.COND_DOWNGRADE_ENABLED) \
            or ctx.is_true(constants.COND_VERSION_VERIFIED):
        return ""
    try:
        async with await ctx.etcd() as client:
            await client.downgrade("CANCEL", step.version)
    except (etcd_errors.EtcdError, kube.KubeError) as err:
        return (f"; etcd is still in downgrade mode to {step.version} (cancelling failed: {err}): run "
                "etcdctl downgrade cancel")
    ctx.announce("DowngradeCancelled", f"Cancelled etcd's downgrade to {step.version}: the request failed")
    return f"; etcd's downgrade to {step.version} was cancelled"
