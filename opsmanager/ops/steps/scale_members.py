"""``HorizontalScaleUp`` / ``HorizontalScaleDown``: change the member count one member at a time, each change
behind a quorum gate (every voting member answers and there is a leader).

Up, per new member (the next ordinal): ``EtcdMemberAdded--<pod>`` — added as a **learner** (it receives the log
but does not vote, so the write quorum is unchanged while it catches up); then the Etcd's ``spec.replicas`` grows by
one and the provisioner's StatefulSet starts the pod, which joins the running cluster
(``--initial-cluster-state=existing``, recorded on the Etcd before the first add); ``EtcdLearnerPromoted--<pod>``
— promoted once etcd agrees it has caught up with the leader. Failure prevented: a voting member added before it has
the data, which raises the quorum at once while it cannot yet ack a write (3 → 4 members needs 3 acks, one of them
from a member still streaming a snapshot). A learner still behind at half the request's ``timeout`` is removed
again (the StatefulSet shrinks back and its data volume goes) and the request fails naming it.

Down, per member, highest ordinal first: leadership moved off it first (``MoveLeader--<pod>``, as before a
restart), then ``MemberRemove``; then the Etcd's ``spec.replicas`` shrinks by one, the pod goes, and its data
volume is deleted (``EtcdMemberRemoved--<pod>`` True after that). Failures prevented: an election from removing the
leader; a removed member's old data coming back as a zombie member if the ordinal is ever used again.

Every move is observed from etcd's member list and the objects, so an operator that stops anywhere resumes at the
right place: a member added (or removed) just before the crash is seen in (or missing from) the list. The request
does not pause the Etcd (the provisioner renders the StatefulSet for each new count) but holds it against other
requests.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import etcdstatus, members, naming
from opsmanager.etcd import admin
from opsmanager.etcd import client as etcd_client
from opsmanager.ops import context, membership, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_HORIZONTAL_SCALE_UP, constants.COND_HORIZONTAL_SCALE_DOWN)

T, F = constants.TRUE, constants.FALSE
# A learner's catch-up gets this share of the request's step timeout; the rest is for removing it again.
CATCH_UP_SHARE = 0.5
# Give up on a learner this long before the step's timeout would fail the request with the learner still in.
ROLLBACK_MARGIN = datetime.timedelta(seconds=10)
ROLLING_BACK = "RollingBack"  # EtcdLearnerPromoted--<pod>'s reason once its learner is being removed again
EVEN_WARNING = ("an even member count tolerates no more failures than the odd count below it (4 members, like 3, "
                "survive one loss) while every write needs one more acknowledgement")


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.ScaleMembers), step  # the engine runs a step with the module its kind names
    if step.replicas % 2 == 0 and not (ctx.request.get("status") or {}).get("warnings"):
        ctx.record(warnings=[f"spec.horizontalScaling.replicas is {step.replicas}: {EVEN_WARNING}"])
    pods = await ctx.pods()
    async with await ctx.etcd(pods) as client:
        listed = await client.members()
        if step.condition == constants.COND_HORIZONTAL_SCALE_UP:
            return await _grow(ctx, step, client, listed)
        return await _shrink(ctx, step, client, listed, pods)


# --- the gate -------------------------------------------------------------------------------------------------


def _waiting(why: str, what: str) -> context.Progress:
    return context.Progress(f"waiting for a healthy cluster before {what} ({why})", delay=0.5)


# --- the Etcd's member count ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScaledBy:
    """The Etcd's ``status.scaledBy``: this request and the count it writes into ``spec.replicas`` next. The webhook
    admits a running Etcd's member count from an active HorizontalScaling only, and only the count it names."""

    request: str
    replicas: int

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        return {**status, "scaledBy": etcd_api.ScaledBy(request=self.request, replicas=self.replicas).to_dict()}


