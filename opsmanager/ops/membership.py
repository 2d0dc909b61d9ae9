"""Membership changes — a member added as a learner, a learner promoted, a member removed — in one place, for every
step that changes who is in the cluster: ``HorizontalScaling`` (:mod:`~opsmanager.ops.steps.scale_members`) and
``RecoverFromQuorumLoss``'s rejoin (:mod:`~opsmanager.ops.steps.recover_quorum`). Steps never import each other,
so what both need lives here; the callers keep what differs (scaling's quorum gate and learner rollback, the
recovery's ordinal range).

Each change writes its per-pod condition of the request and its Event:

- ``EtcdMemberAdded--<pod>`` True with the new member's ID, after MemberAdd (as a **learner**: it receives the log
  but does not vote, so the write quorum is unchanged while it catches up). A member added just before the
  operator stopped is found again in the member list (:func:`member_of`, by its peer URL while it has no name) and
  put on record then (:func:`record_added`), never added twice. A learner this request did not add stops the
  request (:func:`unexpected_learner`): it would be promoted, or counted, as one of ours.
- ``EtcdLearnerPromoted--<pod>`` True once etcd agreed the learner caught up with the leader; False with what it
  waits for while etcd refuses (:func:`not_caught_up`).
- ``EtcdMemberRemoved--<pod>`` False on record before MemberRemove (:func:`remove`); the caller sets it True once
  the member's pod and data are gone.

Before a member is added or removed the cluster passes a gate (:func:`unhealthy`: every voter answers and there is
a leader), and a member that leads hands leadership to one that stays first (:func:`leader_off`).
"""

from __future__ import annotations

from collections.abc import Collection

from opsmanager.api import constants
from opsmanager.cluster import members, naming
from opsmanager.etcd import admin
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, restart, rollout

T, F = constants.TRUE, constants.FALSE


def peer_url(ctx: context.OpsContext, pod: str, scheme: str) -> str:
    """The peer URL ``pod``'s member is added with (its stable DNS name, the peer port of ``scheme``)."""
    return f"{scheme}://{ctx.fqdn(pod)}:{naming.peer_port(scheme)}"


def member_of(listed: list[etcd_client.Member], ctx: context.OpsContext, pod: str) -> etcd_client.Member | None:
    """The member ``pod`` runs: by name, or (a member added but not started yet has no name) by peer URL host."""
    return members.find_member(listed, pod, ctx.fqdn(pod))


def learners(listed: list[etcd_client.Member]) -> list[str]:
    """The learners of ``listed``, by name (by ID while a learner has not started)."""
    return [m.name or m.id_hex for m in listed if m.is_learner]


def unexpected_learner(listed: list[etcd_client.Member], advice: str = "") -> context.Fail | None:
    """The failure when the cluster has a learner before this request adds one (``advice`` appended to its
    message); None when it has none."""
    strangers = learners(listed)
    if not strangers:
        return None
    return context.Fail(f"the cluster has a learner this request did not add ({', '.join(strangers)}){advice}",
                        reason="UnexpectedLearner")


def _added_message(pod: str, member: etcd_client.Member, back: bool) -> str:
    return f"added {pod}{' back' if back else ''} to the cluster as a learner (member {member.id_hex})"


async def add_learner(ctx: context.OpsContext, client: admin.EtcdAdmin, pod: str, scheme: str, *,
                      back: bool = False) -> tuple[etcd_client.Member, list[etcd_client.Member]]:
    """Add ``pod`` as a learner (``back``: a member that was in the cluster before, as in a recovery); the new
    member and the member list after the add."""
    new, listed = await client.member_add([peer_url(ctx, pod, scheme)], is_learner=True)
    ctx.set_condition(constants.per_pod_type(constants.STEP_ETCD_MEMBER_ADDED, pod), T, _added_message(pod, new, back))
    ctx.announce("EtcdMemberAdded", f"Added {pod}{' back' if back else ''} to the cluster as a learner")
    return new, listed


