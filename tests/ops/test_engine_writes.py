"""Writes are only the changes (issue 14): one status write per reconcile, and no write of an unchanged object.

We test these aspects, in the fast world (see conftest.py), whose client counts the request's status PATCHes and
notes every PATCH or PUT the engine makes that leaves its object as it was:
- add TLS, Restart and rotate run to Successful in at most the status writes measured for them (a regression
  that writes per condition again, or a message per reconcile, fails here);
- no operation writes an object it does not change — the request (status and annotations), the Etcd, the
  StatefulSet, Secrets, Certificates;
- a condition set False then True before a flush is written once, True; set away from and back to the state it
  has on the server, it is not written at all and keeps its ``lastTransitionTime``.
"""

from __future__ import annotations

import pytest

from opsmanager.api import conditions, constants
from opsmanager.ops import context, plan
from tests.ops import test_engine_operations as operations
from tests.ops import world as w

T, F = constants.TRUE, constants.FALSE

# Status writes of one run in the fast world (deterministic: the world settles only between reconciles), as
# measured. Add TLS: the origin record (``status.origin``: the TLS the request started from, before anything else);
# Progressing with Running in flight (before the pause; no Pending: it starts at once); the first reconcile's end;
# each member's eviction (before it) and its restart (after) — two per member and pass; one per member update; the
# two template writes; the end. A rotate also records its plan variant before its first step, and its Certificates'
# baseline revisions before it asks cert-manager to re-issue them (one write, where an annotation on each Certificate
# was three). Before the batching: 84 for add TLS.
MOST_STATUS_WRITES = {"add-tls": 21, "restart": 10, "rotate": 7}


@pytest.mark.parametrize("op", operations.OPERATIONS, ids=lambda op: op.name)
async def test_an_operation_writes_only_changes_and_at_most_its_measured_status_writes(
        world: w.World, op: operations.Operation) -> None:
    await operations.prepare(world, op)
    world.kube.status_writes = 0
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert world.kube.unchanged_writes == []
    if op.name in MOST_STATUS_WRITES:
        assert world.kube.status_writes <= MOST_STATUS_WRITES[op.name]


async def test_false_then_true_before_a_flush_is_one_write_and_back_and_forth_is_none(world: w.World) -> None:
    req = await world.request("r", "db", constants.OPS_TYPE_RESTART)
    ctx = context.OpsContext(world.kube, req, {"metadata": {"name": "db"}},
                             plan.Plan(constants.OPS_TYPE_RESTART, None, None, ()), w.FakeClock()())
    evict = constants.per_pod_type(constants.STEP_EVICT_POD, "db-0")
    ctx.set_condition(constants.COND_RESTART_PODS, F, "RestartPods in progress")
    ctx.set_pod_condition(constants.STEP_EVICT_POD, "db-0", F)
    ctx.set_pod_condition(constants.STEP_EVICT_POD, "db-0", T)
    ctx.set_condition(constants.COND_RESTART_PODS, T, "restarted")
    await ctx.flush()
    assert world.kube.status_writes == 1
    live = (await world.get_request("r"))["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in live] == [(constants.COND_RESTART_PODS, T), (evict, T)]

    # An old transition on the server: set False and back to True, the condition is not written and keeps it.
    def old(st: dict) -> dict:
        return {**st, "conditions": [{**c, "lastTransitionTime": "2020-01-01T00:00:00Z"} for c in st["conditions"]]}

    await world.kube.transact_status(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "r", old)
    writes = world.kube.status_writes
    ctx.set_condition(constants.COND_RESTART_PODS, F, "again")
    ctx.set_condition(constants.COND_RESTART_PODS, T, "restarted")
    await ctx.flush()
    await ctx.flush()  # nothing queued: no request at all
    assert world.kube.status_writes == writes
    restart = conditions.get_condition((await world.get_request("r"))["status"]["conditions"],
                                       constants.COND_RESTART_PODS)
    assert restart is not None and restart["lastTransitionTime"] == "2020-01-01T00:00:00Z"

    # A change of status after it: written once, with the time of the change.
    ctx.set_pod_condition(constants.STEP_EVICT_POD, "db-0", F)
    await ctx.flush()
    assert world.kube.status_writes == writes + 1
    cond = conditions.get_condition((await world.get_request("r"))["status"]["conditions"], evict)
    assert cond is not None and cond["status"] == F and cond["lastTransitionTime"] != "2020-01-01T00:00:00Z"
