"""A deduplicating work queue of object keys, the way client-go controllers are built.

Informer handlers only ``add(key)``; one or more workers call ``reconcile(key)``. A key is never reconciled by
two workers at once; a key added while it is being reconciled is reconciled once more afterwards (so no change
is lost). ``reconcile`` returns ``None`` (done) or a delay in seconds to look again (a timer, e.g. a renewal);
an exception requeues the key with exponential back-off (capped) and is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from opsmanager import kube

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, name: str, reconcile: Callable[[K], Awaitable[float | None]], *, workers: int = 1,
                 max_backoff: float = 5.0) -> None:
        self.name = name
        self._reconcile = reconcile
        self._workers = workers
        self._max_backoff = max_backoff
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._again: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, key: K) -> None:
        if key in self._active:
            self._again.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; an earlier pending timer for the key wins."""
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        due = loop.time() + max(0.0, delay)
        if existing is not None and existing.when() <= due:
            return
        if existing is not None:
            existing.cancel()
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def start(self) -> None:
        for i in range(self._workers):
            self._tasks.append(asyncio.create_task(self._work(), name=f"{self.name}-worker-{i}"))

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                delay = await self._reconcile(key)
                self._failures.pop(key, None)
                if delay is not None:
                    self.add_after(key, delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                backoff = min(self._max_backoff, 0.1 * 2 ** min(n, 10))
                log.warning("%s: reconcile %s failed (attempt %d, retry in %.1fs): %s", self.name, key, n, backoff,
                            exc, exc_info=n == 1 and not _is_expected(exc))
                self.add_after(key, backoff)
            finally:
                self._active.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.add(key)


def _is_expected(exc: BaseException) -> bool:
    return isinstance(exc, kube.KubeError)
