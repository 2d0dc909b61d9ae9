"""``UpdateDatabase``: write the request's TLS into the Etcd's ``spec.tls`` (an UpdateVersion: its target into
``spec.version``; a Reconfigure: the flags into ``spec.configuration.tuning``; a VerticalScaling: the resources into
``spec.podTemplate.spec.resources``; a RotateAuth: the staged password into ``password`` and the Secret into
``spec.authSecret``), then clean up what is unused.

Last, so during the roll the Etcd still showed the old state. Failure prevented: an Etcd whose spec claims a
state its members are not in. After a removal it deletes the certificates this operator created (never a
foreign one); after an issuer change, the CA probe Certificates.
"""

from __future__ import annotations

import datetime
from typing import Any

from opsmanager.api import auth, common, conditions, constants
from opsmanager.cluster import credentials, naming, render
from opsmanager.ops import context, plan
from opsmanager.provisioner import applying
from opsmanager.tls import trust

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_UPDATE_DATABASE,)


async def _auth(ctx: context.OpsContext, staging: str, final: str) -> None:
    """RotateAuth: the staged password becomes ``password`` (the old one ``password.prev``, dated for the
    provisioner to drop once a pod's copy of the Secret can no longer be the old one), then
    ``spec.authSecret`` names ``final`` and ``status.authEnabled`` is true. Each write is skipped once done, so a
    crash in between resumes."""
    data = await credentials.read(ctx.kube, ctx.namespace, staging)
    if data is not None and data.get(auth.KEY_NEXT):
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
    if ctx.db.spec.auth_secret is None or ctx.db.spec.auth_secret.name != final:
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"spec": {"authSecret": {"name": final}}})

    def enabled(st: dict[str, Any]) -> dict[str, Any]:
        return {**st, "authEnabled": True}

    await ctx.kube.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace, ctx.db_name,
                                   enabled)


async def _restored(ctx: context.OpsContext) -> None:
    """Restore: the plan is removed (a member's init container then does nothing) and the Etcd records the
    snapshot it was restored from."""
    await ctx.kube.delete("v1", "ConfigMap", ctx.namespace, naming.restore_plan(ctx.db_name))
    record = ctx.recorded("snapshot")

    def restored(st: dict[str, Any]) -> dict[str, Any]:
        backup = {**(st.get("backup") or {}), "lastRestore": {"key": record.get("key"), "revision":
                                                              record.get("revision"), "request": ctx.name,
                                                              "at": conditions.rfc3339(ctx.now)}}
        return {**st, "backup": backup}

    await ctx.kube.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace, ctx.db_name,
                                   restored)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    if ctx.plan.recovers:  # every replica again (the members rejoined have data: nothing restarts)
        sts = await applying.apply_statefulset(ctx.kube, ctx.db, render.Wiring.steady(ctx.db.spec.tls),
                                               restarted_at=f"{ctx.name}/{step.condition}")
        if (sts.get("status") or {}).get("observedGeneration", 0) < sts["metadata"].get("generation", 0):
            return context.Progress("waiting for the StatefulSet controller to observe the template",
                                    delay=ctx.until_watched(0.2))
        return context.Done(step.message)
    if ctx.plan.restores:
        await _restored(ctx)
        return context.Done(step.message)
    if ctx.plan.auth_secrets is not None:
        await _auth(ctx, *ctx.plan.auth_secrets)
        return context.Done(step.message)
    if ctx.plan.desired_resources is not None:
        template = ctx.db.spec.pod_template
        current = template.spec.resources if template is not None and template.spec is not None else None
        if current != ctx.plan.desired_resources:
            change = common.replacing_resources(current.to_dict() if current is not None else None,
                                                ctx.plan.desired_resources.to_dict())
            ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                              ctx.db_name, {"spec": {"podTemplate": {"spec": {"resources": change}}}})
        return context.Done(step.message)
    if ctx.plan.desired_tuning is not None:
        flags = ctx.plan.desired_tuning.to_dict()
        if ctx.db.spec.configuration is None or ctx.db.spec.configuration.tuning != ctx.plan.desired_tuning:
            ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                              ctx.db_name, {"spec": {"configuration": {"tuning": flags}}})
        if ctx.plan.pending_restart:
            ctx.record("warnings", ["restart is false: the members still run with their old flags; each takes the "
                                    "new ones at its next restart (a Restart request applies them to all)"])
        return context.Done(step.message)
    if ctx.plan.desired_version is not None:
        if ctx.db.spec.version != ctx.plan.desired_version:
            ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                              ctx.db_name, {"spec": {"version": ctx.plan.desired_version}})
        version = ctx.plan.desired_version

        def verified(st: dict[str, Any]) -> dict[str, Any]:  # what VersionVerified saw every member report
            return {**st, "version": version}

        await ctx.kube.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace, ctx.db_name,
                                       verified)
        return context.Done(step.message)
    desired = ctx.plan.desired_tls
    if ctx.plan.change is not None:
        live = await ctx.kube.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace, ctx.db_name)
        current = ((live or {}).get("spec") or {}).get("tls")
        want = desired.to_dict() if desired is not None else None
        if current != want:
            patch = ([{"op": "add", "path": "/spec/tls", "value": want}] if want is not None
                     else [{"op": "remove", "path": "/spec/tls"}])
            ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                              ctx.db_name, patch, patch_type="json")
        if ctx.plan.change is plan.TLSChange.REMOVE:
            # The TLS the cluster had: the plan's steps still carry it (spec.tls on the Etcd is gone by now).
            tls_before = next((tls for s in ctx.plan.steps if (tls := getattr(s, "tls", None)) is not None), None)
            if tls_before is not None:
                await trust.delete_certificates(ctx, tls_before)
        if ctx.plan.change in (plan.TLSChange.ISSUER, plan.TLSChange.HANDOVER):
            await trust.delete_probes(ctx, desired)
    return context.Done()

