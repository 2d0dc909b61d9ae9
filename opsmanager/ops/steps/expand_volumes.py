"""``UpdateEtcdNodePVCs`` (KubeDB's name): every member's data claim asks for the new size, one member at a time,
and the volume behind it grows.

Per member, in ordinal order: ``ResizeVolume--<pod>`` False once its claim asks for the size (a patch of
``spec.resources.requests.storage``), True once the volume grew — *online* (the filesystem grows while it is
mounted) when the claim's capacity is the size and neither ``Resizing`` nor ``FileSystemResizePending`` is left;
*offline* once the volume has the size and only the filesystem is pending (the roll that follows mounts it again,
and the kubelet grows it then). One member at a time: a resize the storage cannot do stops the request with one
member's claim asking for more, not all of them.

Failures prevented: a shrink (the rule refuses it before the plan), a class that cannot expand (the API server
refuses the patch; the request fails with its words), a claim missing (the request fails naming it, nothing
patched after it). Every move is read back from the claims, so a restarted operator finds where it was.
"""

from __future__ import annotations

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.cluster import volumes
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_UPDATE_NODE_PVCS,)

T, F = constants.TRUE, constants.FALSE


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.ExpandVolumes), step  # the engine runs a step with the module its kind names
    size = volumes.size_bytes(step.size)
    for pod in ctx.pod_names():
        cond = constants.per_pod_type(constants.STEP_RESIZE_VOLUME, pod)
        if ctx.is_true(cond):
            continue
        found = await volumes.claim(ctx.kube, ctx.namespace, pod)
        if found is None:
            return context.Fail(f"{pod} has no data claim {volumes.claim_name(pod)}", reason="ClaimNotFound")
        if found.requested < size:
            return await _ask(ctx, step, pod)
        if found.grown(size) or (not step.online and found.volume_grown(size)):
            ctx.set_condition(cond, T, _grown(pod, step))
            ctx.announce("ResizeVolume", _grown(pod, step))
            continue
        return context.Progress(_waiting(pod, step.size, found), delay=ctx.until_watched(1.0))
    return context.Done(step.message)


async def _ask(ctx: context.OpsContext, step: plan.ExpandVolumes, pod: str) -> context.StepResult:
    cond = constants.per_pod_type(constants.STEP_RESIZE_VOLUME, pod)
    try:
        await volumes.request_size(ctx.kube, ctx.namespace, pod, step.size)
    except (kube.Invalid, kube.Forbidden) as exc:
        message = f"the API server refused to resize {volumes.claim_name(pod)} to {step.size}: {exc}"
        ctx.set_condition(cond, F, message)
        return context.Fail(message, reason="ResizeRefused")
    ctx.set_condition(cond, F, f"{volumes.claim_name(pod)} asks for {step.size}")
    return context.Progress(f"asked {volumes.claim_name(pod)} for {step.size}", delay=ctx.until_watched(1.0))


def _grown(pod: str, step: plan.ExpandVolumes) -> str:
    if step.online:
        return f"the data volume of {pod} and its filesystem grew to {step.size}"
    return f"the data volume of {pod} grew to {step.size}; its filesystem grows when the member restarts"


def _waiting(pod: str, size: str, found: volumes.Claim) -> str:
    if found.filesystem_pending:
        return f"waiting for the kubelet to grow the filesystem of {pod} to {size}"
    return f"waiting for the volume of {pod} to grow to {size} (capacity {found.capacity} bytes)"
