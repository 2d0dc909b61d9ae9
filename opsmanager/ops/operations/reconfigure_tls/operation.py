"""``ReconfigureTLS`` as the engine sees it: its plans (:mod:`.plans`), the rotate variant it observes once when
it starts (:mod:`.observe`), its write-back, and the queue's rescue rule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opsmanager.api import constants
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base
from opsmanager.ops.operations.reconfigure_tls import observe, plans
from opsmanager.tls import trust


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """``spec.tls`` the desired TLS (removed after a removal), then what is no longer used: after a removal the
    certificates this operator created (never a foreign one), after an issuer change or a handover the CA probe
    Certificates."""
    desired = ctx.plan.desired_tls
    live = await ctx.kube.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace, ctx.db_name)
    current = ((live or {}).get("spec") or {}).get("tls")
    want = desired.to_dict() if desired is not None else None
    if current != want:
        patch = ([{"op": "add", "path": "/spec/tls", "value": want}] if want is not None
                 else [{"op": "remove", "path": "/spec/tls"}])
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, patch, patch_type="json")
    if ctx.plan.change is plans.TLSChange.REMOVE:
        # The TLS the cluster had: the plan's steps still carry it (spec.tls on the Etcd is gone by now).
        tls_before = next((tls for s in ctx.plan.steps if (tls := getattr(s, "tls", None)) is not None), None)
        if tls_before is not None:
            await trust.delete_certificates(ctx, tls_before)
    if ctx.plan.change in (plans.TLSChange.ISSUER, plans.TLSChange.HANDOVER):
        await trust.delete_probes(ctx, desired)
    return context.Done()


def rescues(spec: Mapping[str, Any]) -> bool:
    """A rotate or an issuer change brings an expired cluster back: it may start on an Etcd that is not Ready only
    because its certificates expired."""
    tls = spec.get("tls") or {}
    return bool(tls.get("rotateCertificates") or tls.get("issuerRef")) and not tls.get("remove")


OPERATION = base.Operation(constants.OPS_TYPE_RECONFIGURE_TLS, plans.plan_tls,
                           "Successfully reconfigured the etcd TLS configuration", write_back=write_back,
                           observe=observe.variant, rescues=rescues,
                           rescue_reason=observe.expired)
