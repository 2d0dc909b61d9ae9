"""The client's etcd login: :class:`Login` holds the credentials and the token etcd gave for them, and
:func:`interceptors` attaches that token to every call a channel makes.

How etcd authenticates a call: with auth enabled, each call needs a user — the token ``Authenticate`` returned, in
the gRPC metadata key ``token``, or, with ``--client-cert-auth`` and no token, the client certificate's CN. A token
therefore always wins over the certificate, which is what we want: a client with :class:`~access.Credentials` acts
as that user whatever certificate its TLS identity holds.

Why interceptors: every call of every service of :class:`~opsmanager.etcd.client.EtcdClient` (unary and the
Snapshot stream) keeps working unchanged, and the token and the retry live in one place. One :class:`Login` per client
(its :class:`~opsmanager.etcd.transport.Transport`'s) is shared by the interceptors of all its channels (the channel cache is keyed by TLS identity; credentials and the token are the
client's, so a channel carries whatever the client's login is at call time).

What the interceptors do, per call (``Authenticate`` itself passes through untouched, with no token):

* no credentials: nothing;
* credentials and no token yet: log in first (on the same channel). If etcd answers "authentication is not
  enabled", remember that and send calls without a token;
* etcd answers "invalid auth token" (a simple token expires ``--auth-token-ttl`` after its last use, a restarted
  member forgets every token, a password change or AuthDisable drops them), "revision of auth store is old", or
  "user name is empty": log in again — once, and only if no other call has done so meanwhile — and resend;
* a call sent without a token because auth looked off that is refused for want of a user (or as the certificate's
  CN, "user name not found" / "permission denied"): auth may have been enabled since; log in and resend once.

A login is not bound by the deadline of the call that needed it. etcd checks a password with bcrypt (tens of
milliseconds on an idle core, several times that on a busy one, once per password tried) and then commits the login
through raft. A login cut off at a short call deadline wastes that work, and calls that all have short deadlines
would never log in at all. So a login runs as a task of its own, for at least :data:`LOGIN_TIMEOUT`. A call waits
for it only until its own deadline, and the calls after it join the same login instead of starting another. A
call that joined a login on another member which did not answer logs in on its own member.

A client without a token first takes the one its :class:`Board` holds (the last token etcd gave another client of
the same cluster, for the same user): a token names a user, not a password, and holds on every member. That matters
when a majority is gone: ``Authenticate`` goes through raft and cannot succeed, Status needs a user, and a token from
before the loss is the only way to ask the survivor anything.

A token etcd issued before a restore from a snapshot is one thing a client cannot recover from by itself: etcd's
simple token ends in the raft index it was issued at, a member holds every call whose token names an index it has
not applied until the call's deadline (it never says "invalid"), and a restored cluster starts a new, shorter log on
the same members. Whoever replaces the data makes the clients forget their tokens (:meth:`Login.forget`; the Restore
step does it for every pooled client of the Etcd). Timeouts alone are no sign of it: a member that is down, a
learner catching up or a cluster without a quorum time out too — and then a new login could not succeed.

Everything else, including the second failure, goes back to the caller (translated there by the client). A login
tries :attr:`~access.Credentials.passwords` in turn (the one that worked last first); when none works it raises the
translated error (:class:`errors.AuthFailed` ...), whose message names the user, never a password.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc
import grpc.aio

from opsmanager.etcd import access, errors
from opsmanager.etcd._pb import rpc_pb2, rpc_pb2_grpc

TOKEN_KEY = "token"  # etcd's rpctypes.TokenFieldNameGRPC
AUTHENTICATE = "/etcdserverpb.Auth/Authenticate"
LOGIN_TIMEOUT: Final = 10.0  # the least time a login gets, whatever the deadline of the call that started it

_GRPC_RAISES = (grpc.RpcError, grpc.aio.BaseError, OSError, TimeoutError)


def _details(exc: grpc.RpcError) -> str:
    details = exc.details() if hasattr(exc, "details") else None
    return str(details or exc)


class Board:
    """The last token etcd gave for a user, shared by the clients of one cluster (the pool's: the engine's and the
    status pass's)."""

    def __init__(self) -> None:
        self.username: str | None = None
        self.token: str | None = None

    def post(self, username: str, token: str) -> None:
        self.username, self.token = username, token

    def take(self, username: str) -> str | None:
        return self.token if self.username == username else None

    def withdraw(self, token: str) -> None:
        if self.token == token:
            self.token = None


@dataclasses.dataclass(frozen=True)
class _Flight:
    """A login running as its own task: for the credentials of ``epoch``, on the member ``label``, started by a
    call with the deadline ``patience``."""

    epoch: int
    label: str
    patience: float | None
    task: asyncio.Task[str | None]


def _earliest(*deadlines: float | None) -> float | None:
    known = [d for d in deadlines if d is not None]
    return min(known) if known else None


class Login:
    """Credentials and the current token of one client (shared by every channel's interceptors)."""

    def __init__(self, credentials: access.Credentials | None = None, board: Board | None = None) -> None:
        self.credentials = credentials
        self.board = board
        self.token: str | None = None
        self.enabled: bool | None = None  # False: Authenticate said auth is off, calls go without a token
        self.logins = 0  # successful Authenticate calls (for tests and logs)
        self._epoch = 0  # bumped by every login attempt that settled something, and by forget()
        self._worked: str | None = None  # the password etcd accepted last (tried first next time)
        self._flights: list[_Flight] = []  # logins running (each on the channel of the call that started it)

    def set_credentials(self, credentials: access.Credentials | None) -> None:
        """Use ``credentials`` from the next call on (the same value keeps the current token)."""
        if credentials != self.credentials:
            self.credentials = credentials
            self._worked = None
            self.forget()

    def forget(self) -> None:
        """Drop the token (and what we knew of auth being on): the next call logs in again. The token leaves the
        board too: whatever made this client forget it (a password change, a restore) holds for the others."""
        if self.token is not None and self.board is not None:
            self.board.withdraw(self.token)
        self.token = None
        self.enabled = None
        self._epoch += 1

    def answered(self, used: str | None) -> None:
        """A call that carried ``used`` was answered: post it when the board holds none (another client withdrew a
        token some member refused; it still holds where this call went)."""
        if (used is not None and used == self.token and self.board is not None and self.credentials is not None
                and self.board.token is None):
            self.board.post(self.credentials.username, used)

    async def current(self, stub: rpc_pb2_grpc.AuthStub, label: str, deadline: float | None) -> str | None:
        """The token to send now (logging in first when there is none yet); None: send the call without one."""
        if self.credentials is None or self.enabled is False:
            return None
        if self.token is not None:
            return self.token
        posted = self.board.take(self.credentials.username) if self.board is not None else None
        if posted is not None:
            self.token, self.enabled = posted, True
            return posted
        return await self.renew(stub, label, None, deadline)

    async def renew(self, stub: rpc_pb2_grpc.AuthStub, label: str, used: str | None,
                    deadline: float | None) -> str | None:
        """A token newer than ``used`` (the one a refused call carried; None: it carried none), from the login in
        flight or a new one; None when there are no credentials or etcd says auth is not enabled.

        A call joins a login on its own member, else one on another member, but waits for the latter only as long
        as the call that started it would have: past that, or when it failed to reach its member, this call logs
        in on its own member as well, and the first login that succeeds serves both."""
        credentials = self.credentials
        if credentials is None:
            return None
        if self.token is not None and self.token != used:
            return self.token  # another call logged in meanwhile: use that
        loop = asyncio.get_running_loop()
        if deadline is not None and loop.time() >= deadline:
            # etcd also calls a token invalid when the call's deadline ends its wait for the raft index the token
            # names: an answer that came this late is a timeout, no reason to log in
            raise errors.DeadlinePassed(f"Authenticate as {credentials.username!r} on {label}: the call's deadline "
                                        "passed before the login", endpoint=label)
        if used is not None and self.board is not None:
            self.board.withdraw(used)  # refused: no other client should take it
        own = self._running(label)
        joined, started = own or self._running(None), False
        while True:
            if joined is None:
                joined = own = self._start(stub, label, credentials, deadline)
                started = True
            until = deadline if joined is own else _earliest(deadline, joined.patience)
            timeout = None if until is None else max(0.0, until - loop.time())
            tasks = {joined.task, *(f.task for f in self._flights if f.epoch == joined.epoch and not f.task.done())}
            done, _ = await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is None:
                    return task.result()
            if started and own is not None and own.task in done:
                return own.task.result()  # raises why this call's own login failed
            refused = [t for t in done if not t.cancelled() and not errors.is_transient(t.exception() or Exception())]
            if refused:
                return refused[0].result()  # refused, not unanswered: another try would be refused too
            if deadline is not None and loop.time() >= deadline:
                raise errors.RequestTimeout(
                    f"Authenticate as {credentials.username!r} on {joined.label}: no answer before the deadline "
                    "(the login goes on for the calls after this one)", endpoint=label)
            if own is None or own.task.done():
                # the login joined (another member's, or an older one on this member) failed or took too long:
                # this call logs in on its own member, with the time it has left
                joined = own = None

    def _running(self, label: str | None) -> _Flight | None:
        """A login in flight for the current credentials (on ``label``; None: on any member)."""
        return next((f for f in self._flights if f.epoch == self._epoch and not f.task.done()
                     and (label is None or f.label == label)), None)

    def _start(self, stub: rpc_pb2_grpc.AuthStub, label: str, credentials: access.Credentials,
               deadline: float | None) -> _Flight:
        loop = asyncio.get_running_loop()
        until = None if deadline is None else max(deadline, loop.time() + LOGIN_TIMEOUT)
        task = loop.create_task(self._login(stub, label, credentials, self._epoch, until),
                                name=f"etcd login on {label}")
        flight = _Flight(self._epoch, label, deadline, task)
        self._flights.append(flight)

        def landed(task: asyncio.Task[str | None]) -> None:
            self._flights.remove(flight)
            if not task.cancelled():
                task.exception()  # a login no call waits for any more: its error is not "never retrieved"
        task.add_done_callback(landed)
        return flight

    async def _login(self, stub: rpc_pb2_grpc.AuthStub, label: str, credentials: access.Credentials, epoch: int,
                     deadline: float | None) -> str | None:
        token = await self._authenticate(stub, label, credentials, deadline)
        if self.credentials is credentials and self._epoch == epoch:
            self.token, self.enabled, self._epoch = token, token is not None, self._epoch + 1
            if token is not None and self.board is not None:
                self.board.post(credentials.username, token)
        return token

    async def close(self) -> None:
        """End the logins in flight (their channels are closing)."""
        flights = [f.task for f in self._flights]
        for task in flights:
            task.cancel()
        await asyncio.gather(*flights, return_exceptions=True)

    async def _authenticate(self, stub: rpc_pb2_grpc.AuthStub, label: str, credentials: access.Credentials,
                            deadline: float | None) -> str | None:
        """A new token, trying the password that worked last first, then the others in order; None when auth is
        off. The last refusal is raised when no password works."""
        passwords = list(credentials.passwords)
        if self._worked in passwords:
            passwords.remove(self._worked)
            passwords.insert(0, self._worked)
        call = f"Authenticate as {credentials.username!r}"
        for tried, password in enumerate(passwords, 1):
            loop = asyncio.get_running_loop()
            timeout = None if deadline is None else deadline - loop.time()
            if timeout is not None and timeout <= 0:
                raise errors.DeadlinePassed(f"{call} on {label}: deadline passed before the login", endpoint=label)
            request = rpc_pb2.AuthenticateRequest(name=credentials.username, password=password)
            try:
                response = await stub.Authenticate(request, timeout=timeout)
            except _GRPC_RAISES as exc:
                err = errors.past_deadline(errors.translate(exc, endpoint=label, call=call), deadline, loop.time())
                if isinstance(err, errors.AuthNotEnabled):
                    return None
                if isinstance(err, errors.AuthFailed) and tried < len(passwords):
                    continue  # the next password (a change in flight)
                if isinstance(err, errors.AuthFailed) and tried > 1:
                    err.args = (f"{err} (tried {tried} passwords)",)
                raise err from exc
            self.logins += 1
            self._worked = password
            return str(response.token)
        raise AssertionError("Credentials.passwords is never empty")

    def should_renew(self, exc: BaseException, used: str | None) -> bool:
        """Is ``exc`` (a refused call that carried ``used``) one a fresh login may cure?"""
        if self.credentials is None or not isinstance(exc, grpc.RpcError):
            return False
        kind = errors.auth_error_class(_details(exc))
        if kind is None:
            return False
        if issubclass(kind, (errors.InvalidAuthToken, errors.AuthRequired)):
            return True
        # Sent without a token (auth looked off) and refused as nobody or as the certificate's CN: auth is on now.
        return used is None and issubclass(kind, (errors.PermissionDenied, errors.UserNotFound))


def _method(details: grpc.aio.ClientCallDetails) -> str:
    method = details.method
    return method.decode() if isinstance(method, bytes) else str(method)


def _deadline(details: grpc.aio.ClientCallDetails) -> float | None:
    return None if details.timeout is None else asyncio.get_running_loop().time() + details.timeout


def _with_token(details: grpc.aio.ClientCallDetails, token: str | None,
                deadline: float | None) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*((k, v) for k, v in (details.metadata or ()) if k != TOKEN_KEY))
    if token:
        metadata.add(TOKEN_KEY, token)
    timeout = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
    return grpc.aio.ClientCallDetails(details.method, timeout, metadata, details.credentials,
                                      details.wait_for_ready)


