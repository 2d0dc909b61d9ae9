"""Wall-clock bounds in tests: only where the bound is the point of the test, and then relative to a baseline.

A test that asserts "X happens within its timeout" measures, in the same test and on the same machine under the
same load, how long a comparable operation that needs no waiting takes (:func:`baseline` / :func:`abaseline`: the
slowest of a few runs), and allows the expected wait plus :func:`allowance` of that baseline: ``SLACK`` times it,
and never less than ``FLOOR`` — a baseline of a few milliseconds times ten is shorter than one scheduler hiccup of
a loaded 2-core CI machine, and a bound that flakes proves nothing. On a loaded machine both grow together.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

SLACK = 10  # how many baselines a bound allows on top of the wait that is the point of the test
FLOOR = 0.5  # seconds: the least a bound allows on top of that wait


def allowance(base: float) -> float:
    """What a bound allows on top of the wait that is its point, given a baseline measured in the same test."""
    return max(SLACK * base, FLOOR)


def baseline(operation: Callable[[], Any], *, runs: int = 3) -> float:
    """The slowest of ``runs`` timed calls of ``operation``, in seconds."""
    times = []
    for _ in range(runs):
        started = time.monotonic()
        operation()
        times.append(time.monotonic() - started)
    return max(times)


async def abaseline(operation: Callable[[], Awaitable[Any]], *, runs: int = 3) -> float:
    """The slowest of ``runs`` timed awaits of ``operation()``, in seconds."""
    times = []
    for _ in range(runs):
        started = time.monotonic()
        await operation()
        times.append(time.monotonic() - started)
    return max(times)