def record_added(ctx: context.OpsContext, pod: str, member: etcd_client.Member, *, back: bool = False) -> bool:
    """Put on record a learner found in the member list but not yet on record (added just before the operator
    stopped); True when it was not on record."""
    added = constants.per_pod_type(constants.STEP_ETCD_MEMBER_ADDED, pod)
    if ctx.is_true(added):
        return False
    ctx.set_condition(added, T, _added_message(pod, member, back))
    return True


async def promote(ctx: context.OpsContext, client: admin.EtcdAdmin, member: etcd_client.Member,
                  pod: str) -> context.Progress | None:
    """Promote ``pod``'s learner to a voting member: the progress once promoted; None while etcd says it has not
    caught up with the leader (the caller decides what then: :func:`not_caught_up`)."""
    try:
        await client.member_promote(member.id)
    except etcd_errors.LearnerNotReady:
        return None
    ctx.set_condition(constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, pod), T,
                      f"promoted {pod} to a voting member")
    ctx.announce("EtcdLearnerPromoted", f"Promoted {pod} to a voting member")
    return context.Progress(f"promoted {pod}", delay=0.0)


def not_caught_up(ctx: context.OpsContext, pod: str, where: str | None = None, then: str = "") -> context.Progress:
    """``EtcdLearnerPromoted--<pod>`` False while the learner is behind (``where``: how far, ``then``: what happens
    next, both in the condition's message) and the progress waiting for it."""
    detail = f" ({where})" if where else ""
    ctx.set_condition(constants.per_pod_type(constants.STEP_ETCD_LEARNER_PROMOTED, pod), F,
                      f"{pod} is a learner that has not caught up with the leader yet{detail}{then}")
    return context.Progress(f"waiting for learner {pod} to catch up{detail}", delay=1.0)


async def remove(ctx: context.OpsContext, client: admin.EtcdAdmin, member: etcd_client.Member, pod: str) -> None:
    """Remove ``pod``'s member from the cluster. ``EtcdMemberRemoved--<pod>`` False is on record before the remove
    goes out (a restarted operator then observes from the member list whether it happened)."""
    ctx.set_condition(constants.per_pod_type(constants.STEP_ETCD_MEMBER_REMOVED, pod), F,
                      f"removing {pod} from the cluster")
    await ctx.flush()
    await client.member_remove(member.id)
    ctx.announce("EtcdMemberRemoved", f"Removed {pod} from the cluster")


async def unhealthy(client: admin.EtcdAdmin, listed: list[etcd_client.Member],
                    ) -> tuple[str | None, dict[str, etcd_client.MemberStatus]]:
    """Why the membership must not change now (None: every voter of ``listed`` answers and there is a leader), and
    the members' Status by pod name."""
    statuses = await members.answering(client)
    answering = {v.member_id for v in statuses.values()}
    down = [m.name or m.id_hex for m in listed if not m.is_learner and m.id not in answering]
    if down:
        return f"{', '.join(down)} not answering", statuses
    if not any(v.leader_id for v in statuses.values()):
        return "no leader", statuses
    return None, statuses


async def leader_off(ctx: context.OpsContext, client: admin.EtcdAdmin, member: etcd_client.Member, pod: str,
                     statuses: dict[str, etcd_client.MemberStatus], stays: Collection[str],
                     before: str) -> context.StepResult | None:
    """Move leadership off ``pod`` (about to leave: ``before`` says why) to the most caught-up voter among
    ``stays`` that answers; None when ``pod`` does not lead. Failure prevented: an election from removing the
    leader (no writes until a new leader is elected)."""
    leader_id = next((v.leader_id for v in statuses.values() if v.leader_id), 0)
    if member.id != leader_id:
        return None
    candidates = sorted((v for n, v in statuses.items() if n != pod and not v.is_learner and n in stays),
                        key=lambda v: (-v.raft_applied_index, v.endpoint.name))
    if not candidates:
        return context.Progress(f"waiting for a healthy cluster before moving leadership off {pod} (no member that "
                                "stays answers)", delay=0.5)
    move = rollout.Action(rollout.ActionKind.MOVE_LEADER, "remove the leader last", pod=pod,
                          target_pod=candidates[0].endpoint.name, target_id=candidates[0].member_id)
    return await restart.move_leader(ctx, client, move, before=before)
