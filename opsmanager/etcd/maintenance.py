"""etcd's Maintenance service (:class:`Maintenance`): Status, MoveLeader (routed to the leader), HashKV, Alarm,
Defragment, Downgrade and the Snapshot stream, over the client's one :class:`~opsmanager.etcd.transport.Transport`.

Two calls have sharp edges, handled here:

* **MoveLeader must reach the leader** (a follower answers FAILED_PRECONDITION "not leader") and has no server-side
  deadline. :meth:`Maintenance.move_leader` finds the leader by Status, sends it there with a deadline, follows a
  "not leader" answer to the new leader, and only returns once every member reports the target as leader.
* **Snapshot is a stream** of the whole backend: :meth:`Maintenance.snapshot` writes it beside the destination,
  checks etcd's sha256 trailer, and only then renames it into place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import grpc.aio
from google.protobuf import unknown_fields

from opsmanager.etcd import access, cluster, errors, snapshot, transport
from opsmanager.etcd._pb import rpc_pb2


@dataclasses.dataclass(frozen=True)
class MemberStatus:
    """A member's own view (Status is answered locally, without a raft round trip)."""

    endpoint: access.Endpoint
    scheme: str
    member_id: int
    cluster_id: int
    leader_id: int
    raft_index: int
    raft_term: int
    raft_applied_index: int
    revision: int
    version: str
    db_size: int
    db_size_in_use: int
    is_learner: bool
    errors: tuple[str, ...]
    storage_version: str = ""  # etcd 3.6+: the version of the member's data ("" before 3.6)
    downgrade_target: str = ""  # etcd 3.6+: the target of a downgrade in progress ("" when none)

    @property
    def is_leader(self) -> bool:
        return self.leader_id != 0 and self.member_id == self.leader_id

    @property
    def member_id_hex(self) -> str:
        return format(self.member_id, "x")

    @classmethod
    def from_pb(cls, ep: access.Endpoint, scheme: str, r: rpc_pb2.StatusResponse) -> MemberStatus:
        return cls(
            endpoint=ep, scheme=scheme, member_id=r.header.member_id, cluster_id=r.header.cluster_id,
            leader_id=r.leader, raft_index=r.raftIndex, raft_term=r.raftTerm, raft_applied_index=r.raftAppliedIndex,
            revision=r.header.revision, version=r.version, db_size=r.dbSize, db_size_in_use=r.dbSizeInUse,
            is_learner=r.isLearner, errors=tuple(r.errors), storage_version=r.storageVersion,
            downgrade_target=r.downgradeInfo.targetVersion if r.downgradeInfo.enabled else "",
        )


@dataclasses.dataclass(frozen=True)
class LeaderMove:
    """What :meth:`Maintenance.move_leader` did: the RPC went to ``sent_to`` (after ``redirects`` "not leader"
    answers), took ``rpc_seconds``; every member in ``agreed`` reported ``leader_id`` ``total_seconds`` after the
    start; ``unreachable`` members did not answer Status during the check."""

    previous_leader_id: int
    leader_id: int
    sent_to: str
    redirects: int
    rpc_seconds: float
    total_seconds: float
    agreed: tuple[str, ...]
    unreachable: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Alarm:
    """An alarm raised on a member (etcd's ``AlarmMember``): ``NOSPACE`` (the backend reached its quota; the
    cluster takes reads and deletes only) or ``CORRUPT``."""

    member_id: int
    alarm: str


@dataclasses.dataclass(frozen=True)
class KVHash:
    """HashKV of one member: the hash of its key-value store up to ``revision``."""

    endpoint: str
    member_id: int
    revision: int
    hash: int
    compact_revision: int


def inconsistent_hashes(hashes: Sequence[KVHash]) -> list[str]:
    """Pure: human-readable disagreements among hashes taken at the same revision (members whose compaction
    differs are not comparable and are skipped, as etcd's own corruption check does). Empty when consistent."""
    problems = []
    by_compaction: dict[tuple[int, int], list[KVHash]] = {}
    for h in hashes:
        by_compaction.setdefault((h.revision, h.compact_revision), []).append(h)
    for (revision, compacted), group in sorted(by_compaction.items()):
        if len({h.hash for h in group}) > 1:
            views = ", ".join(f"{h.endpoint}={h.hash:08x}" for h in group)
            problems.append(f"revision {revision} (compacted at {compacted}): {views}")
    return problems


