"""The async etcd admin client the operator uses to see and steer a cluster: Status, MemberList, MemberUpdate,
MoveLeader, health, the "recovered?" gate after a restart, the certificate a port serves, auth (users, enabling it)
and snapshots.

Why our own client (not etcdctl, not etcd3gw): every decision of a leader-aware rolling restart rests on facts
only the v3 API gives — who the leader is (``Status.header.member_id == Status.leader``), how far a member has
applied, whether a linearizable read goes through — and on two calls with sharp edges:

* **MoveLeader must reach the leader** (a follower answers FAILED_PRECONDITION "not leader") and has no server-side
  deadline. :meth:`EtcdClient.move_leader` finds the leader by Status, sends it there with a deadline, follows a
  "not leader" answer to the new leader, and only returns once every member reports the target as leader.
* **A restarted member is not "back" when its port opens.** :meth:`EtcdClient.wait_recovered` is the gate: the
  expected voter count and no learners, every endpoint healthy, the member's applied index caught up with the
  leader's commit index, and a linearizable read through that member.

Transport: ``grpc.aio`` channels, cached per (endpoint, scheme, identity) and closed by :meth:`close` (or ``async
with``). TLS material is bytes (:class:`access.TLSIdentity`); ``Endpoint.server_name`` becomes
``grpc.ssl_target_name_override`` so a pod IP can be dialled while the certificate's DNS name is verified.
An endpoint may list several schemes ("dual view" during a TLS transition): each is tried with its own budget,
starting with the one that last worked. The identity can be swapped while running (:meth:`EtcdClient.set_tls`).

Auth: with :class:`access.Credentials` (``credentials=`` or :meth:`EtcdClient.set_credentials`) every call carries
the token etcd gave for them, obtained lazily and renewed once when etcd forgets it (:mod:`opsmanager.etcd.tokens`,
interceptors on every channel, so no call site knows about tokens). Without credentials calls go as they are (with
``--client-cert-auth``, etcd then takes the client certificate's CN as the user).

Timeouts: ``timeout`` is the budget of one attempt (one endpoint, one scheme); calls that may try several
endpoints or schemes take at most attempts x timeout. ``deadline`` (absolute ``loop.time()``) caps everything.
Every call has a deadline: nothing here can hang.

Errors: only :mod:`opsmanager.etcd.errors` types leave this module; gRPC errors are translated at the edge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import aiohttp
import grpc
import grpc.aio
from google.protobuf import unknown_fields

from opsmanager import pki
from opsmanager.etcd import access, errors, probes, snapshot, tokens
from opsmanager.etcd._pb import rpc_pb2, rpc_pb2_grpc

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0
HEALTH_KEY = b"health"  # the key etcd's own /health reads; reading it changes nothing

# Reconnect quickly after a member restarts (gRPC's default backoff grows to 120 s); never use an HTTP proxy.
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 300),
    ("grpc.enable_http_proxy", 0),
    ("grpc.enable_retries", 0),
)

# Errors after which the same call is worth trying on the endpoint's next scheme: the transport failed, the
# member did not decide anything.
_TRY_NEXT_SCHEME = (errors.MemberUnreachable, errors.TLSHandshakeFailed, errors.RequestTimeout)
# ... and on another endpoint: also "this member cannot do it" answers (no quorum seen from there, a learner).
_TRY_NEXT = (*_TRY_NEXT_SCHEME, errors.NoQuorum, errors.LearnerNotSupported)
# What a gRPC call may raise besides translated errors (grpc.aio.BaseError: UsageError on a closed channel ...).
_GRPC_RAISES = (grpc.RpcError, grpc.aio.BaseError, OSError, TimeoutError)


# ---- values returned ------------------------------------------------------------------------------------------

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
class Member:
    """One entry of MemberList."""

    id: int
    name: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_learner: bool

    @property
    def id_hex(self) -> str:
        return format(self.id, "x")

    @classmethod
    def from_pb(cls, m: rpc_pb2.Member) -> Member:
        return cls(id=m.ID, name=m.name, peer_urls=tuple(m.peerURLs), client_urls=tuple(m.clientURLs),
                   is_learner=m.isLearner)


@dataclasses.dataclass(frozen=True)
class LeaderMove:
    """What :meth:`EtcdClient.move_leader` did: the RPC went to ``sent_to`` (after ``redirects`` "not leader"
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
class Recovery:
    """The state in which :meth:`EtcdClient.wait_recovered` let a member pass the gate."""

    member: str
    member_id: int
    leader_id: int
    voters: int
    applied_index: int
    leader_commit_index: int
    seconds: float
    polls: int


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
    """What :meth:`EtcdClient.put_if_mod_revision` got: ``succeeded`` (the comparison held and the value was written
    at ``revision``), else ``current``, the key as the transaction's other branch read it at ``revision``."""

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


Health = probes.Health
SnapshotResult = snapshot.SnapshotResult

SNAPSHOT_VERSION_FIELD = 4  # SnapshotResponse.version, etcd 3.6+ (not in our proto: see rpc.proto)


def snapshot_version(response: rpc_pb2.SnapshotResponse) -> str:
    """etcd 3.6's ``SnapshotResponse.version`` (the storage version), read from the message's unknown fields; ""
    from etcd 3.5, which does not send it."""
    fields = unknown_fields.UnknownFieldSet(response)
    for field in (fields[i] for i in range(len(fields))):
        if field.field_number == SNAPSHOT_VERSION_FIELD and field.wire_type == 2:  # length-delimited: a string
            return bytes(field.data).decode("utf-8", "replace")
    return ""


# ---- the client -----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Conn:
    channel: grpc.aio.Channel
    kv: rpc_pb2_grpc.KVStub
    cluster: rpc_pb2_grpc.ClusterStub
    maintenance: rpc_pb2_grpc.MaintenanceStub
    auth: rpc_pb2_grpc.AuthStub
    watch: rpc_pb2_grpc.WatchStub


class EtcdClient:
    """Admin client over a set of member endpoints. Use ``async with EtcdClient(eps, tls=...) as c:``.

    ``endpoints``: the members to talk to (their ``name`` is how the other calls refer to them).
    ``tls``: trust bundle and client identity for ``https`` schemes; None for plaintext-only endpoints.
    ``timeout``: default per-attempt budget in seconds.
    ``credentials``: the etcd user to act as when the cluster has auth enabled (None: no token is sent).
    """

    def __init__(self, endpoint_list: Iterable[access.Endpoint], *, tls: access.TLSIdentity | None = None,
                 timeout: float = DEFAULT_TIMEOUT, credentials: access.Credentials | None = None,
                 board: tokens.Board | None = None) -> None:
        self._endpoints: list[access.Endpoint] = []
        self._tls: access.TLSIdentity | None = None
        self.timeout = timeout
        self._conns: dict[tuple[str, str, str | None, str | None], _Conn] = {}
        self._preferred_scheme: dict[str, str] = {}
        self._last_good: str | None = None
        self._ids: dict[int, access.Endpoint] = {}  # member ID -> endpoint, learned from Status
        self._http: aiohttp.ClientSession | None = None
        self._closed = False
        self._login = tokens.Login(board=board)  # board: the token this cluster's other clients got, shared
        self.set_endpoints(endpoint_list)
        self.set_tls(tls)
        self.set_credentials(credentials)

    # -- configuration --

    @property
    def endpoints(self) -> tuple[access.Endpoint, ...]:
        return tuple(self._endpoints)

    @property
    def tls(self) -> access.TLSIdentity | None:
        return self._tls

    @property
    def credentials(self) -> access.Credentials | None:
        return self._login.credentials

    @property
    def logins(self) -> int:
        """How many times this client has authenticated (a new token each time)."""
        return self._login.logins

    def set_endpoints(self, endpoint_list: Iterable[access.Endpoint]) -> None:
        """Replace the endpoint set (e.g. after a member was replaced). Channels already open stay cached."""
        eps = list(endpoint_list)
        if not eps:
            raise ValueError("EtcdClient needs at least one endpoint")
        names = [e.name for e in eps]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"EtcdClient: endpoint names must be unique; duplicated: {dupes}")
        self._endpoints = eps
        self._ids = {i: e for i, e in self._ids.items() if e in eps}

    def set_tls(self, tls: access.TLSIdentity | None) -> None:
        """Use another trust bundle / client identity from now on (e.g. the new client cert during a rotation).
        Channels of the previous identity stay open (calls in flight finish) until :meth:`close`."""
        if tls is not None and not isinstance(tls, access.TLSIdentity):
            raise TypeError(f"tls must be an access.TLSIdentity or None, not {type(tls).__name__}")
        self._tls = tls

    def set_credentials(self, credentials: access.Credentials | None) -> None:
        """Act as this etcd user from the next call on (None: send no token). The token of the previous
        credentials is dropped; the next call logs in (lazily, on the channel it uses). Channels are not touched:
        credentials are not part of the TLS identity."""
        if credentials is not None and not isinstance(credentials, access.Credentials):
            raise TypeError(f"credentials must be an access.Credentials or None, not {type(credentials).__name__}")
        self._login.set_credentials(credentials)

    def forget_login(self) -> None:
        """Drop the token: the next call logs in again. For whoever replaced the members' data (a restore): a token
        of the old cluster would stall every call on the new one to its deadline (see :mod:`~opsmanager.etcd.tokens`)."""
        self._login.forget()

    def endpoint(self, ref: access.Endpoint | str) -> access.Endpoint:
        """The configured endpoint named ``ref`` (an :class:`Endpoint` is returned as is)."""
        return access.find(self._endpoints, ref)

    # -- lifecycle --

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel and the HTTP session. The client can be used again afterwards (reconnects)."""
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.channel.close(grace=None)
        if self._http is not None:
            session, self._http = self._http, None
            await session.close()

    # -- transport --

    def _conn(self, ep: access.Endpoint, scheme: str) -> _Conn:
        identity = self._tls if scheme == "https" else None
        if scheme == "https" and identity is None:
            raise ValueError(f"endpoint {ep.name!r} lists scheme 'https' but the client has no TLS identity; "
                             "pass tls=TLSIdentity(ca_pem=...) or drop 'https' from the endpoint's schemes")
        key = (ep.target, scheme, ep.server_name, identity.fingerprint if identity else None)
        conn = self._conns.get(key)
        if conn is None:
            options = list(CHANNEL_OPTIONS)
            interceptors, bind = tokens.interceptors(self._login, f"{ep.label} [{scheme}]")
            if scheme == "https":
                assert identity is not None
                creds = grpc.ssl_channel_credentials(root_certificates=identity.ca_pem,
                                                     private_key=identity.key_pem,
                                                     certificate_chain=identity.cert_pem)
                if ep.server_name:
                    options.append(("grpc.ssl_target_name_override", ep.server_name))
                channel = grpc.aio.secure_channel(ep.target, creds, options=options, interceptors=interceptors)
            else:
                channel = grpc.aio.insecure_channel(ep.target, options=options, interceptors=interceptors)
            bind(channel)
            conn = _Conn(channel, rpc_pb2_grpc.KVStub(channel),  # type: ignore[no-untyped-call]
                         rpc_pb2_grpc.ClusterStub(channel),  # type: ignore[no-untyped-call]
                         rpc_pb2_grpc.MaintenanceStub(channel),  # type: ignore[no-untyped-call]
                         rpc_pb2_grpc.AuthStub(channel),  # type: ignore[no-untyped-call]
                         rpc_pb2_grpc.WatchStub(channel))  # type: ignore[no-untyped-call]
            self._conns[key] = conn
        return conn

    def _schemes(self, ep: access.Endpoint, scheme: str | None) -> list[str]:
        if scheme is not None:
            if scheme not in access.SCHEMES:
                raise ValueError(f"scheme must be 'http' or 'https', not {scheme!r}")
            return [scheme]
        order = list(ep.schemes)
        preferred = self._preferred_scheme.get(ep.target)
        if preferred in order:
            order.remove(preferred)
            order.insert(0, preferred)
        return order

    @staticmethod
    def _attempt_timeout(timeout: float, deadline: float | None) -> float:
        if deadline is None:
            return timeout
        return min(timeout, deadline - asyncio.get_running_loop().time())

    async def _call(self, ep: access.Endpoint, call: str, fn: Callable[[_Conn, float], Awaitable[T]], *,
                    timeout: float | None = None, deadline: float | None = None,
                    scheme: str | None = None) -> tuple[T, str]:
        """Run ``fn(conn, timeout)`` on ``ep``, trying its schemes in order; returns (result, scheme).

        The only place gRPC errors are caught and translated (a login the token interceptor made on the way raises
        its error translated already).
        """
        per_try = self.timeout if timeout is None else timeout
        failures: list[tuple[str, errors.EtcdError, BaseException | None]] = []
        for s in self._schemes(ep, scheme):
            budget = self._attempt_timeout(per_try, deadline)
            if budget <= 0:
                break
            conn = self._conn(ep, s)
            try:
                result = await fn(conn, budget)
            except (*_GRPC_RAISES, errors.EtcdError) as exc:
                err = errors.translate(exc, endpoint=f"{ep.label} [{s}]", call=call)
                cause = exc.__cause__ if err is exc else exc
                if not isinstance(err, _TRY_NEXT_SCHEME):
                    if err is exc:
                        raise
                    raise err from exc
                failures.append((s, err, cause))
                continue
            self._preferred_scheme[ep.target] = s
            return result, s
        if not failures:
            raise errors.DeadlinePassed(f"{call} on {ep.label}: deadline passed before any attempt",
                                        endpoint=ep.label)
        # One error for the caller: the most specific kind seen, naming every attempt.
        rank = (errors.TLSHandshakeFailed, errors.RequestTimeout)
        chosen = failures[0]
        for kind in rank:
            hit = [f for f in failures if isinstance(f[1], kind)]
            if hit:
                chosen = hit[0]
                break
        err = chosen[1]
        if len(failures) > 1:
            others = "; ".join(f"{s}: {e}" for s, e, _ in failures if e is not err)
            err.args = (f"{err} (also tried {others})",)
        raise err from chosen[2]

    async def _on_any(self, call: str, fn: Callable[[_Conn, float], Awaitable[T]], *,
                      timeout: float | None = None, deadline: float | None = None,
                      candidates: Sequence[access.Endpoint] | None = None) -> tuple[T, access.Endpoint]:
        """Run ``fn`` on the first endpoint that answers, starting with the one that answered last."""
        order = list(candidates or self._endpoints)
        if self._last_good is not None:
            order.sort(key=lambda e: e.name != self._last_good)
        failures: list[errors.EtcdError] = []
        untried = list(order)
        for ep in order:
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                break
            untried.remove(ep)
            try:
                result, _ = await self._call(ep, call, fn, timeout=timeout, deadline=deadline)
            except _TRY_NEXT as err:
                failures.append(err)
                continue
            self._last_good = ep.name
            return result, ep
        # Endpoints the deadline left untried still count as down when their channels say so.
        known_down = sum(1 for ep in untried if self._channel_down(ep))
        raise self._cluster_error(call, failures, known_down=known_down)

    def _channel_down(self, ep: access.Endpoint) -> bool:
        """True when every cached channel to ``ep`` is failing to connect (local state, no I/O); False if unknown."""
        conns = [c for (target, *_), c in self._conns.items() if target == ep.target]
        failing = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.CONNECTING)
        return bool(conns) and all(c.channel.get_state(try_to_connect=False) in failing for c in conns)

    def _cluster_error(self, call: str, failures: list[errors.EtcdError], *,
                       known_down: int = 0) -> errors.EtcdError:
        """The error for "no endpoint could do it". NoQuorum when a member said so, or when the members that
        answered could not finish the call while a majority of the endpoints did not answer at all (with 2 of 3
        members down, the survivor's linearizable calls time out: that is lost quorum, not a slow member)."""
        if not failures:
            return errors.DeadlinePassed(f"{call}: deadline passed before any endpoint was tried")
        detail = "; ".join(str(f) for f in failures)
        down = [f for f in failures if isinstance(f, (errors.MemberUnreachable, errors.TLSHandshakeFailed))]
        answered = [f for f in failures if f not in down]
        if any(isinstance(f, errors.NoQuorum) for f in failures) or (
                answered and len(down) + known_down > len(self._endpoints) // 2):
            err: errors.EtcdError = errors.NoQuorum(f"{call}: no quorum: {detail}")
        elif answered:
            return answered[0]
        elif all(isinstance(f, errors.TLSHandshakeFailed) for f in failures):
            err = errors.TLSHandshakeFailed(f"{call}: TLS handshake failed on every endpoint: {detail}")
        else:
            err = errors.MemberUnreachable(f"{call}: no endpoint reachable: {detail}")
        err.__cause__ = failures[0]
        return err

    # -- Maintenance --

    async def status(self, endpoint: access.Endpoint | str, *, timeout: float | None = None,
                     deadline: float | None = None, scheme: str | None = None) -> MemberStatus:
        """Status of one member (its own view; learners answer too)."""
        ep = self.endpoint(endpoint)

        async def fn(c: _Conn, t: float) -> rpc_pb2.StatusResponse:
            return await c.maintenance.Status(rpc_pb2.StatusRequest(), timeout=t)  # type: ignore[no-any-return]

        resp, used = await self._call(ep, "Status", fn, timeout=timeout, deadline=deadline, scheme=scheme)
        st = MemberStatus.from_pb(ep, used, resp)
        self._ids[st.member_id] = ep
        return st

    async def statuses(self, *, timeout: float | None = None, deadline: float | None = None,
                       extra: Sequence[access.Endpoint] = ()) -> dict[str, MemberStatus | errors.EtcdError]:
        """Status of every endpoint, concurrently; an endpoint that failed maps to its error."""
        eps = list(self._endpoints) + [e for e in extra if e not in self._endpoints]

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
        budget = self.timeout if timeout is None else timeout
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
                ep = await self._discover(leader_id, deadline=deadline)
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
                              f"views: {self._describe(views)}")

    @staticmethod
    def _describe(views: dict[str, MemberStatus | errors.EtcdError]) -> str:
        parts = []
        for name, v in views.items():
            if isinstance(v, MemberStatus):
                parts.append(f"{name}: id={v.member_id_hex} leader={format(v.leader_id, 'x')}")
            else:
                parts.append(f"{name}: {type(v).__name__}")
        return ", ".join(parts) or "no endpoints"

    async def _discover(self, member_id: int, *, deadline: float | None = None) -> access.Endpoint | None:
        """An endpoint for ``member_id``: a configured one (known from Status) or one built from MemberList."""
        if member_id in self._ids:
            return self._ids[member_id]
        try:
            members = await self.members(linearizable=False, timeout=min(self.timeout, 2.0), deadline=deadline)
        except errors.EtcdError:
            return None
        for m in members:
            if m.id == member_id and m.client_urls:
                for ep in self._endpoints:  # a configured endpoint under the same name wins (TLS name, ports)
                    if ep.name == m.name:
                        return ep
                usable = {u.split("://", 1)[0] for u in m.client_urls} & set(access.SCHEMES)
                if self._tls is None:
                    usable.discard("https")  # we could not dial it anyway
                if not usable:
                    return None
                schemes = sorted(usable, key=lambda s: s != "https")
                first = next(u for u in m.client_urls if u.startswith(f"{schemes[0]}://"))
                return dataclasses.replace(access.Endpoint.from_url(m.name, first, metrics_port=None),
                                           schemes=tuple(schemes))
        return None

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
        current: access.Endpoint
        previous = 0
        if via is not None:
            current = self.endpoint(via)
        else:
            leader = await self.leader(timeout=timeout)
            current, previous = leader.endpoint, leader.member_id
        redirects = 0
        request = rpc_pb2.MoveLeaderRequest(targetID=target_id)

        async def fn(c: _Conn, t: float) -> rpc_pb2.MoveLeaderResponse:
            return await c.maintenance.MoveLeader(request, timeout=t)  # type: ignore[no-any-return]

        rpc_started = loop.time()
        while True:
            try:
                resp, _ = await self._call(current, "MoveLeader", fn, timeout=timeout, deadline=deadline)
                break
            except errors.NotLeader as err:
                redirects += 1
                if redirects > 3 or loop.time() >= deadline:
                    raise errors.LeaderTransferTimeout(
                        f"MoveLeader to {target_id:x}: leadership kept moving ({err})", endpoint=err.endpoint) from err
                leader = await self.leader(timeout=max(0.05, deadline - loop.time()))
                current, previous = leader.endpoint, leader.member_id
                rpc_started = loop.time()
            except errors.MemberUnreachable:
                if via is None or redirects or loop.time() >= deadline:
                    raise
                redirects += 1  # the member we were pointed at is down: ask the leader instead
                leader = await self.leader(timeout=max(0.05, deadline - loop.time()))
                current, previous = leader.endpoint, leader.member_id
                rpc_started = loop.time()
            except errors.RequestTimeout as err:
                raise errors.LeaderTransferTimeout(
                    f"MoveLeader to {target_id:x} via {current.label}: not finished within {timeout}s ({err})",
                    endpoint=current.label) from err
        rpc_seconds = loop.time() - rpc_started
        if not previous:
            previous = resp.header.member_id
        agreed, unreachable = await self._wait_leader_agreed(target_id, loop.time() + agree_timeout)
        return LeaderMove(previous_leader_id=previous, leader_id=target_id, sent_to=current.label,
                          redirects=redirects, rpc_seconds=rpc_seconds, total_seconds=loop.time() - started,
                          agreed=agreed, unreachable=unreachable)

    async def _wait_leader_agreed(self, leader_id: int, deadline: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
        loop = asyncio.get_running_loop()
        extra: list[access.Endpoint] = []
        if leader_id not in self._ids:
            found = await self._discover(leader_id, deadline=deadline)
            if found is not None and found not in self._endpoints:
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
                    f"MoveLeader to {leader_id:x}: not every member reports it as leader; views: "
                    f"{self._describe(views)}")
            await asyncio.sleep(0.02)

    async def hash_kv(self, endpoint: access.Endpoint | str, *, revision: int = 0, timeout: float | None = None,
                      deadline: float | None = None) -> KVHash:
        """HashKV of one member at ``revision`` (0: its current revision). Costs a scan of the store."""
        ep = self.endpoint(endpoint)
        request = rpc_pb2.HashKVRequest(revision=revision)

        async def fn(c: _Conn, t: float) -> rpc_pb2.HashKVResponse:
            return await c.maintenance.HashKV(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._call(ep, "HashKV", fn, timeout=timeout, deadline=deadline)
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

    async def alarms(self, *, timeout: float | None = None) -> list[Alarm]:
        """Every member's raised alarms (an empty list: none)."""
        request = rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.GET, memberID=0)

        async def fn(c: _Conn, t: float) -> rpc_pb2.AlarmResponse:
            return await c.maintenance.Alarm(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("Alarm", fn, timeout=timeout)
        return [Alarm(a.memberID, rpc_pb2.AlarmType.Name(a.alarm)) for a in resp.alarms]

    async def set_alarm(self, member_id: int, alarm: str, *, raised: bool,
                        timeout: float | None = None) -> list[Alarm]:
        """Raise (``raised``) or disarm ``alarm`` (``NOSPACE``, ``CORRUPT``) on a member, through consensus; returns
        the alarms the request changed. Disarming ``NOSPACE`` before space is back only lets the next write raise
        it again; raising one by hand is for tests and drills."""
        action = rpc_pb2.AlarmRequest.ACTIVATE if raised else rpc_pb2.AlarmRequest.DEACTIVATE
        request = rpc_pb2.AlarmRequest(action=action, memberID=member_id, alarm=alarm)

        async def fn(c: _Conn, t: float) -> rpc_pb2.AlarmResponse:
            return await c.maintenance.Alarm(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("Alarm", fn, timeout=timeout)
        return [Alarm(a.memberID, rpc_pb2.AlarmType.Name(a.alarm)) for a in resp.alarms]

    async def defragment(self, endpoint: access.Endpoint | str, *, timeout: float | None = None) -> None:
        """Defragment one member's backend, giving back the space compaction freed. The member answers nothing
        else until it is done (seconds per gigabyte), so callers do one member at a time."""
        request = rpc_pb2.DefragmentRequest()

        async def fn(c: _Conn, t: float) -> rpc_pb2.DefragmentResponse:
            return await c.maintenance.Defragment(request, timeout=t)  # type: ignore[no-any-return]

        await self._call(self.endpoint(endpoint), "Defragment", fn, timeout=timeout)

    async def downgrade(self, action: str, version: str, *, timeout: float | None = None) -> str:
        """etcd's downgrade protocol: ``VALIDATE``, ``ENABLE`` or ``CANCEL`` a downgrade to ``version`` (major.minor);
        returns the cluster version the answer names. Refusals are :class:`errors.EtcdServerError` (or
        :class:`errors.MembershipError`) naming etcd's reason ("invalid downgrade target version", "the cluster has
        an ongoing downgrade job", ...)."""
        request = rpc_pb2.DowngradeRequest(action=action, version=version)

        async def fn(c: _Conn, t: float) -> rpc_pb2.DowngradeResponse:
            return await c.maintenance.Downgrade(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("Downgrade", fn, timeout=timeout)
        return str(resp.version)

    async def cluster_version(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> str:
        """The cluster version a member has decided (``etcd_cluster_version`` on its plain-HTTP metrics port):
        the lowest minor its members run, or the downgrade target. "" when the member does not report one."""
        return await probes.http_cluster_version(self._session(), self.endpoint(endpoint), timeout=timeout)

    async def quota_bytes(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> int | None:
        """``--quota-backend-bytes`` as the member runs it (``etcd_server_quota_backend_bytes`` on its metrics port;
        etcd's default, 2 GiB, when the flag is 0); None when the member does not report it."""
        metrics = await probes.http_metrics(self._session(), self.endpoint(endpoint), timeout=timeout)
        value = probes.metric_value(metrics, "etcd_server_quota_backend_bytes")
        return int(value) if value is not None else None

    # -- Cluster --

    async def members(self, *, linearizable: bool = True, timeout: float | None = None,
                      deadline: float | None = None) -> list[Member]:
        """MemberList from any voter. ``linearizable`` (etcd 3.5+) reads it through consensus, so it fails with
        :class:`errors.NoQuorum` rather than return a stale list when the cluster has no quorum."""
        request = rpc_pb2.MemberListRequest(linearizable=linearizable)

        async def fn(c: _Conn, t: float) -> rpc_pb2.MemberListResponse:
            return await c.cluster.MemberList(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("MemberList", fn, timeout=timeout, deadline=deadline)
        return [Member.from_pb(m) for m in resp.members]

    @staticmethod
    def _check_peer_urls(peer_urls: Sequence[str], call: str) -> list[str]:
        if isinstance(peer_urls, str) or not peer_urls:
            raise ValueError(f"{call}: peer_urls must be a non-empty list like ['https://10.0.0.5:2380']")
        out = []
        for url in peer_urls:
            try:
                access.Endpoint.from_url("peer", url)
            except ValueError:
                raise ValueError(f"{call}: peer_urls entry {url!r} is not http(s)://host:port") from None
            out.append(url)
        return out

    async def member_update(self, member_id: int, peer_urls: Sequence[str], *,
                            timeout: float | None = None) -> list[Member]:
        """Set a member's advertised peer URLs (goes through raft; needs quorum). Returns the new member list.
        Other members dial the new URLs from their next connection on; existing peer streams are not cut."""
        urls = self._check_peer_urls(peer_urls, "member_update")
        request = rpc_pb2.MemberUpdateRequest(ID=member_id, peerURLs=urls)

        async def fn(c: _Conn, t: float) -> rpc_pb2.MemberUpdateResponse:
            return await c.cluster.MemberUpdate(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("MemberUpdate", fn, timeout=timeout)
        return [Member.from_pb(m) for m in resp.members]

    async def member_add(self, peer_urls: Sequence[str], *, is_learner: bool = False,
                         timeout: float | None = None) -> tuple[Member, list[Member]]:
        """Add a member (optionally as learner); returns (the new member, the member list)."""
        urls = self._check_peer_urls(peer_urls, "member_add")
        request = rpc_pb2.MemberAddRequest(peerURLs=urls, isLearner=is_learner)

        async def fn(c: _Conn, t: float) -> rpc_pb2.MemberAddResponse:
            return await c.cluster.MemberAdd(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("MemberAdd", fn, timeout=timeout)
        return Member.from_pb(resp.member), [Member.from_pb(m) for m in resp.members]

    async def member_remove(self, member_id: int, *, timeout: float | None = None) -> list[Member]:
        request = rpc_pb2.MemberRemoveRequest(ID=member_id)

        async def fn(c: _Conn, t: float) -> rpc_pb2.MemberRemoveResponse:
            return await c.cluster.MemberRemove(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("MemberRemove", fn, timeout=timeout)
        return [Member.from_pb(m) for m in resp.members]

    async def member_promote(self, member_id: int, *, timeout: float | None = None) -> list[Member]:
        request = rpc_pb2.MemberPromoteRequest(ID=member_id)

        async def fn(c: _Conn, t: float) -> rpc_pb2.MemberPromoteResponse:
            return await c.cluster.MemberPromote(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("MemberPromote", fn, timeout=timeout)
        return [Member.from_pb(m) for m in resp.members]

    # -- Auth --

    async def _auth_rpc(self, call: str, fn: Callable[[_Conn, float], Awaitable[T]], *,
                        endpoint: access.Endpoint | str | None = None, timeout: float | None = None) -> T:
        if endpoint is None:
            resp, _ = await self._on_any(call, fn, timeout=timeout)
        else:
            resp, _ = await self._call(self.endpoint(endpoint), call, fn, timeout=timeout)
        return resp

    @staticmethod
    def _check_name(value: str, what: str, call: str) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError(f"{call}: {what} must be a non-empty string")
        return value

    async def auth_status(self, *, timeout: float | None = None) -> bool:
        """Is auth enabled? (etcd 3.5+.) etcd checks the caller's user only while auth is on, so a refusal of the
        question itself — :class:`errors.AuthRequired` (no credentials, no certificate CN) or
        :class:`errors.UserNotFound` (no credentials, ``--client-cert-auth`` and a CN that is no user) — answers
        True too."""
        request = rpc_pb2.AuthStatusRequest()

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthStatusResponse:
            return await c.auth.AuthStatus(request, timeout=t)  # type: ignore[no-any-return]

        try:
            resp = await self._auth_rpc("AuthStatus", fn, timeout=timeout)
        except (errors.PermissionDenied, errors.UserNotFound):
            return True
        return bool(resp.enabled)

    async def auth_enable(self, *, timeout: float | None = None) -> None:
        """Enable auth (through consensus, every member). Needs the user ``root`` with the role ``root``
        (:class:`errors.RootUserNotExist`, :class:`errors.RootRoleNotExist`). Enabling it again is a no-op. From
        the next call on this client logs in (with its credentials; without, calls are refused with
        :class:`errors.AuthRequired` unless a client certificate's CN names a user)."""
        request = rpc_pb2.AuthEnableRequest()

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthEnableResponse:
            return await c.auth.AuthEnable(request, timeout=t)  # type: ignore[no-any-return]

        await self._auth_rpc("AuthEnable", fn, timeout=timeout)
        self._login.forget()

    async def auth_disable(self, *, timeout: float | None = None) -> None:
        """Disable auth (needs the root role while it is on). etcd drops every token; calls go without one from
        then on."""
        request = rpc_pb2.AuthDisableRequest()

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthDisableResponse:
            return await c.auth.AuthDisable(request, timeout=t)  # type: ignore[no-any-return]

        await self._auth_rpc("AuthDisable", fn, timeout=timeout)
        self._login.forget()

    async def user_add(self, name: str, password: str, *, timeout: float | None = None) -> None:
        """Create user ``name`` with ``password`` (etcd stores a bcrypt hash). :class:`errors.UserExists` when there
        is one already — catch it to create idempotently (the password is then not changed)."""
        self._check_name(name, "name", "user_add")
        request = rpc_pb2.AuthUserAddRequest(name=name, password=password)

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthUserAddResponse:
            return await c.auth.UserAdd(request, timeout=t)  # type: ignore[no-any-return]

        await self._auth_rpc(f"UserAdd {name!r}", fn, timeout=timeout)

    async def user_get(self, name: str, *, timeout: float | None = None) -> tuple[str, ...]:
        """The roles of user ``name`` (sorted, as etcd keeps them); :class:`errors.UserNotFound`."""
        self._check_name(name, "name", "user_get")
        request = rpc_pb2.AuthUserGetRequest(name=name)

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthUserGetResponse:
            return await c.auth.UserGet(request, timeout=t)  # type: ignore[no-any-return]

        resp = await self._auth_rpc(f"UserGet {name!r}", fn, timeout=timeout)
        return tuple(resp.roles)

    async def user_grant_role(self, name: str, role: str, *, timeout: float | None = None) -> None:
        """Grant ``role`` to user ``name`` (granting it again is a no-op; the role ``root`` always exists).
        :class:`errors.UserNotFound`, :class:`errors.RoleNotFound`."""
        self._check_name(name, "name", "user_grant_role")
        self._check_name(role, "role", "user_grant_role")
        request = rpc_pb2.AuthUserGrantRoleRequest(user=name, role=role)

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthUserGrantRoleResponse:
            return await c.auth.UserGrantRole(request, timeout=t)  # type: ignore[no-any-return]

        await self._auth_rpc(f"UserGrantRole {name!r} {role!r}", fn, timeout=timeout)

    async def user_change_password(self, name: str, password: str, *, timeout: float | None = None) -> None:
        """Set user ``name``'s password. etcd drops that user's tokens at once: every client logged in as ``name``
        must log in again, and only the new password works. When ``name`` is this client's own user, the client
        takes the new password as its credentials (else its very next call would fail to log in).
        :class:`errors.UserNotFound`."""
        self._check_name(name, "name", "user_change_password")
        request = rpc_pb2.AuthUserChangePasswordRequest(name=name, password=password)

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthUserChangePasswordResponse:
            return await c.auth.UserChangePassword(request, timeout=t)  # type: ignore[no-any-return]

        await self._auth_rpc(f"UserChangePassword {name!r}", fn, timeout=timeout)
        own = self._login.credentials
        if own is not None and own.username == name:
            self.set_credentials(access.Credentials(name, password))

    async def check_login(self, endpoint: access.Endpoint | str | None, username: str, password: str, *,
                          timeout: float | None = None) -> bool:
        """Would etcd accept ``username`` / ``password``? A fresh Authenticate (on ``endpoint``, else on any member)
        whose token is thrown away: this client's own login is not touched. False when etcd refuses the pair
        (:class:`errors.AuthFailed`); :class:`errors.AuthNotEnabled` when auth is off (there is no login to check)."""
        self._check_name(username, "username", "check_login")
        request = rpc_pb2.AuthenticateRequest(name=username, password=password)

        async def fn(c: _Conn, t: float) -> rpc_pb2.AuthenticateResponse:
            return await c.auth.Authenticate(request, timeout=t)  # type: ignore[no-any-return]

        try:
            await self._auth_rpc(f"Authenticate as {username!r}", fn, endpoint=endpoint, timeout=timeout)
        except errors.AuthFailed:
            return False
        return True

    # -- snapshots --

    async def snapshot(self, endpoint: access.Endpoint | str, dest_path: str | os.PathLike[str], *,
                       timeout: float) -> SnapshotResult:
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
        ep = self.endpoint(endpoint)
        dest = pathlib.Path(dest_path)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        status = await self.status(ep, timeout=min(self.timeout, timeout), deadline=deadline)
        label = f"{ep.label} [{status.scheme}]"
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise errors.DeadlinePassed(f"Snapshot on {label}: deadline passed before the stream", endpoint=label)
        conn = self._conn(ep, status.scheme)
        out = snapshot.SnapshotFile(dest)
        call = conn.maintenance.Snapshot(rpc_pb2.SnapshotRequest(), timeout=remaining)
        header_revision, header_member, version, chunks = 0, 0, "", 0
        try:
            while True:
                try:
                    resp = await call.read()
                except (*_GRPC_RAISES, errors.EtcdError) as exc:
                    err = errors.translate(exc, endpoint=label, call="Snapshot")
                    err = errors.past_deadline(err, deadline, loop.time())
                    if err is exc:
                        raise
                    raise err from exc
                if resp is grpc.aio.EOF:
                    break
                if chunks == 0:
                    out.expected_db_size = len(resp.blob) + resp.remaining_bytes
                    header_revision, header_member = resp.header.revision, resp.header.member_id
                    version = snapshot_version(resp)
                chunks += 1
                out.write(resp.blob)
            try:
                size, digest = await asyncio.to_thread(out.finish)
            except ValueError as exc:
                raise errors.SnapshotFailed(f"Snapshot on {label}: {exc}", endpoint=label) from exc
        except BaseException:
            call.cancel()
            out.abort()
            raise
        revision = header_revision
        if not revision:
            try:
                revision = await asyncio.to_thread(snapshot.db_revision, dest)
            except ValueError as exc:
                dest.unlink(missing_ok=True)
                raise errors.SnapshotFailed(f"Snapshot on {label}: the file is not an etcd backend: {exc}",
                                            endpoint=label) from exc
        return SnapshotResult(path=dest, size=size, sha256_hex=digest, revision=revision,
                              member_id=header_member or status.member_id, version=version)

    # -- KV --

    @staticmethod
    def _bytes(value: bytes | str) -> bytes:
        return value.encode() if isinstance(value, str) else value

    async def _on(self, endpoint: access.Endpoint | str | None, call: str, fn: Callable[[_Conn, float], Awaitable[T]],
                  *, scheme: str | None, timeout: float | None, deadline: float | None) -> T:
        """``fn`` on ``endpoint`` (and ``scheme``) when given, else on any member."""
        if endpoint is None:
            resp, _ = await self._on_any(call, fn, timeout=timeout, deadline=deadline)
            return resp
        result, _ = await self._call(self.endpoint(endpoint), call, fn, timeout=timeout, deadline=deadline,
                                     scheme=scheme)
        return result

    async def put(self, key: bytes | str, value: bytes | str, *, endpoint: access.Endpoint | str | None = None,
                  scheme: str | None = None, timeout: float | None = None,
                  deadline: float | None = None) -> int:
        """Put one key; returns the revision. On ``endpoint`` (and ``scheme``) when given, else on any member."""
        request = rpc_pb2.PutRequest(key=self._bytes(key), value=self._bytes(value))

        async def fn(c: _Conn, t: float) -> rpc_pb2.PutResponse:
            return await c.kv.Put(request, timeout=t)  # type: ignore[no-any-return]

        resp = await self._on(endpoint, "Put", fn, scheme=scheme, timeout=timeout, deadline=deadline)
        return int(resp.header.revision)

    async def _range_one(self, key: bytes, *, serializable: bool, endpoint: access.Endpoint | str | None,
                         scheme: str | None, timeout: float | None, deadline: float | None) -> rpc_pb2.RangeResponse:
        request = rpc_pb2.RangeRequest(key=key, serializable=serializable, limit=1)

        async def fn(c: _Conn, t: float) -> rpc_pb2.RangeResponse:
            return await c.kv.Range(request, timeout=t)  # type: ignore[no-any-return]

        return await self._on(endpoint, "Range", fn, scheme=scheme, timeout=timeout, deadline=deadline)

    async def get(self, key: bytes | str, *, endpoint: access.Endpoint | str | None = None,
                  serializable: bool = False, scheme: str | None = None, timeout: float | None = None,
                  deadline: float | None = None) -> bytes | None:
        """Read one key (linearizable unless ``serializable``); None when absent."""
        resp = await self._range_one(self._bytes(key), serializable=serializable, endpoint=endpoint, scheme=scheme,
                                     timeout=timeout, deadline=deadline)
        return bytes(resp.kvs[0].value) if resp.kvs else None

    async def read_key(self, key: bytes | str, *, endpoint: access.Endpoint | str | None = None,
                       scheme: str | None = None, timeout: float | None = None,
                       deadline: float | None = None) -> KeyRead:
        """A linearizable read of one key with its revisions (what :meth:`get` leaves out)."""
        k = self._bytes(key)
        resp = await self._range_one(k, serializable=False, endpoint=endpoint, scheme=scheme, timeout=timeout,
                                     deadline=deadline)
        return _key_read(k, resp.kvs, resp.header)

    async def put_if_mod_revision(self, key: bytes | str, value: bytes | str, mod_revision: int, *,
                                  endpoint: access.Endpoint | str | None = None, scheme: str | None = None,
                                  timeout: float | None = None, deadline: float | None = None) -> GuardedPut:
        """Write ``value`` only if ``key`` was last written at ``mod_revision`` (0: only if it is absent), else read
        it: one transaction, so the answer says which branch ran and what the key held."""
        k = self._bytes(key)
        request = rpc_pb2.TxnRequest(
            compare=[rpc_pb2.Compare(result=rpc_pb2.Compare.EQUAL, target=rpc_pb2.Compare.MOD, key=k,
                                     mod_revision=mod_revision)],
            success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=self._bytes(value)))],
            failure=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=k, limit=1))])

        async def fn(c: _Conn, t: float) -> rpc_pb2.TxnResponse:
            return await c.kv.Txn(request, timeout=t)  # type: ignore[no-any-return]

        resp = await self._on(endpoint, "Txn", fn, scheme=scheme, timeout=timeout, deadline=deadline)
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
        ep = self.endpoint(endpoint)
        s = self._schemes(ep, scheme)[0]
        label = f"{ep.label} [{s}]"
        budget = self.timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + budget
        start = self._bytes(prefix)
        conn = self._conn(ep, s)
        call: Any = None
        try:
            token = await self._login.current(conn.auth, label, deadline)
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
                if resp is grpc.aio.EOF:
                    raise errors.MemberUnreachable(f"Watch on {label}: the stream ended", endpoint=label)
                if resp.canceled:
                    if resp.compact_revision:
                        compacted = errors.Compacted(f"Watch on {label}: revision {start_revision} is compacted "
                                                     f"(the last compaction is at {resp.compact_revision})",
                                                     endpoint=label)
                        compacted.compact_revision = resp.compact_revision
                        raise compacted
                    raise errors.EtcdServerError(f"Watch on {label}: cancelled ({resp.cancel_reason})",
                                                 endpoint=label, details=resp.cancel_reason)
                confirmed = True
                yield WatchBatch(
                    events=tuple(WatchEvent(kind="delete" if e.type == rpc_pb2.Event.DELETE else "put",
                                            key=bytes(e.kv.key), value=bytes(e.kv.value),
                                            mod_revision=e.kv.mod_revision, version=e.kv.version)
                                 for e in resp.events),
                    revision=resp.header.revision, cluster_id=resp.header.cluster_id,
                    member_id=resp.header.member_id)
        except (*_GRPC_RAISES, errors.EtcdError) as exc:
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
        start, end = self._bytes(prefix), prefix_end(self._bytes(prefix))
        out: list[tuple[bytes, bytes]] = []
        while True:
            request = rpc_pb2.RangeRequest(key=start, range_end=end, limit=page, revision=revision)

            async def fn(c: _Conn, t: float, request: rpc_pb2.RangeRequest = request) -> rpc_pb2.RangeResponse:
                return await c.kv.Range(request, timeout=t)  # type: ignore[no-any-return]

            if endpoint is None:
                resp, _ = await self._on_any("Range", fn, timeout=timeout)
            else:
                resp, _ = await self._call(self.endpoint(endpoint), "Range", fn, timeout=timeout, scheme=scheme)
            revision = revision or int(resp.header.revision)
            out.extend((bytes(kv.key), bytes(kv.value)) for kv in resp.kvs)
            if not resp.more or not resp.kvs:
                return out, revision
            start = bytes(resp.kvs[-1].key) + b"\x00"

    async def delete_prefix(self, prefix: bytes | str, *, timeout: float | None = None) -> tuple[int, int]:
        """Delete every key under ``prefix``; (keys deleted, the revision of the deletion)."""
        key = self._bytes(prefix)
        request = rpc_pb2.DeleteRangeRequest(key=key, range_end=prefix_end(key))

        async def fn(c: _Conn, t: float) -> rpc_pb2.DeleteRangeResponse:
            return await c.kv.DeleteRange(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("DeleteRange", fn, timeout=timeout)
        return int(resp.deleted), int(resp.header.revision)

    async def compact(self, revision: int, *, physical: bool = True, timeout: float | None = None) -> int:
        """Compact the key-value history below ``revision`` (every member: it goes through consensus); with
        ``physical`` the answer waits until the backend applied it, so a defragmentation after it gives the space
        back. Returns the cluster's revision."""
        if revision <= 0:
            raise ValueError(f"compact: revision must be positive, got {revision}")
        request = rpc_pb2.CompactionRequest(revision=revision, physical=physical)

        async def fn(c: _Conn, t: float) -> rpc_pb2.CompactionResponse:
            return await c.kv.Compact(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self._on_any("Compact", fn, timeout=timeout)
        return int(resp.header.revision)

    # -- health and recovery --

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(trust_env=False)
        return self._http

    async def health(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> probes.Health:
        """Is this member healthy, by etcd's own definition (has a leader, no alarm, a linearizable read completes)?

        Uses ``GET /health`` on the plain-HTTP metrics port when the endpoint has one, else reproduces the same check
        over gRPC (Status + a linearizable Range). Returns a :class:`probes.Health` — never raises for an unhealthy or
        unreachable member — and within ``timeout`` (plus up to 1 s to confirm, by Status, that a member whose
        ``/health`` hung is alive).
        ``no_quorum`` is set when the member answers but consensus does not.
        """
        ep = self.endpoint(endpoint)
        started = time.monotonic()
        if ep.metrics_url is not None:
            try:
                return await probes.http_health(self._session(), ep, timeout=timeout)
            except errors.RequestTimeout as err:
                # The member accepted /health but its linearizable read hung: alive without consensus, if Status
                # confirms it is alive.
                try:
                    st = await self.status(ep, timeout=min(1.0, timeout))
                except errors.EtcdError:
                    return probes.Health(ep.label, False, str(err), reachable=False, via="http-metrics",
                                         took=time.monotonic() - started)
                return probes.Health(ep.label, False, f"{err} (member up, leader={st.leader_id:x})", no_quorum=True,
                                     via="http-metrics", took=time.monotonic() - started)
            except errors.MemberUnreachable:
                pass  # no metrics listener (or the member is down): ask over gRPC
        return await self._grpc_health(ep, timeout, started)

    async def _grpc_health(self, ep: access.Endpoint, timeout: float, started: float) -> probes.Health:
        deadline = asyncio.get_running_loop().time() + timeout  # one budget for Status and the read together
        try:
            st = await self.status(ep, timeout=timeout, deadline=deadline)
        except errors.EtcdError as err:
            return probes.Health(ep.label, False, f"unreachable: {err}", reachable=False, via="grpc",
                                 took=time.monotonic() - started)
        via = f"grpc-{st.scheme}"
        if st.errors:
            reason = "; ".join(st.errors)
            return probes.Health(ep.label, False, reason, no_quorum=probes.reason_means_no_quorum(reason), via=via,
                                 took=time.monotonic() - started)
        if st.leader_id == 0:
            return probes.Health(ep.label, False, "RAFT NO LEADER", no_quorum=True, via=via,
                                 took=time.monotonic() - started)
        try:
            await self.get(HEALTH_KEY, endpoint=ep, scheme=st.scheme, timeout=timeout, deadline=deadline)
        except (errors.NoQuorum, errors.RequestTimeout) as err:
            return probes.Health(ep.label, False, f"linearizable read failed: {err}", no_quorum=True, via=via,
                                 took=time.monotonic() - started)
        except errors.EtcdError as err:
            return probes.Health(ep.label, False, f"linearizable read failed: {err}", via=via,
                                 took=time.monotonic() - started)
        return probes.Health(ep.label, True, via=via, took=time.monotonic() - started)

    async def wait_recovered(self, member: access.Endpoint | str, *, expected_voters: int,
                             timeout: float = 30.0, poll_interval: float = 0.1,
                             check_hash: bool = False) -> Recovery:
        """The gate after ``member`` restarted. Polls until all of these hold, or ``timeout`` seconds pass:

        1. MemberList (linearizable) has ``expected_voters`` voters and no learners;
        2. every endpoint is healthy (:meth:`health`);
        3. the member's applied index has reached the leader's commit index (sampled just before);
        4. a linearizable read through the member succeeds;
        5. with ``check_hash``: every member hashes its store identically at one revision (:meth:`check_consistency`;
           a scan of the store on every member, so off by default). A mismatch raises
           :class:`errors.DataInconsistent` at once — it does not heal by waiting.

        Raises :class:`errors.NoQuorum` when the last blocker was lost quorum, else :class:`errors.NotRecovered`
        with the blocker as ``reason`` — never later than about ``timeout`` (+ one poll's own bound).
        """
        if expected_voters < 1:
            raise ValueError(f"wait_recovered: expected_voters must be >= 1, not {expected_voters}")
        ep = self.endpoint(member)
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout
        blocker: errors.EtcdError = errors.NotRecovered("not checked yet", reason="not checked yet")
        polls = 0
        while True:
            polls += 1
            step = max(0.05, min(self.timeout, deadline - loop.time()))
            try:
                result = await self._recovery_check(ep, expected_voters, step, deadline)
                if check_hash:
                    await self.check_consistency(timeout=step, deadline=deadline)
                return dataclasses.replace(result, seconds=loop.time() - started, polls=polls)
            except errors.DataInconsistent:
                raise
            except errors.RequestTimeout as err:
                # A poll cut short by the overall deadline (or by DeadlinePassed) says only that time ran out:
                # it does not replace an earlier, more telling blocker (e.g. the stopped member's health).
                if polls == 1 or (step >= self.timeout and not isinstance(err, errors.DeadlinePassed)):
                    blocker = err
            except errors.EtcdError as err:
                blocker = err
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.sleep(min(poll_interval, remaining))
        msg = f"wait_recovered({ep.name}): not recovered within {timeout}s ({polls} polls); last blocker: {blocker}"
        if isinstance(blocker, errors.NoQuorum):
            raise errors.NoQuorum(msg, endpoint=ep.label) from blocker
        raise errors.NotRecovered(msg, reason=str(blocker), endpoint=ep.label) from blocker

    async def _recovery_check(self, ep: access.Endpoint, expected_voters: int, step: float,
                              deadline: float) -> Recovery:
        members = await self.members(linearizable=True, timeout=step, deadline=deadline)
        voters = [m for m in members if not m.is_learner]
        learners = [m.name or m.id_hex for m in members if m.is_learner]
        if len(voters) != expected_voters or learners:
            raise errors.NotRecovered(
                f"{len(voters)} voters (expected {expected_voters}), learners: {learners or 'none'}",
                reason="membership")
        healths = await asyncio.gather(*(self.health(e, timeout=step) for e in self._endpoints))
        bad = [h for h in healths if not h.healthy]
        if bad:
            detail = "; ".join(f"{h.endpoint}: {h.reason}" for h in bad)
            if any(h.no_quorum for h in bad) and len(bad) > len(healths) // 2:
                raise errors.NoQuorum(f"unhealthy: {detail}")
            raise errors.NotRecovered(f"unhealthy: {detail}", reason="health")
        leader = await self.leader(timeout=step)
        mine = await self.status(ep, timeout=step, deadline=deadline)
        if mine.raft_applied_index < leader.raft_index:
            raise errors.NotRecovered(
                f"{ep.name} applied index {mine.raft_applied_index} < leader {leader.endpoint.name}'s commit index "
                f"{leader.raft_index}", reason="catching up")
        await self.get(HEALTH_KEY, endpoint=ep, timeout=step, deadline=deadline)
        return Recovery(member=ep.name, member_id=mine.member_id, leader_id=leader.member_id, voters=len(voters),
                        applied_index=mine.raft_applied_index, leader_commit_index=leader.raft_index,
                        seconds=0.0, polls=0)

    # -- certificates --

    async def flags(self, endpoint: access.Endpoint | str, *, timeout: float = 3.0) -> tuple[str, ...]:
        """The command line the member started with: Go's ``expvar`` publishes ``cmdline`` on etcd's ``/debug/vars``
        (the client port; with this client's certificate on a TLS member). The scheme that works first is used."""
        ep = self.endpoint(endpoint)
        failures = []
        for scheme in ep.schemes:
            try:
                return await probes.debug_cmdline(self._session(), ep, scheme, identity=self._tls, timeout=timeout)
            except errors.EtcdError as err:
                failures.append(err)
        raise failures[0]

    async def served_certificate(self, endpoint: access.Endpoint | str, *, port: str | int = "client",
                                 timeout: float = 3.0) -> pki.CertInfo:
        """The certificate ``endpoint`` serves now on its client port (``port="client"``), peer port (``"peer"``) or
        any port number, read with a fresh handshake that presents this client's certificate (if any)."""
        ep = self.endpoint(endpoint)
        number = {"client": ep.client_port, "peer": ep.peer_port}.get(port, port) if isinstance(port, str) else port
        if not isinstance(number, int):
            raise ValueError(f"served_certificate: port must be 'client', 'peer' or a number, not {port!r}")
        return await probes.served_certificate(ep.host, number, ep.server_name, identity=self._tls, timeout=timeout)
