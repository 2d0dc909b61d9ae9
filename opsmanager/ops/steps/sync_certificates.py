"""``CertificateSynced``: apply the desired cert-manager Certificates and wait until every Secret is complete.

Failures prevented:

- **a member pointed at half-written material** — cert-manager creates a Secret before it finishes issuing into
  it, and etcd exits on a missing file or rejects every handshake when key and cert do not match (measured). The
  step ends only when every Secret holds ``tls.crt``, ``tls.key``, ``ca.crt``, parseable, key matching, issued by
  the issuer the request asks for.
- **adopting someone else's objects** — a Certificate or Secret controlled by another owner is never taken over:
  the step fails closed naming the object and the way out (cozystack's rule), before anything is applied.

For a fresh TLS set-up (``Trust.DESIRED``, add TLS) it then writes the trust bundle from the new CAs.
"""

from __future__ import annotations

from opsmanager.ops import certificates, context, plan
from opsmanager.provisioner import render


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert step.tls is not None
    certs = render.render_certificates(ctx.db, step.tls)
    if problem := await certificates.check_ownership(ctx, certs):
        return context.Fail(problem, reason="ForeignObject")
    for cert in certs:
        await ctx.kube.apply(cert)
    waiting = [p for cert in certs if (p := await certificates.material_problem(ctx, cert))]
    if waiting:
        return context.Progress(f"waiting for certificates: {'; '.join(waiting)}", delay=0.5)
    if step.trust is plan.Trust.DESIRED:
        await certificates.write_bundle(ctx, await certificates.desired_cas(ctx, step.tls))
    return context.Done()
