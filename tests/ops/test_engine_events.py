"""Events and metrics of every operation (issue 15 part 5), in the fast world (see conftest.py).

We test these aspects:
- every operation announces each step done exactly once — by an Event on the request whose reason is the step's
  condition, or named in the message of the one Event for the steps one write records (the terminal write's in
  ``Successful``); ``Running``'s is the Etcd's ``Paused`` —, one ``EvictPod`` per member restarted, one
  ``MoveLeader`` per leader moved, one ``Successful``, and on the Etcd one ``Paused`` and one ``Resumed`` naming
  the request; the totals are as measured (add TLS on 3 members: 15, one more than before issue 15 — issue 14's
  API budget counts every Event; the per-member peer-URL updates are named in their step's one Event);
- an operator killed anywhere (after every write, before and after every action) may lose an Event but never
  posts one twice for one transition, and no member restart or leader move is announced twice;
- a failed request posts one ``Failed`` (Warning) and counts it; a MoveLeader request posts one ``Successful``
  naming its step (one write records both; no pause) and counts its move;
- the metrics count what this process did: ``opsmanager_opsrequests_total{type,phase}`` once per request (an
  engine that reads a request already terminal — a restarted operator — counts nothing), the step histograms one
  observation per step, member restarts and leader moves as the fake cluster saw them, the request duration;
- ``opsmanager_reconcile_errors_total``'s kind comes from the error's class.
"""

from __future__ import annotations

import collections

import pytest

from opsmanager import kube, metrics
from opsmanager.api import constants
from opsmanager.etcd import errors as etcd_errors
from tests.ops import test_engine_operations as operations
from tests.ops import test_engine_resume as resume
from tests.ops import world as w

Events = collections.Counter[tuple[str, str]]


async def events(world: w.World) -> list[dict]:
    return list(await world.kube.list("v1", "Event", w.NS))


def count(evs: list[dict]) -> Events:
    return collections.Counter((e["involvedObject"]["kind"], e["reason"]) for e in evs)


# Events an operation posts in the fast world, as measured (the steps one write records share one Event).
TOTAL = {"add-tls": 15, "rotate": 4, "change-issuer": 19, "remove-tls": 14, "restart": 7, "restart-tls": 7}


def expected(op: operations.Operation) -> Events:
    """The Events that do not depend on how steps share writes."""
    want: Events = collections.Counter({(constants.OPS_KIND, "Successful"): 1})
    want[(constants.OPS_KIND, "EvictPod")] = len(operations.PODS) * op.passes
    want[(constants.OPS_KIND, "MoveLeader")] = op.passes  # the leader restarted last in each pass
    want[(constants.ETCD_KIND, "Paused")] = want[(constants.ETCD_KIND, "Resumed")] = 1
    return +want


def steps_announced(evs: list[dict], op: operations.Operation) -> collections.Counter[str]:
    """How often each step of ``op`` is announced: as an Event's reason, or named ``<Step>: …`` in its message."""
    steps = [c for c in op.order if c not in (constants.COND_RUNNING, constants.COND_SUCCESSFUL)]
    got: collections.Counter[str] = collections.Counter()
    for e in evs:
        if e["involvedObject"]["kind"] != constants.OPS_KIND:
            continue
        got.update({c for c in steps if e["reason"] == c or f"{c}: " in e["message"]})
    return got


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("op", operations.OPERATIONS, ids=lambda op: op.name)
async def test_an_operation_posts_one_event_per_transition_restart_and_leader_move(
        world: w.World, op: operations.Operation) -> None:
    await operations.prepare(world, op)
    before = {e["metadata"]["name"] for e in await events(world)}
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    posted = [e for e in await events(world) if e["metadata"]["name"] not in before]
    assert len(posted) == TOTAL[op.name], count(posted)
    got = count(posted)
    assert {k: got[k] for k in expected(op)} == expected(op)
    steps = [c for c in op.order if c not in (constants.COND_RUNNING, constants.COND_SUCCESSFUL)]
    assert steps_announced(posted, op) == {c: 1 for c in steps}
    assert got[(constants.OPS_KIND, constants.COND_RUNNING)] == 0  # the Etcd's Paused announces it
    on_etcd = {e["reason"]: e["message"] for e in posted if e["involvedObject"]["kind"] == constants.ETCD_KIND}
    assert all(op.name in message for message in on_etcd.values()), on_etcd  # they name the request
    if op.name == "add-tls":
        peer = next(e["message"] for e in posted if e["reason"] == constants.COND_PEER_URLS_UPDATED)
        assert all(p in peer for p in operations.PODS), peer


async def test_a_move_whose_answer_came_late_is_still_recorded_and_announced(world: w.World) -> None:
    # MoveLeader hands leadership over and then times out (every member's agreement came late, as on a loaded
    # machine). The move happened: the next look finds the pod a follower and plans no move of its own, so this one
    # is the only chance to count and announce it.
    op = next(o for o in operations.OPERATIONS if o.name == "restart")
    await operations.prepare(world, op)
    assert world.cluster is not None
    world.cluster.late_move_answers = 1
    moved = sample("opsmanager_leader_moves_total")
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert world.cluster.late_move_answers == 0  # the late answer did happen
    moves = [e["message"] for e in await events(world) if e["reason"] == "MoveLeader"]
    changes = [c for c in world.cluster.history if c.cause == "move"]
    assert len(moves) == len(changes) == op.passes, (moves, changes)
    assert "the call itself reported" in moves[0]
    assert sample("opsmanager_leader_moves_total") == moved + op.passes


