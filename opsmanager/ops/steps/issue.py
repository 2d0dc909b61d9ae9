"""``IssueCertificatesSucceeded`` (rotate): ask cert-manager to re-issue every Certificate, once per request.

Sets ``Issuing=True`` on each Certificate (what ``cmctl renew`` does) and waits until each has a higher
``status.revision`` than before. The baseline revision is recorded in the request's own status
(``status.certificateRevisions``, written before the trigger), so an operator restarted mid-step neither re-triggers
the issuance nor mistakes the old certificate for the new one; a recorded Certificate still at its baseline and not
``Issuing`` (the operator died between the record and the trigger) is triggered again. Failure prevented: a
"rotation" that rolls the members onto the certificate they already serve.
"""

from __future__ import annotations

from typing import Any

from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.cluster import render
from opsmanager.ops import context, plan
from opsmanager.tls import trust

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_ISSUE_CERTIFICATES_SUCCEEDED,)

# Where older operators kept the baseline: "<request uid>/<baseline revision>" on the Certificate. Read, never
# written; the reader can go once no Certificate carries it.
ANNOTATION_ROTATION = "ops.opsmanager.dev/rotation"


def _revision(cert: dict[str, Any]) -> int:
    return int((cert.get("status") or {}).get("revision") or 0)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.Issue), step  # the engine runs a step with the module its kind names
    assert step.tls is not None
    waiting, ask = [], {}
    for desired in render.render_certificates(ctx.db, step.tls):
        name = desired["metadata"]["name"]
        live = await ctx.kube.get(trust.CERT_API, "Certificate", ctx.namespace, name)
        if live is None:
            return context.Fail(f"Certificate {ctx.namespace}/{name} does not exist; rotateCertificates needs the "
                                "certificates the Etcd was set up with", reason="CertificateMissing")
        baseline = _baseline(ctx, live)
        if baseline is None:
            ask[name] = _revision(live)
            waiting.append(f"{name} re-issue requested")
            continue
        if _revision(live) <= baseline:
            if (failed := _failed_since(ctx, step, live)) is not None:
                return context.Fail(f"cert-manager could not issue Certificate {ctx.namespace}/{name}: {failed}; "
                                    "nothing was restarted", reason="IssuanceFailed")
            if not conditions.is_true((live.get("status") or {}).get("conditions"), "Issuing"):
                # Recorded but not (or no longer) issuing: the operator died between the record and the trigger.
                await _trigger_issuing(ctx.kube, ctx.namespace, name)
            waiting.append(f"{name} at revision {_revision(live)}, waiting for > {baseline}{_why_not(live)}")
    if ask:
        ctx.record(certificate_revisions={**(ctx.records.certificate_revisions or {}), **ask})
        await ctx.flush()  # every baseline is durable before cert-manager is asked
        for name in ask:
            await _trigger_issuing(ctx.kube, ctx.namespace, name)
    if waiting:
        return context.Progress("; ".join(waiting), delay=ctx.until_watched(0.5))
    return context.Done()


def _baseline(ctx: context.OpsContext, cert: dict[str, Any]) -> int | None:
    """The Certificate's revision before this request asked for its re-issue, or None when it has not asked yet:
    the request's record, else the annotation an older operator marked the Certificate with for this request."""
    recorded = (ctx.records.certificate_revisions or {}).get(cert["metadata"]["name"])
    if recorded is not None:
        return recorded
    uid = ctx.request["metadata"].get("uid") or ctx.name
    mark = (cert["metadata"].get("annotations") or {}).get(ANNOTATION_ROTATION, "")
    if not mark.startswith(f"{uid}/"):
        return None
    return int(mark.split("/", 1)[1] or 0)


def _failed_since(ctx: context.OpsContext, step: plan.Issue, cert: dict[str, Any]) -> str | None:
    """cert-manager's ``Issuing=False`` (a failed issuance; it then backs off for an hour: waiting is pointless), when it came
    after this step started (an older failure was overwritten by our ``Issuing=True``); None otherwise."""
    conds = (cert.get("status") or {}).get("conditions") or []
    issuing = conditions.get_condition(conds, "Issuing")
    if issuing is None or issuing.get("status") != constants.FALSE:
        return None
    started = (ctx.condition(step.condition) or {}).get("lastTransitionTime")
    when = issuing.get("lastTransitionTime")
    if not started or not when or conditions.parse_rfc3339(when) < conditions.parse_rfc3339(started):
        return None
    return f"{issuing.get('reason')}: {issuing.get('message') or 'issuance failed'}"


def _why_not(cert: dict[str, Any]) -> str:
    """cert-manager's word on why a Certificate is not Ready (the issuer missing, not ready...), for the step's
    message — and so for the timeout's ``Failed`` message."""
    ready = conditions.get_condition((cert.get("status") or {}).get("conditions") or [], "Ready")
    if ready is None or ready.get("status") == constants.TRUE:
        return ""
    return f" (Ready=False: {ready.get('reason')}: {ready.get('message')})"


async def _trigger_issuing(client: kube.Kube, namespace: str, name: str) -> None:
    def mutate(st: dict[str, Any]) -> dict[str, Any]:
        st = dict(st)
        st["conditions"] = conditions.set_condition(
            st.get("conditions"), "Issuing", constants.TRUE, reason="ManuallyTriggered",
            message="Certificate re-issuance manually triggered")
        return st

    await client.transact_status(trust.CERT_API, "Certificate", namespace, name, mutate)
