"""Client histories: several clients record what they asked etcd and what it answered, and a watcher records what
it was told, for the linearizability check (:mod:`e2e.lincheck`) and the watch check (:mod:`e2e.watchcheck`).

**The recorder** (:class:`Recorder`): ``clients`` concurrent clients, each looping over random operations on a few
shared keys ``<prefix>/k<i>`` (shared, so that the clients race and a stale read can show):

* ``put`` a value no one else writes (``c<client>-<seq>``);
* ``get``, a linearizable read (value, mod revision, and the header's revision);
* ``txn``: put only if the key's mod revision is still the last one this client saw, else read it (etcd's
  compare-and-swap; the answer says which branch ran).

Each record (:class:`Operation`) has the client, the operation, its input, its call and return times
(``time.monotonic_ns``, taken just before the request goes and just after the answer came: the real interval lies
within) and its outcome. Any error is an **unknown** outcome: a put that timed out may have been applied, or may be
applied later. It is kept, never dropped or retried under the same value; the checker gives it an infinite return
time, as etcd's robustness tests do. The client's next operation goes to its next target (failover).

**Spread and following**: client ``i`` starts on member ``i mod n``, so every member serves some clients, and fails
over through the other targets. The targets are :class:`e2e.writer.Target` (endpoint x scheme x identity); a
recorder made with :meth:`Recorder.following` takes the targets and the login of a running :class:`e2e.writer.Writer`
before each operation, so it follows whatever the writer follows — new CAs and client certificates (its
:class:`~e2e.writer.Material`), passwords (its :class:`~e2e.writer.Login`), members moved to other addresses
(``Scenario.following_addresses``) — with the writer's own building blocks, and runs beside it in ``Scenario.live``.

**The watcher** (:class:`Watcher`): one watch on the recorder's prefix, reconnecting after any error from the revision
after the last event it saw, on the next target; it logs each (re)connection, each response and each error
(:mod:`e2e.watchcheck`'s entries). When a response names another cluster than the one it watched, it logs
``new-cluster`` and drops that response's events; after a clear error (``compacted``, ``new-cluster``) it starts over
from the current revision (a new segment).

Both together, as :class:`Recording` (what ``Scenario.operate(..., record=True)`` runs beside the live writer)::

    async with history.Recording(history.Recorder(writer.targets_for(eps, identities=[ident]))) as rec:
        ...                                         # change the cluster
    (await lincheck.check(rec.result.history, tmp_path)).raise_for_problems()
    assert rec.result.watch_problems() == []

A history that spans a restore (another cluster ID, the revisions of the snapshot kept) mixes two histories: the
recorder does not yet tell them apart (a put's answer carries no cluster ID here), so record one per history.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import random
import secrets
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Self

import aiohttp

from e2e import gateway, watchcheck, writer
from opsmanager.etcd import access, errors, kv
from opsmanager.etcd import client as etcd_client

KINDS = ("put", "get", "txn")


@dataclasses.dataclass(frozen=True)
class Operation:
    """One operation of one client, as lincheck reads it (the JSON keys are the field names, ``return_`` as
    ``return``). ``value``: what a put or txn writes; ``expect``: the mod revision a txn compares (0: absent).
    A known outcome (``ok``) has the header's ``revision``; a txn ``succeeded`` or not; a get — and a txn whose
    comparison failed, which reads the key instead — what the key held (``found``, ``read_value``,
    ``mod_revision``). ``unknown``: ``error`` says what happened."""

    client: int
    kind: str
    key: str
    call: int
    return_: int | None
    outcome: str
    value: str = ""
    expect: int = 0
    revision: int = 0
    succeeded: bool = False
    found: bool = False
    read_value: str = ""
    mod_revision: int = 0
    member: str = ""
    error: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Operation: kind must be one of {KINDS}, not {self.kind!r}")
        if self.outcome not in ("ok", "unknown"):
            raise ValueError(f"Operation: outcome must be 'ok' or 'unknown', not {self.outcome!r}")

    @property
    def write(self) -> bool:
        return self.kind != "get"

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["return"] = out.pop("return_")
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Operation:
        data = dict(raw)
        data["return_"] = data.pop("return", None)
        return cls(**data)


def never_sent(error: str) -> bool:
    """Pure: an error (``Operation.error``) that proves the request never reached the member: the TLS handshake
    failed, or gRPC found no connection to send it on ("failed to connect to all addresses": the call fails when
    it is picked, before any byte of it is written). A connection lost after the request went out says neither."""
    return error.startswith("TLSHandshakeFailed:") or (error.startswith("MemberUnreachable:")
                                                       and "failed to connect to all addresses" in error)


@dataclasses.dataclass(frozen=True)
class History:
    """Every operation of every client (in call order), and the prefix their keys are under."""

    prefix: str
    operations: tuple[Operation, ...]

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "operations": [op.to_json() for op in self.operations]}

    def write(self, path: pathlib.Path) -> pathlib.Path:
        path.write_text(json.dumps(self.to_json()))
        return path

    @classmethod
    def load(cls, path: pathlib.Path) -> History:
        raw = json.loads(path.read_text())
        return cls(prefix=raw.get("prefix", ""), operations=tuple(Operation.from_json(o) for o in raw["operations"]))

    def changes(self) -> list[watchcheck.Change]:
        """What the clients wrote, for the watch check: known writes at their revision, writes of unknown outcome at
        the revision a read showed them at (else None)."""
        writes: list[tuple[str, str, int | None]] = []
        reads: list[tuple[str, str, int]] = []
        for op in self.operations:
            if op.write and op.outcome == "unknown":
                writes.append((op.key, op.value, None))
            elif op.kind == "put" or (op.kind == "txn" and op.succeeded):
                writes.append((op.key, op.value, op.revision))
            if op.outcome == "ok" and op.found:
                reads.append((op.key, op.read_value, op.mod_revision))
        return watchcheck.changes(writes, reads)

    def counts(self) -> dict[str, int]:
        out = {"operations": len(self.operations)}
        for op in self.operations:
            name = f"{op.kind} {op.outcome}"
            out[name] = out.get(name, 0) + 1
        return out


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


class _Targets:
    """Where operations go: fixed targets (:meth:`set_targets`, :meth:`move_endpoint`, like the writer's), or those
    of a running writer, read afresh each time."""

    def __init__(self, targets: Sequence[writer.Target], follow: writer.Writer | None,
                 credentials: access.Credentials | None) -> None:
        self._targets = list(targets)
        self.follow = follow
        self._credentials = credentials
        if not self._targets and follow is None:
            raise ValueError("history: give targets, or a writer to follow")

    def now(self) -> list[writer.Target]:
        return list(self.follow.targets) if self.follow is not None else list(self._targets)

    def credentials(self) -> access.Credentials | None:
        return self.follow.credentials if self.follow is not None else self._credentials

    def set_targets(self, targets: Sequence[writer.Target]) -> None:
        self._targets = list(targets)

    def move_endpoint(self, name: str, host: str) -> None:
        self._targets = [writer.moved(t, name, host) for t in self._targets]

    def order(self, home: int, last_good: writer.Target | None,
              failed: Sequence[writer.Target] = ()) -> list[writer.Target]:
        """The targets, the last good one first, then those on the client's home member, then the rest; those in
        ``failed`` (failed since the last success) last, so that failing over walks every target in turn."""
        targets = self.now()
        names = list(dict.fromkeys(t.endpoint.name for t in targets))
        mine = names[home % len(names)] if names else ""
        ordered = sorted(targets, key=lambda t: (t in failed, t != last_good, t.endpoint.name != mine))
        return ordered


class _FailOver:
    """A client's way through the targets: the last good one while it works; after a failure the next target not
    failed since the last success, every target in turn (a fail-over to "the second of the order" went back and
    forth between the first two, which never reached plain http when two https identities were refused, or left
    a client on the two targets of an isolated member)."""

    def __init__(self, targets: _Targets, home: int) -> None:
        self.targets, self.home = targets, home
        self.last_good: writer.Target | None = None
        self.failed: list[writer.Target] = []

    def order(self) -> list[writer.Target]:
        order = self.targets.order(self.home, self.last_good, self.failed)
        if order and order[0] in self.failed:  # every target failed since the last success: start the round again
            self.failed.clear()
        return order

    def ok(self, target: writer.Target) -> None:
        self.last_good, self.failed = target, []

    def fail(self, target: writer.Target) -> None:
        self.last_good = None
        if target not in self.failed:
            self.failed.append(target)


class _Running:
    """``async with``: :meth:`start` on the way in, :meth:`stop` on the way out."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> object:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class Recorder(_Running):
    """``clients`` clients recording operations on ``keys`` shared keys under ``prefix`` (by default
    ``/opsmanager/history/<8 hex digits>``, its own). Each client waits ``interval`` seconds between operations;
    ``try_timeout`` bounds one. ``start()``/``stop()`` or ``async with``; :meth:`history` after."""

    def __init__(self, targets: Sequence[writer.Target] = (), *, clients: int = 3, keys: int = 3,
                 interval: float = 0.02, try_timeout: float = 0.5, prefix: str | None = None,
                 credentials: access.Credentials | None = None, follow: writer.Writer | None = None,
                 seed: int | None = None) -> None:
        if clients < 1 or keys < 1 or interval <= 0 or try_timeout <= 0:
            raise ValueError("Recorder: clients and keys must be at least 1, interval and try_timeout positive")
        self.prefix = prefix or f"/opsmanager/history/{secrets.token_hex(4)}"
        if self.prefix.endswith("/"):
            raise ValueError(f"Recorder: prefix must not end with '/', not {self.prefix!r}")
        self.keys = [f"{self.prefix}/k{i}" for i in range(keys)]
        self.clients, self.interval = clients, interval
        self.targets = _Targets(targets, follow, credentials)
        self._connections = writer.ClientPool(try_timeout)
        self._seed = seed if seed is not None else random.randrange(1 << 30)
        self._operations: list[Operation] = []
        self._not_sent = 0  # tries on a target that never received them (never_sent): not operations
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    @classmethod
    def following(cls, w: writer.Writer, **kwargs: Any) -> Recorder:
        """A recorder on whatever targets and login ``w`` holds, as they change (``w`` must be running)."""
        return cls(follow=w, **kwargs)

    def set_targets(self, targets: Sequence[writer.Target]) -> None:
        self.targets.set_targets(targets)

    def move_endpoint(self, name: str, host: str) -> None:
        self.targets.move_endpoint(name, host)

    @property
    def operations(self) -> int:
        return len(self._operations)

    @property
    def not_sent(self) -> int:
        """Tries skipped for the next target because the member never received them (:func:`never_sent`)."""
        return self._not_sent

    def history(self) -> History:
        return History(prefix=self.prefix, operations=tuple(sorted(self._operations, key=lambda o: o.call)))

    async def start(self) -> None:
        if self._tasks:
            raise RuntimeError("Recorder already started")
        self._stopping = False
        self._tasks = [asyncio.create_task(self._client(i), name=f"history-client-{i}") for i in range(self.clients)]

    async def stop(self) -> History:
        """Let every client finish the operation in flight (at most ``try_timeout``), then stop."""
        self._stopping = True
        try:
            await asyncio.gather(*self._tasks)
        finally:
            self._tasks = []
        return self.history()

    async def close(self) -> None:
        await self._connections.close()

    async def wait_operations(self, count: int, *, timeout: float = 10.0) -> None:
        """Wait (polling, with a deadline) until ``count`` more operations are recorded; a sync point."""
        target = len(self._operations) + count
        deadline = time.monotonic() + timeout
        while len(self._operations) < target:
            for task in self._tasks:
                if task.done():
                    task.result()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Recorder: {target - len(self._operations)} of {count} operations missing after "
                                   f"{timeout}s")
            await asyncio.sleep(0.05)

    async def _client(self, client: int) -> None:
        rng = random.Random(self._seed * 1000 + client)
        way = _FailOver(self.targets, client)
        mods: dict[str, int] = {}  # the last mod revision this client saw of each key
        seq = 0
        while not self._stopping:
            seq += 1
            kind = rng.choices(KINDS, weights=(2, 2, 1))[0]
            key = rng.choice(self.keys)
            op, target = await self._first_sent(way, client, kind, key, f"c{client}-{seq}", mods.get(key, 0))
            if op is None:  # no target took the request: nothing happened, and nothing is recorded
                await asyncio.sleep(self.interval)
                continue
            self._operations.append(op)
            if op.outcome == "ok":
                way.ok(target)
                if op.kind == "put" or op.succeeded:
                    mods[key] = op.revision
                elif op.found or op.kind == "txn":
                    mods[key] = op.mod_revision
            else:  # fail over: the next operation starts on the next target
                way.fail(target)
            await asyncio.sleep(self.interval)

    async def _first_sent(self, way: _FailOver, client: int, kind: str, key: str, value: str,
                          expect: int) -> tuple[Operation | None, writer.Target]:
        """The operation on the first target of ``way`` that took it. A target that provably never received
        the request (:func:`never_sent`: its TLS handshake or its connection failed) is skipped for the next
        one, as the writer does: recorded as unknown, each such try would be a write of unknown outcome that
        never happened, and a scheme or identity a member does not serve yet (before an add TLS, across a CA
        change) would fill the history with them (thousands in one add TLS, past what porcupine can search).
        None: no target took it."""
        order = way.order()
        for target in order:
            op = await self._one(client, kind, key, value, expect, target)
            if not never_sent(op.error):
                return op, target
            self._not_sent += 1
            way.fail(target)
        return None, order[0]

    async def _one(self, client: int, kind: str, key: str, value: str, expect: int,
                   target: writer.Target) -> Operation:
        self._connections.use_credentials(self.targets.credentials())
        c = self._connections.for_target(target)
        where: dict[str, Any] = {"endpoint": target.endpoint.name, "scheme": target.scheme}
        base: dict[str, Any] = {"client": client, "kind": kind, "key": key, "member": target.label}
        if kind != "get":
            base["value"] = value
        if kind == "txn":
            base["expect"] = expect
        call = time.monotonic_ns()
        try:
            if kind == "put":
                revision = await c.kv.put(key, value, **where)
                answer: dict[str, Any] = {"revision": revision}
            elif kind == "get":
                answer = self._read(await c.kv.read_key(key, **where))
            else:
                guarded = await c.kv.put_if_mod_revision(key, value, expect, **where)
                answer = {"revision": guarded.revision, "succeeded": guarded.succeeded}
                if guarded.current is not None:
                    answer.update(self._read(guarded.current))
        except errors.EtcdError as err:
            return Operation(call=call, return_=time.monotonic_ns(), outcome="unknown",
                             error=f"{type(err).__name__}: {err}", **base)
        return Operation(call=call, return_=time.monotonic_ns(), outcome="ok", **base, **answer)

    @staticmethod
    def _read(kv: kv.KeyRead) -> dict[str, Any]:
        return {"revision": kv.revision, "found": kv.value is not None, "read_value": _text(kv.value),
                "mod_revision": kv.mod_revision}

    async def read_final(self, *, timeout: float = 10.0) -> dict[str, Operation]:
        """After :meth:`stop`: every key read once more (linearizable, recorded as a client of its own), trying each
        target until one answers; the reads that got an answer, by key. The highest ``mod_revision`` among them is
        the last write under the prefix: what a watcher must reach."""
        reader = self.clients
        out: dict[str, Operation] = {}
        deadline = time.monotonic() + timeout
        for key in self.keys:
            while key not in out:
                for target in self.targets.order(reader, None):
                    op = await self._one(reader, "get", key, "", 0, target)
                    self._operations.append(op)
                    if op.outcome == "ok":
                        out[key] = op
                        break
                if key not in out and time.monotonic() >= deadline:
                    raise TimeoutError(f"Recorder.read_final: {key} could not be read within {timeout}s")
        return out


