"""The one way tests wait: poll a check until it holds or a deadline passes — never a fixed sleep.

``eventually`` is for synchronous tests, ``aeventually`` for async ones (its check may be sync or async). Both
return the first truthy value the check gave and raise ``AssertionError`` at the deadline, naming ``what`` and the
last value seen, so a failure says what it was waiting for.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _failure(what: str, timeout: float, last: Any) -> AssertionError:
    return AssertionError(f"{what or 'condition'} not met within {timeout}s (last value: {last!r})")


def eventually(check: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.02, what: str = "") -> T:
    """Call ``check`` until it returns a truthy value (returned) or raise at ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        time.sleep(interval)


async def aeventually(check: Callable[[], Awaitable[T] | T], *, timeout: float = 10.0, interval: float = 0.05,
                      what: str = "") -> T:
    """Await (or call) ``check`` until it gives a truthy value (returned) or raise at ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        last: T = await value if inspect.isawaitable(value) else value  # type: ignore[assignment]
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        await asyncio.sleep(interval)
