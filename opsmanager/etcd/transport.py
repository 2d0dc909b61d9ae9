"""The one transport every etcd service of a client shares (:class:`Transport`): the member endpoints and which of
their schemes answered last, the TLS identity, the etcd login, the ``grpc.aio`` channels, the retry across schemes
and endpoints, deadlines, and the translation of gRPC errors.

The services (:mod:`~opsmanager.etcd.kv`, :mod:`~opsmanager.etcd.cluster`, :mod:`~opsmanager.etcd.maintenance`,
:mod:`~opsmanager.etcd.auth`) only build requests and read answers; they reach a member through :meth:`Transport.call`
(one endpoint), :meth:`Transport.on_any` (the first endpoint that answers) or :meth:`Transport.on` (either), so
where to send a call, how long to wait and which errors leave are decided here and nowhere else.

Channels are cached per (endpoint, scheme, server name, identity); one channel carries every service's stub
(:class:`Conn`). ``Endpoint.server_name`` becomes ``grpc.ssl_target_name_override`` so a pod IP can be dialled while
the certificate's DNS name is verified. An endpoint may list several schemes ("dual view" during a TLS transition):
each is tried with its own budget, starting with the one that last worked.

Auth: with :class:`access.Credentials` every call carries the token etcd gave for them, obtained lazily and renewed
once when etcd forgets it (:mod:`opsmanager.etcd.tokens`, interceptors on every channel, so no service knows about
tokens). Without credentials calls go as they are.

Timeouts: ``timeout`` is the budget of one attempt (one endpoint, one scheme); ``deadline`` (absolute
``loop.time()``) caps everything. Errors: only :mod:`opsmanager.etcd.errors` types leave; gRPC errors are
translated here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import aiohttp
import grpc
import grpc.aio

from opsmanager.etcd import access, errors, tokens
from opsmanager.etcd._pb import rpc_pb2_grpc

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0

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
TRY_NEXT_SCHEME = (errors.MemberUnreachable, errors.TLSHandshakeFailed, errors.RequestTimeout)
# ... and on another endpoint: also "this member cannot do it" answers (no quorum seen from there, a learner).
TRY_NEXT = (*TRY_NEXT_SCHEME, errors.NoQuorum, errors.LearnerNotSupported)
# What a gRPC call may raise besides translated errors (grpc.aio.BaseError: UsageError on a closed channel ...).
GRPC_RAISES = (grpc.RpcError, grpc.aio.BaseError, OSError, TimeoutError)


@dataclasses.dataclass
class Conn:
    """One channel to one member and scheme, with the stub of every etcd service on it."""

    channel: grpc.aio.Channel
    kv: rpc_pb2_grpc.KVStub
    cluster: rpc_pb2_grpc.ClusterStub
    maintenance: rpc_pb2_grpc.MaintenanceStub
    auth: rpc_pb2_grpc.AuthStub
    watch: rpc_pb2_grpc.WatchStub


Call = Callable[[Conn, float], Awaitable[T]]
"""What a service sends: ``fn(conn, timeout)`` — one RPC on the channel the transport chose, within ``timeout``."""


class Transport:
    """The channels, identity, login and endpoint choice of one client (see the module doc).

    ``endpoints``: the members to talk to (their ``name`` is how calls refer to them). ``tls``: trust bundle and
    client identity for ``https`` schemes. ``timeout``: default per-attempt budget in seconds. ``credentials``: the
    etcd user to act as. ``board``: the token this cluster's other clients got, shared.
    """

    def __init__(self, endpoint_list: Iterable[access.Endpoint], *, tls: access.TLSIdentity | None = None,
                 timeout: float = DEFAULT_TIMEOUT, credentials: access.Credentials | None = None,
                 board: tokens.Board | None = None) -> None:
        self._endpoints: list[access.Endpoint] = []
        self._tls: access.TLSIdentity | None = None
        self.timeout = timeout
        self._conns: dict[tuple[str, str, str | None, str | None], Conn] = {}
        self._preferred_scheme: dict[str, str] = {}
        self._last_good: str | None = None
        self.ids: dict[int, access.Endpoint] = {}  # member ID -> endpoint, learned from Status
        self._http: aiohttp.ClientSession | None = None
        self.login = tokens.Login(board=board)
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
        self.ids = {i: e for i, e in self.ids.items() if e in eps}

    def set_tls(self, tls: access.TLSIdentity | None) -> None:
        """Use another trust bundle / client identity from now on. Channels of the previous identity stay open
        (calls in flight finish) until :meth:`close`."""
        if tls is not None and not isinstance(tls, access.TLSIdentity):
            raise TypeError(f"tls must be an access.TLSIdentity or None, not {type(tls).__name__}")
        self._tls = tls

    def set_credentials(self, credentials: access.Credentials | None) -> None:
        """Act as this etcd user from the next call on (None: send no token); the previous token is dropped."""
        if credentials is not None and not isinstance(credentials, access.Credentials):
            raise TypeError(f"credentials must be an access.Credentials or None, not {type(credentials).__name__}")
        self.login.set_credentials(credentials)

    def endpoint(self, ref: access.Endpoint | str) -> access.Endpoint:
        """The configured endpoint named ``ref`` (an :class:`Endpoint` is returned as is)."""
        return access.find(self._endpoints, ref)

    # -- lifecycle --

    async def close(self) -> None:
        """Close every channel and the HTTP session. The transport can be used again afterwards (reconnects)."""
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.channel.close(grace=None)
        await self.login.close()
        if self._http is not None:
            session, self._http = self._http, None
            await session.close()

    async def prune(self) -> None:
        """Close the channels of addresses that are no longer endpoints."""
        targets = {ep.target for ep in self._endpoints}
        gone = [key for key in self._conns if key[0] not in targets]
        for key in gone:
            conn = self._conns.pop(key)
            with contextlib.suppress(Exception):
                await conn.channel.close(grace=None)

    def session(self) -> aiohttp.ClientSession:
        """The HTTP session of the plain-HTTP probes (metrics port, ``/debug/vars``), closed with the channels."""
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(trust_env=False)
        return self._http

    # -- channels --

    def conn(self, ep: access.Endpoint, scheme: str) -> Conn:
        """The cached channel to ``ep`` over ``scheme`` (opened on first use), with every service's stub."""
        identity = self._tls if scheme == "https" else None
        if scheme == "https" and identity is None:
            raise ValueError(f"endpoint {ep.name!r} lists scheme 'https' but the client has no TLS identity; "
                             "pass tls=TLSIdentity(ca_pem=...) or drop 'https' from the endpoint's schemes")
        key = (ep.target, scheme, ep.server_name, identity.fingerprint if identity else None)
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = self._open(ep, scheme, identity)
        return conn

    def _open(self, ep: access.Endpoint, scheme: str, identity: access.TLSIdentity | None) -> Conn:
        options = list(CHANNEL_OPTIONS)
        interceptors, bind = tokens.interceptors(self.login, f"{ep.label} [{scheme}]")
        if identity is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=identity.ca_pem, private_key=identity.key_pem,
                                                 certificate_chain=identity.cert_pem)
            if ep.server_name:
                options.append(("grpc.ssl_target_name_override", ep.server_name))
            channel = grpc.aio.secure_channel(ep.target, creds, options=options, interceptors=interceptors)
        else:
            channel = grpc.aio.insecure_channel(ep.target, options=options, interceptors=interceptors)
        bind(channel)
        return Conn(channel, rpc_pb2_grpc.KVStub(channel),  # type: ignore[no-untyped-call]
                    rpc_pb2_grpc.ClusterStub(channel),  # type: ignore[no-untyped-call]
                    rpc_pb2_grpc.MaintenanceStub(channel),  # type: ignore[no-untyped-call]
                    rpc_pb2_grpc.AuthStub(channel),  # type: ignore[no-untyped-call]
                    rpc_pb2_grpc.WatchStub(channel))  # type: ignore[no-untyped-call]

    def schemes(self, ep: access.Endpoint, scheme: str | None) -> list[str]:
        """The schemes to try on ``ep``: ``scheme`` alone when pinned, else the endpoint's, the last good first."""
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

    def channel_down(self, ep: access.Endpoint) -> bool:
        """True when every cached channel to ``ep`` is failing to connect (local state, no I/O); False if unknown."""
        conns = [c for (target, *_), c in self._conns.items() if target == ep.target]
        failing = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.CONNECTING)
        return bool(conns) and all(c.channel.get_state(try_to_connect=False) in failing for c in conns)

    # -- calls --

    @staticmethod
    def _attempt_timeout(timeout: float, deadline: float | None) -> float:
        if deadline is None:
            return timeout
        return min(timeout, deadline - asyncio.get_running_loop().time())

    async def call(self, ep: access.Endpoint, call: str, fn: Call[T], *, timeout: float | None = None,
                   deadline: float | None = None, scheme: str | None = None) -> tuple[T, str]:
        """Run ``fn(conn, timeout)`` on ``ep``, trying its schemes in order; returns (result, scheme).

        The only place gRPC errors of a unary call are caught and translated (a login the token interceptor made on
        the way raises its error translated already).
        """
        per_try = self.timeout if timeout is None else timeout
        failures: list[tuple[str, errors.EtcdError, BaseException | None]] = []
        for s in self.schemes(ep, scheme):
            budget = self._attempt_timeout(per_try, deadline)
            if budget <= 0:
                break
            conn = self.conn(ep, s)
            try:
                result = await fn(conn, budget)
            except (*GRPC_RAISES, errors.EtcdError) as exc:
                err = errors.translate(exc, endpoint=f"{ep.label} [{s}]", call=call)
                cause = exc.__cause__ if err is exc else exc
                if not isinstance(err, TRY_NEXT_SCHEME):
                    if err is exc:
                        raise
                    raise err from exc
                failures.append((s, err, cause))
                continue
            self._preferred_scheme[ep.target] = s
            return result, s
        err, cause = _schemes_error(ep, call, failures)
        raise err from cause

    async def on_any(self, call: str, fn: Call[T], *, timeout: float | None = None, deadline: float | None = None,
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
                result, _ = await self.call(ep, call, fn, timeout=timeout, deadline=deadline)
            except TRY_NEXT as err:
                failures.append(err)
                continue
            self._last_good = ep.name
            return result, ep
        # Endpoints the deadline left untried still count as down when their channels say so.
        known_down = sum(1 for ep in untried if self.channel_down(ep))
        raise self._cluster_error(call, failures, known_down=known_down)

    async def on(self, endpoint: access.Endpoint | str | None, call: str, fn: Call[T], *, scheme: str | None = None,
                 timeout: float | None = None, deadline: float | None = None) -> T:
        """``fn`` on ``endpoint`` (and ``scheme``) when given, else on any member."""
        if endpoint is None:
            resp, _ = await self.on_any(call, fn, timeout=timeout, deadline=deadline)
            return resp
        result, _ = await self.call(self.endpoint(endpoint), call, fn, timeout=timeout, deadline=deadline,
                                    scheme=scheme)
        return result

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


def _schemes_error(ep: access.Endpoint, call: str, failures: list[tuple[str, errors.EtcdError, BaseException | None]]
                   ) -> tuple[errors.EtcdError, BaseException | None]:
    """The one error for "no scheme of ``ep`` answered" and its cause: the most specific kind seen, naming every
    attempt."""
    if not failures:
        return errors.DeadlinePassed(f"{call} on {ep.label}: deadline passed before any attempt",
                                     endpoint=ep.label), None
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
    return err, chosen[2]

