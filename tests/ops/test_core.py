"""The engine core runs steps of any request without etcd: the loop, the status buffer, timeouts, a crash point,
a hold point."""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from opsmanager.api import conditions, constants
from opsmanager.ops.core import failpoints, loop, results
from opsmanager.ops.core.status import RequestStatus

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class StatusStore:
    """What the status buffer needs of the Kubernetes client: one object's status transactions and Events."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.writes = 0
        self.events: list[tuple[str, str]] = []

    async def transact_status(self, api_version: str, kind: str, namespace: str, name: str,
                              *mutations: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        status = copy.deepcopy(self.obj.get("status") or {})
        for mutate in mutations:
            status = mutate(status)
        self.writes += 1
        self.obj = {**self.obj, "status": status}
        return copy.deepcopy(self.obj)

    async def event(self, involved: dict[str, Any], *, reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append((reason, message))


@dataclasses.dataclass(frozen=True)
class Step:
    condition: str
    message: str


def _ctx() -> tuple[RequestStatus, StatusStore]:
    store = StatusStore({"metadata": {"name": "r", "namespace": "ns", "generation": 1}})
    return RequestStatus(store, copy.deepcopy(store.obj)), store  # type: ignore[arg-type]


async def test_steps_run_in_order_until_one_waits_then_one_write_records_them() -> None:
    ctx, store = _ctx()
    answers: dict[str, list[results.StepResult]] = {"First": [results.Done()], "Second": [results.Progress("half way", delay=2.0), results.Done("all")]}

    async def execute(c: RequestStatus, step: Step) -> results.StepResult:
        return answers[step.condition].pop(0)

    steps = [Step("First", "first done"), Step("Second", "second done")]
    runner = loop.Loop(execute, lambda: NOW)
    assert await runner.run(ctx, steps, datetime.timedelta(minutes=1)) == loop.Again(2.0)
    assert store.writes == 1
    live = store.obj["status"]["conditions"]
    assert conditions.is_true(live, "First") and conditions.is_false(live, "Second")
    assert (conditions.get_condition(live, "Second") or {})["message"] == "half way"
    assert store.events == [("First", "first done")]
    ended = await runner.run(ctx, steps, datetime.timedelta(minutes=1))
    assert ended == loop.Finished(ok=True, message="", reason=constants.COND_SUCCESSFUL)


async def test_a_step_past_its_timeout_ends_the_plan_naming_the_member_it_is_stuck_at() -> None:
    ctx, _ = _ctx()
    ctx.set_condition("Roll", constants.FALSE, "rolling")
    ctx.set_condition(constants.per_pod_type("EvictPod", "db-1"), constants.FALSE, "evicting")

    async def execute(c: RequestStatus, step: Step) -> results.StepResult:
        raise AssertionError("a timed-out step does not run")

    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)  # the conditions' clock is real
    ended = await loop.Loop(execute, lambda: later).run(ctx, [Step("Roll", "rolled")], datetime.timedelta(minutes=5))
    assert isinstance(ended, loop.Finished) and not ended.ok and ended.reason == "Timeout"
    assert "at EvictPod of db-1: evicting" in ended.message


async def test_a_transient_error_is_retried_later_and_counted() -> None:
    ctx, store = _ctx()
    counted: list[BaseException] = []

    async def execute(c: RequestStatus, step: Step) -> results.StepResult:
        raise ConnectionError("unreachable")

    runner = loop.Loop(execute, lambda: NOW, transient=(ConnectionError,), on_transient=counted.append)
    assert await runner.run(ctx, [Step("A", "a")], datetime.timedelta(minutes=1)) == loop.Again(1.0)
    assert len(counted) == 1 and store.writes == 1  # the step's False condition is on record


async def test_a_crash_point_fires_right_after_the_write_that_records_its_step(monkeypatch: Any) -> None:
    ctx, store = _ctx()
    crashed_at: list[int] = []
    monkeypatch.setattr("opsmanager.ops.core.failpoints.crash", lambda: crashed_at.append(store.writes))

    async def execute(c: RequestStatus, step: Step) -> results.StepResult:
        return results.Done()

    runner = loop.Loop(execute, lambda: NOW, crash_after=frozenset({("r", "A")}))
    await runner.run(ctx, [Step("A", "a"), Step("B", "b")], datetime.timedelta(minutes=1))
    assert crashed_at == [1]  # after the first write, which recorded A True
    assert conditions.is_true(store.obj["status"]["conditions"], "A")


async def test_a_crash_point_on_a_member_fires_in_the_middle_of_its_step(monkeypatch: Any) -> None:
    ctx, store = _ctx()
    crashed_at: list[tuple[int, list[str]]] = []

    def crash() -> None:
        done = [c["type"] for c in store.obj["status"]["conditions"] if c["status"] == constants.TRUE]
        crashed_at.append((store.writes, done))

    monkeypatch.setattr("opsmanager.ops.core.failpoints.crash", crash)
    members = ["db-0", "db-1", "db-2"]

    async def execute(c: RequestStatus, step: Step) -> results.StepResult:
        todo = [m for m in members if not c.is_true(constants.per_pod_type("Roll", m))]
        if not todo:
            return results.Done()
        c.set_condition(constants.per_pod_type("Roll", todo[0]), constants.TRUE, "rolled")
        return results.Progress(delay=0.0)

    runner = loop.Loop(execute, lambda: NOW, crash_after=frozenset({("r", "Roll--db-1"), ("other", "Roll--db-0")}))
    ended = await runner.run(ctx, [Step("Roll", "rolled all")], datetime.timedelta(minutes=1))
    # One crash, right after the write that recorded db-1's part, with the step and db-2's part still to do.
    assert crashed_at == [(1, ["Roll--db-0", "Roll--db-1"])]
    assert ended == loop.Finished(ok=True, message="", reason=constants.COND_SUCCESSFUL)  # the test's crash returns


async def test_a_hold_point_shows_its_step_in_flight_then_holds_it_once(monkeypatch: Any) -> None:
    ctx, store = _ctx()
    seen: list[tuple[float, str | None]] = []

    async def sleep(seconds: float) -> None:  # what the step's condition is on record as while it is held
        live = store.obj.get("status", {}).get("conditions")
        seen.append((seconds, (conditions.get_condition(live, "B") or {}).get("status")))

    monkeypatch.setattr("opsmanager.ops.core.loop.asyncio.sleep", sleep)

    async def execute(c: RequestStatus, step: Step) -> results.StepResult:
        return results.Done()

    holds = {("r", "B"): 3.0, ("other", "A"): 1.0}
    runner = loop.Loop(execute, lambda: NOW, holds=holds)
    ended = await runner.run(ctx, [Step("A", "a"), Step("B", "b")], datetime.timedelta(minutes=1))
    assert ended == loop.Finished(ok=True, message="", reason=constants.COND_SUCCESSFUL)
    assert seen == [(3.0, constants.FALSE)]  # B written False (A True with it), then held; only this request's
    assert holds == {("other", "A"): 1.0}  # taken: a later pass does not hold again
    assert failpoints.holds("crash-after:r:A, hold-in:r:B:2.5,hold-in:bad:X:soon") == {("r", "B"): 2.5}
