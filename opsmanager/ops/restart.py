"""The restart machinery — the only code that disrupts members through the Eviction API: stamping the StatefulSet's
template so each pass has its own revision, the leader-aware rolling restart onto that revision (followers first,
the leader last after MoveLeader, one member at a time), and the checks after each member's restart. Steps call it
(:mod:`~opsmanager.ops.steps.restart_pods`, :mod:`~opsmanager.ops.steps.roll_pass`,
:mod:`~opsmanager.ops.steps.update_statefulset`, :mod:`~opsmanager.ops.steps.verify_served`); it owns the per-pod
conditions it writes.

A member "needs a restart" exactly when its pod's ``controller-revision-hash`` differs from the StatefulSet's
``updateRevision`` (each pass stamps its own revision, :func:`apply_template`). That
fact survives an operator crash: a member restarted just before the crash is recreated on the new revision and is
never restarted again. The decision of what to do next is the pure :func:`opsmanager.ops.rollout.next_action`;
this module observes, acts, and writes the per-pod conditions:

``EvictPod--<pod>`` (False before the pod is evicted — written before the eviction goes out —, True after) → ``CheckPodReady--<pod>`` (recreated on the
new revision and Ready) → ``EtcdClusterHealthy--<pod>`` (the etcd admin's ``wait_recovered`` gate: every voter
healthy, no learners, the member caught up, a linearizable read through it) → ``VerifyServedCertificate--<pod>``
(a fresh handshake shows the certificate now in its Secret, on the client and the peer port) — the checks that
pass at once go True in the same reconcile and the same write —, and ``MoveLeader--<pod>`` for the leader (True
once leadership has moved; False only when the move failed). Failures prevented: quorum lost by restarting two members at once or a
member of a degraded cluster; a 1.5–2 s write stall from killing the leader (MoveLeader takes ≈ 0.1 s).

:func:`restart`, :func:`finish_eviction`, :func:`post_checks` and :func:`move_leader` also serve
:mod:`~opsmanager.ops.steps.verify_served`, which restarts a member alone when it still serves a previous
certificate; the caller says what "recreated" means by a ``replaced`` predicate (the rolling restart: the pod runs
the update revision; verify_served: the pod has a new UID, since the StatefulSet's revision does not change).

The template (:func:`apply_template`) is replaced as a whole (the provisioner's apply: PUT only when the render or
the restart token differs from what is live) and stamped ``opsmanager.dev/restartedAt: <request>/<pass>``. So the
request's queued record (the step before, done in the same reconcile) is written before the template is: re-run
after a crash, an earlier pass would otherwise re-apply its own template. Failure prevented: a roll that starts
before the StatefulSet controller has computed the new ``updateRevision`` and so restarts members onto the old
template.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opsmanager import kube, metrics
from opsmanager.api import conditions, constants
from opsmanager.cluster import members, naming, statefulset
from opsmanager.etcd import admin
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan, rollout
from opsmanager.tls import serials

T, F = constants.TRUE, constants.FALSE
# The steps that stamp the StatefulSet's template (each pass its own revision).
Templated = plan.ApplyStatefulSet | plan.Restart | plan.RollPass
POST_CHECKS = (constants.STEP_CHECK_POD_READY, constants.STEP_ETCD_CLUSTER_HEALTHY,
               constants.STEP_VERIFY_SERVED_CERTIFICATE)

# A follower's stop, for the engine's own restarts. On SIGTERM etcd closes its client listeners at once (new requests
# go to the other members, in-flight ones are answered within milliseconds) and then waits its request timeout
# (5 s + 2 election timeouts: 7 s by default) for the open streams to end before it cuts them — per listener. Watch
# streams never end by themselves, so a member with watchers takes 7 s or more to stop, and every restart of an
# operation pays it. What the rest of the graceful stop gives a follower (closing raft and the backend) etcd's crash
# recovery gives as well: its WAL is synced before any write is acknowledged. So the engine stops a follower with
# the kubelet's minimal window instead (the kubelet never SIGKILLs sooner than 2 s after SIGTERM); the leader, moved
# off first, and every stop by anyone else keep the pod's own grace (etcd hands leadership over in its stop).
FOLLOWER_STOP_GRACE_SECONDS = 2

# Does this pod object (of the named member) stand for the member after the restart we asked for?
Replaced = Callable[[str, dict[str, Any]], bool]


async def post_checks(ctx: context.OpsContext, step: plan.Restarting, client: admin.EtcdAdmin,
                      pods: dict[str, dict[str, Any]], replaced: Replaced) -> context.StepResult | None:
    """Finish the checks of a member restarted in this step, in order, as many as pass now (their conditions go
    True together in the reconcile's one write); None when no member has checks left."""
    for name in ctx.pod_names():
        if not ctx.is_true(constants.per_pod_type(constants.STEP_EVICT_POD, name)):
            continue
        for check in _pending_checks(ctx, step, name):
            if (waiting := await _check(ctx, step, client, name, pods.get(name), check, replaced)) is not None:
                return waiting
            ctx.set_pod_condition(check, name, T)
    return None


def _pending_checks(ctx: context.OpsContext, step: plan.Restarting, name: str) -> list[str]:
    checks = [c for c in POST_CHECKS if c != constants.STEP_VERIFY_SERVED_CERTIFICATE or step.verify_served_certificates]
    return [c for c in checks if ctx.condition(constants.per_pod_type(c, name)) is not None
            and not ctx.is_true(constants.per_pod_type(c, name))]


def awaiting_pod(ctx: context.OpsContext, step: plan.Restarting, pods: dict[str, dict[str, Any]],
                 replaced: Replaced) -> context.Progress | None:
    """What :func:`post_checks` would answer when the next check is ``CheckPodReady`` of a member whose pod is not
    back yet — decided from the watch cache alone, before an etcd client is leased. While a member restarts, most
    passes end here (a restart under load takes tens of seconds); None when anything else is next (an eviction
    in flight, a check that asks etcd, or no member with checks left)."""
    names = ctx.pod_names()
    for name in names:
        evict = constants.per_pod_type(constants.STEP_EVICT_POD, name)
        if ctx.condition(evict) is not None and not ctx.is_true(evict):
            return None  # finish_eviction's
    for name in names:
        if not ctx.is_true(constants.per_pod_type(constants.STEP_EVICT_POD, name)):
            continue
        pending = _pending_checks(ctx, step, name)
        if not pending:
            continue
        if pending[0] != constants.STEP_CHECK_POD_READY:
            return None
        pod = pods.get(name)
        if pod is None or not replaced(name, pod) or not members.serving(pod):
            return context.Progress(_recreating(name), delay=ctx.until_watched(0.3))
        return None
    return None


async def _check(ctx: context.OpsContext, step: plan.Restarting, client: admin.EtcdAdmin, name: str,
                 pod: dict[str, Any] | None, check: str, replaced: Replaced) -> context.Progress | None:
    """One post-restart check of member ``name``: None when it passes, else what it waits for."""
    if check == constants.STEP_CHECK_POD_READY:
        if pod is None or not replaced(name, pod) or not members.serving(pod):
            return context.Progress(_recreating(name), delay=ctx.until_watched(0.3))
    elif check == constants.STEP_ETCD_CLUSTER_HEALTHY:
        try:
            await client.wait_recovered(name, expected_voters=ctx.db.spec.replicas, timeout=3.0)
        except etcd_errors.EtcdError as err:
            return context.Progress(f"waiting for the cluster to recover after {name}: {err}", delay=0.3)
    else:
        assert step.tls is not None
        problem = await serials.served_problem(client, name, await serials.expected_serials(
            ctx, step.tls))
        if problem is not None:
            return context.Progress(problem, delay=0.5)
    return None


async def finish_eviction(ctx: context.OpsContext, step: plan.Restarting, pods: dict[str, dict[str, Any]],
                          replaced: Replaced, client: admin.EtcdAdmin) -> context.StepResult | None:
    """A pod whose eviction is not done (``EvictPod`` False: the budget refused it, or the operator stopped in
    between): mark it evicted if it is gone, terminating or already replaced, else evict it again — as a
    follower's restart when it is one now (:func:`a_follower`). None when no eviction is in flight."""
    for name in ctx.pod_names():
        type_ = constants.per_pod_type(constants.STEP_EVICT_POD, name)
        if ctx.condition(type_) is None or ctx.is_true(type_):
            continue
        pod = pods.get(name)
        if pod is None or pod["metadata"].get("deletionTimestamp") or replaced(name, pod):
            _mark_evicted(ctx, step, name)
            return context.Progress(delay=0.0)
        return await restart(ctx, step, pod, follower=await a_follower(client, name))
    return None


async def a_follower(client: admin.EtcdAdmin, name: str, *, timeout: float = 1.5) -> bool:
    """Whether member ``name`` is a follower now: it answers, and it and every other member that answers name one
    leader, not it. What the rollout knew of a restart it decided, asked again when that restart's eviction is tried
    again (the budget, which admits the eviction, still judges whether the others serve). Anything less certain is
    False, and the pod keeps its own grace."""
    answers = await _answers(client, timeout)
    mine = answers.get(name)
    leaders = {s.leader_id for s in answers.values()}
    return mine is not None and len(leaders) == 1 and 0 not in leaders and not mine.is_leader


def stop_grace(pod: dict[str, Any], *, follower: bool) -> int | None:
    """The deletion grace of a member's restart: :data:`FOLLOWER_STOP_GRACE_SECONDS` (or the pod's own, when
    shorter) for a follower among serving members; None (the pod's own) otherwise."""
    if not follower:
        return None
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return FOLLOWER_STOP_GRACE_SECONDS if own is None else min(FOLLOWER_STOP_GRACE_SECONDS, int(own))


async def restart(ctx: context.OpsContext, step: plan.Restarting, pod: dict[str, Any], *,
                  follower: bool = False) -> context.StepResult:
    """The one place a member is evicted: through the Eviction API, so a PodDisruptionBudget still has a say.
    ``EvictPod--<pod>`` False — and everything queued before it — is written before the eviction goes out.
    ``follower``: the member was a follower when this was decided, and the others serve (:func:`stop_grace`)."""
    name = pod["metadata"]["name"]
    ctx.set_pod_condition(constants.STEP_EVICT_POD, name, F)
    await ctx.flush()
    how = ""
    grace = stop_grace(pod, follower=follower)
    try:
        await ctx.kube.evict(ctx.namespace, name, grace_period_seconds=grace)
    except kube.TooManyRequests as err:
        budget = await ctx.kube.get("policy/v1", "PodDisruptionBudget", ctx.namespace, naming.pdb(ctx.db_name))
        if members.admitted_by_budget(budget, pod):
            # The API server records an admitted eviction in the budget first and deletes the pod second; a client
            # that went away in between (an operator killed mid-request) leaves the budget counting this pod as
            # disrupted — every further eviction refused for the two minutes the disruption controller waits —
            # while the pod runs on. Deleting it is the rest of that same admitted eviction, within the budget.
            how = "; finishing an eviction the PodDisruptionBudget had admitted"
        elif own := _own_stale_entries(ctx, budget, await ctx.pods()):
            # kube-controller-manager keys disruptedPods by pod name: when it misses the delete of a pod this
            # request evicted (the StatefulSet recreated it at once), the entry outlives the eviction by two minutes
            # and counts the healthy successor as disrupted. Proven ours and every member serving, deleting this
            # pod is the one disruption the budget allows; the entry itself is left alone, so the budget still
            # refuses everyone else until it expires.
            how = (f"; the PodDisruptionBudget's only refusal was its stale entry for {', '.join(own)}, left by "
                   f"this request's own restart of {'them' if len(own) > 1 else 'it'} (healthy again, every member "
                   "serving)")
        else:
            stale = members.stale_budget_entries(budget, await ctx.pods())
            why = "".join(f"; the budget still counts {other} as disrupted by an eviction of its previous pod (kube-"
                          f"controller-manager drops that entry at {conditions.rfc3339(until)})"
                          for other, until in sorted(stale.items()))
            return context.Progress(f"eviction of {name} not allowed yet by the PodDisruptionBudget: {err}{why}",
                                    delay=1.0)
        await ctx.kube.delete("v1", "Pod", ctx.namespace, name, uid=pod["metadata"].get("uid"),
                              grace_period_seconds=grace)
    except kube.NotFound:
        pass
    metrics.member_restarted()
    _mark_evicted(ctx, step, name)
    ctx.announce("EvictPod", f"Restarted etcd member {name} ({step.condition}{how})")  # with EvictPod True's write
    # The message the wait for the new pod shows too: one write says it (the Event says that it was restarted).
    return context.Progress(_recreating(name), delay=ctx.until_watched(0.2))


def _own_stale_entries(ctx: context.OpsContext, budget: dict[str, Any] | None,
                       pods: dict[str, dict[str, Any]]) -> list[str]:
    """:func:`members.own_stale_entries` from this request's record: when it evicted each member (``EvictPod--``
    True) and which members passed their checks after that (``CheckPodReady--`` and ``EtcdClusterHealthy--``)."""
    evicted_at, recovered = {}, []
    for name in ctx.pod_names():
        evicted = ctx.condition(constants.per_pod_type(constants.STEP_EVICT_POD, name))
        if evicted is None or evicted.get("status") != T or not evicted.get("lastTransitionTime"):
            continue
        try:
            evicted_at[name] = conditions.parse_rfc3339(str(evicted["lastTransitionTime"]))
        except ValueError:
            continue
        if all(ctx.is_true(constants.per_pod_type(c, name))
               for c in (constants.STEP_CHECK_POD_READY, constants.STEP_ETCD_CLUSTER_HEALTHY)):
            recovered.append(name)
    return members.own_stale_entries(budget, pods, evicted_at, recovered, ctx.db.spec.replicas)


def _recreating(name: str) -> str:
    return f"restarted {name}; waiting for it to be recreated and Ready"


def _mark_evicted(ctx: context.OpsContext, step: plan.Restarting, name: str) -> None:
    ctx.set_pod_condition(constants.STEP_EVICT_POD, name, T)
    for check in POST_CHECKS:
        if check == constants.STEP_VERIFY_SERVED_CERTIFICATE and not step.verify_served_certificates:
            continue
        ctx.set_pod_condition(check, name, F)


async def move_leader(ctx: context.OpsContext, client: admin.EtcdAdmin, action: rollout.Action, *,
                      before: str = "restarting it") -> context.StepResult:
    """Move leadership off ``action.pod`` (about to be restarted) to ``action.target_pod``. ``MoveLeader--<pod>`` is
    written after the move (with its Event), not before: the RPC disrupts nothing, and a move the operator did not
    live to record is observed again (the member is no longer leader) — nothing to re-derive from a False."""
    assert action.pod is not None and action.target_id is not None
    took, late, delay = "", "", 0.0
    try:
        move = await client.move_leader(action.target_id, timeout=5.0)
        took = f"in {move.rpc_seconds:.3f}s "
    except etcd_errors.EtcdError as err:
        if not await _leads(client, action.target_id):
            ctx.set_pod_condition(constants.STEP_MOVE_LEADER, action.pod, F)
            return context.Progress(f"moving leadership from {action.pod} to {action.target_pod}: {err}", delay=0.5)
        # The transfer happened, only its answer (or every member's agreement) came late: it is recorded and
        # announced like any move, or the next look would find the pod a follower and the move unaccounted for.
        late, delay = f" (the call itself reported: {err})", 0.5
    metrics.leader_moved()
    ctx.set_pod_condition(constants.STEP_MOVE_LEADER, action.pod, T)
    ctx.announce("MoveLeader", f"Moved etcd leadership from {action.pod} to {action.target_pod} {took}before "
                               f"{before}{late}")
    return context.Progress(delay=delay)


async def _leads(client: admin.EtcdAdmin, member_id: int) -> bool:
    """Does a member that answers Status report ``member_id`` as its leader?"""
    return any(s.leader_id == member_id for s in (await _answers(client, 1.0)).values())


async def _answers(client: admin.EtcdAdmin, timeout: float) -> dict[str, etcd_client.MemberStatus]:
    """The Status of each member that answers now, by name (none when the call fails as a whole)."""
    try:
        views = await client.statuses(timeout=timeout)
    except etcd_errors.EtcdError:
        return {}
    return {name: v for name, v in views.items() if isinstance(v, etcd_client.MemberStatus)}


def skip_move_leader(ctx: context.OpsContext) -> bool:
    """The benchmark-only annotation ``ops.opsmanager.dev/bench-skip-move-leader: "true"`` on the request: restart
    in ordinal order with no MoveLeader (docs/benchmarks.md: what MoveLeader buys). Never set by the operator."""
    notes = ctx.request["metadata"].get("annotations") or {}
    return str(notes.get(constants.ANNOTATION_BENCH_SKIP_MOVE_LEADER, "")).lower() == "true"


async def rolling(ctx: context.OpsContext, step: plan.Roll | plan.Restart | plan.RollPass) -> context.StepResult:
    """One move of the rolling restart (a ``ROLL`` or ``RESTART`` step, or the roll part of a ``ROLL_PASS``)."""
    sts = await ctx.statefulset()
    if sts is None:
        return context.Fail(f"StatefulSet {ctx.namespace}/{ctx.db_name} does not exist", reason="NoStatefulSet")
    update_revision = (sts.get("status") or {}).get("updateRevision")
    if not update_revision:
        return context.Progress("waiting for the StatefulSet's update revision", delay=ctx.until_watched(0.2))

    def on_update_revision(_name: str, pod: dict[str, Any]) -> bool:
        return bool(members.revision(pod) == update_revision)

    pods = await ctx.pods()
    if (not_back := awaiting_pod(ctx, step, pods, on_update_revision)) is not None:
        return not_back
    peer_scheme = step.wiring.advertised_peer_scheme if step.wiring is not None else "https"
    async with await ctx.etcd(pods, peer_scheme=peer_scheme) as client:
        if (in_flight := await finish_eviction(ctx, step, pods, on_update_revision, client)) is not None:
            return in_flight
        pending = await post_checks(ctx, step, client, pods, on_update_revision)
        if pending is not None:
            return pending
        views = await members.observe(client, pods, ctx.pod_names(), timeout=1.5, update_revision=update_revision,
                                      learners=True, nodes_down=await members.down_nodes(ctx.kube, pods))
        action = rollout.next_action(views, ctx.db.spec.replicas, move_leader=not skip_move_leader(ctx))
        if action.kind is rollout.ActionKind.DONE:
            return context.Done()
        if action.kind in (rollout.ActionKind.WAIT, rollout.ActionKind.REFUSE):
            return context.Progress(action.reason, delay=0.5)
        if action.kind is rollout.ActionKind.MOVE_LEADER:
            return await move_leader(ctx, client, action)
        assert action.pod is not None
        return await restart(ctx, step, pods[action.pod], follower=action.follower)


# --- the template each pass restarts onto ------------------------------------------------------------------------


def restart_token(ctx: context.OpsContext, step: Templated) -> str:
    if step.kind is plan.StepKind.ROLL_PASS:  # each pass its own revision; every other restart shares one
        return f"{ctx.name}/{step.condition}"
    return f"{ctx.name}/{constants.COND_RESTART_PODS}"


async def apply_template(ctx: context.OpsContext, step: Templated) -> context.StepResult:
    """Re-render the StatefulSet for ``step.wiring``, stamped for this pass; done once its controller saw it."""
    assert step.wiring is not None
    if await ctx.statefulset() is None:
        return context.Fail(f"StatefulSet {ctx.namespace}/{ctx.db_name} does not exist", reason="NoStatefulSet")
    try:
        sts = await statefulset.apply_statefulset(ctx.kube, ctx.db, step.wiring, restarted_at=restart_token(ctx, step),
                                               before_write=lambda: _before_write(ctx, step))
    except kube.Conflict:
        return context.Progress("the StatefulSet changed while it was updated; retrying", delay=0.1)
    status = sts.get("status") or {}
    if status.get("observedGeneration", 0) < sts["metadata"].get("generation", 0) or not status.get("updateRevision"):
        return context.Progress(WAITING_FOR_CONTROLLER, delay=ctx.until_watched(0.2))
    return context.Done()


WAITING_FOR_CONTROLLER = "waiting for the StatefulSet controller to observe the new template"


async def _before_write(ctx: context.OpsContext, step: Templated) -> None:
    """Record the request before the template changes (see the module doc), saying already what the step waits for
    next — the write that follows the template's then has nothing to add."""
    ctx.set_condition(step.condition, constants.FALSE, WAITING_FOR_CONTROLLER)
    await ctx.flush()


# --- a member restarted alone because it still served a previous certificate ----------------------------------


def stale_restart_message(restarted: list[str], total: int, after: int) -> str:
    return (f"Restarted {len(restarted)} of {total} members that still served the previous certificate {after}s "
            f"after it was issued: {', '.join(restarted)}")


def report_stale_restart(ctx: context.OpsContext, pod: str, elapsed: float, problem: str) -> None:
    """``RestartPods`` False while a member is restarted alone: which one and why."""
    ctx.set_condition(constants.COND_RESTART_PODS, F,
                      f"Restarting {pod}: it still served the previous certificate {elapsed:.0f}s after it was "
                      f"issued ({problem})")


def report_stale_restarts_done(ctx: context.OpsContext, restarted: list[str], total: int, after: int) -> str:
    """``RestartPods`` True once every member restarted alone serves its new leaf; the message, for the caller's."""
    message = stale_restart_message(restarted, total, after)
    ctx.set_condition(constants.COND_RESTART_PODS, T, message)
    return message


# --- every member replaced together (a CA rescue, a Restore) --------------------------------------------------


async def delete_recorded(ctx: context.OpsContext, record: dict[str, str],
                          pods: dict[str, dict[str, Any]]) -> list[str]:
    """Delete each member pod that still has the UID ``record`` holds for it (a pod with another UID is its
    replacement: never deleted again), at once; returns the names deleted."""
    deleted = []
    for name, uid in record.items():
        pod = pods.get(name)
        if pod is None or members.terminating(pod) or pod["metadata"].get("uid") != uid:
            continue
        if await ctx.kube.delete("v1", "Pod", ctx.namespace, name, uid=uid, grace_period_seconds=0):
            deleted.append(name)
    if deleted:
        metrics.member_restarted(len(deleted))
    return deleted


def not_replaced(names: list[str], record: dict[str, str], pods: dict[str, dict[str, Any]]) -> list[str]:
    """The members whose pod is missing, terminating, still the recorded one, or not serving yet."""
    return [n for n in names if (p := pods.get(n)) is None or members.terminating(p)
            or p["metadata"].get("uid") == record.get(n) or not members.serving(p)]

