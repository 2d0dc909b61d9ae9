"""One module per step of the EtcdOpsRequest state machine, each owning the condition(s) it names in ``CONDITIONS``.

Every step module exposes ``async def run(ctx, step) -> context.StepResult``; the engine's step table
(:data:`opsmanager.ops.engine.STEPS`) maps each :class:`opsmanager.ops.plan.StepKind` to one of them. A step module
never imports another (an import contract): what steps share lives beside them in :mod:`opsmanager.ops` (the
restart machinery in :mod:`~opsmanager.ops.restart`) and in :mod:`opsmanager.tls`. The table of steps in
``docs/operations.md`` is generated from this code (:mod:`opsmanager.ops.steptable`).
"""
