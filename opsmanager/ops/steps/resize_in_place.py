"""``InPlaceResized``: the etcd container of every member gets its new CPU and memory without a restart, through
each pod's ``resize`` subresource, one member at a time.

``RequestInPlaceResize--<pod>``: the ``PATCH pods/<pod>/resize`` went out (the pod's spec now asks for the new
resources). ``CheckInPlaceResizeSettled--<pod>``: the kubelet reports them as the container's resources
(``status.containerStatuses[].resources``), with no ``PodResizePending`` or ``PodResizeInProgress`` condition left,
and the container was not restarted for it. A resize the kubelet calls ``Infeasible`` (the node does not have it)
fails the request naming the member and the kubelet's reason; one ``Deferred`` waits, saying so. Failure
prevented: a restart per member for a change that needs none (the Restart mode's cost), and a resize reported done
that the node never applied.
"""

from __future__ import annotations

from typing import Any

from opsmanager import kube
from opsmanager.api import common, constants
from opsmanager.cluster import naming
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_IN_PLACE_RESIZED,)

T = constants.TRUE


def _etcd_container(pod: dict[str, Any], key: str) -> dict[str, Any]:
    for c in (pod.get(key) or {}).get("containers" if key == "spec" else "containerStatuses") or []:
        if c.get("name") == naming.CONTAINER_NAME:
            return dict(c)
    return {}


def _describe(resources: dict[str, Any]) -> str:
    return "; ".join(f"{kind} " + ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                     for kind, values in sorted(resources.items()) if values) or "no requests or limits"


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.ResizeInPlace), step  # the engine runs a step with the module its kind names
    want = step.resources.to_dict()
    pods = await ctx.pods()
    for name in ctx.pod_names():
        requested = constants.per_pod_type(constants.STEP_REQUEST_IN_PLACE_RESIZE, name)
        settled = constants.per_pod_type(constants.STEP_CHECK_IN_PLACE_RESIZE_SETTLED, name)
        if ctx.is_true(settled):
            continue
        pod = pods.get(name)
        if pod is None:
            return context.Progress(f"waiting for {name}'s pod", delay=ctx.until_watched(0.5))
        current = _etcd_container(pod, "spec").get("resources") or {}
        if not common.same_resources(current, want):
            try:
                await ctx.kube.patch("v1", "Pod", ctx.namespace, name,
                                     {"spec": {"containers": [{"name": naming.CONTAINER_NAME,
                                                               "resources": common.replacing_resources(current, want)}]}},
                                     subresource="resize", patch_type="strategic")
            except (kube.Invalid, kube.Forbidden) as err:  # a QoS class change (only a restart can do that), or
                # an API server or a role without pods/resize
                return context.Fail(f"the API server refused to resize {name} in place ({err}); file the request "
                                    "again with mode: Restart", reason="ResizeRefused")
            except kube.NotFound:
                return context.Progress(f"waiting for {name}'s pod", delay=ctx.until_watched(0.5))
            ctx.set_condition(requested, T, f"asked for {_describe(want)} on {name}'s etcd container")
            ctx.announce("RequestInPlaceResize", f"Resizing {name} in place: {_describe(want)}")
            return context.Progress(f"waiting for the kubelet to resize {name}", delay=ctx.until_watched(0.5))
        if not ctx.is_true(requested):  # the resize went out just before the operator stopped
            ctx.set_condition(requested, T, f"asked for {_describe(want)} on {name}'s etcd container")
        conds = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
        pending = conds.get("PodResizePending")
        if pending is not None and pending.get("status") == T and pending.get("reason") == "Infeasible":
            return context.Fail(f"the kubelet cannot resize {name}: {pending.get('message') or 'Infeasible'}",
                                reason="ResizeInfeasible")
        status = _etcd_container(pod, "status")
        waiting = [t for t in ("PodResizePending", "PodResizeInProgress") if (conds.get(t) or {}).get("status") == T]
        if waiting or not common.same_resources(status.get("resources"), want):
            why = ", ".join(f"{t}: {conds[t].get('reason') or ''} {conds[t].get('message') or ''}".strip()
                            for t in waiting) or "the container's resources are not the new ones yet"
            return context.Progress(f"waiting for the kubelet to resize {name} ({why})", delay=ctx.until_watched(0.5))
        ctx.set_condition(settled, T, f"{name} runs with {_describe(want)} (restart count "
                                      f"{status.get('restartCount', 0)})")
        return context.Progress(delay=0.0)
    return context.Done(step.message)
