"""``EtcdCompacted``: compact etcd's key-value history below ``spec.compact.revision`` (absent: the current
revision), physically — the answer comes once the backend applied it, so a defragmentation after it gives the space
back.

No pause (as in KubeDB): a compaction goes through consensus and disrupts nothing. Failures prevented: a revision
beyond the current one (refused with both numbers, before anything is sent); a compaction re-sent after an operator
crash, or a revision another compaction already passed (etcd answers "compacted": done, nothing lost).
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_ETCD_COMPACTED,)


def _in_use(views: dict[str, etcd_client.MemberStatus | etcd_errors.EtcdError]) -> str:
    return ", ".join(f"{name} {v.db_size_in_use / 1e6:.1f} MB in use of {v.db_size / 1e6:.1f} MB"
                     for name, v in sorted(views.items()) if isinstance(v, etcd_client.MemberStatus))


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.Compact), step  # the engine runs a step with the module its kind names
    async with await ctx.etcd() as client:
        views = await client.statuses(timeout=1.5)
        revisions = [v.revision for v in views.values() if isinstance(v, etcd_client.MemberStatus)]
        if not revisions:
            return context.Progress("no member answers Status yet", delay=0.5)
        current = max(revisions)
        target = step.revision or current
        if target > current:
            return context.Fail(f"spec.compact.revision {target} is beyond the current revision {current}; use a "
                                f"revision of at most {current}, or none for the current one",
                                reason="FutureRevision")
        before = _in_use(views)
        try:
            await client.compact(target, physical=True, timeout=30.0)
        except etcd_errors.Compacted:
            return context.Done(f"The history below revision {target} was compacted already; {before}")
        after = _in_use(await client.statuses(timeout=1.5))
    return context.Done(f"Compacted the history below revision {target}; before: {before}; after: {after}")
