"""``EtcdDefragmented``: defragment every member's backend, one at a time — followers first, the leader last after
moving leadership off it — with a health gate before each.

A defragmentation rewrites the member's database file and gives back the space compaction freed; the member answers
nothing meanwhile (seconds per gigabyte). Failures prevented: every member frozen at once (all defragmented
together, the cluster stops taking writes), a write stall from defragmenting the leader (leadership moves first,
as before a restart), and a defragmentation that starts while the cluster is degraded (each one waits until every
voter answers and the cluster has a leader). ``Defragment--<pod>`` is set per member; each member's size before
and after is recorded in ``status.databaseSizes`` — before first, so a crash mid-defragmentation keeps the "before".
A repeated defragmentation after a crash only costs time.
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import members
from opsmanager.etcd import client as etcd_client
from opsmanager.ops import context, plan, restart, rollout

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_ETCD_DEFRAGMENTED,)

T = constants.TRUE


def _mb(size: int | None) -> str:
    return "?" if size is None else f"{size / 1e6:.1f} MB"


def summary(sizes: dict[str, ops_api.DatabaseSize]) -> str:
    return ", ".join(f"{name} {_mb(s.before_bytes)} → {_mb(s.after_bytes)}" for name, s in sorted(sizes.items()))


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.Defragment), step  # the engine runs a step with the module its kind names
    names = ctx.pod_names()
    pending = [n for n in names if not ctx.is_true(constants.per_pod_type(constants.STEP_DEFRAGMENT, n))]
    sizes = dict(ctx.records.database_sizes or {})
    if not pending:
        return context.Done(f"{step.message}: {summary(sizes)}")
    async with await ctx.etcd() as client:
        statuses = await members.answering(client)
        if (why := members.not_answering(names, statuses)) is not None:
            return context.Progress(f"waiting for a healthy cluster before the next defragmentation ({why})",
                                    delay=0.5)
        # followers first (by name), the leader last
        name = sorted(pending, key=lambda n: (statuses[n].is_leader, n))[0]
        if statuses[name].is_leader:
            others = sorted((v for n, v in statuses.items() if n != name and not v.is_learner),
                            key=lambda v: (-v.raft_applied_index, v.endpoint.name))
            if others:
                move = rollout.Action(rollout.ActionKind.MOVE_LEADER, "defragment the leader last", pod=name,
                                      target_pod=others[0].endpoint.name, target_id=others[0].member_id)
                return await restart.move_leader(ctx, client, move, before="defragmenting it")
        if name not in sizes:
            sizes[name] = ops_api.DatabaseSize(before_bytes=statuses[name].db_size,
                                               before_in_use_bytes=statuses[name].db_size_in_use)
            ctx.record(database_sizes=sizes)
            await ctx.flush()  # the size before is on record before the file is rewritten
        await client.defragment(name, timeout=120.0)
        after = (await client.statuses(timeout=1.5)).get(name)
    sizes[name] = sizes[name].model_copy(
        update={"after_bytes": after.db_size if isinstance(after, etcd_client.MemberStatus) else None})
    ctx.record(database_sizes=sizes)
    ctx.set_pod_condition(constants.STEP_DEFRAGMENT, name, T)
    return context.Progress(f"defragmented {name}: {summary({name: sizes[name]})}", delay=0.0)
