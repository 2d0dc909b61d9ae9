"""``UpdateCredential``: stage the new root password where clients look before etcd changes it.

The new password is the request's ``authentication.secretRef`` Secret's ``password``, or a random one. It is
written into the auth Secret clients read as ``password.next`` (kept across an operator restart: a generated
password is generated once). A client that fails to log in with ``password`` tries ``password.next``, so from the
moment etcd takes the new password (the next step) every client that re-reads the Secret still gets in.

Failures prevented: a password change clients cannot follow (each would be locked out until someone edits their
Secret); a referenced Secret that vanished or lost its password since admission (refused here, with the webhook's
words, before anything changes).
"""

from __future__ import annotations

from opsmanager.api import auth, constants
from opsmanager.cluster import credentials
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_UPDATE_CREDENTIAL,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.UpdateCredential), step  # the engine runs a step with the module its kind names
    staged = await credentials.read(ctx.kube, ctx.namespace, step.staging_secret)
    if step.source_secret is not None:
        new, problem = await credentials.source_password(ctx.kube, ctx.namespace, step.source_secret)
        if problem is not None or new is None:
            reason, message = problem or ("NoPassword", "no password")
            return context.Fail(message, reason=reason)
        if step.source_secret == step.staging_secret:  # authentication was off: that Secret is the one to use
            return context.Done(f"The new root password is in Secret {step.source_secret}")
    else:
        new = (staged or {}).get(auth.KEY_NEXT) or credentials.new_password()
    if staged is None:
        await ctx.kube.create(credentials.secret_manifest(ctx.db, step.staging_secret, {auth.KEY_NEXT: new}))
    elif staged.get(auth.KEY_NEXT) != new:
        await ctx.kube.patch("v1", "Secret", ctx.namespace, step.staging_secret,
                             {"data": auth.encode({auth.KEY_NEXT: new})})
    return context.Done(f"The new root password is staged in Secret {step.staging_secret} as "
                        f"{auth.KEY_NEXT}")
