"""The intermediate passes of the TLS plans, one step each.

``TLSListenersAdded`` and ``PlaintextListenersAdded``
(add/remove TLS: every member listens on both schemes before any peer URL changes scheme),
``TrustBundleWidened`` and ``TrustBundleNarrowed`` (issuer change: trust old+new CA before the switch, the new CA
only after it; and the same two for a CA rollover, :class:`~opsmanager.ops.plan.Trust` ``CURRENT_AND_RENEWED`` /
``IN_USE``, releasing on every reconcile the sources every member can already trust).

A pass is: the trust bundle the pass needs (:func:`trust_for`), the StatefulSet for
the pass's wiring, then the rolling restart (both :mod:`~opsmanager.ops.restart`) — in that order on every reconcile, each part a no-op once done, so the pass
is one condition. Failure prevented: members restarted onto listeners or a CA their peers cannot talk to (a
3-member cluster broken for good at the third member, or 3–8 s write stalls — measured). A handover pass
(``step.handover_from``) is skipped when the issuer's CA is the user's CA: nothing to widen or narrow.
"""

from __future__ import annotations

from opsmanager import pki
from opsmanager.api import constants
from opsmanager.cluster import render
from opsmanager.ops import context, plan, restart
from opsmanager.tls import trust

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_TLS_LISTENERS_ADDED, constants.COND_PLAINTEXT_LISTENERS_ADDED, constants.COND_TRUST_BUNDLE_WIDENED, constants.COND_TRUST_BUNDLE_NARROWED)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.RollPass), step  # the engine runs a step with the module its kind names
    if step.handover_from is not None:
        # Handover: fail closed on a foreign Certificate before any member restarts; no pass at all
        # when the issuer's CA is the user's CA.
        assert step.tls is not None
        if problem := await trust.check_ownership(ctx, render.render_certificates(ctx.db, step.tls), step.tls):
            return context.Fail(problem, reason="ForeignObject")
        same = await trust.handover_same_ca(ctx, step.tls, step.handover_from)
        if not isinstance(same, bool):
            return context.from_tls(same)
        if same:
            return context.Done()
    bundle = await trust_for(ctx, step)
    if isinstance(bundle, trust.Waiting | trust.Refused):
        return context.from_tls(bundle)
    if bundle is not None:
        await trust.write_bundle(ctx, bundle)
    if step.release_loaded and (wait := await trust.entry_settling(ctx)) > 0:
        # CA rollover: a member must start strictly after the second its new CA entered the bundle to count as
        # having loaded it (the loaded rule works in whole seconds); restarting it within that second would hold
        # the renewed leaves back for the rest of the run.
        return context.Progress("waiting for the second the trust bundle changed to pass", delay=wait)
    if step.release_loaded and step.tls is not None:
        # CA rollover: leaves cert-manager renews meanwhile still reach the members, each once its CA is loaded.
        await trust.release_loaded(ctx, step.tls)
    applied = await restart.apply_template(ctx, step)
    if not isinstance(applied, context.Done):
        return applied
    return await restart.rolling(ctx, step)


async def trust_for(ctx: context.OpsContext, step: plan.RollPass) -> bytes | trust.Waiting | trust.Refused | None:
    """The trust bundle a pass needs (None: keep it as it is)."""
    if step.trust is plan.Trust.KEEP:
        return None
    assert step.tls is not None
    if step.trust is plan.Trust.CURRENT_AND_RENEWED:
        return await trust.renewed_bundle(ctx, step.tls)
    if step.trust is plan.Trust.IN_USE:
        return await trust.in_use_bundle(ctx, step.tls)
    if step.trust is plan.Trust.CURRENT_AND_DESIRED:
        new = await trust.probe_cas(ctx, step.tls)
        if not isinstance(new, bytes):
            return new
        return pki.bundle(await trust.current_bundle(ctx), new)
    return await trust.desired_cas(ctx, step.tls)
