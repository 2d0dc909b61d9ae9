"""RecoverFromQuorumLoss: rebuild a cluster that lost quorum from one surviving member (KubeDB's type; destructive
for the members that are gone, which come back empty and catch up from the survivor).

- ``QuorumLossConfirmed``: checked again when the request starts — no leader among the members that answer, and
  the member to keep is the one with the highest raft committed index among them (the one the Etcd's
  ``QuorumLost`` condition named, and the request confirmed). Failure prevented: a recovery on a cluster that came
  back by itself (it would discard the others' newer data), or one that keeps a member behind another.
- ``SurvivorForcedNewCluster``: from now on a member started on an empty data directory joins the running cluster
  (``status.initialClusterState: existing``); the StatefulSet is narrowed to the survivor's ordinal
  (``ordinals.start``, one replica), so the other pods go and their data volumes are deleted; the survivor is
  restarted with ``--force-new-cluster`` — etcd commits a membership of one from its own data, keeping its member ID
  and every write it has — and then once more without the flag, so that no later restart of it ever forces again.
  The pod's UID is recorded before each restart (a crash restarts it once).
- ``MembersRejoined``: each other member, one at a time (the StatefulSet's ordinal range grows by one at either
  end), is added back as a learner (``EtcdMemberAdded--<pod>``), its pod started with ``--initial-cluster`` naming
  exactly the members of the moment, and promoted once etcd says it caught up (``EtcdLearnerPromoted--<pod>``).
  No MoveLeader: the survivor leads throughout. ``UpdateDatabase`` puts the StatefulSet back to every replica.
"""

from __future__ import annotations

import dataclasses

from opsmanager.api import constants
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import health, members, render, statefulset
from opsmanager.etcd import admin
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, membership, plan, restart

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_QUORUM_LOSS_CONFIRMED, constants.COND_SURVIVOR_FORCED,
                               constants.COND_MEMBERS_REJOINED)

T, F = constants.TRUE, constants.FALSE


def _ordinal(pod: str) -> int:
    return int(pod.rsplit("-", 1)[-1])


def rejoin_order(names: list[str], survivor: str) -> list[str]:
    """The other members in the order they come back: the ordinals above the survivor's upwards, then those below
    downwards — the StatefulSet's ordinal range grows by one at an end each time, never with a gap."""
    k = _ordinal(survivor)
    above = sorted((n for n in names if _ordinal(n) > k), key=_ordinal)
    below = sorted((n for n in names if _ordinal(n) < k), key=_ordinal, reverse=True)
    return above + below


def wiring(ctx: context.OpsContext, running: list[str], *, force: bool = False,
           initial: list[str] | None = None) -> render.Wiring:
    """The StatefulSet for ``running`` (a contiguous ordinal range) with ``--initial-cluster`` naming ``initial``."""
    ordinals = sorted(_ordinal(n) for n in running)
    listed = sorted(initial if initial is not None else running, key=_ordinal)
    return dataclasses.replace(render.Wiring.steady(ctx.db.spec.tls), ordinals=(ordinals[0], len(ordinals)),
                               initial_members=tuple(listed), force_new_cluster=force)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    if isinstance(step, plan.ConfirmQuorumLoss):
        return await _confirm(ctx, step)
    if isinstance(step, plan.ForceNewCluster):
        return await _force(ctx, step)
    assert isinstance(step, plan.RejoinMembers), step  # the kinds the engine runs with this module
    return await _rejoin(ctx, step)


# --- QuorumLossConfirmed ----------------------------------------------------------------------------------------


