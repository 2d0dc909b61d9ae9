"""StorageMigration: every member moved onto a claim of the new StorageClass, never with fewer than N voters.

A member moves to another class only by getting a new claim under its ordinal (the StatefulSet has one claim
template, recreated on the new class by ``ClaimTemplatesUpdated`` before these steps), so each member is replaced —
and while one is replaced an extra member keeps the voter count at N:

- ``SurgeMemberAdded``: ordinal N joins on the new class — any claim left under that name by an earlier scale-down is
  deleted first (its old data would come back as a zombie member), then ``EtcdMemberAdded--<pod>`` (a **learner**:
  it does not vote, so the write quorum is unchanged while it streams the data), the StatefulSet widened to N+1
  (``--initial-cluster`` naming exactly the N+1 members etcd will list when the new pod starts), and
  ``EtcdLearnerPromoted--<pod>`` once etcd agrees it caught up. The cluster now has N+1 voters.
- ``MigrateEtcdStorage``: ordinals 0..N-1 in order, each behind the gate (every voter answers, there is a leader):
  leadership moved off it first (``MoveLeader--<pod>``), ``MemberRemove`` (``EtcdMemberRemoved--<pod>`` False on
  record first) — N voters left —, re-added as a learner at the same peer URL, then its pod's UID recorded
  (``status.migration.replacedFrom``) before its old claim (the volume set to ``Retain`` first when
  ``oldPVReclaimPolicy: Retain``) and its pod are deleted; the StatefulSet creates the pod again on a new claim of
  the new class, empty, and the learner streams the data and is promoted. Failures prevented: a replacement run with
  N-1 voters (a quorum that survives no further failure while a learner catches up); a voter added before it has
  the data (the quorum grows while it cannot ack); the leader removed (an election); a pod deleted twice.
- ``SurgeMemberRemoved``: ordinal N leaves (leadership off it, ``MemberRemove``), the StatefulSet back to N, its
  claim deleted (``EtcdMemberRemoved--<pod>`` True).

Every move is read from etcd's member list, the pods (by UID) and the claims (by class), so an operator that stops
anywhere resumes at the right place: a member removed just before the crash is missing from the list and is re-added
as a learner, a learner already added is found by its peer URL, a pod already replaced has another UID.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import members, naming, render, statefulset, volumes
from opsmanager.etcd import admin
from opsmanager.etcd import client as etcd_client
from opsmanager.ops import context, membership, plan, restart

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_SURGE_MEMBER_ADDED, constants.COND_MIGRATE_STORAGE,
                               constants.COND_SURGE_MEMBER_REMOVED)

T, F = constants.TRUE, constants.FALSE


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    if isinstance(step, plan.SurgeMember):
        return await _surge(ctx, step)
    if isinstance(step, plan.MigrateMembers):
        return await _migrate(ctx, step)
    assert isinstance(step, plan.RemoveSurge), step  # the kinds the engine runs with this module
    return await _unsurge(ctx, step)


# --- the StatefulSet ----------------------------------------------------------------------------------------------


def _widened(ctx: context.OpsContext, replicas: int) -> render.Wiring:
    """The StatefulSet with the extra member: N+1 replicas, ``--initial-cluster`` naming all N+1 — the members etcd
    lists whenever a new pod of this migration starts (N voters and it, the learner)."""
    names = tuple(naming.pods(ctx.db_name, replicas + 1))
    return dataclasses.replace(render.Wiring.steady(ctx.db.spec.tls), ordinals=(0, replicas + 1),
                               initial_members=names)


async def _apply(ctx: context.OpsContext, wiring: render.Wiring) -> context.Progress | None:
    """Apply the StatefulSet for ``wiring`` (the live restart token and claim templates kept: nothing restarts); a
    Progress while its controller has not observed it."""
    sts = await statefulset.apply_statefulset(ctx.kube, ctx.db, wiring)
    status = sts.get("status") or {}
    if status.get("observedGeneration", 0) < sts["metadata"].get("generation", 0):
        return context.Progress("waiting for the StatefulSet controller to observe the template",
                                delay=ctx.until_watched(0.2))
    return None


async def _delete_claim(ctx: context.OpsContext, pod: str, *, retain: bool = False) -> bool:
    """Delete ``pod``'s data claim (the volume set to ``Retain`` first when ``retain``); True when one was there."""
    name = volumes.claim_name(pod)
    claim = await ctx.kube.get("v1", "PersistentVolumeClaim", ctx.namespace, name)
    if claim is None or claim["metadata"].get("deletionTimestamp"):
        return False
    volume = (claim.get("spec") or {}).get("volumeName")
    if retain and volume:
        await ctx.kube.patch("v1", "PersistentVolume", None, volume,
                             {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})
    try:
        return await ctx.kube.delete("v1", "PersistentVolumeClaim", ctx.namespace, name,
                                     uid=claim["metadata"].get("uid"))
    except kube.NotFound:
        return False