async def _set_replicas(ctx: context.OpsContext, replicas: int) -> None:
    """The Etcd's ``spec.replicas``: the provisioner renders the StatefulSet (and ``--initial-cluster``) for it.
    ``status.scaledBy`` names this request and the count first, for the webhook to admit the write. The legacy
    ``scaled-by`` annotation an older operator wrote goes with the write (the webhook reads it only when there is no
    ``status.scaledBy``)."""
    await etcdstatus.write(ctx.kube, ctx.namespace, ctx.db_name, ScaledBy(ctx.name, replicas))
    patch: dict[str, Any] = {"spec": {"replicas": replicas}}
    if constants.ANNOTATION_SCALED_BY in (ctx.db_obj["metadata"].get("annotations") or {}):
        patch["metadata"] = {"annotations": {constants.ANNOTATION_SCALED_BY: None}}
    updated = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace, ctx.db_name, patch)
    if updated is not None:
        ctx.db_obj = updated


# --- up ---------------------------------------------------------------------------------------------------------


def _give_up_in(ctx: context.OpsContext, step: plan.ScaleMembers, pod: str) -> datetime.timedelta | None:
    """How long ``pod``'s learner has left to catch up (negative: give up now); None before it was added."""
    now, timeout = ctx.now, ctx.spec.timeout_delta
    added = conditions.transition_age(ctx.conditions, constants.per_pod_type(constants.STEP_ETCD_MEMBER_ADDED, pod),
                                      now=now)
    if added is None:
        return None
    left = timeout * CATCH_UP_SHARE - added
    umbrella = conditions.transition_age(ctx.conditions, step.condition, now=now)
    if umbrella is not None:
        left = min(left, timeout - ROLLBACK_MARGIN - umbrella)
    return left


async def _grow(ctx: context.OpsContext, step: plan.ScaleMembers, client: admin.EtcdAdmin,
                listed: list[etcd_client.Member]) -> context.StepResult:
    names = naming.pods(ctx.db_name, step.replicas)
    for index, pod in enumerate(names):
        member = membership.member_of(listed, ctx, pod)
        promoted = ctx.condition(constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, pod)) or {}
        if promoted.get("reason") == ROLLING_BACK:  # the operator stopped inside a rollback: finish it
            return await _finish_rollback(ctx, client, member, pod, index)
        if member is not None and not member.is_learner:
            continue
        if member is None:
            return await _add(ctx, step, client, listed, pod)
        if membership.record_added(ctx, pod, member):  # added just before the operator stopped: the catch-up clock
            return context.Progress(delay=0.0)         # starts now
        if ctx.db.spec.replicas < index + 1:
            await _set_replicas(ctx, index + 1)
            return context.Progress(f"scaling the StatefulSet to {index + 1} to start {pod}",
                                    delay=ctx.until_watched(0.5))
        return await _promote(ctx, step, client, member, pod, index)
    why, statuses = await membership.unhealthy(client, listed)
    learners = membership.learners(listed)
    if why is not None or learners or len(listed) != step.replicas:
        detail = why or (f"learners: {', '.join(learners)}" if learners else f"{len(listed)} members listed")
        return context.Progress(f"waiting for all {step.replicas} members to be healthy voters ({detail})",
                                delay=0.5)
    return context.Done(step.message)


async def _add(ctx: context.OpsContext, step: plan.ScaleMembers, client: admin.EtcdAdmin,
               listed: list[etcd_client.Member], pod: str) -> context.StepResult:
    """Add ``pod`` as a learner once the cluster passes the gate (the Etcd first records that new members join)."""
    stranger = membership.unexpected_learner(
        listed, "; remove it (etcdctl member remove) and file the request again")
    if stranger is not None:
        return stranger
    why, _ = await membership.unhealthy(client, listed)
    if why is not None:
        return _waiting(why, f"adding {pod}")
    await ctx.joins_existing()
    await membership.add_learner(ctx, client, pod, step.wiring.advertised_peer_scheme)
    return context.Progress(f"added {pod} as a learner; starting its pod", delay=0.0)


async def _promote(ctx: context.OpsContext, step: plan.ScaleMembers, client: admin.EtcdAdmin,
                   member: etcd_client.Member, pod: str, index: int) -> context.StepResult:
    promoted = await membership.promote(ctx, client, member, pod)
    if promoted is not None:
        return promoted
    left = _give_up_in(ctx, step, pod)
    if left is not None and left <= datetime.timedelta():
        return await _remove_learner(ctx, client, member, pod, index)
    return membership.not_caught_up(ctx, pod, await _catch_up(client, pod),
                                    f"; it is promoted once it has, or removed again in "
                                    f"{max(0, int((left or datetime.timedelta()).total_seconds()))}s")


