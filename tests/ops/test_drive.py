"""The ops engine's driver loop (``opsmanager.ops.handlers.drive``): when a pass runs, with a fake reconcile.

What it must do: a burst of watch events gets a handful of passes, not one each; no change is lost (a pass always
starts after the last event); a lone change gets a pass at once; a step's own delay still bounds the wait; an API
error is retried. The reconcile here is a stub behind the same signature (the real engine is in the other tests).
"""

from __future__ import annotations

import asyncio
import logging

from opsmanager import kube
from opsmanager.ops import engine, handlers

log = logging.getLogger("test")


class Recorder:
    """A reconcile that records when each pass started and finishes after ``passes`` passes (or when told)."""

    def __init__(self, *, delay: float, passes: int = 10_000) -> None:
        self.delay = delay
        self.passes = passes
        self.starts: list[float] = []
        self.stop = False
        self.fail_first = 0

    async def __call__(self) -> engine.Outcome:
        self.starts.append(asyncio.get_running_loop().time())
        if self.fail_first:
            self.fail_first -= 1
            raise kube.KubeError("the API server is unavailable")
        return engine.Outcome(finished=self.stop or len(self.starts) >= self.passes, delay=self.delay)


async def test_a_burst_of_changes_gets_few_passes_and_the_last_change_is_seen() -> None:
    rec, changed = Recorder(delay=30.0), asyncio.Event()
    task = asyncio.create_task(handlers.drive(rec, changed, logger=log, what="ns/req", rewake_interval=0.3))
    loop = asyncio.get_running_loop()
    while not rec.starts:
        await asyncio.sleep(0.001)
    last_event = 0.0
    for _ in range(40):  # 40 events over about 0.4 s
        changed.set()
        last_event = loop.time()
        await asyncio.sleep(0.01)
    deadline = loop.time() + 5.0
    while not any(t >= last_event for t in rec.starts) and loop.time() < deadline:
        await asyncio.sleep(0.01)
    rec.stop = True
    changed.set()
    await asyncio.wait_for(task, 5.0)
    during = rec.starts[1:-1]
    assert any(t >= last_event for t in rec.starts), "the last change got no pass"
    # one pass per 0.3 s at most: the 0.4 s burst (and the wait after it) gets a few, not 40
    assert 1 <= len(during) <= 4, rec.starts
    gaps = [b - a for a, b in zip(rec.starts, rec.starts[1:], strict=False)]
    assert min(gaps[:-1]) >= 0.3 - 0.01, gaps


async def test_a_lone_change_gets_a_pass_at_once_and_the_delay_still_bounds_the_wait() -> None:
    rec, changed = Recorder(delay=0.2, passes=4), asyncio.Event()
    task = asyncio.create_task(handlers.drive(rec, changed, logger=log, what="ns/req", rewake_interval=5.0))
    loop = asyncio.get_running_loop()
    await asyncio.wait_for(task, 5.0)  # nobody sets `changed`: the step's 0.2 s delay drives every pass
    gaps = [b - a for a, b in zip(rec.starts, rec.starts[1:], strict=False)]
    assert len(rec.starts) == 4 and all(0.19 <= g < 2.0 for g in gaps), gaps

    rec, changed = Recorder(delay=30.0, passes=2), asyncio.Event()
    task = asyncio.create_task(handlers.drive(rec, changed, logger=log, what="ns/req", rewake_interval=0.05))
    while not rec.starts:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.2)  # quiet for longer than the interval (a schedule, not a synchronisation)
    woken = loop.time()
    changed.set()
    await asyncio.wait_for(task, 5.0)
    assert rec.starts[1] - woken < 1.0  # at once: well under the step's 30 s delay, and no added interval


async def test_an_api_error_is_retried() -> None:
    rec, changed = Recorder(delay=0.0, passes=3), asyncio.Event()
    rec.fail_first = 1
    await asyncio.wait_for(handlers.drive(rec, changed, logger=log, what="ns/req"), 10.0)
    assert len(rec.starts) == 3