def _removed(ctx: context.OpsContext, pod: str, message: str) -> None:
    ctx.set_condition(constants.per_pod_type(constants.STEP_ETCD_MEMBER_REMOVED, pod), T, message)


async def _promote(ctx: context.OpsContext, client: admin.EtcdAdmin, member: etcd_client.Member,
                   pod: str) -> context.StepResult:
    """Promote ``pod``'s learner once its process runs and etcd says it caught up."""
    if not member.name:
        return context.Progress(f"waiting for {pod} to start and join as a learner", delay=ctx.until_watched(0.5))
    promoted = await membership.promote(ctx, client, member, pod)
    return promoted if promoted is not None else membership.not_caught_up(ctx, pod)


async def _add(ctx: context.OpsContext, client: admin.EtcdAdmin, listed: list[etcd_client.Member],
               pod: str) -> context.StepResult:
    """Add ``pod`` as a learner, behind the gate (no learner of anyone else's, every voter answers, a leader)."""
    stranger = membership.unexpected_learner(listed, "; remove it (etcdctl member remove) and file the request again")
    if stranger is not None:
        return stranger
    why, _ = await membership.unhealthy(client, listed)
    if why is not None:
        return context.Progress(f"waiting for a healthy cluster before adding {pod} ({why})", delay=0.5)
    await ctx.joins_existing()
    await membership.add_learner(ctx, client, pod, render.Wiring.steady(ctx.db.spec.tls).advertised_peer_scheme,
                                 back=pod in ctx.pod_names())
    return context.Progress(f"added {pod} as a learner", delay=0.0)


async def _remove(ctx: context.OpsContext, client: admin.EtcdAdmin, listed: list[etcd_client.Member],
                  member: etcd_client.Member, pod: str, stays: list[str]) -> context.StepResult:
    """Remove ``pod``'s voter, behind the gate of the others, leadership moved off it first."""
    why, statuses = await membership.unhealthy(client, [m for m in listed if m.id != member.id])
    if why is not None:
        return context.Progress(f"waiting for a healthy cluster before removing {pod} ({why})", delay=0.5)
    moving = await membership.leader_off(ctx, client, member, pod, statuses, stays, "removing it")
    if moving is not None:
        return moving
    await membership.remove(ctx, client, member, pod)
    return context.Progress(f"removed {pod} from the cluster", delay=0.0)


# --- SurgeMemberAdded ---------------------------------------------------------------------------------------------


async def _surge(ctx: context.OpsContext, step: plan.SurgeMember) -> context.StepResult:
    pod = naming.pod(ctx.db_name, step.replicas)
    pods = await ctx.pods()
    async with await ctx.etcd(pods, names=naming.pods(ctx.db_name, step.replicas + 1)) as client:
        listed = await client.members()
        member = membership.member_of(listed, ctx, pod)
        if member is None:
            if pod not in pods and await _delete_claim(ctx, pod):
                ctx.announce("StaleClaimDeleted", f"Deleted the claim {volumes.claim_name(pod)} left by an earlier "
                                                  "member: its data must not come back")
            return await _add(ctx, client, listed, pod)
        membership.record_added(ctx, pod, member)
        waiting = await _apply(ctx, _widened(ctx, step.replicas))
        if waiting is not None:
            return waiting
        if member.is_learner:
            return await _promote(ctx, client, member, pod)
    return context.Done(f"{step.message}: {pod}")


# --- MigrateEtcdStorage -------------------------------------------------------------------------------------------


async def _migrate(ctx: context.OpsContext, step: plan.MigrateMembers) -> context.StepResult:
    pods = await ctx.pods()
    waiting = await _apply(ctx, _widened(ctx, step.replicas))
    if waiting is not None:
        return waiting
    async with await ctx.etcd(pods, names=naming.pods(ctx.db_name, step.replicas + 1)) as client:
        listed = await client.members()
        for pod in naming.pods(ctx.db_name, step.replicas):
            result = await _move(ctx, step, client, listed, pods, pod)
            if result is not None:
                return result
    return context.Done(step.message)