async def _catch_up(client: admin.EtcdAdmin, pod: str) -> str:
    statuses = await members.answering(client)
    mine = statuses.get(pod)
    if mine is None:
        return "its etcd is not answering yet"
    leader = next((v for v in statuses.values() if v.is_leader), None)
    return f"applied index {mine.raft_applied_index}" + (f", the leader's {leader.raft_index}" if leader else "")


async def _remove_learner(ctx: context.OpsContext, client: admin.EtcdAdmin, member: etcd_client.Member, pod: str,
                          index: int) -> context.StepResult:
    """Undo one learner that never caught up: out of the cluster, the StatefulSet back to ``index``, its data
    volume deleted (the PVC goes once the pod has, held until then by Kubernetes' protection)."""
    promoted = constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, pod)
    ctx.set_condition(promoted, F, f"{pod} did not catch up with the leader in time; removing it again",
                      reason=ROLLING_BACK)
    await ctx.flush()  # on record before the remove: a restarted operator finishes the rollback, never re-adds
    return await _finish_rollback(ctx, client, member, pod, index)


async def _finish_rollback(ctx: context.OpsContext, client: admin.EtcdAdmin, member: etcd_client.Member | None,
                           pod: str, index: int) -> context.StepResult:
    if member is not None:
        await client.member_remove(member.id)
    if ctx.db.spec.replicas > index:
        await _set_replicas(ctx, index)
    await _delete_volume(ctx, pod)
    message = (f"{pod} did not catch up with the leader in time; it was removed from the cluster again, the Etcd "
               f"is back at {index} members and its data volume is deleted")
    ctx.set_condition(constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, pod), F, message,
                      reason=ROLLING_BACK)
    ctx.announce("EtcdMemberRemoved", message, "Warning")
    return context.Fail(message, reason="LearnerNotCaughtUp")


async def _delete_volume(ctx: context.OpsContext, pod: str) -> None:
    try:
        await ctx.kube.delete("v1", "PersistentVolumeClaim", ctx.namespace, f"{naming.DATA_VOLUME}-{pod}")
    except kube.NotFound:
        pass


# --- down -------------------------------------------------------------------------------------------------------


async def _shrink(ctx: context.OpsContext, step: plan.ScaleMembers, client: admin.EtcdAdmin,
                  listed: list[etcd_client.Member], pods: dict[str, dict[str, Any]]) -> context.StepResult:
    origin = ctx.records.origin.replicas if ctx.records.origin is not None else None
    start = max(origin or 0, ctx.db.spec.replicas)
    names = naming.pods(ctx.db_name, start)
    for index in reversed(range(step.replicas, start)):
        pod = names[index]
        removed = constants.per_pod_type(constants.STEP_ETCD_MEMBER_REMOVED, pod)
        if ctx.is_true(removed):
            continue
        member = membership.member_of(listed, ctx, pod)
        if member is not None:
            # the member that goes need not answer (a lost member is removed too); the rest must
            why, statuses = await membership.unhealthy(client, [m for m in listed if m.id != member.id])
            if why is not None:
                return _waiting(why, f"removing {pod}")
            moving = await membership.leader_off(ctx, client, member, pod, statuses,
                                                 naming.pods(ctx.db_name, step.replicas), "removing it")
            if moving is not None:
                return moving
            await membership.remove(ctx, client, member, pod)
            return context.Progress(f"removed {pod} from the cluster; shrinking the StatefulSet", delay=0.0)
        if ctx.db.spec.replicas > index:
            await _set_replicas(ctx, index)
            return context.Progress(f"scaling the StatefulSet to {index}: {pod} goes", delay=ctx.until_watched(0.5))
        if pod in pods:
            return context.Progress(f"waiting for {pod} to go", delay=ctx.until_watched(0.5))
        await _delete_volume(ctx, pod)
        ctx.set_condition(removed, T, f"removed {pod} from the cluster; its pod and data volume are deleted")
        return context.Progress(delay=0.0)
    why, _ = await membership.unhealthy(client, listed)
    if why is not None or len(listed) != step.replicas:
        return context.Progress(f"waiting for the {step.replicas} members left to be healthy "
                                f"({why or f'{len(listed)} members listed'})", delay=0.5)
    return context.Done(step.message)
