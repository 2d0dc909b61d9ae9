"""An operator killed anywhere resumes every TLS operation (and Restart) to Successful, restarting no member twice.

How the operator dies here (see :mod:`tests.ops.world`):
- between every two reconciles: each reconcile runs on a fresh :class:`~opsmanager.ops.engine.Engine` — nothing
  in memory survives, as after a restart;
- after step k, for every k: right after the status write that marks a step done (``done <condition>``);
- between the in-flight mark and the action, for every step and every per-member step: right after the write
  that first shows the condition False (``in-flight <condition>``), before the step acts;
- around each disruptive call: before and after each eviction, each MoveLeader, each member update.
Each point fires once per run (the next engine gets past it), so one run per operation visits all of them.

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


RESUMED = [*operations.TLS_OPERATIONS, next(o for o in operations.OPERATIONS if o.name == "restart")]


async def run_killed_everywhere(world: w.World, name: str, op: operations.Operation,
                                **run_kw: Any) -> tuple[dict[str, Any], set[str]]:
    """Run request ``name`` with the operator killed at every crash point of ``op``: it ends Successful, in
    ``op.order``, rolled safely, and every step was interrupted both in flight and right after it ended. Returns
    the request and the crash points hit, for the caller's own checks."""
    world.crash_points = crash_points(op)
    req = await world.run(name, **run_kw)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == op.order
    await operations.assert_rolled_safely(world, op)
    crashed = set(world.crashes)
    for cond in op.order:
        assert {f"in-flight {cond}", f"done {cond}"} <= crashed or cond == constants.COND_SUCCESSFUL, cond
    return req, crashed


@pytest.mark.parametrize("op", RESUMED, ids=lambda op: op.name)
async def test_killed_after_every_step_and_before_every_action_it_resumes_to_successful(
        world: w.World, op: operations.Operation) -> None:
    await operations.prepare(world, op)
    # Every step was interrupted both between its in-flight mark and its action, and right after it ended ...
    _, crashed = await run_killed_everywhere(world, op.name, op)
    # ... and so was every restart of every member, before and after the eviction went out.
    if op.passes:  # (rotate restarts nothing: tests/ops/test_engine_rotate.py crashes around its restart of one)
        for pod in operations.PODS:
            assert {f"before evict {pod}", f"after evict {pod}", f"in-flight EvictPod--{pod}"} <= crashed, pod
        assert any(p.startswith("after move_leader") for p in crashed)
    if constants.COND_PEER_URLS_UPDATED in op.order:
        assert {f"after member_update {p}" for p in operations.PODS} <= crashed
