"""The leader monitor: who leads, at which raft term, sampled every few tens of milliseconds during an operation.

"No unplanned leader election" is measured here. Every change of leadership in etcd is an election at a higher
raft term; a MoveLeader is one too (a planned one). So ``unplanned = term increments - MoveLeader calls``. With
pre-vote (on by default in 3.5) a restarting follower does not bump the term, so a well-run rolling restart shows
exactly one term increment per MoveLeader; a killed leader shows an election of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Iterable

from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client


@dataclasses.dataclass(frozen=True)
class LeaderChange:
    at: float  # seconds since the monitor started
    term: int
    leader_id: int


@dataclasses.dataclass(frozen=True)
class MonitorResult:
    first_term: int
    last_term: int
    changes: tuple[LeaderChange, ...]
    blind_seconds: float = 0.0  # time no member answered with any identity (elections then are seen late or not)

    @property
    def elections(self) -> int:
        return max(0, self.last_term - self.first_term)


class LeaderMonitor:
    def __init__(self, endpoints: list[access.Endpoint], *, identity: access.TLSIdentity | None = None,
                 identities: list[access.TLSIdentity] | None = None, interval: float = 0.05) -> None:
        """``identities``: every client identity that may be the accepted one during the operation (a CA change
        moves the members from one to the other); each sample asks with all of them, plus plain http."""
        ids = list(identities or ([identity] if identity is not None else []))
        self._endpoints = list(endpoints)
        self._clients = [etcd_client.EtcdClient(endpoints, tls=i, timeout=0.5) for i in ids]
        self._clients.append(etcd_client.EtcdClient([e.with_schemes("http") for e in endpoints], timeout=0.5))
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._changes: list[LeaderChange] = []
        self._first_term = 0
        self._last = (0, 0)
        self._started = 0.0
        self._blind = 0.0
        self._last_sample = 0.0

    def add_identity(self, identity: access.TLSIdentity) -> None:
        """Ask with ``identity`` too from the next sample on (a CA that appeared while running)."""
        self._clients.insert(0, etcd_client.EtcdClient(self._endpoints, tls=identity, timeout=0.5))

    def move_endpoint(self, name: str, host: str) -> None:
        """Member ``name`` answers at ``host`` now (see :meth:`e2e.writer.Writer.move_endpoint`)."""
        def moved(eps: Iterable[access.Endpoint]) -> list[access.Endpoint]:
            return [dataclasses.replace(e, host=host) if e.name == name else e for e in eps]

        self._endpoints = moved(self._endpoints)
        for client in self._clients:
            client.set_endpoints(moved(client.endpoints))

    @property
    def started_at(self) -> float:
        """When it started (``time.monotonic``): :attr:`LeaderChange.at` counts from it."""
        return self._started

    async def start(self) -> None:
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="leader-monitor")

    async def stop(self) -> MonitorResult:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for client in self._clients:
            await client.close()
        return self.result

    @property
    def result(self) -> MonitorResult:
        return MonitorResult(self._first_term, self._last[0], tuple(self._changes), self._blind)

    async def _run(self) -> None:
        while True:
            answers = await asyncio.gather(*(c.statuses(timeout=0.4) for c in self._clients))
            now = time.monotonic() - self._started
            best = max(((s.raft_term, s.leader_id) for views in answers for s in views.values()
                        if isinstance(s, etcd_client.MemberStatus) and s.leader_id), default=None)
            if best is None:
                self._blind += now - self._last_sample
            self._last_sample = now
            if best is not None:
                if not self._first_term:
                    self._first_term = best[0]
                    self._last = best
                elif best[0] > self._last[0]:
                    self._changes.append(LeaderChange(now, best[0], best[1]))
                    self._last = best
                # Same term, another leader id: a lagging member's view of the same election (a term has one
                # leader), not a change.
            await asyncio.sleep(self.interval)
