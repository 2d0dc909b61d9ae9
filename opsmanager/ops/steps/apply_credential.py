"""``EtcdCredentialApplied``: etcd takes the new root password, live, and a fresh login proves it.

On a cluster with authentication: ``UserChangePassword`` (etcd invalidates the tokens of ``root``; clients log in
again with the staged password). On one without: the ``root`` user is created (or its password set), given the
``root`` role, and authentication is turned on. No member restarts: etcd keeps its users in its data, replicated
like any write. Then a login with the new password must succeed, and one with the old password must fail.

Failures prevented: a rotation that "succeeded" while etcd still takes the old password (a leaked password stays
valid); a half-done enable (root user without the root role: ``AuthEnable`` refuses it, and nothing is locked out);
a step re-run after an operator crash changing the password twice (a login with the new password first says it
is done).
"""

from __future__ import annotations

from opsmanager.api import auth, constants
from opsmanager.cluster import credentials
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_ETCD_CREDENTIAL_APPLIED,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.ApplyCredential), step  # the engine runs a step with the module its kind names
    staged = await credentials.read(ctx.kube, ctx.namespace, step.staging_secret) or {}
    if step.source_secret is not None:
        new, problem = await credentials.source_password(ctx.kube, ctx.namespace, step.source_secret)
        if problem is not None or new is None:
            reason, message = problem or ("NoPassword", "no password")
            return context.Fail(message, reason=reason)
    else:
        new = staged.get(auth.KEY_NEXT) or ""
        if not new:
            return context.Fail(f"Secret {ctx.namespace}/{step.staging_secret} has no {auth.KEY_NEXT} "
                                "(UpdateCredential staged it): it was edited meanwhile; file a new RotateAuth",
                                reason="StagedPasswordLost")
    old = staged.get(auth.KEY_PASSWORD) or ""
    user = auth.USERNAME
    async with await ctx.etcd() as client:
        if not await client.auth_status():
            try:
                await client.user_add(user, new)
            except etcd_errors.UserExists:
                await client.user_change_password(user, new)
            await client.user_grant_role(user, auth.ROOT_ROLE)
            await client.auth_enable()
            await ctx.etcd_event("AuthenticationEnabled", "etcd authentication is on: clients log in as root")
        elif not await client.check_login(None, user, new):
            await client.user_change_password(user, new)
            await ctx.etcd_event("RootPasswordChanged", "etcd's root password was changed (RotateAuth)")
        if not await client.check_login(None, user, new):
            return context.Progress("a fresh login with the new root password does not succeed yet", delay=1.0)
        if old and old != new and await client.check_login(None, user, old):
            return context.Fail("the old root password still logs in after the change; the cluster's users are "
                                "not what this request set: check for another writer of the root password",
                                reason="OldPasswordAccepted")
    return context.Done(step.message)
