"""Which member to restart next: the pure decision behind the leader-aware rolling restart.

The rolling restart is the only place that disrupts members, and it does so one member at a time. This module
decides *what* to do next from a snapshot of the cluster; the I/O (deleting pods, MoveLeader, waiting for
recovery) lives in :mod:`opsmanager.ops.restart`. It reads the one member view,
:class:`opsmanager.cluster.health.MemberView`, that the provisioner's health verdict reads too. Because the
decision is re-derived from observed facts on every call — which pods already run the target template revision, who leads, who is caught up — an operator that
crashes mid-roll and starts again makes the same decision and never restarts a member twice.

Rules (each prevents a failure that was seen elsewhere or measured here):

- **Refuse unless at rest.** All expected voters present, no learners, every member healthy. Restarting a member
  of a degraded 3-member cluster loses quorum. A member whose node is not Ready is named with its node: its pod
  cannot be deleted to completion until the node answers again.
- **One member at a time.** While any member is missing, not Ready, or not recovered, the answer is ``wait``.
- **Followers first, most-lagged first** (CloudNativePG's order): the member that would need the longest
  catch-up anyway goes while the others are healthy.
- **Leader last, after MoveLeader.** When only the leader is out of date, leadership moves first to the most
  caught-up *up-to-date* follower (so it does not bounce back to a member that still needs a restart). A killed
  leader stalls writes 1.5–2 s (measured); MoveLeader takes ≈ 0.1 s with none lost.
- **A single member** restarts in place with documented downtime: there is no one to move leadership to.

``move_leader=False`` is the benchmark's baseline only (the request annotation
``ops.opsmanager.dev/bench-skip-move-leader``): the same checks, but members restart in ordinal order, the leader
wherever it falls, with no MoveLeader — to measure what the leader-last rule buys.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from opsmanager.cluster import health


class ActionKind(enum.Enum):
    DONE = "Done"  # every member runs the target revision and the cluster is healthy
    WAIT = "Wait"  # a member is in flight (missing, starting, catching up); look again shortly
    REFUSE = "Refuse"  # the cluster is not at rest and nothing of ours is in flight: do not disrupt it
    RESTART = "Restart"  # delete this member's pod
    MOVE_LEADER = "MoveLeader"  # move leadership from ``pod`` to ``target``


@dataclasses.dataclass(frozen=True)
class Action:
    kind: ActionKind
    reason: str
    pod: str | None = None
    target_pod: str | None = None
    target_id: int | None = None
    follower: bool = False  # RESTART: ``pod`` is a follower in the view decided on (so the leader serves on)


def _ordinal(member: health.MemberView) -> tuple[int, str]:
    """A StatefulSet pod's ordinal (``<name>-<n>``), for ordinal order that sorts ``db-10`` after ``db-2``."""
    tail = member.name.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, member.name)


def next_action(members: Sequence[health.MemberView], expected_voters: int, *, move_leader: bool = True) -> Action:
    """Decide the next step of a rolling restart onto the StatefulSet's update revision (``move_leader=False``: the
    benchmark's baseline, ordinal order with no leader transfer)."""
    if not members:
        return Action(ActionKind.REFUSE, "no members observed")
    stranded = [m.on_down_node for m in members if m.node_down]
    if stranded:
        # Its pod can be neither restarted (a deletion on a node that does not answer never completes) nor left
        # out (restarting another member would leave too few): wait for the node, or for someone to replace it.
        return Action(ActionKind.REFUSE, f"not at rest: {'; '.join(stranded)}")
    missing = [m.name for m in members if not m.exists or not m.pod_ready or not m.answering]
    if missing:
        # A missing or unready *outdated* pod was not restarted by us: the cluster is not at rest.
        # A missing or unready *up-to-date* pod is one we restarted: wait for it to come back.
        if all(m.up_to_date for m in members if m.name in missing):
            return Action(ActionKind.WAIT, f"waiting for {', '.join(missing)} to be recreated and Ready")
        return Action(ActionKind.REFUSE, f"not at rest: {', '.join(missing)} missing or not Ready before its restart")
    learners = [m.name for m in members if m.is_learner]
    if learners:
        return Action(ActionKind.REFUSE, f"not at rest: learner(s) {', '.join(learners)}")
    if len(members) != expected_voters:
        return Action(ActionKind.REFUSE, f"not at rest: {len(members)} members, expected {expected_voters}")
    unhealthy = [m.name for m in members if not m.healthy]
    if unhealthy:
        if all(m.up_to_date for m in members if m.name in unhealthy):
            return Action(ActionKind.WAIT, f"waiting for {', '.join(unhealthy)} to recover")
        return Action(ActionKind.REFUSE, f"not at rest: {', '.join(unhealthy)} unhealthy")
    leaders = [m for m in members if m.is_leader]
    if len(leaders) != 1:
        return Action(ActionKind.WAIT, "waiting for the members to agree on one leader")
    leader = leaders[0]
    outdated = [m for m in members if not m.up_to_date]
    if not outdated:
        return Action(ActionKind.DONE, "every member runs the update revision")
    if not move_leader:
        victim = min(outdated, key=_ordinal)
        role = "leader" if victim.is_leader else "follower"
        return Action(ActionKind.RESTART, f"{role} {victim.name} is out of date (ordinal order, no MoveLeader: "
                      "benchmark baseline)", pod=victim.name, follower=not victim.is_leader)
    followers = sorted((m for m in outdated if not m.is_leader), key=lambda m: (m.applied_index, m.name))
    if followers:
        return Action(ActionKind.RESTART, f"follower {followers[0].name} is out of date", pod=followers[0].name,
                      follower=True)
    # Only the leader is left.
    if len(members) == 1:
        return Action(ActionKind.RESTART, f"single member {leader.name}: restart in place (downtime)", pod=leader.name)
    candidates = sorted(
        (m for m in members if not m.is_leader and m.answering),
        key=lambda m: (not m.up_to_date, -m.applied_index, m.name),
    )
    if not candidates:
        return Action(ActionKind.WAIT, "no follower can take leadership yet")
    target = candidates[0]
    return Action(
        ActionKind.MOVE_LEADER,
        f"leader {leader.name} is the last out-of-date member; moving leadership to {target.name}",
        pod=leader.name,
        target_pod=target.name,
        target_id=target.member_id,
    )
