"""``EtcdLeaderMoved``: the standalone ``MoveLeader`` request — hand leadership to a chosen (or the most
caught-up) voter.

MoveLeader is sent to the current leader — a follower answers ``not leader`` — under a deadline, and the step
ends only when every member reports the new leader (the etcd admin does both). No pause: nothing is restarted.
Failures prevented: leadership handed to a name that is not a member (refused up front, naming the members), or
to a learner or lagging member (the most caught-up voter is chosen when none is named).
"""

from __future__ import annotations

from opsmanager import metrics
from opsmanager.api import constants
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_ETCD_LEADER_MOVED,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    wanted = ctx.spec.move_leader.new_leader if ctx.spec.move_leader is not None else None
    if wanted is not None and wanted not in ctx.pod_names():
        return context.Fail(f"spec.moveLeader.newLeader {wanted!r} is not a member of Etcd {ctx.db_name}; use one "
                            f"of {', '.join(ctx.pod_names())}", reason="UnknownMember")
    async with await ctx.etcd() as client:
        views = await client.statuses(timeout=1.5)
        statuses = {k: v for k, v in views.items() if isinstance(v, etcd_client.MemberStatus)}
        leader = next((s for s in statuses.values() if s.is_leader), None)
        if leader is None:
            return context.Progress("no member reports itself leader yet", delay=0.5)
        if wanted is None:
            followers = sorted((s for s in statuses.values() if not s.is_leader and not s.is_learner),
                               key=lambda s: (-s.raft_applied_index, s.endpoint.name))
            if not followers:
                return context.Fail("no voting follower to move leadership to", reason="NoFollower")
            target = followers[0]
        else:
            if wanted not in statuses:
                return context.Progress(f"{wanted} does not answer Status yet", delay=0.5)
            target = statuses[wanted]
        if target.member_id == leader.member_id:
            return context.Done(f"{target.endpoint.name} is already the leader")
        try:
            move = await client.move_leader(target.member_id, timeout=5.0)
        except etcd_errors.EtcdError as err:
            return context.Progress(f"MoveLeader to {target.endpoint.name}: {err}", delay=0.5)
    metrics.leader_moved()  # its Event is the step's transition (EtcdLeaderMoved), whose message says it
    return context.Done(f"Moved leadership from {leader.endpoint.name} to {target.endpoint.name} in "
                        f"{move.rpc_seconds:.3f}s")
