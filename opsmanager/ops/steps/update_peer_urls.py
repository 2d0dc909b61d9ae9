"""``PeerURLsUpdated``: re-register each member's peer URL under the new scheme (``member update``), one member
at a time.

Why: etcd keeps peer URLs in its membership store and ignores ``--initial-advertise-peer-urls`` after bootstrap.
Restarting members onto https-only listeners while the registered URLs stay ``http://`` broke a 3-member cluster
for good once the third member restarted (measured: 42 of 42 writes failed, no leader 20 s later). With every
member already listening on both schemes, a ``member update`` moves one member's peer traffic to the other
scheme; the others dial it there from their next connection. One member at a time, with every member healthy
before the next (``UpdatePeerURL--<pod>``: False written before the update, True once every member is healthy
after it; an update whose record was lost with the operator is found in the member list). No Event per member:
the step's one transition Event names the members it updated (the API request budget).
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_PEER_URLS_UPDATED,)


def peer_url(ctx: context.OpsContext, pod: str, scheme: str) -> str:
    return f"{scheme}://{ctx.fqdn(pod)}:{naming.peer_port(scheme)}"


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.UpdatePeerURLs), step  # the engine runs a step with the module its kind names
    assert step.peer_scheme is not None
    async with await ctx.etcd(peer_scheme=step.peer_scheme) as client:
        try:
            members = {m.name: m for m in await client.members(timeout=2.0)}
        except etcd_errors.EtcdError as err:
            return context.Progress(f"reading the member list: {err}", delay=0.5)
        for pod in ctx.pod_names():
            cond = constants.per_pod_type(constants.STEP_UPDATE_PEER_URL, pod)
            if ctx.is_true(cond):
                continue
            member = members.get(pod)
            if member is None:
                return context.Progress(f"member {pod} is not in the member list", delay=0.5)
            want = peer_url(ctx, pod, step.peer_scheme)
            if tuple(member.peer_urls) != (want,):
                ctx.set_pod_condition(constants.STEP_UPDATE_PEER_URL, pod, constants.FALSE)
                await ctx.flush()  # the member in flight on record before its peer traffic moves
                try:
                    await client.member_update(member.id, [want], timeout=3.0)
                except etcd_errors.EtcdError as err:
                    return context.Progress(f"member update of {pod} to {want}: {err}", delay=0.5)
                return context.Progress(delay=0.1)
            unhealthy = [h for ep in client.endpoints if not (h := await client.health(ep, timeout=2.0)).healthy]
            if unhealthy:
                if ctx.condition(cond) is None:  # updated by an operator that died before recording it
                    ctx.set_pod_condition(constants.STEP_UPDATE_PEER_URL, pod, constants.FALSE)
                return context.Progress(
                    f"after updating {pod}: waiting for {', '.join(h.endpoint for h in unhealthy)}", delay=0.3)
            ctx.set_pod_condition(constants.STEP_UPDATE_PEER_URL, pod, constants.TRUE)
    return context.Done(done_message(ctx, step))


def done_message(ctx: context.OpsContext, step: plan.UpdatePeerURLs) -> str:
    """What the step did, naming the members whose peer URL it re-registered (those with an ``UpdatePeerURL``
    condition: the others were registered so already)."""
    assert step.peer_scheme is not None
    updated = [p for p in ctx.pod_names()
               if ctx.condition(constants.per_pod_type(constants.STEP_UPDATE_PEER_URL, p)) is not None]
    port = naming.peer_port(step.peer_scheme)
    if not updated:
        return f"{step.message}: every member's peer URL was already {step.peer_scheme}://…:{port}"
    return f"{step.message}: re-registered the peer URLs of {', '.join(updated)} as {step.peer_scheme}://…:{port}"
