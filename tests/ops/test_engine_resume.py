"""An operator killed anywhere resumes every TLS operation (and Restart) to Successful, restarting no member twice.

How the operator dies here (see :mod:`tests.ops.world`):
- between every two reconciles: each reconcile runs on a fresh :class:`~opsmanager.ops.engine.Engine` — nothing
  in memory survives, as after a restart;
- after step k, for every k: right after the status write that marks a step done (``done <condition>``);
- between the in-flight mark and the action, for every step that writes its mark before it acts (the engine's
  flush points: pausing the Etcd, writing a StatefulSet template, a member update, an eviction or pod deletion —
  :data:`RECORDED_BEFORE_ACTING`) and every per-member step: right after the write that first shows the condition
  False (``in-flight <condition>``), before the step acts;
- around each disruptive call: before and after each eviction, each MoveLeader, each member update;
- inside an eviction, between the API server's two writes (its own test): the budget counts the pod as disrupted
  and the pod is not deleted — what a client that went away mid-request leaves; every further eviction is refused
  for the two minutes the disruption controller waits.
Each point fires once per run (the next engine gets past it), so one run per operation visits all of them. One
status write records everything a reconcile changed, so a crash after it is the moment of every point it shows
(:meth:`~tests.ops.world.World.maybe_crash_after_write`). A step that only observes, or acts idempotently (issue,
release, verify, write the Etcd's spec), writes its record with the end of a reconcile: one that finishes in the
reconcile it starts is written ``True`` only — there is no moment between its mark and its action — and is killed
right after it ends, and wherever the reconcile running it died.

We then check what must hold whatever the crash: Successful, the steps in plan order, each member restarted
exactly once per pass, one at a time, never while leading (no election), and the Etcd not left paused.
"""

from __future__ import annotations

from typing import Any

import pytest

from opsmanager.api import constants
from tests.ops import test_engine_operations as operations
from tests.ops import world as w

PER_POD_STEPS = (constants.STEP_EVICT_POD, constants.STEP_CHECK_POD_READY, constants.STEP_ETCD_CLUSTER_HEALTHY,
                 constants.STEP_VERIFY_SERVED_CERTIFICATE, constants.STEP_MOVE_LEADER,
                 constants.STEP_UPDATE_PEER_URL)
CALLS = ("evict", "move_leader", "member_update")


def crash_points(op: operations.Operation) -> set[str]:
    conds = [*op.order, *(constants.per_pod_type(s, p) for s in PER_POD_STEPS for p in operations.PODS)]
    points = {f"{when} {c}" for c in conds for when in ("in-flight", "done")}
    points |= {f"{when} {call} {p}" for call in CALLS for p in operations.PODS for when in ("before", "after")}
    return points


# The steps that write their in-flight record before they act on the cluster (and so always have an in-flight moment).
RECORDED_BEFORE_ACTING = frozenset({constants.COND_RUNNING, constants.COND_UPDATE_STATEFULSET,
                                    constants.COND_PEER_URLS_UPDATED})
# ... and those that do when they restart members (a pass with nothing to restart finishes at once).
RESTARTING = frozenset({constants.COND_RESTART_PODS, constants.COND_TLS_LISTENERS_ADDED,
                        constants.COND_PLAINTEXT_LISTENERS_ADDED, constants.COND_TRUST_BUNDLE_WIDENED,
                        constants.COND_TRUST_BUNDLE_NARROWED})


def assert_interrupted(crashed: set[str], order: list[str], *, restarts: bool) -> None:
    """Every step was interrupted right after it ended, and — when it records itself in flight before it acts —
    between that record and its action."""
    in_flight = RECORDED_BEFORE_ACTING | (RESTARTING if restarts else frozenset())
    for cond in order:
        if cond == constants.COND_SUCCESSFUL:
            continue
        assert f"done {cond}" in crashed, cond
        assert cond not in in_flight or f"in-flight {cond}" in crashed, cond


RESUMED = [*operations.TLS_OPERATIONS, next(o for o in operations.OPERATIONS if o.name == "restart")]


async def run_killed_everywhere(world: w.World, name: str, op: operations.Operation,
                                **run_kw: Any) -> tuple[dict[str, Any], set[str]]:
    """Run request ``name`` with the operator killed at every crash point of ``op``: it ends Successful, in
    ``op.order``, rolled safely, and every step was interrupted right after it ended and, if it records itself in
    flight before acting, in flight (:func:`assert_interrupted`). Returns the request and the crash points hit, for
    the caller's own checks. Nothing is written that was already written (a resumed step re-writes nothing)."""
    world.crash_points = crash_points(op)
    req = await world.run(name, **run_kw)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == op.order
    await operations.assert_rolled_safely(world, op)
    crashed = set(world.crashes)
    assert_interrupted(crashed, op.order, restarts=op.passes > 0)
    assert world.kube.unchanged_writes == [], "a resumed step wrote what was already written"
    return req, crashed


@pytest.mark.slow  # a crash at every point of a run: seconds, kept out of `make test-fast`
@pytest.mark.parametrize("op", RESUMED, ids=lambda op: op.name)
async def test_killed_after_every_step_and_before_every_action_it_resumes_to_successful(
        world: w.World, op: operations.Operation) -> None:
    await operations.prepare(world, op)
    # Every step was interrupted right after it ended, and between its in-flight mark and its action ...
    _, crashed = await run_killed_everywhere(world, op.name, op)
    # ... and so was every restart of every member, before and after the eviction went out.
    if op.passes:  # (rotate restarts nothing: tests/ops/test_engine_rotate.py crashes around its restart of one)
        for pod in operations.PODS:
            assert {f"before evict {pod}", f"after evict {pod}", f"in-flight EvictPod--{pod}"} <= crashed, pod
        assert any(p.startswith("after move_leader") for p in crashed)
    if constants.COND_PEER_URLS_UPDATED in op.order:
        assert {f"after member_update {p}" for p in operations.PODS} <= crashed
        assert {f"in-flight UpdatePeerURL--{p}" for p in operations.PODS} <= crashed


@pytest.mark.parametrize("op", RESUMED[-1:], ids=lambda op: op.name)
async def test_killed_inside_every_eviction_it_finishes_the_admitted_eviction_without_waiting_out_the_budget(
        world: w.World, op: operations.Operation) -> None:
    """The API server admitted each eviction (the budget counts the pod as disrupted) but the operator died before
    the pod was deleted: the next operator's eviction is refused for two minutes, so it deletes the pod the budget
    already counts — once — and the roll goes on (the world gives up long before two minutes)."""
    world.budget = True
    await operations.prepare(world, op)
    world.crash_points = {f"midway evict {p}" for p in operations.PODS}
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert set(world.crashes) == {f"midway evict {p}" for p in operations.PODS}
    await operations.assert_rolled_safely(world, op)
    assert sorted(world.record.deletions) == sorted(operations.PODS)  # each pod deleted once, by the second try