async def _move(ctx: context.OpsContext, step: plan.MigrateMembers, client: admin.EtcdAdmin,
                listed: list[etcd_client.Member], pods: dict[str, dict[str, Any]], pod: str) -> context.StepResult | None:
    """One move toward ``pod`` on the new class; None once it is a voter on a claim of that class."""
    member = membership.member_of(listed, ctx, pod)
    before = ((ctx.records.migration or ops_api.MigrationProgress()).replaced_from or {}).get(pod)
    if before is None:
        if member is None:
            return await _add(ctx, client, listed, pod)
        if not member.is_learner:
            stays = [n for n in naming.pods(ctx.db_name, step.replicas + 1) if n != pod]
            return await _remove(ctx, client, listed, member, pod, stays)
        membership.record_added(ctx, pod, member, back=True)  # found again after a stop before the record
        return await _replace(ctx, step, pods, pod)
    if member is None:
        return context.Fail(f"{pod}'s learner left the cluster while its pod was replaced (not by this request): "
                            "add it back (HorizontalScaling) or file the request again", reason="MemberVanished")
    current = pods.get(pod)
    if current is not None and current["metadata"].get("uid") == before and not members.terminating(current):
        return await _replace(ctx, step, pods, pod)  # recorded, then the operator stopped before the deletes
    if current is None or members.terminating(current) or current["metadata"].get("uid") == before:
        return context.Progress(f"waiting for {pod} to come back on a new claim", delay=ctx.until_watched(0.5))
    claim = await volumes.claim(ctx.kube, ctx.namespace, pod)
    if claim is None or claim.storage_class != step.storage_class:
        return context.Progress(f"waiting for {pod}'s claim on StorageClass {step.storage_class}",
                                delay=ctx.until_watched(0.5))
    if member.is_learner:
        return await _promote(ctx, client, member, pod)
    removed = constants.per_pod_type(constants.STEP_ETCD_MEMBER_REMOVED, pod)
    if not ctx.is_true(removed):
        _removed(ctx, pod, f"replaced {pod} on StorageClass {step.storage_class}; its old claim is deleted")
    return None


async def _replace(ctx: context.OpsContext, step: plan.MigrateMembers, pods: dict[str, dict[str, Any]],
                   pod: str) -> context.StepResult:
    """The learner is in: record the pod's UID, then delete its old claim and the pod (the StatefulSet creates both
    again, the claim on the new class). The claim goes first: while the pod lives it is only marked for deletion
    (kept by its protection), so the pod created again never finds the old one."""
    current = pods.get(pod)
    if current is None or members.terminating(current):
        return context.Progress(f"waiting for {pod}'s pod before replacing it", delay=ctx.until_watched(0.5))
    uid = str(current["metadata"].get("uid") or "")
    record = ctx.records.migration or ops_api.MigrationProgress()
    if (record.replaced_from or {}).get(pod) != uid:
        ctx.record(migration=record.model_copy(update={"replaced_from": {**(record.replaced_from or {}), pod: uid}}))
        await ctx.flush()  # on record before the deletes: a restarted operator never deletes the new pod
    claim = await volumes.claim(ctx.kube, ctx.namespace, pod)
    if claim is not None and claim.storage_class != step.storage_class:
        await _delete_claim(ctx, pod, retain=step.retain_old)
    await restart.delete_recorded(ctx, {pod: uid}, pods)
    ctx.announce("MemberReplaced", f"Deleted {pod} and its old claim: it comes back on StorageClass "
                                   f"{step.storage_class}")
    return context.Progress(f"replacing {pod} on StorageClass {step.storage_class}", delay=ctx.until_watched(0.5))


# --- SurgeMemberRemoved -------------------------------------------------------------------------------------------


async def _unsurge(ctx: context.OpsContext, step: plan.RemoveSurge) -> context.StepResult:
    pod = naming.pod(ctx.db_name, step.replicas)
    pods = await ctx.pods()
    async with await ctx.etcd(pods, names=naming.pods(ctx.db_name, step.replicas + 1)) as client:
        listed = await client.members()
        member = membership.member_of(listed, ctx, pod)
        if member is not None:
            return await _remove(ctx, client, listed, member, pod, naming.pods(ctx.db_name, step.replicas))
    waiting = await _apply(ctx, render.Wiring.steady(ctx.db.spec.tls))
    if waiting is not None:
        return waiting
    if pod in pods:
        return context.Progress(f"waiting for {pod} to go", delay=ctx.until_watched(0.5))
    await _delete_claim(ctx, pod)
    _removed(ctx, pod, f"removed the extra member {pod}; its pod and claim are deleted")
    return context.Done(step.message)