SNAPSHOT_VERSION_FIELD = 4  # SnapshotResponse.version, etcd 3.6+ (not in our proto: see rpc.proto)


def snapshot_version(response: rpc_pb2.SnapshotResponse) -> str:
    """etcd 3.6's ``SnapshotResponse.version`` (the storage version), read from the message's unknown fields; ""
    from etcd 3.5, which does not send it."""
    fields = unknown_fields.UnknownFieldSet(response)
    for field in (fields[i] for i in range(len(fields))):
        if field.field_number == SNAPSHOT_VERSION_FIELD and field.wire_type == 2:  # length-delimited: a string
            return bytes(field.data).decode("utf-8", "replace")
    return ""


def describe(views: dict[str, MemberStatus | errors.EtcdError]) -> str:
    """Pure: each member's view of the leader, for an error message."""
    parts = []
    for name, v in views.items():
        if isinstance(v, MemberStatus):
            parts.append(f"{name}: id={v.member_id_hex} leader={format(v.leader_id, 'x')}")
        else:
            parts.append(f"{name}: {type(v).__name__}")
    return ", ".join(parts) or "no endpoints"


@dataclasses.dataclass
class _Route:
    """Where a MoveLeader goes: the member asked, the leader it replaces (0: not known yet), the "not leader" or
    "down" answers followed, and when the RPC to ``current`` started."""

    current: access.Endpoint
    previous: int
    redirects: int
    started: float