async def _confirm(ctx: context.OpsContext, step: plan.ConfirmQuorumLoss) -> context.StepResult:
    async with await ctx.etcd() as client:
        up = await members.answering(client, timeout=2.0)
    if len([v for v in up.values() if v.leader_id]) >= health.quorum(ctx.db.spec.replicas):
        return context.Fail(f"quorum is back ({', '.join(sorted(up))} answer with a leader): there is nothing to "
                            "recover, and nothing was changed", reason="QuorumNotLost")
    if step.survivor not in up:
        return context.Fail(f"{step.survivor} does not answer (answering: {', '.join(sorted(up)) or 'none'}): only "
                            "a member whose data is there can be kept; nothing was changed", reason="SurvivorSilent")
    committed = [(n, v.raft_index) for n, v in up.items()]
    best = health.survivor(committed)
    chosen = (ctx.spec.recover_from_quorum_loss.member if ctx.spec.recover_from_quorum_loss is not None else None)
    if chosen is None and best != step.survivor:
        return context.Fail(f"{step.survivor} is not the member with the highest committed index any more: "
                            f"{', '.join(f'{n} {i}' for n, i in sorted(committed))}; file the request again with "
                            f"confirmMember: {best}; nothing was changed", reason="SurvivorChanged")
    return context.Done(f"Quorum is lost ({len(up)} of {ctx.db.spec.replicas} answer, no leader); {step.survivor} "
                        f"is kept (raft committed index {up[step.survivor].raft_index})")


# --- SurvivorForcedNewCluster -----------------------------------------------------------------------------------


async def _apply(ctx: context.OpsContext, w: render.Wiring, token: str) -> context.Progress | None:
    """Apply the StatefulSet for ``w``; a Progress while its controller has not observed it."""
    sts = await statefulset.apply_statefulset(ctx.kube, ctx.db, w, restarted_at=f"{ctx.name}/{token}")
    status = sts.get("status") or {}
    if status.get("observedGeneration", 0) < sts["metadata"].get("generation", 0):
        return context.Progress("waiting for the StatefulSet controller to observe the template",
                                delay=ctx.until_watched(0.2))
    return None


async def _alone(ctx: context.OpsContext, survivor: str) -> str | None:
    """Why the survivor is not (yet) a healthy cluster of one: None when it leads a membership of just itself."""
    async with await ctx.etcd() as client:
        up = await members.answering(client, timeout=2.0)
        view = up.get(survivor)
        if view is None or not view.is_leader:
            return f"{survivor} is not leading yet"
        try:
            listed = await client.members(timeout=2.0)
        except etcd_errors.EtcdError as err:
            return f"{survivor}: {err}"
    if len(listed) != 1:
        return f"the membership has {len(listed)} members"
    return None


async def _restart_survivor(ctx: context.OpsContext, survivor: str, field: str, w: render.Wiring, token: str,
                            what: str) -> context.StepResult | None:
    """Restart the survivor once onto ``w`` (its pod UID recorded in ``status.recovery`` first, ``field`` a field of the record) and wait
    until it leads alone; None once done."""
    waiting = await _apply(ctx, w, token)
    if waiting is not None:
        return waiting
    pods = await ctx.pods()
    record = ctx.records.recovery or ops_api.RecoveryProgress()
    before = getattr(record, field)
    if not before:
        pod = pods.get(survivor)
        if pod is None or members.terminating(pod):
            return context.Progress(f"waiting for {survivor}'s pod", delay=ctx.until_watched(0.5))
        before = str(pod["metadata"].get("uid") or "")
        ctx.record(recovery=record.model_copy(update={field: before}))
        await ctx.flush()  # on record before the pod is deleted
    if await restart.delete_recorded(ctx, {survivor: before}, pods):
        ctx.announce("SurvivorRestarted", f"Restarted {survivor} {what}")
        return context.Progress(f"restarted {survivor} {what}", delay=ctx.until_watched(0.5))
    if restart.not_replaced([survivor], {survivor: before}, pods):
        return context.Progress(f"waiting for {survivor} to come back {what}", delay=ctx.until_watched(0.5))
    why = await _alone(ctx, survivor)
    if why is not None:
        return context.Progress(f"waiting for {survivor} to lead a cluster of one ({why})", delay=0.5)
    return None


