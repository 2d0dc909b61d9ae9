"""``UpdateDatabase``: write back to the Etcd what the request achieved, as its type says, then clean up what is
no longer used.

Each type's module holds its write-back (the new TLS into ``spec.tls`` and the certificates it no longer uses, a
version into ``spec.version``, flags, resources, the auth Secret, a restore's record, every replica after a quorum
recovery); this step knows no type and runs the one the registry holds for the plan's request type
(:mod:`opsmanager.ops.operations`). Last, so during the roll the Etcd still showed the old state. Failure
prevented: an Etcd whose spec claims a state its members are not in.
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.ops import context, operations, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_UPDATE_DATABASE,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    write_back = operations.of(ctx.plan.request_type).write_back
    if write_back is None:  # a type with nothing to write back
        return context.Done()
    return await write_back(ctx, step)
