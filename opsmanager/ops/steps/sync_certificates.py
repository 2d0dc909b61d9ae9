"""``CertificateSynced``: apply the desired cert-manager Certificates and wait until every Secret is complete.

Failures prevented:

- **a member pointed at half-written material** — cert-manager creates a Secret before it finishes issuing into
  it, and etcd exits on a missing file or rejects every handshake when key and cert do not match (measured). The
  step ends only when every Secret holds ``tls.crt``, ``tls.key``, ``ca.crt``, parseable, key matching, issued by
  the issuer the request asks for.
- **adopting someone else's objects** — a Certificate or Secret controlled by another owner is never taken over:
  the step fails closed naming the object and the way out (cozystack's rule), before anything is applied.

Then it releases every source (what the Certificate wrote) into the Secret members and clients mount, through
the material gate (:mod:`opsmanager.tls.release`), with the CAs the phase allows: for a fresh TLS set-up
(``Trust.DESIRED``, add TLS) any CA — no member serves TLS yet — and the trust bundle is then written from the
released CAs, before the pass that turns TLS on; otherwise (rotate, certificate update, issuer change after the
widen pass) the CAs of the current trust bundle, which every member has restarted onto; for a CA rollover the CAs
every member has loaded (:func:`opsmanager.tls.release.loaded`) — after the widen pass, old and new.
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.cluster import render
from opsmanager.ops import context, plan
from opsmanager.tls import release, trust

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_CERTIFICATE_SYNCED,)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.SyncCertificates), step  # the engine runs a step with the module its kind names
    assert step.tls is not None
    certs = render.render_certificates(ctx.db, step.tls)
    if problem := await trust.check_ownership(ctx, certs, step.tls):
        return context.Fail(problem, reason="ForeignObject")
    for cert in certs:
        await ctx.kube.apply(cert)
    waiting = [p for cert in certs if (p := await trust.material_problem(ctx, cert))]
    if waiting:
        return context.Progress(f"waiting for certificates: {'; '.join(waiting)}", delay=ctx.until_watched(0.5))
    fresh = step.trust is plan.Trust.DESIRED
    if step.release_loaded:  # CA rollover: the CAs every member has loaded (the gate's rule), not the bundle
        allowed: bytes | None = await release.loaded(ctx.kube, ctx.db)
    else:
        allowed = None if fresh else await trust.current_bundle(ctx)
    if held := await trust.release_all(ctx, step.tls, allowed):
        return context.Progress(f"waiting for certificates that pass the gate: {held}", delay=0.5)
    if fresh:
        await trust.write_bundle(ctx, await trust.desired_cas(ctx, step.tls))
    return context.Done()
