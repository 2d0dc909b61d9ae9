"""etcd's KV and Watch services (:class:`KV`): Put, Range, Txn, DeleteRange, Compact and Watch, over the client's
one :class:`~opsmanager.etcd.transport.Transport`.

The operator itself compacts (``Compact``) and reads one key for the health gate; the rest serves the tests' live
writer, client histories and watch check (``e2e/writer.py``, ``e2e/history.py``, ``e2e/watchcheck.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import grpc.aio

from opsmanager.etcd import access, errors, tokens, transport
from opsmanager.etcd._pb import rpc_pb2


@dataclasses.dataclass(frozen=True)
class KeyRead:
    """One key as a linearizable read saw it: its value (None: absent), the revision it was last written at and its
    version (0 when absent), and the response header's store revision, cluster and member."""

    key: bytes
    value: bytes | None
    mod_revision: int
    version: int
    revision: int
    cluster_id: int
    member_id: int


@dataclasses.dataclass(frozen=True)
class GuardedPut:
    """What :meth:`KV.put_if_mod_revision` got: ``succeeded`` (the comparison held and the value was written at
    ``revision``), else ``current``, the key as the transaction's other branch read it at ``revision``."""

    succeeded: bool
    revision: int
    current: KeyRead | None


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One change a watch delivered: ``kind`` ``"put"`` or ``"delete"``, at ``mod_revision``."""

    kind: str
    key: bytes
    value: bytes
    mod_revision: int
    version: int


@dataclasses.dataclass(frozen=True)
class WatchBatch:
    """One response of a watch stream: its events (none in the confirmation that opens the stream, or in a progress
    notification) and the header's store revision, cluster and member — the confirmation already names the cluster
    that will answer, before any event of it."""

    events: tuple[WatchEvent, ...]
    revision: int
    cluster_id: int
    member_id: int

    @classmethod
    def from_pb(cls, resp: rpc_pb2.WatchResponse) -> WatchBatch:
        return cls(events=tuple(WatchEvent(kind="delete" if e.type == rpc_pb2.Event.DELETE else "put",
                                           key=bytes(e.kv.key), value=bytes(e.kv.value),
                                           mod_revision=e.kv.mod_revision, version=e.kv.version)
                                for e in resp.events),
                   revision=resp.header.revision, cluster_id=resp.header.cluster_id, member_id=resp.header.member_id)


def _key_read(key: bytes, kvs: Sequence[rpc_pb2.KeyValue], header: rpc_pb2.ResponseHeader) -> KeyRead:
    kv = kvs[0] if kvs else None
    return KeyRead(key=key, value=bytes(kv.value) if kv is not None else None,
                   mod_revision=kv.mod_revision if kv is not None else 0, version=kv.version if kv is not None else 0,
                   revision=header.revision, cluster_id=header.cluster_id, member_id=header.member_id)


def prefix_end(prefix: bytes) -> bytes:
    """Pure: etcd's ``range_end`` for every key starting with ``prefix`` (the prefix with its last byte below
    0xff incremented; ``\\x00`` — to the end of the keyspace — when every byte is 0xff)."""
    trimmed = prefix.rstrip(b"\xff")
    return trimmed[:-1] + bytes([trimmed[-1] + 1]) if trimmed else b"\x00"


def as_bytes(value: bytes | str) -> bytes:
    """A key or value as etcd takes it (a ``str`` is UTF-8 encoded)."""
    return value.encode() if isinstance(value, str) else value


class KV:
    """etcd's KV and Watch services over ``transport``. A call with ``endpoint`` (and ``scheme``) goes to that member,
    without one to the first member that answers."""

    def __init__(self, transport_: transport.Transport) -> None:
        self.transport = transport_

    async def put(self, key: bytes | str, value: bytes | str, *, endpoint: access.Endpoint | str | None = None,
                  scheme: str | None = None, timeout: float | None = None,
                  deadline: float | None = None) -> int:
        """Put one key; returns the revision. On ``endpoint`` (and ``scheme``) when given, else on any member."""
        request = rpc_pb2.PutRequest(key=as_bytes(key), value=as_bytes(value))

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.PutResponse:
            return await c.kv.Put(request, timeout=t)  # type: ignore[no-any-return]

        resp = await self.transport.on(endpoint, "Put", fn, scheme=scheme, timeout=timeout, deadline=deadline)
        return int(resp.header.revision)

    async def _range_one(self, key: bytes, *, serializable: bool, endpoint: access.Endpoint | str | None,
                         scheme: str | None, timeout: float | None, deadline: float | None) -> rpc_pb2.RangeResponse:
        request = rpc_pb2.RangeRequest(key=key, serializable=serializable, limit=1)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.RangeResponse:
            return await c.kv.Range(request, timeout=t)  # type: ignore[no-any-return]

        return await self.transport.on(endpoint, "Range", fn, scheme=scheme, timeout=timeout, deadline=deadline)

    async def get(self, key: bytes | str, *, endpoint: access.Endpoint | str | None = None,
                  serializable: bool = False, scheme: str | None = None, timeout: float | None = None,
                  deadline: float | None = None) -> bytes | None:
        """Read one key (linearizable unless ``serializable``); None when absent."""
        resp = await self._range_one(as_bytes(key), serializable=serializable, endpoint=endpoint, scheme=scheme,
                                     timeout=timeout, deadline=deadline)
        return bytes(resp.kvs[0].value) if resp.kvs else None

    async def read_key(self, key: bytes | str, *, endpoint: access.Endpoint | str | None = None,
                       scheme: str | None = None, timeout: float | None = None,
                       deadline: float | None = None) -> KeyRead:
        """A linearizable read of one key with its revisions (what :meth:`get` leaves out)."""
        k = as_bytes(key)
        resp = await self._range_one(k, serializable=False, endpoint=endpoint, scheme=scheme, timeout=timeout,
                                     deadline=deadline)
        return _key_read(k, resp.kvs, resp.header)

    async def put_if_mod_revision(self, key: bytes | str, value: bytes | str, mod_revision: int, *,
                                  endpoint: access.Endpoint | str | None = None, scheme: str | None = None,
                                  timeout: float | None = None, deadline: float | None = None) -> GuardedPut:
        """Write ``value`` only if ``key`` was last written at ``mod_revision`` (0: only if it is absent), else read
        it: one transaction, so the answer says which branch ran and what the key held."""
        k = as_bytes(key)
        request = rpc_pb2.TxnRequest(
            compare=[rpc_pb2.Compare(result=rpc_pb2.Compare.EQUAL, target=rpc_pb2.Compare.MOD, key=k,
                                     mod_revision=mod_revision)],
            success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=as_bytes(value)))],
            failure=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=k, limit=1))])

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.TxnResponse:
            return await c.kv.Txn(request, timeout=t)  # type: ignore[no-any-return]

        resp = await self.transport.on(endpoint, "Txn", fn, scheme=scheme, timeout=timeout, deadline=deadline)
        if resp.succeeded:
            return GuardedPut(succeeded=True, revision=resp.header.revision, current=None)
        kvs = resp.responses[0].response_range.kvs if resp.responses else []
        return GuardedPut(succeeded=False, revision=resp.header.revision, current=_key_read(k, kvs, resp.header))

    async def watch(self, prefix: bytes | str, *, start_revision: int, endpoint: access.Endpoint | str,
                    scheme: str | None = None, timeout: float | None = None) -> AsyncGenerator[WatchBatch, None]:
        """The changes of every key under ``prefix`` from ``start_revision`` on, as ``endpoint`` streams them, until
        the caller stops iterating (a watch has no end of its own). ``timeout`` bounds the set-up only: until etcd
        confirms the watch.

        Raises :class:`errors.Compacted` (``compact_revision`` set) when ``start_revision`` is at or below the last
        compaction — at once, or on the stream — and the translated transport errors when the stream breaks; the
        caller reconnects from the revision after the last one it saw."""
        ep = self.transport.endpoint(endpoint)
        s = self.transport.schemes(ep, scheme)[0]
        label = f"{ep.label} [{s}]"
        budget = self.transport.timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + budget
        start = as_bytes(prefix)
        conn = self.transport.conn(ep, s)
        call: Any = None
        try:
            token = await self.transport.login.current(conn.auth, label, deadline)
            call = conn.watch.Watch(metadata=((tokens.TOKEN_KEY, token),) if token else None)
            await call.write(rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
                key=start, range_end=prefix_end(start), start_revision=start_revision)))
            confirmed = False  # etcd answers the create request first (created=true), then sends events
            while True:
                if confirmed:
                    resp = await call.read()
                else:
                    remaining = deadline - asyncio.get_running_loop().time()
                    resp = await asyncio.wait_for(call.read(), max(remaining, 0.001))
                _check_watch_response(resp, label, start_revision)
                confirmed = True
                yield WatchBatch.from_pb(resp)
        except (*transport.GRPC_RAISES, errors.EtcdError) as exc:
            err = errors.translate(exc, endpoint=label, call="Watch")
            if err is exc:
                raise
            raise err from exc
        finally:
            if call is not None:
                call.cancel()

    async def range_prefix(self, prefix: bytes | str, *, endpoint: access.Endpoint | str | None = None,
                           page: int = 1000, scheme: str | None = None, timeout: float | None = None,
                           revision: int = 0) -> tuple[list[tuple[bytes, bytes]], int]:
        """Every key under ``prefix`` with its value, in key order, and the revision read at: a linearizable
        read, paged ``page`` keys at a time, every page at the first page's revision (one consistent view) — or at
        ``revision`` when given (the store as it was then; :class:`errors.Compacted` below the compaction)."""
        start, end = as_bytes(prefix), prefix_end(as_bytes(prefix))
        out: list[tuple[bytes, bytes]] = []
        while True:
            request = rpc_pb2.RangeRequest(key=start, range_end=end, limit=page, revision=revision)

            async def fn(c: transport.Conn, t: float,
                         request: rpc_pb2.RangeRequest = request) -> rpc_pb2.RangeResponse:
                return await c.kv.Range(request, timeout=t)  # type: ignore[no-any-return]

            if endpoint is None:
                resp, _ = await self.transport.on_any("Range", fn, timeout=timeout)
            else:
                resp, _ = await self.transport.call(self.transport.endpoint(endpoint), "Range", fn, timeout=timeout,
                                                    scheme=scheme)
            revision = revision or int(resp.header.revision)
            out.extend((bytes(kv.key), bytes(kv.value)) for kv in resp.kvs)
            if not resp.more or not resp.kvs:
                return out, revision
            start = bytes(resp.kvs[-1].key) + b"\x00"

    async def delete_prefix(self, prefix: bytes | str, *, timeout: float | None = None) -> tuple[int, int]:
        """Delete every key under ``prefix``; (keys deleted, the revision of the deletion)."""
        key = as_bytes(prefix)
        request = rpc_pb2.DeleteRangeRequest(key=key, range_end=prefix_end(key))

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.DeleteRangeResponse:
            return await c.kv.DeleteRange(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("DeleteRange", fn, timeout=timeout)
        return int(resp.deleted), int(resp.header.revision)

    async def compact(self, revision: int, *, physical: bool = True, timeout: float | None = None) -> int:
        """Compact the key-value history below ``revision`` (every member: it goes through consensus); with
        ``physical`` the answer waits until the backend applied it, so a defragmentation after it gives the space
        back. Returns the cluster's revision."""
        if revision <= 0:
            raise ValueError(f"compact: revision must be positive, got {revision}")
        request = rpc_pb2.CompactionRequest(revision=revision, physical=physical)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.CompactionResponse:
            return await c.kv.Compact(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("Compact", fn, timeout=timeout)
        return int(resp.header.revision)


def _check_watch_response(resp: Any, label: str, start_revision: int) -> None:
    """Raise for a watch response that ends the stream: EOF, or etcd cancelling the watch (compacted revision)."""
    if resp is grpc.aio.EOF:
        raise errors.MemberUnreachable(f"Watch on {label}: the stream ended", endpoint=label)
    if resp.canceled:
        if resp.compact_revision:
            compacted = errors.Compacted(f"Watch on {label}: revision {start_revision} is compacted "
                                         f"(the last compaction is at {resp.compact_revision})", endpoint=label)
            compacted.compact_revision = resp.compact_revision
            raise compacted
        raise errors.EtcdServerError(f"Watch on {label}: cancelled ({resp.cancel_reason})",
                                     endpoint=label, details=resp.cancel_reason)
