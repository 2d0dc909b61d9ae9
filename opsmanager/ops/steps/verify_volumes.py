"""``VolumeExpansionVerified``: every member's data filesystem has the new size, as the kubelet's statfs of the
mounted volume reports it (:func:`opsmanager.cluster.volumes.filesystem_bytes`) — not the claim's capacity, which
only says what Kubernetes recorded.

Per member: ``VerifyVolumeSize--<pod>`` True with the size read, once it is at least :data:`FILESYSTEM_SHARE` of the
claim's new size (a filesystem keeps part of its volume for itself: ext4's journal and inode tables are a few per
cent); False with what was read while it is not. Failure prevented: a request that reports success while a member's
etcd still writes into the old, smaller filesystem (a resize the kubelet never finished, a pod that was not
remounted after an offline expansion) — and later fills it.
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.cluster import volumes
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_VOLUMES_VERIFIED,)

T, F = constants.TRUE, constants.FALSE
FILESYSTEM_SHARE = 0.9  # of the volume's size, the least a grown filesystem reports


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.VerifyVolumes), step  # the engine runs a step with the module its kind names
    least = int(volumes.size_bytes(step.size) * FILESYSTEM_SHARE)
    pods = await ctx.pods()
    for name in ctx.pod_names():
        cond = constants.per_pod_type(constants.STEP_VERIFY_VOLUME_SIZE, name)
        if ctx.is_true(cond):
            continue
        pod = pods.get(name)
        measured = await volumes.filesystem_bytes(ctx.kube, ctx.namespace, pod) if pod is not None else None
        if measured is None or measured < least:
            seen = "no size reported yet" if measured is None else f"{measured} bytes"
            ctx.set_condition(cond, F, f"the data filesystem of {name} is not {step.size} yet ({seen})")
            return context.Progress(f"waiting for the data filesystem of {name} to reach {step.size} ({seen})",
                                    delay=1.0)
        ctx.set_condition(cond, T, f"the data filesystem of {name} has {measured} bytes (statfs, by the kubelet)")
    return context.Done(step.message)