VIA = ("grpc", "gateway")


class Watcher(_Running):
    """One watch on ``prefix`` from ``start_revision``, reconnecting after every error from the revision after the
    last event seen, on the next target; :attr:`log` is what :func:`e2e.watchcheck.check` reads. ``via``: over
    gRPC, or through etcd's JSON gateway (:mod:`e2e.gateway`), as HTTP clients watch."""

    def __init__(self, targets: Sequence[writer.Target] = (), *, prefix: str, start_revision: int = 1,
                 follow: writer.Writer | None = None, credentials: access.Credentials | None = None,
                 timeout: float = 2.0, retry_interval: float = 0.1, home: int = 0, via: str = "grpc") -> None:
        if via not in VIA:
            raise ValueError(f"Watcher: via must be one of {VIA}, not {via!r}")
        self.prefix = prefix
        self.via = via
        self.home = home  # the member it watches on first (by its index in the targets), as a client's own
        self.targets = _Targets(targets, follow, credentials)
        self.log: list[watchcheck.Entry] = []
        self.reached = start_revision - 1  # the revision of the last event delivered
        self._start = start_revision
        self._connections = writer.ClientPool(timeout)
        self._session: aiohttp.ClientSession | None = None  # the gateway's
        self._timeout, self._retry_interval = timeout, retry_interval
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def beside(cls, rec: Recorder, **kwargs: Any) -> Watcher:
        """A watcher on ``rec``'s keys through the same targets (or the same writer)."""
        return cls(rec.targets.now() if rec.targets.follow is None else (), prefix=rec.prefix + "/",
                   follow=rec.targets.follow, credentials=rec.targets.credentials(), **kwargs)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="history-watcher")

    async def stop(self) -> list[watchcheck.Entry]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._connections.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        return self.log

    async def wait_reached(self, revision: int, *, timeout: float = 10.0) -> None:
        """Wait (polling, with a deadline) until an event at ``revision`` or later was delivered."""
        deadline = time.monotonic() + timeout
        while self.reached < revision:
            if self._task is None:
                raise RuntimeError(f"Watcher: not running (stopped at revision {self.reached}, waited for {revision})")
            if self._task.done():
                self._task.result()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Watcher: reached revision {self.reached}, not {revision}, within {timeout}s")
            await asyncio.sleep(0.05)

    async def wait_watching(self, *, timeout: float = 20.0) -> None:
        """Wait (polling, with a deadline) until a member has confirmed the watch: from then on it delivers every
        change, and a compaction below it does not break it. (A watch still connecting when the cluster is
        compacted above its start revision would fail with ``compacted`` instead.)"""
        deadline = time.monotonic() + timeout
        while not any(isinstance(entry, watchcheck.Delivered) for entry in self.log):
            if self._task is None:
                raise RuntimeError("Watcher: not running")
            if self._task.done():
                self._task.result()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Watcher: no member confirmed the watch within {timeout}s: {self.log[-3:]}")
            await asyncio.sleep(0.05)

    async def _current_revision(self, target: writer.Target) -> int:
        c = self._connections.for_target(target)
        return (await c.kv.read_key(self.prefix, endpoint=target.endpoint.name, scheme=target.scheme)).revision

    def _label(self, target: writer.Target) -> str:
        return f"{target.label} (gateway)" if self.via == "gateway" else target.label

    def _open(self, c: etcd_client.EtcdClient, target: writer.Target,
              start: int) -> AsyncGenerator[kv.WatchBatch, None]:
        """A new stream from ``start`` (a new segment's start revision is read over gRPC either way)."""
        if self.via == "gateway":
            if self._session is None:
                self._session = aiohttp.ClientSession()
            return gateway.watch(self._session, target, self.prefix, start_revision=start, timeout=self._timeout,
                                 credentials=self.targets.credentials())
        return c.kv.watch(self.prefix, start_revision=start, endpoint=target.endpoint.name, scheme=target.scheme,
                          timeout=self._timeout)

    async def _run(self) -> None:
        cluster: int | None = None  # the cluster this segment watches (None: the next to answer)
        start, resync = self._start, False
        way = _FailOver(self.targets, self.home)
        while True:
            target = way.order()[0]
            self._connections.use_credentials(self.targets.credentials())
            c = self._connections.for_target(target)
            try:
                if resync:  # a new segment: from now on
                    start, resync = await self._current_revision(target) + 1, False
                self.log.append(watchcheck.Connected(start, self._label(target)))
                async with contextlib.aclosing(self._open(c, target, start)) as stream:
                    async for batch in stream:
                        way.ok(target)
                        if cluster is not None and batch.cluster_id != cluster:
                            self.log.append(watchcheck.Broken(
                                "new-cluster", f"{target.label} answers for cluster {batch.cluster_id:x}, not "
                                               f"{cluster:x}: the history started again"))
                            cluster, resync = None, True
                            break
                        cluster = batch.cluster_id
                        events = tuple(watchcheck.Event(e.kind, _text(e.key), _text(e.value), e.mod_revision)
                                       for e in batch.events)
                        self.log.append(watchcheck.Delivered(batch.revision, batch.cluster_id, self._label(target),
                                                             events))
                        if events:
                            self.reached = max(self.reached, events[-1].revision)
                            start = self.reached + 1
            except errors.Compacted as err:
                self.log.append(watchcheck.Broken("compacted", str(err), err.compact_revision))
                cluster, resync = None, True
            except errors.EtcdError as err:
                self.log.append(watchcheck.Broken("transient", f"{type(err).__name__}: {err}"))
                way.fail(target)
                if isinstance(err, errors.InvalidAuthToken):
                    c.forget_login()
                await asyncio.sleep(self._retry_interval)


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What a :class:`Recording` recorded: the history, the watch log, and the last write under the prefix (the
    watcher was stopped only once it had seen it; 0 when the recording ended with an error)."""

    history: History
    watch_log: tuple[watchcheck.Entry, ...]
    last_revision: int
    other_watch_logs: tuple[tuple[watchcheck.Entry, ...], ...] = ()  # the further watchers' (``watchers`` > 1)
    vias: tuple[str, ...] = ()  # how each watcher watched (``Watcher.via``), in the order of the logs

    def count(self, via: str) -> int:
        """How many watchers watched ``via`` (``"grpc"`` or ``"gateway"``)."""
        return self.vias.count(via)

    def watch_problems(self) -> list[str]:
        """:func:`e2e.watchcheck.check` of every watcher's log against the history's changes (empty: the guarantees
        held; with several watchers, each problem names its watcher)."""
        logs = (self.watch_log, *self.other_watch_logs)
        found = []
        for index, log in enumerate(logs):
            problems = watchcheck.check(log, self.history.changes(), prefix=self.history.prefix + "/",
                                        until=self.last_revision or None)
            via = f" ({self.vias[index]})" if index < len(self.vias) else ""
            found += [f"watcher {index}{via}: {p}" if len(logs) > 1 else p for p in problems]
        return found

    def reconnects(self) -> int:
        """How many times the watchers opened their watch again after the first time, all together."""
        return sum(sum(1 for e in log if isinstance(e, watchcheck.Connected)) - 1
                   for log in (self.watch_log, *self.other_watch_logs) if log)

    def resolved(self) -> History:
        """The history with each write of unknown outcome settled by the watch log, as etcd's robustness tests do:
        every value is unique, so a write whose value the watch delivered took effect at that event's revision (and
        before the first known operation that returned a revision as high), and one whose value it never
        delivered had no effect and is left out; a read of unknown outcome constrains nothing and is left out.
        Sound only for a whole watch log (:meth:`watch_problems` empty, watched up to :attr:`last_revision`)."""
        if not self.last_revision:
            return self.history
        delivered: dict[tuple[str, str], int] = {}
        for entry in self.watch_log:
            if isinstance(entry, watchcheck.Delivered):
                for event in entry.events:
                    if event.kind == "put":
                        delivered.setdefault((event.key, event.value), event.revision)
        returns = sorted((op.revision, op.return_) for op in self.history.operations
                         if op.outcome == "ok" and op.return_ is not None)
        out = []
        for op in self.history.operations:
            if op.outcome == "ok":
                out.append(op)
                continue
            revision = delivered.get((op.key, op.value)) if op.write else None
            if revision is None:  # a read, or a write that never took effect
                continue
            seen_by = [ret for rev, ret in returns if rev >= revision and ret is not None]
            if not seen_by:  # nothing returned after it: it stays a write that may have happened at the end
                out.append(op)
                continue
            out.append(dataclasses.replace(op, outcome="ok", revision=revision, succeeded=op.kind == "txn",
                                           return_=max(min(seen_by), op.call), error=""))
        return History(prefix=self.history.prefix, operations=tuple(out))


class Recording:
    """A recorder and a watcher on its keys, as one ``async with``; :attr:`result` after it. On a normal exit the
    keys are read once more (recorded) and the watcher stopped only once it has seen the last write; on an error
    both just stop.

    ::

        async with sc.live(db) as (w, mon), history.Recording(history.Recorder.following(w)) as rec:
            ...
        (await lincheck.check(rec.result.history, tmp_path)).raise_for_problems()
        assert rec.result.watch_problems() == []
    """

    def __init__(self, recorder: Recorder, *, reach_timeout: float = 20.0, watchers: int = 1,
                 gateway: int = 0) -> None:
        self.recorder = recorder
        # ``watchers`` over gRPC, then ``gateway`` through etcd's JSON gateway; each starts on another member (as
        # clients spread over a cluster do)
        vias = ["grpc"] * watchers + ["gateway"] * gateway or ["grpc"]
        self.watchers = [Watcher.beside(recorder, home=i, via=via) for i, via in enumerate(vias)]
        self.watcher = self.watchers[0]
        self.reach_timeout = reach_timeout
        self.result: Recorded | None = None

    async def __aenter__(self) -> Recording:
        # The watch is confirmed before the first operation: everything the clients write is then delivered on a
        # live stream, whatever the operation does to the history below it (a Compact compacts at once).
        try:
            for watcher in self.watchers:
                await watcher.start()
            for watcher in self.watchers:
                await watcher.wait_watching(timeout=self.reach_timeout)
        except BaseException:
            for watcher in self.watchers:
                await watcher.stop()
            raise
        await self.recorder.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        last = 0
        logs: list[tuple[watchcheck.Entry, ...]] = []
        try:
            await self.recorder.stop()
            if exc_type is None:
                final = await self.recorder.read_final()
                last = max(op.mod_revision for op in final.values())
                for watcher in self.watchers:
                    await watcher.wait_reached(last, timeout=self.reach_timeout)
        finally:
            for watcher in self.watchers:
                logs.append(tuple(await watcher.stop()))
            await self.recorder.close()
            self.result = Recorded(self.recorder.history(), logs[0], last, tuple(logs[1:]),
                                   tuple(w.via for w in self.watchers))


__all__ = ["History", "Operation", "Recorded", "Recorder", "Recording", "Watcher", "never_sent"]
