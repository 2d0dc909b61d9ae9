"""One etcd client per Etcd and client identity, reused across reconciles (:class:`ClientPool`).

Why: without a pool, the provisioner's status pass and every engine reconcile would open a new
:class:`EtcdClient` — new gRPC channels, a new TLS handshake per member — and close it a moment later, every few
hundred milliseconds during an operation and every interval for every idle Etcd. A pooled client keeps its
channels (and what it learned: which scheme a member answers on, member IDs, the member that answered last) and
is only told the current member addresses each time it is leased.

- **Key**: ``(namespace, Etcd name, identity fingerprint, user)`` (fingerprint None for plaintext; ``user``: the
  engine and the status pass each have their own, since they set different endpoint schemes). A new identity — the operator's
  client certificate was renewed, a rotation moved it to another CA — is a new client; the old one is closed once
  it has not been leased for :attr:`ClientPool.idle_close` seconds.
- **Tokens**: the clients of one Etcd share the last token etcd gave (:class:`~opsmanager.etcd.tokens.Board`): a
  new client (the engine's, for each request) takes it instead of logging in. A login needs a quorum, so during a
  quorum loss the status pass's token, kept alive by its use, is what lets the engine ask the survivor anything.
  :meth:`ClientPool.forget_logins` makes them all log in again after a restore replaced the members' data.
- **Addresses**: each lease sets the endpoints it was given and closes the channels of addresses no longer in
  them (a recreated member pod has a new IP).
- **Lifetime**: ``async with`` on a leased client does not close it (the engine's steps keep their ``async with``
  for the unpooled clients of tests); :meth:`ClientPool.forget` closes an Etcd's clients when the Etcd is deleted,
  :meth:`ClientPool.close` all of them when the operator stops.
- **Event loops**: gRPC's asyncio channels belong to the loop that made them. A lease from another loop (tests run
  one loop each) starts afresh instead of reusing channels of a loop that may be gone.

:data:`shared` is the operator process's pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable, Sequence

from opsmanager.etcd import access, client, tokens

log = logging.getLogger(__name__)

Key = tuple[str, str, str | None, str]

DEFAULT_IDLE_CLOSE = 300.0


class SharedClient(client.EtcdClient):
    """An :class:`~opsmanager.etcd.client.EtcdClient` that a ``with`` block does not close (the pool does)."""

    async def __aenter__(self) -> SharedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def prune(self) -> None:
        """Close the channels of addresses that are no longer endpoints."""
        await self.transport.prune()


@dataclasses.dataclass
class _Entry:
    client: SharedClient
    loop: asyncio.AbstractEventLoop
    used: float


class ClientPool:
    """The etcd clients of one process (see the module doc)."""

    def __init__(self, *, idle_close: float = DEFAULT_IDLE_CLOSE) -> None:
        self.idle_close = idle_close
        self._entries: dict[Key, _Entry] = {}
        self._boards: dict[tuple[str, str], tokens.Board] = {}  # per Etcd: the token its clients share
        self.opened = 0  # clients made since the start, for tests and the benchmark

    def __len__(self) -> int:
        return len(self._entries)

    async def lease(self, namespace: str, db: str, endpoints: Sequence[access.Endpoint],
                    tls: access.TLSIdentity | None, *, timeout: float, user: str) -> SharedClient:
        """The pooled client of ``namespace/db`` for ``tls`` and ``user``, now over ``endpoints``."""
        loop = asyncio.get_running_loop()
        key = (namespace, db, tls.fingerprint if tls is not None else None, user)
        entry = self._entries.get(key)
        if entry is not None and entry.loop is not loop:
            self._entries.pop(key)  # made on another (perhaps closed) loop: its channels are not usable here
            entry = None
        if entry is None:
            board = self._boards.setdefault((namespace, db), tokens.Board())
            entry = _Entry(SharedClient(endpoints, tls=tls, timeout=timeout, board=board), loop, time.monotonic())
            self._entries[key] = entry
            self.opened += 1
        else:
            entry.client.set_endpoints(endpoints)
            entry.client.timeout = timeout
            entry.used = time.monotonic()
            await entry.client.prune()
        await self._reap(loop, keep=key)
        return entry.client

    async def _reap(self, loop: asyncio.AbstractEventLoop, keep: Key) -> None:
        now = time.monotonic()
        idle = [k for k, e in self._entries.items()
                if k != keep and e.loop is loop and now - e.used > self.idle_close]
        await self._close(idle)

    async def _close(self, keys: Iterable[Key]) -> None:
        for key in list(keys):
            entry = self._entries.pop(key, None)
            if entry is not None:
                with contextlib.suppress(Exception):
                    await entry.client.close()

    async def forget(self, namespace: str, db: str, *, user: str | None = None) -> None:
        """Close every client of ``namespace/db`` (the Etcd is gone), or only ``user``'s (an ops request ended: the
        engine's clients of that Etcd — one per identity it went through — wait for no one)."""
        await self._close([k for k in self._entries if k[:2] == (namespace, db) and user in (None, k[3])])
        if user is None:
            self._boards.pop((namespace, db), None)

    def forget_logins(self, namespace: str, db: str) -> None:
        """Every client of ``namespace/db`` logs in again at its next call, and the board is cleared: the members'
        data was replaced (a restore), and a token of the old cluster would stall every call on the new one."""
        for key, entry in self._entries.items():
            if key[:2] == (namespace, db):
                entry.client.forget_login()
        board = self._boards.get((namespace, db))
        if board is not None:
            board.token = None

    async def close(self) -> None:
        await self._close(list(self._entries))


shared = ClientPool()
"""The operator process's pool (the engine's and the provisioner's clients)."""