class _Interceptor:
    def __init__(self, login: Login, label: str) -> None:
        self.login = login
        self.label = label
        self.stub: rpc_pb2_grpc.AuthStub | None = None  # set once the channel exists (it carries this interceptor)

    def _stub(self) -> rpc_pb2_grpc.AuthStub:
        assert self.stub is not None, "interceptors() returned before its channel was bound"
        return self.stub

    def _passes_through(self, details: grpc.aio.ClientCallDetails) -> bool:
        return self.login.credentials is None or _method(details) == AUTHENTICATE

    async def _retry_token(self, exc: BaseException, used: str | None, deadline: float | None) -> str | None:
        """The token to resend with after ``exc``; None: do not resend (the caller re-raises ``exc``)."""
        if not self.login.should_renew(exc, used):
            return None
        fresh = await self.login.renew(self._stub(), self.label, used, deadline)
        if fresh is None or fresh == used:
            return None
        if deadline is not None and deadline <= asyncio.get_running_loop().time():
            return None
        return fresh


class _UnaryUnary(_Interceptor, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Callable[..., Awaitable[Any]],
                                    client_call_details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        if self._passes_through(client_call_details):
            return await continuation(client_call_details, request)
        deadline = _deadline(client_call_details)
        token = await self.login.current(self._stub(), self.label, deadline)
        call = await continuation(_with_token(client_call_details, token, deadline), request)
        try:
            response = await call
        except grpc.aio.AioRpcError as exc:
            fresh = await self._retry_token(exc, token, deadline)
            if fresh is None:
                raise
        else:
            self.login.answered(token)
            return response
        call = await continuation(_with_token(client_call_details, fresh, deadline), request)
        response = await call
        self.login.answered(fresh)
        return response


class _UnaryStream(_Interceptor, grpc.aio.UnaryStreamClientInterceptor):
    """etcd checks the user before it sends the first message: the first read tells whether to log in again."""

    async def intercept_unary_stream(self, continuation: Callable[..., Awaitable[Any]],
                                     client_call_details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        if self._passes_through(client_call_details):
            return await continuation(client_call_details, request)
        deadline = _deadline(client_call_details)
        token = await self.login.current(self._stub(), self.label, deadline)
        call = await continuation(_with_token(client_call_details, token, deadline), request)
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as exc:
            fresh = await self._retry_token(exc, token, deadline)
            if fresh is None:
                raise
            call = await continuation(_with_token(client_call_details, fresh, deadline), request)
            first = await call.read()
            token = fresh
        self.login.answered(token)
        return _chain(call, first)


async def _chain(call: Any, first: Any) -> AsyncIterator[Any]:
    message = first
    while message is not grpc.aio.EOF:
        yield message
        message = await call.read()


def interceptors(login: Login, label: str) -> tuple[list[grpc.aio.ClientInterceptor],
                                                    Callable[[grpc.aio.Channel], None]]:
    """The interceptors for a new channel to ``label`` (pass them to ``grpc.aio.*_channel``) and the function to
    call with that channel once it exists (logins go over the channel of the call that needs them)."""
    unary, stream = _UnaryUnary(login, label), _UnaryStream(login, label)

    def bind(channel: grpc.aio.Channel) -> None:
        stub = rpc_pb2_grpc.AuthStub(channel)  # type: ignore[no-untyped-call]
        unary.stub = stream.stub = stub

    return [unary, stream], bind
