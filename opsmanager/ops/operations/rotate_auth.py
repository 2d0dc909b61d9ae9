"""``RotateAuth``: a new root password, live — or, on a cluster without authentication, the root user created and
authentication turned on. No member restarts: etcd keeps users in its data.

Where the password is staged is fixed by the auth Secret the Etcd used when the request started
(``status.origin.authSecret``): the write-back points ``spec.authSecret`` elsewhere near the end.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping
from typing import Any

from opsmanager.api import auth, constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import credentials, etcdstatus, naming
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuthPlan(plan.Plan):
    # (the Secret the new password is staged in, the Secret spec.authSecret names from now on)
    auth_secrets: tuple[str, str]

    @property
    def credential_secrets(self) -> tuple[str, ...]:
        return self.auth_secrets


def plan_rotate(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """Staged as ``password.next`` in the auth Secret clients read (the Etcd's, else the one the request names,
    else ``<etcd>-auth``), applied with UserChangePassword and verified by a fresh login; then the Secret holds it
    as ``password`` and ``spec.authSecret`` names the Secret the request named."""
    origin = request.status.origin if request.status is not None else None
    recorded = origin.auth_secret if origin is not None and origin.observed_at else None
    current = recorded if origin is not None and origin.observed_at else (
        db.spec.auth_secret.name if db.spec.auth_secret is not None else None)
    ref = request.spec.authentication.secret_ref if request.spec.authentication is not None else None
    source = ref.name if ref is not None else None
    rules.enforce(rules.rotate_auth(request.spec.authentication))
    staging = current or source or naming.auth_secret(db.metadata.name or "")
    final = source or staging
    turning_on = current is None
    steps = (
        plan.running("Etcd ops request is turning authentication on" if turning_on
                     else "Etcd ops request is rotating the root password"),
        plan.UpdateCredential(constants.COND_UPDATE_CREDENTIAL,
                              f"The new root password is staged in Secret {staging}",
                              staging_secret=staging, source_secret=source),
        plan.ApplyCredential(constants.COND_ETCD_CREDENTIAL_APPLIED,
                             "etcd authentication is on with the new root password, verified by a fresh login"
                             if turning_on else "etcd has the new root password, verified by a fresh login; the "
                                                "old one is refused",
                             staging_secret=staging, source_secret=source),
        plan.update_database(f"Successfully rotated the root password; spec.authSecret is {final}"),
    )
    return AuthPlan(request.spec.type, None, db.spec.tls, steps, auth_secrets=(staging, final))


async def _move_password(ctx: context.OpsContext, staging: str, final: str) -> None:
    """The staged password becomes ``password`` (the old one ``password.prev``, dated for the provisioner to drop
    once a pod's copy of the Secret can no longer be the old one). Skipped once done."""
    data = await credentials.read(ctx.kube, ctx.namespace, staging)
    if data is None or not data.get(auth.KEY_NEXT):
        return
    moved: dict[str, str | None] = {**auth.encode({auth.KEY_USERNAME: auth.USERNAME,
                                                   auth.KEY_PASSWORD: data[auth.KEY_NEXT]}), auth.KEY_NEXT: None}
    patch: dict[str, Any] = {"data": moved}
    # The old password is kept beside the new one only in the Secret clients go on reading (and the provisioner
    # dates it and drops it there); a Secret the Etcd stops naming gets the new password alone.
    if data.get(auth.KEY_PASSWORD) and staging == final:
        moved[auth.KEY_PREV] = auth.encode({auth.KEY_PREV: data[auth.KEY_PASSWORD]})[auth.KEY_PREV]
        # Kept while a pod's copy of the Secret may still be the old one; the provisioner drops it after.
        until = ctx.now + datetime.timedelta(seconds=ctx.delivery_timeout)
        patch["metadata"] = auth.previous_kept_until(until)
    await ctx.kube.patch("v1", "Secret", ctx.namespace, staging, patch)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """The password moved, then ``spec.authSecret`` names the final Secret and ``status.authEnabled`` is true.
    Each write is skipped once done, so a crash in between resumes."""
    assert isinstance(ctx.plan, AuthPlan)
    staging, final = ctx.plan.auth_secrets
    await _move_password(ctx, staging, final)
    if ctx.db.spec.auth_secret is None or ctx.db.spec.auth_secret.name != final:
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"spec": {"authSecret": {"name": final}}})
    await etcdstatus.write(ctx.kube, ctx.namespace, ctx.db_name, auth.AuthEnabled())
    return context.Done(step.message)


def _origin(spec: Mapping[str, Any]) -> ops_api.RequestOrigin:
    # Where the new password is staged, fixed before the write-back moves it.
    return base.origin_field("authSecret", (spec.get("authSecret") or {}).get("name"), str)


OPERATION = base.Operation(constants.OPS_TYPE_ROTATE_AUTH, plan_rotate, "Successfully rotated the etcd root password",
                           write_back=write_back, origin=_origin)
