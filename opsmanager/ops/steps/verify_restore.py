"""``RestoreVerified``: the restored members hold exactly the snapshot's keys.

HashKV at the snapshot's revision — a hash of every key and value, and their history, up to that revision — on
every member, compared with each other and with the HashKV the backup recorded on the member it was taken from.
A restore keeps revisions as they were (no bump), so the two are the same store when they agree. When the backup
could not record one (compacted meanwhile), the members must still agree, and the message says so.

Failure prevented: a "successful" restore whose data is not the snapshot's (a member that kept other data, a
snapshot of another cluster, a restore that bumped revisions).
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_RESTORE_VERIFIED,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.VerifyRestore), step  # the engine runs a step with the module its kind names
    record = ctx.snapshot
    revision = record.revision
    recorded = record.hash_kv
    async with await ctx.etcd() as client:
        hashes = {}
        for ep in client.endpoints:
            try:
                hashes[ep.name] = (await client.hash_kv(ep.name, revision=revision, timeout=30.0)).hash
            except etcd_errors.Compacted:
                return context.Fail(f"revision {revision} of the snapshot is compacted on {ep.name}: the restored "
                                    "store is not the snapshot's (or a compaction ran since); compare the keys by "
                                    "hand", reason="Compacted")
    shown = ", ".join(f"{n}={h:08x}" for n, h in sorted(hashes.items()))
    if len(set(hashes.values())) != 1:
        return context.Fail(f"the members disagree at revision {revision}: {shown}", reason="HashMismatch")
    value = next(iter(hashes.values()))
    if recorded is not None and int(recorded) != value:
        return context.Fail(f"HashKV at revision {revision} is {value:08x} on every member, the backup recorded "
                            f"{int(recorded):08x}: the restored store is not the snapshot's", reason="HashMismatch")
    against = "as the backup recorded" if recorded is not None else "(the backup recorded none: members compared)"
    return context.Done(f"HashKV at revision {revision} is {value:08x} on every member, {against}")
