"""``ServedCertificatesVerified`` (rotate, unchanged CA): every member serves its re-issued leaf — no restart.

etcd re-reads its leaf certificate and key on every new TLS handshake (it loads CA files only at start; measured
on etcd 3.5.1), and the kubelet swaps a changed Secret into a running pod atomically (``..data``). So after
``CertificateSynced`` nothing needs restarting: this step waits until a **fresh handshake** with each member, on
the client port (the ``server`` alias Secret's leaf) and on the https peer port (the ``peer`` alias's), shows the
serial now in the Secret, and sets ``VerifyServedCertificate--<pod>`` True per member.

The kubelet delivers a changed Secret after a delay (its sync period plus its cache TTL: about a minute on a
default kubelet). A member still serving the previous leaf ``delivery_timeout`` seconds after ``CertificateSynced``
became True (``opsmanager run --certificate-delivery-timeout``, default 120 s; the clock is that condition's
``lastTransitionTime``, so it survives an operator restart) is **restarted alone** with the rolling restart's
machinery (:mod:`~opsmanager.ops.restart`): only when the cluster is at rest, followers before the leader,
MoveLeader off a stale leader first, through the Eviction API, then ``CheckPodReady--`` (a new pod UID, Ready),
``EtcdClusterHealthy--`` and ``VerifyServedCertificate--``. Only then does ``RestartPods`` appear, saying how many
members needed a restart and why.

Failures prevented: a rotation that restarts every member for nothing (an election-free roll still costs each
member a restart and a catch-up; a naive one stalls writes and causes elections — ``docs/benchmarks.md``); a
"rotation" declared done while a member still hands out the old certificate (a kubelet that never delivered, a
pod stuck on a stale volume) — it is found by the handshake and fixed by a restart of that member only.

Crash safety: the conditions are the state. Before an eviction the member's pod UID is recorded in the request's
``status.restarts.staleMembers``, written with ``EvictPod--<pod>`` False in the one status write
``restart.restart`` makes before it evicts, so a member evicted just before the operator died is
recognised by its new UID and never restarted twice.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from opsmanager.api import conditions, constants
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import members
from opsmanager.etcd import admin
from opsmanager.ops import context, plan, restart, rollout
from opsmanager.tls import serials

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_SERVED_CERTIFICATES_VERIFIED,)

T, F = constants.TRUE, constants.FALSE


def _stale_record(ctx: context.OpsContext) -> dict[str, ops_api.StaleMember]:
    """The members restarted alone (``status.restarts.staleMembers``, by pod; or, on a request an older engine
    started, its annotation)."""
    stale = ctx.restarts.stale_members
    if stale is not None:
        return dict(stale)
    raw = ctx.legacy_annotation(constants.LEGACY_STALE_MEMBERS)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): ops_api.StaleMember(uid=str(v.get("uid")), after_seconds=int(v.get("after", 0)))
            for k, v in value.items() if isinstance(v, dict) and v.get("uid") is not None}


def _remember(ctx: context.OpsContext, name: str, uid: str, after: float) -> None:
    """Record the member about to be restarted; written with ``EvictPod--<pod>`` False, before the eviction."""
    stale = {**_stale_record(ctx), name: ops_api.StaleMember(uid=uid, after_seconds=round(after))}
    ctx.record(restarts=ctx.restarts.model_copy(update={"stale_members": stale}))


def _since_synced(ctx: context.OpsContext, step: plan.VerifyServed) -> float:
    """Seconds since the new material was complete (``CertificateSynced``, else this step's own start)."""
    for type_ in (constants.COND_CERTIFICATE_SYNCED, step.condition):
        age = conditions.transition_age(ctx.conditions, type_, now=ctx.now)
        if age is not None:
            return age.total_seconds()
    return 0.0


async def _stale_members(ctx: context.OpsContext, client: admin.EtcdAdmin, names: list[str],
                         expected: dict[str, int]) -> dict[str, str]:
    """The members not yet verified that still serve a previous certificate, each with what it serves; those that
    serve the expected ones get ``VerifyServedCertificate--<pod>`` True, the others False (once)."""
    stale: dict[str, str] = {}
    for name in names:
        type_ = constants.per_pod_type(constants.STEP_VERIFY_SERVED_CERTIFICATE, name)
        if ctx.is_true(type_):
            continue
        problem = await serials.served_problem(client, name, expected)
        if problem is None:
            ctx.set_pod_condition(constants.STEP_VERIFY_SERVED_CERTIFICATE, name, T)
            continue
        if ctx.condition(type_) is None:
            ctx.set_pod_condition(constants.STEP_VERIFY_SERVED_CERTIFICATE, name, F)
        stale[name] = problem
    return stale


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.VerifyServed), step  # the engine runs a step with the module its kind names
    assert step.tls is not None
    record = _stale_record(ctx)

    def replaced(name: str, pod: dict[str, Any]) -> bool:
        old = record[name].uid if name in record else None
        return old is not None and pod["metadata"].get("uid") != old and not members.terminating(pod)

    pods = await ctx.pods()
    names = ctx.pod_names()
    async with await ctx.etcd(pods) as client:
        if (in_flight := await restart.finish_eviction(ctx, step, pods, replaced, client)) is not None:
            return in_flight
        if (checks := await restart.post_checks(ctx, step, client, pods, replaced)) is not None:
            return checks
        expected = await serials.expected_serials(ctx, step.tls)
        missing = [p for p in constants.PORT_ALIAS if p not in expected]
        if missing:
            return context.Progress(f"no certificate in the Secret of the {', '.join(missing)} port", delay=0.5)
        stale = await _stale_members(ctx, client, names, expected)
        if not stale:
            # The members this step restarted (its own record: an earlier pass of the same request, e.g. a
            # handover's widen, leaves EvictPod--<pod> True too).
            restarted = [n for n in names if n in record
                         and ctx.is_true(constants.per_pod_type(constants.STEP_EVICT_POD, n))]
            if not restarted:
                return context.Done()
            afters = [record[n].after_seconds if n in record else 0 for n in restarted]
            message = restart.report_stale_restarts_done(ctx, restarted, len(names), min(afters))
            return context.Done(f"{step.message}; {message[0].lower()}{message[1:]}")
        elapsed = _since_synced(ctx, step)
        bound = ctx.delivery_timeout
        if elapsed < bound:
            return context.Progress(
                f"waiting up to {bound:g}s after CertificateSynced for the kubelet to deliver the new certificates "
                f"(a member still serving the previous one then is restarted alone): {'; '.join(stale.values())}",
                delay=0.5)
        views = await members.observe(client, pods, names, timeout=1.5, learners=True)
        views = [dataclasses.replace(v, up_to_date=v.name not in stale) for v in views]
        action = rollout.next_action(views, ctx.db.spec.replicas)
        if action.kind in (rollout.ActionKind.WAIT, rollout.ActionKind.REFUSE, rollout.ActionKind.DONE):
            return context.Progress(f"{', '.join(stale)} still serve(s) the previous certificate after {bound:g}s; "
                                    f"not restarting yet: {action.reason}", delay=0.5)
        if action.kind is rollout.ActionKind.MOVE_LEADER:
            return await restart.move_leader(ctx, client, action)
        assert action.pod is not None
        pod = pods[action.pod]
        _remember(ctx, action.pod, str(pod["metadata"].get("uid") or ""), elapsed)
        restart.report_stale_restart(ctx, action.pod, elapsed, stale[action.pod])
        return await restart.restart(ctx, step, pod, follower=action.follower)