@pytest.mark.slow  # a crash at every point of four operations: seconds, kept out of `make test-fast`
@pytest.mark.parametrize("op", resume.RESUMED, ids=lambda op: op.name)
async def test_an_operator_killed_anywhere_never_posts_an_event_twice(
        world: w.World, op: operations.Operation) -> None:
    await operations.prepare(world, op)
    await resume.run_killed_everywhere(world, op.name, op)
    posted = await events(world)
    got = count(posted)
    want = expected(op)
    for key in want:
        assert got[key] <= want[key], (key, got[key], want[key])
    assert all(n <= 1 for n in steps_announced(posted, op).values()), steps_announced(posted, op)
    assert sum(got.values()) > 0  # (killed right after the terminal write, even Successful's may be lost)


async def test_a_failed_request_posts_one_failed_warning_and_counts_it(world: w.World) -> None:
    await world.etcd("db")
    await world.request("move", "db", "MoveLeader", moveLeader={"newLeader": "db-9"})
    failed = sample("opsmanager_opsrequests_total", type="MoveLeader", phase="Failed")
    req = await world.run("move")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    reasons = [(e["reason"], e["type"]) for e in await events(world) if e["involvedObject"]["name"] == "move"]
    assert reasons == [("Failed", "Warning")]
    assert sample("opsmanager_opsrequests_total", type="MoveLeader", phase="Failed") == failed + 1


async def test_metrics_count_what_this_process_did_once(world: w.World) -> None:
    op = next(o for o in operations.OPERATIONS if o.name == "add-tls")
    await operations.prepare(world, op)
    names = ("opsmanager_member_restarts_total", "opsmanager_leader_moves_total")
    before = {n: sample(n) for n in names}
    ok = dict(type=constants.OPS_TYPE_RECONFIGURE_TLS, phase=constants.PHASE_SUCCESSFUL)
    done = sample("opsmanager_opsrequests_total", **ok)
    steps = {c: sample("opsmanager_step_duration_seconds_count", step=c) for c in op.order[:-1]}
    durations = sample("opsmanager_opsrequest_duration_seconds_count", type=constants.OPS_TYPE_RECONFIGURE_TLS)
    req = await world.run(op.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert sample("opsmanager_opsrequests_total", **ok) == done + 1
    assert sample("opsmanager_opsrequest_duration_seconds_count", type=constants.OPS_TYPE_RECONFIGURE_TLS) \
        == durations + 1
    assert sample("opsmanager_member_restarts_total") - before[names[0]] == len(operations.PODS) * op.passes
    assert world.cluster is not None
    assert sample("opsmanager_leader_moves_total") - before[names[1]] == len(world.cluster.history) == op.passes
    for cond, n in steps.items():
        assert sample("opsmanager_step_duration_seconds_count", step=cond) == n + 1, cond
    # A restarted operator (a fresh engine) reading the terminal request counts nothing again.
    outcome = await world.engine().reconcile(w.NS, op.name)
    assert outcome.finished
    assert sample("opsmanager_opsrequests_total", **ok) == done + 1


def test_the_reconcile_error_kind_comes_from_the_error_class() -> None:
    cases = {
        etcd_errors.MemberUnreachable("x"): "etcd",
        kube.Conflict("x"): "conflict",
        kube.AlreadyExists("x"): "conflict",
        kube.Forbidden("x"): "forbidden",
        kube.Unavailable("x"): "unavailable",
        kube.NotFound("x"): "not-found",
        kube.Invalid("x"): "kube",
        ValueError("secret-looking text never becomes a label"): "other",
    }
    assert {type(e).__name__: metrics.error_kind(e) for e in cases} == \
        {type(e).__name__: kind for e, kind in cases.items()}
    before = sample("opsmanager_reconcile_errors_total", kind="conflict")
    metrics.reconcile_error(kube.Conflict("stale"))
    assert sample("opsmanager_reconcile_errors_total", kind="conflict") == before + 1


async def test_a_move_leader_request_posts_one_successful_naming_the_move_and_counts_it(world: w.World) -> None:
    await world.etcd("db")
    await world.request("move", "db", "MoveLeader", moveLeader={"newLeader": "db-2"})
    moves = sample("opsmanager_leader_moves_total")
    req = await world.run("move")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    posted = [e for e in await events(world) if e["involvedObject"]["name"] == "move"]
    # Its one step and its end are one write: one Event, naming the step and the move.
    assert [e["reason"] for e in posted] == ["Successful"]
    assert f"{constants.COND_ETCD_LEADER_MOVED}: Moved leadership from db-0 to db-2" in posted[0]["message"]
    assert sample("opsmanager_leader_moves_total") == moves + 1