class Maintenance:
    """etcd's Maintenance service over ``transport``; ``cluster`` finds a leader that is not among the endpoints."""

    def __init__(self, transport_: transport.Transport, cluster_: cluster.Cluster) -> None:
        self.transport = transport_
        self.cluster = cluster_

    async def status(self, endpoint: access.Endpoint | str, *, timeout: float | None = None,
                     deadline: float | None = None, scheme: str | None = None) -> MemberStatus:
        """Status of one member (its own view; learners answer too)."""
        ep = self.transport.endpoint(endpoint)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.StatusResponse:
            return await c.maintenance.Status(rpc_pb2.StatusRequest(), timeout=t)  # type: ignore[no-any-return]

        resp, used = await self.transport.call(ep, "Status", fn, timeout=timeout, deadline=deadline, scheme=scheme)
        st = MemberStatus.from_pb(ep, used, resp)
        self.transport.ids[st.member_id] = ep
        return st

    async def statuses(self, *, timeout: float | None = None, deadline: float | None = None,
                       extra: Sequence[access.Endpoint] = ()) -> dict[str, MemberStatus | errors.EtcdError]:
        """Status of every endpoint, concurrently; an endpoint that failed maps to its error."""
        endpoints = self.transport.endpoints
        eps = list(endpoints) + [e for e in extra if e not in endpoints]

        async def one(ep: access.Endpoint) -> MemberStatus | errors.EtcdError:
            try:
                return await self.status(ep, timeout=timeout, deadline=deadline)
            except errors.EtcdError as err:
                return err

        results = await asyncio.gather(*(one(e) for e in eps))
        return {ep.name: r for ep, r in zip(eps, results, strict=True)}

    async def leader(self, *, timeout: float | None = None) -> MemberStatus:
        """The current leader's own Status (``header.member_id == leader``).

        Polls while an election is in progress, for up to ``timeout`` seconds; raises :class:`errors.NoQuorum` when no
        member reports a leader by then. When members agree on a leader that is not among the endpoints, it is
        looked up in MemberList (its client URL) and asked directly.
        """
        budget = self.transport.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        views: dict[str, MemberStatus | errors.EtcdError] = {}
        while True:
            views = await self.statuses(timeout=min(budget, 2.0), deadline=deadline)
            for st in views.values():
                if isinstance(st, MemberStatus) and st.is_leader:
                    return st
            claimed = {st.leader_id for st in views.values() if isinstance(st, MemberStatus) and st.leader_id}
            for leader_id in claimed:
                ep = await self.cluster.discover(leader_id, deadline=deadline)
                if ep is not None:
                    try:
                        st = await self.status(ep, timeout=min(budget, 2.0), deadline=deadline)
                    except errors.EtcdError:
                        continue
                    if st.is_leader:
                        return st
            if loop.time() >= deadline:
                break
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
        raise errors.NoQuorum(f"leader: no member reported a reachable leader within {budget}s; "
                              f"views: {describe(views)}")

    async def move_leader(self, target_id: int, *, via: access.Endpoint | str | None = None,
                          timeout: float = 5.0, agree_timeout: float = 2.0) -> LeaderMove:
        """Make ``target_id`` (a voting member) the leader.

        The RPC goes to the current leader (found by Status), or first to ``via`` — a "not leader" answer is then
        followed to the leader, never returned. It runs under a deadline (``timeout``, the whole call). Returns only
        when every member that answers Status reports ``target_id`` as leader (polled for up to ``agree_timeout``).
        Raises :class:`errors.LeaderTransferTimeout`, :class:`errors.BadLeaderTransferee` (not a voter),
        :class:`errors.NoQuorum` (no leader to ask).
        """
        if not isinstance(target_id, int) or target_id <= 0:
            raise ValueError(f"move_leader: target_id must be a member ID (positive int), not {target_id!r}")
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout
        if via is not None:
            route = _Route(self.transport.endpoint(via), 0, 0, 0.0)
        else:
            leader = await self.leader(timeout=timeout)
            route = _Route(leader.endpoint, leader.member_id, 0, 0.0)
        resp = await self._send_move_leader(target_id, route, via_given=via is not None, timeout=timeout,
                                            deadline=deadline)
        rpc_seconds = loop.time() - route.started
        previous = route.previous or resp.header.member_id
        agreed, unreachable = await self._wait_leader_agreed(target_id, loop.time() + agree_timeout)
        return LeaderMove(previous_leader_id=previous, leader_id=target_id, sent_to=route.current.label,
                          redirects=route.redirects, rpc_seconds=rpc_seconds, total_seconds=loop.time() - started,
                          agreed=agreed, unreachable=unreachable)

    async def _send_move_leader(self, target_id: int, route: _Route, *, via_given: bool, timeout: float,
                                deadline: float) -> rpc_pb2.MoveLeaderResponse:
        """The MoveLeader RPC, following "not leader" answers (and a down ``via``) to the leader; ``route`` says
        where it went in the end."""
        loop = asyncio.get_running_loop()
        request = rpc_pb2.MoveLeaderRequest(targetID=target_id)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.MoveLeaderResponse:
            return await c.maintenance.MoveLeader(request, timeout=t)  # type: ignore[no-any-return]

        route.started = loop.time()
        while True:
            try:
                resp, _ = await self.transport.call(route.current, "MoveLeader", fn, timeout=timeout,
                                                    deadline=deadline)
                return resp
            except errors.NotLeader as err:
                route.redirects += 1
                if route.redirects > 3 or loop.time() >= deadline:
                    raise errors.LeaderTransferTimeout(
                        f"MoveLeader to {target_id:x}: leadership kept moving ({err})", endpoint=err.endpoint) from err
            except errors.MemberUnreachable:
                if not via_given or route.redirects or loop.time() >= deadline:
                    raise
                route.redirects += 1  # the member we were pointed at is down: ask the leader instead
            except errors.RequestTimeout as err:
                raise errors.LeaderTransferTimeout(
                    f"MoveLeader to {target_id:x} via {route.current.label}: not finished within {timeout}s ({err})",
                    endpoint=route.current.label) from err
            leader = await self.leader(timeout=max(0.05, deadline - loop.time()))
            route.current, route.previous = leader.endpoint, leader.member_id
            route.started = loop.time()

    async def _wait_leader_agreed(self, leader_id: int, deadline: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
        loop = asyncio.get_running_loop()
        extra: list[access.Endpoint] = []
        if leader_id not in self.transport.ids:
            found = await self.cluster.discover(leader_id, deadline=deadline)
            if found is not None and found not in self.transport.endpoints:
                extra.append(found)
        while True:
            views = await self.statuses(timeout=0.5, deadline=deadline, extra=extra)
            answered = {n: v for n, v in views.items() if isinstance(v, MemberStatus)}
            disagree = [n for n, v in answered.items() if v.leader_id != leader_id]
            if answered and not disagree:
                unreachable = tuple(n for n in views if n not in answered)
                return tuple(sorted(answered)), unreachable
            if loop.time() >= deadline:
                raise errors.LeaderTransferTimeout(
                    f"MoveLeader to {leader_id:x}: not every member reports it as leader; views: {describe(views)}")
            await asyncio.sleep(0.02)

    async def hash_kv(self, endpoint: access.Endpoint | str, *, revision: int = 0, timeout: float | None = None,
                      deadline: float | None = None) -> KVHash:
        """HashKV of one member at ``revision`` (0: its current revision). Costs a scan of the store."""
        ep = self.transport.endpoint(endpoint)
        request = rpc_pb2.HashKVRequest(revision=revision)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.HashKVResponse:
            return await c.maintenance.HashKV(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.call(ep, "HashKV", fn, timeout=timeout, deadline=deadline)
        return KVHash(endpoint=ep.name, member_id=resp.header.member_id, revision=revision or resp.header.revision,
                      hash=resp.hash, compact_revision=resp.compact_revision)

    async def check_consistency(self, *, timeout: float | None = None,
                                deadline: float | None = None) -> list[KVHash]:
        """Hash every endpoint's key-value store at one revision (the lowest current revision among them) and compare.
        Raises :class:`errors.DataInconsistent` when members with the same compaction disagree; returns the hashes.
        Every endpoint must answer (an unreachable one raises its error); learners are skipped (they refuse HashKV)."""
        views = await self.statuses(timeout=timeout, deadline=deadline)
        failed = [v for v in views.values() if isinstance(v, errors.EtcdError)]
        if failed:
            raise failed[0]
        statuses = [v for v in views.values() if isinstance(v, MemberStatus) and not v.is_learner]
        revision = min(st.revision for st in statuses)
        hashes = list(await asyncio.gather(*(self.hash_kv(st.endpoint, revision=revision, timeout=timeout,
                                                          deadline=deadline) for st in statuses)))
        problems = inconsistent_hashes(hashes)
        if problems:
            raise errors.DataInconsistent("members disagree on the key-value store: " + "; ".join(problems))
        return hashes

    async def _alarm(self, request: rpc_pb2.AlarmRequest, timeout: float | None) -> list[Alarm]:
        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AlarmResponse:
            return await c.maintenance.Alarm(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("Alarm", fn, timeout=timeout)
        return [Alarm(a.memberID, rpc_pb2.AlarmType.Name(a.alarm)) for a in resp.alarms]

    async def alarms(self, *, timeout: float | None = None) -> list[Alarm]:
        """Every member's raised alarms (an empty list: none)."""
        return await self._alarm(rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.GET, memberID=0), timeout)

    async def set_alarm(self, member_id: int, alarm: str, *, raised: bool,
                        timeout: float | None = None) -> list[Alarm]:
        """Raise (``raised``) or disarm ``alarm`` (``NOSPACE``, ``CORRUPT``) on a member, through consensus; returns
        the alarms the request changed. Disarming ``NOSPACE`` before space is back only lets the next write raise
        it again; raising one by hand is for tests and drills."""
        action = rpc_pb2.AlarmRequest.ACTIVATE if raised else rpc_pb2.AlarmRequest.DEACTIVATE
        return await self._alarm(rpc_pb2.AlarmRequest(action=action, memberID=member_id, alarm=alarm), timeout)

    async def defragment(self, endpoint: access.Endpoint | str, *, timeout: float | None = None) -> None:
        """Defragment one member's backend, giving back the space compaction freed. The member answers nothing
        else until it is done (seconds per gigabyte), so callers do one member at a time."""
        request = rpc_pb2.DefragmentRequest()

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.DefragmentResponse:
            return await c.maintenance.Defragment(request, timeout=t)  # type: ignore[no-any-return]

        await self.transport.call(self.transport.endpoint(endpoint), "Defragment", fn, timeout=timeout)

    async def downgrade(self, action: str, version: str, *, timeout: float | None = None) -> str:
        """etcd's downgrade protocol: ``VALIDATE``, ``ENABLE`` or ``CANCEL`` a downgrade to ``version`` (major.minor);
        returns the cluster version the answer names. Refusals are :class:`errors.EtcdServerError` (or
        :class:`errors.MembershipError`) naming etcd's reason ("invalid downgrade target version", "the cluster has
        an ongoing downgrade job", ...)."""
        request = rpc_pb2.DowngradeRequest(action=action, version=version)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.DowngradeResponse:
            return await c.maintenance.Downgrade(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("Downgrade", fn, timeout=timeout)
        return str(resp.version)

    async def snapshot(self, endpoint: access.Endpoint | str, dest_path: str | os.PathLike[str], *,
                       timeout: float) -> snapshot.SnapshotResult:
        """Save ``endpoint``'s backend (any member: a follower or a learner serves it too) to ``dest_path``.

        The stream goes to a temporary file beside ``dest_path`` (one write buffer in memory, never the whole
        database); the sha256 trailer etcd appends is checked, and only then is the file fsynced and renamed onto
        ``dest_path`` — the file etcdctl's ``snapshot save`` writes, which ``etcdutl snapshot restore`` accepts.
        ``timeout`` bounds everything (a Status of the member first, then the stream).

        The result's ``revision`` is the revision the database holds (etcd sends no header with the stream, so it is
        read from the file as ``etcdutl snapshot status`` does), ``member_id`` the member's (from that Status),
        ``version`` the storage version etcd 3.6+ names ("" from 3.5). Raises :class:`errors.SnapshotFailed` (short
        stream, trailer mismatch: nothing is left at ``dest_path``), :class:`errors.RequestTimeout`, the auth errors
        (a snapshot needs the root role), and ``OSError`` for the local file.
        """
        ep = self.transport.endpoint(endpoint)
        dest = pathlib.Path(dest_path)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        status = await self.status(ep, timeout=min(self.transport.timeout, timeout), deadline=deadline)
        label = f"{ep.label} [{status.scheme}]"
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise errors.DeadlinePassed(f"Snapshot on {label}: deadline passed before the stream", endpoint=label)
        conn = self.transport.conn(ep, status.scheme)
        out = snapshot.SnapshotFile(dest)
        call = conn.maintenance.Snapshot(rpc_pb2.SnapshotRequest(), timeout=remaining)
        try:
            header_revision, header_member, version = await _receive_snapshot(call, out, label, deadline)
            try:
                size, digest = await asyncio.to_thread(out.finish)
            except ValueError as exc:
                raise errors.SnapshotFailed(f"Snapshot on {label}: {exc}", endpoint=label) from exc
        except BaseException:
            call.cancel()
            out.abort()
            raise
        revision = header_revision or await _file_revision(dest, label)
        return snapshot.SnapshotResult(path=dest, size=size, sha256_hex=digest, revision=revision,
                                       member_id=header_member or status.member_id, version=version)


async def _receive_snapshot(call: Any, out: snapshot.SnapshotFile, label: str,
                            deadline: float) -> tuple[int, int, str]:
    """Write the Snapshot stream ``call`` into ``out``; the first message's header revision and member and the
    storage version it names. A stream error is translated (past ``deadline``: a timeout)."""
    loop = asyncio.get_running_loop()
    header_revision, header_member, version, chunks = 0, 0, "", 0
    while True:
        try:
            resp = await call.read()
        except (*transport.GRPC_RAISES, errors.EtcdError) as exc:
            err = errors.translate(exc, endpoint=label, call="Snapshot")
            err = errors.past_deadline(err, deadline, loop.time())
            if err is exc:
                raise
            raise err from exc
        if resp is grpc.aio.EOF:
            return header_revision, header_member, version
        if chunks == 0:
            out.expected_db_size = len(resp.blob) + resp.remaining_bytes
            header_revision, header_member = resp.header.revision, resp.header.member_id
            version = snapshot_version(resp)
        chunks += 1
        out.write(resp.blob)


async def _file_revision(dest: pathlib.Path, label: str) -> int:
    """The revision inside the saved backend (etcd sends none with the stream); a file that is no backend is
    removed and :class:`errors.SnapshotFailed`."""
    try:
        return await asyncio.to_thread(snapshot.db_revision, dest)
    except ValueError as exc:
        dest.unlink(missing_ok=True)
        raise errors.SnapshotFailed(f"Snapshot on {label}: the file is not an etcd backend: {exc}",
                                    endpoint=label) from exc