async def _force(ctx: context.OpsContext, step: plan.ForceNewCluster) -> context.StepResult:
    survivor = step.survivor
    if not (ctx.records.recovery or ops_api.RecoveryProgress()).forced:
        others = [n for n in ctx.pod_names() if n != survivor]
        await ctx.joins_existing()
        alone = wiring(ctx, [survivor], force=True)
        waiting = await _apply(ctx, alone, "force")
        if waiting is not None:
            return waiting
        pods = await ctx.pods()
        still = [n for n in others if n in pods]
        if still:
            return context.Progress(f"waiting for the pods of {', '.join(still)} to go", delay=ctx.until_watched(0.5))
        wiped = []
        claims = statefulset.pvc_names(await ctx.kube.list("v1", "PersistentVolumeClaim", ctx.namespace), ctx.db_name)
        for pvc in claims:
            if any(pvc.endswith(f"-{n}") for n in others) and await ctx.kube.delete(
                    "v1", "PersistentVolumeClaim", ctx.namespace, pvc):
                wiped.append(pvc)
        if wiped:
            ctx.announce("MembersWiped", f"Deleted the data volumes of the members that are gone: {', '.join(wiped)}")
        result = await _restart_survivor(ctx, survivor, "forced_from", alone, "force", "with --force-new-cluster")
        if result is not None:
            return result
        recovery = ctx.records.recovery or ops_api.RecoveryProgress()
        ctx.record(recovery=recovery.model_copy(update={"forced": True}))
        await ctx.flush()  # from now on the template never carries --force-new-cluster again
    result = await _restart_survivor(ctx, survivor, "unforced_from", wiring(ctx, [survivor]), "alone",
                                     "without --force-new-cluster")
    if result is not None:
        return result
    return context.Done(step.message)


# --- MembersRejoined --------------------------------------------------------------------------------------------


async def _rejoin(ctx: context.OpsContext, step: plan.RejoinMembers) -> context.StepResult:
    survivor = step.survivor
    running = [survivor]
    async with await ctx.etcd() as client:
        listed = await client.members(timeout=3.0)
        for pod in rejoin_order(ctx.pod_names(), survivor):
            member = membership.member_of(listed, ctx, pod)
            if member is not None and not member.is_learner:
                running.append(pod)
                continue
            if member is None:
                if (stranger := membership.unexpected_learner(listed)) is not None:
                    return stranger
                member, listed = await membership.add_learner(
                    ctx, client, pod, render.Wiring.steady(ctx.db.spec.tls).advertised_peer_scheme, back=True)
            else:
                membership.record_added(ctx, pod, member, back=True)
            waiting = await _apply(ctx, wiring(ctx, [*running, pod], initial=[*(m.name or pod for m in listed)]),
                                   f"rejoin-{pod}")
            if waiting is not None:
                return waiting
            return await _promote(ctx, client, member, pod)
        learners = membership.learners(listed)
        if learners or len(listed) != ctx.db.spec.replicas:
            return context.Progress(f"waiting for all {ctx.db.spec.replicas} members to be voters "
                                    f"({len(listed)} listed, learners: {', '.join(learners) or 'none'})", delay=0.5)
    return context.Done(f"{step.message}: {', '.join(rejoin_order(ctx.pod_names(), survivor))} rejoined from "
                        f"{survivor}")


async def _promote(ctx: context.OpsContext, client: admin.EtcdAdmin, member: etcd_client.Member,
                   pod: str) -> context.StepResult:
    if not member.name:
        ctx.set_condition(constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, pod), F, f"waiting for {pod} to start and join as a learner")
        return context.Progress(f"waiting for {pod} to start and join", delay=ctx.until_watched(0.5))
    promoted = await membership.promote(ctx, client, member, pod)
    return promoted if promoted is not None else membership.not_caught_up(ctx, pod)


