"""``RestartPods``: restart the members, one at a time with the leader last, or every member together once.

``ROLL`` restarts onto the template the step before applied, ``RESTART`` (the Restart request) stamps the template
itself first — both with the rolling restart of :mod:`opsmanager.ops.restart` —, and ``RESTART_ALL`` is the CA
rescue's restart of every member together, below.

Members loaded their CA at start; once it has expired (or the new leaves chain to a CA they never loaded) they
cannot talk to each other. A rolling restart would only lose members: the restarted one trusts the new CA, the
others the old. So every member pod is deleted at once (not through the Eviction API: a PodDisruptionBudget would
refuse exactly this), and the StatefulSet recreates them onto the new bundle and leaves already released.

Crash safety, each member restarted exactly once: before deleting anything the UIDs of the current pods are written
in the request's ``status.restarts.allTogether``; a pod is deleted only with its recorded UID as a
precondition, so a pod recreated before the operator died is never deleted again. The step is done when every
member runs in a pod with a new UID and a majority answers etcd's plain-HTTP ``/health`` on the metrics port (2381:
a leader and a linearizable read; no TLS chain trusted), bounded by the request's timeout (``spec.timeout``).
"""

from __future__ import annotations

from opsmanager.api import conditions, constants
from opsmanager.cluster import health
from opsmanager.ops import context, plan, restart
from opsmanager.tls import gate, trust

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_RESTART_PODS,)


def _record(ctx: context.OpsContext) -> dict[str, str] | None:
    """The pod UIDs recorded before the restart (``{pod: uid}``, ``status.restarts.allTogether``), None before it.
    A request an older engine started has them in an annotation (the gate's record codec)."""
    together = ctx.restarts.all_together
    if together is not None:
        return dict(together)
    return gate.decode_record(ctx.legacy_annotation(constants.LEGACY_RESCUE_RESTARTED))


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    if isinstance(step, plan.RestartAll):
        return await _restart_all(ctx, step)
    if isinstance(step, plan.Restart):
        applied = await restart.apply_template(ctx, step)
        if not isinstance(applied, context.Done):
            return applied
    assert isinstance(step, plan.Roll | plan.Restart), step  # the kinds the engine runs with this module
    return await restart.rolling(ctx, step)


async def _restart_all(ctx: context.OpsContext, step: plan.RestartAll) -> context.StepResult:
    pods = await ctx.pods()
    names = ctx.pod_names()
    record = _record(ctx)
    if record is None:
        # Every member's new container must start in a later second than the bundle's newest CA entered it (start
        # and entry times have one-second resolution; a member started in that second does not count as having
        # loaded that CA, and the next rotate would rescue it again).
        wait = await trust.entry_settling(ctx)
        if wait > 0:
            return context.Progress("waiting for the second the new CA entered the trust bundle to pass",
                                    delay=wait)
        record = {n: str(pods[n]["metadata"].get("uid") or "") for n in names if n in pods}
        ctx.record(restarts=ctx.restarts.model_copy(update={"all_together": record}))
    await ctx.flush()  # the record and the step in flight are written before any member is deleted
    deleted = await restart.delete_recorded(ctx, record, pods)
    if deleted:
        # Not "RestartPods": that reason is the step's own transition Event, when quorum is back.
        ctx.announce("RestartAllPods", f"Restarted every etcd member together onto the new CA: "
                                       f"{', '.join(deleted)}")
        return context.Progress(f"restarted {', '.join(deleted)} together", delay=ctx.until_watched(0.5))
    waiting = restart.not_replaced(names, record, pods)
    if waiting:
        return context.Progress(f"waiting for {', '.join(waiting)} to be recreated and Ready",
                                delay=ctx.until_watched(0.5))
    async with await ctx.etcd(pods) as client:
        # Quorum from etcd's plain-HTTP /health on the metrics port: no TLS chain trusted for it (an expired or
        # replaced one cannot mislead it); healthy means "has a leader and a linearizable read succeeded".
        answers = [await client.health(ep, timeout=2.0) for ep in client.endpoints]
    healthy = [a for a in answers if a.healthy]
    if len(healthy) < health.quorum(ctx.db.spec.replicas):
        sick = "; ".join(f"{ep.name}: {a.reason or 'unhealthy'}" for ep, a in zip(client.endpoints, answers,
                                                                                   strict=True) if not a.healthy)
        return context.Progress(f"waiting for quorum after the restart of every member ({len(healthy)} of "
                                f"{ctx.db.spec.replicas} healthy: {sick})", delay=0.5)
    age = conditions.transition_age(ctx.conditions, step.condition, now=ctx.now)
    took = f" in {age.total_seconds():.1f}s" if age is not None else ""
    return context.Done(f"{step.message}: {len(record)} members restarted together once, quorum back{took}")
