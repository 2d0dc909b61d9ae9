"""The client's auth and snapshot machinery without etcd: error translation, :class:`access.Credentials`, the token
interceptors (against an in-process gRPC server on 127.0.0.1 that answers as etcd does) and the snapshot file.

We test these aspects: etcd's auth texts (3.6's ``etcdserver:`` codes and 3.5's ``UNKNOWN auth:`` answers of its
maintenance calls) become the typed errors, transient only for a token etcd forgot; credentials never show their
password; with credentials the first call logs in (Authenticate carrying no token) and every call, unary and the
Snapshot stream, carries the token; a forgotten token is renewed once and the call resent, a second refusal is
raised (no loop); concurrent calls share one login; alternate passwords are tried in turn (the one that worked first
next time); "authentication is not enabled" makes calls go without a token
until etcd asks for a user; check_login leaves the client's token alone; a wrong password is ``AuthFailed`` without
the password in the message; the snapshot file is renamed into place only with a matching sha256 trailer and the
announced size, leaving nothing behind otherwise (also when the stream stalls past the deadline); etcd 3.6's SnapshotResponse.version (field 4, not in our proto)
is read; the client's snapshot takes the revision from a header when etcd sends one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from opsmanager.etcd import access, errors, maintenance, snapshot, tokens
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd._pb import rpc_pb2, rpc_pb2_grpc
from tests.polling import aeventually

C = grpc.StatusCode
PASSWORD = "s3cret-pw"


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


# ---- translation ----------------------------------------------------------------------------------------------

AUTH_CASES = [
    # 3.6 and the gRPC-level checks of 3.5 (rpctypes)
    (C.INVALID_ARGUMENT, "etcdserver: authentication failed, invalid user ID or password", errors.AuthFailed, False),
    (C.PERMISSION_DENIED, "etcdserver: permission denied", errors.PermissionDenied, False),
    (C.INVALID_ARGUMENT, "etcdserver: user name is empty", errors.AuthRequired, False),
    (C.UNAUTHENTICATED, "etcdserver: invalid auth token", errors.InvalidAuthToken, True),
    (C.INVALID_ARGUMENT, "etcdserver: revision of auth store is old", errors.AuthOldRevision, True),
    (C.FAILED_PRECONDITION, "etcdserver: authentication is not enabled", errors.AuthNotEnabled, False),
    (C.FAILED_PRECONDITION, "etcdserver: user name already exists", errors.UserExists, False),
    (C.FAILED_PRECONDITION, "etcdserver: user name not found", errors.UserNotFound, False),
    (C.FAILED_PRECONDITION, "etcdserver: role name not found", errors.RoleNotFound, False),
    (C.FAILED_PRECONDITION, "etcdserver: root user does not exist", errors.RootUserNotExist, False),
    (C.FAILED_PRECONDITION, "etcdserver: root user does not have root role", errors.RootRoleNotExist, False),
    # 3.5's maintenance calls (Defragment, HashKV, MoveLeader, Snapshot ...) return the auth package's errors
    (C.UNKNOWN, "auth: permission denied", errors.PermissionDenied, False),
    (C.UNKNOWN, "auth: user name is empty", errors.AuthRequired, False),
    (C.UNKNOWN, "auth: user not found", errors.UserNotFound, False),  # the auth package's words (3.5 and 3.6)
    (C.UNKNOWN, "auth: user already exists", errors.UserExists, False),
    (C.UNKNOWN, "auth: role not found", errors.RoleNotFound, False),
    (C.UNKNOWN, "auth: root user does not have root role", errors.RootRoleNotExist, False),
    (C.UNKNOWN, "auth: authentication failed, invalid user ID or password", errors.AuthFailed, False),
    (C.UNKNOWN, "auth: invalid auth token", errors.InvalidAuthToken, True),
    (C.UNKNOWN, "auth: revision in header is old", errors.AuthOldRevision, True),
]


@pytest.mark.parametrize(("code", "details", "kind", "transient"), AUTH_CASES,
                         ids=[f"{c[0].name}-{c[1]}" for c in AUTH_CASES])
def test_auth_answers_translate_to_typed_errors(code: grpc.StatusCode, details: str, kind: type[errors.EtcdError],
                                                transient: bool) -> None:
    err = errors.from_grpc(rpc_error(code, details), endpoint="m1 (127.0.0.2:2379) [https]", call="HashKV")
    assert type(err) is kind
    assert isinstance(err, errors.AuthError)
    assert errors.is_transient(err) is transient
    assert "m1 (127.0.0.2:2379)" in str(err) and "HashKV" in str(err)
    assert errors.auth_error_class(details) is kind


def test_auth_required_is_a_permission_denied_and_texts_elsewhere_are_not_auth_errors() -> None:
    assert issubclass(errors.AuthRequired, errors.PermissionDenied)
    assert issubclass(errors.AuthOldRevision, errors.InvalidAuthToken)
    assert errors.auth_error_class("open /var/lib/etcd: permission denied") is None  # an OS error is not etcd auth
    err = errors.from_grpc(rpc_error(C.UNAVAILABLE, "failed to connect: permission denied"), endpoint="e", call="c")
    assert type(err) is errors.MemberUnreachable


def test_credentials_never_show_the_password() -> None:
    creds = access.Credentials("root", PASSWORD)
    for text in (repr(creds), str(creds), f"{creds}", f"{creds!r}", repr([creds]), repr({"c": creds})):
        assert PASSWORD not in text
        assert "root" in text and "redacted" in text
    assert creds == access.Credentials("root", PASSWORD) and hash(creds) == hash(access.Credentials("root", PASSWORD))
    with pytest.raises(dataclasses.FrozenInstanceError):
        creds.password = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="username is empty"):
        access.Credentials("", PASSWORD)


# ---- an in-process etcd stand-in ------------------------------------------------------------------------------

class StandIn(rpc_pb2_grpc.MaintenanceServicer, rpc_pb2_grpc.AuthServicer):
    """Answers Authenticate, Status and Snapshot as etcd does with auth on (or off): the texts and codes of
    rpctypes. Records (method, token) of every call it receives."""

    def __init__(self) -> None:
        self.enabled = True
        self.password = PASSWORD
        self.valid: set[str] = set()
        self.refuse_all_tokens = False
        self.seen: list[tuple[str, str | None]] = []
        self.issued = 0
        self.on_status: Any = None
        self.blobs: list[bytes] = [b"db" * 3000]
        self.trailer: bytes | None = None  # None: the right sha256
        self.header_revision = 42  # our payload is no bbolt file: the header must name the revision
        self.version = ""
        self.login_delay = 0.01  # a raft round trip: lets concurrent callers pile up behind the login
        self.answers_logins = True  # False: Authenticate never answers (a member cut off)
        self.logins_timing_out = 0  # the next n logins end in etcd's "request timed out" (a quorum lost meanwhile)

    @staticmethod
    def token(context: grpc.aio.ServicerContext) -> str | None:
        return dict(context.invocation_metadata() or ()).get("token")  # type: ignore[arg-type, return-value]

    async def check(self, method: str, context: grpc.aio.ServicerContext) -> None:
        token = self.token(context)
        self.seen.append((method, token))
        if not self.enabled:
            return
        if token is None:
            await context.abort(C.INVALID_ARGUMENT, "etcdserver: user name is empty")
        if self.refuse_all_tokens or token not in self.valid:
            await context.abort(C.UNAUTHENTICATED, "etcdserver: invalid auth token")

    async def Authenticate(self, request: rpc_pb2.AuthenticateRequest,  # type: ignore[override]
                           context: grpc.aio.ServicerContext) -> rpc_pb2.AuthenticateResponse:
        self.seen.append(("Authenticate", self.token(context)))
        if not self.enabled:
            await context.abort(C.FAILED_PRECONDITION, "etcdserver: authentication is not enabled")
        if request.name != "root" or request.password != self.password:
            await context.abort(C.INVALID_ARGUMENT, "etcdserver: authentication failed, invalid user ID or password")
        if not self.answers_logins:
            await asyncio.Event().wait()
        await asyncio.sleep(self.login_delay)
        if self.logins_timing_out:
            self.logins_timing_out -= 1
            await context.abort(C.UNAVAILABLE, "etcdserver: request timed out")
        self.issued += 1
        token = f"tok{self.issued}"
        self.valid.add(token)
        return rpc_pb2.AuthenticateResponse(token=token)

    async def Status(self, request: rpc_pb2.StatusRequest,  # type: ignore[override]
                     context: grpc.aio.ServicerContext) -> rpc_pb2.StatusResponse:
        await self.check("Status", context)
        if self.on_status is not None:
            self.on_status()
        return rpc_pb2.StatusResponse(header=rpc_pb2.ResponseHeader(member_id=0x77, revision=9), version="3.6.16",
                                      leader=0x77)

    async def Snapshot(self, request: rpc_pb2.SnapshotRequest,  # type: ignore[override]
                       context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await self.check("Snapshot", context)
        total = sum(len(b) for b in self.blobs)
        sent = 0
        for i, blob in enumerate(self.blobs):
            sent += len(blob)
            message = rpc_pb2.SnapshotResponse(remaining_bytes=total - sent, blob=blob)
            if i == 0 and self.header_revision:
                message.header.revision = self.header_revision
            yield self.with_version(message)
        digest = self.trailer if self.trailer is not None else hashlib.sha256(b"".join(self.blobs)).digest()
        yield self.with_version(rpc_pb2.SnapshotResponse(remaining_bytes=0, blob=digest))

    def with_version(self, message: rpc_pb2.SnapshotResponse) -> bytes:
        raw = message.SerializeToString()
        if self.version:  # field 4, length-delimited: what etcd 3.6 adds
            data = self.version.encode()
            raw += bytes([4 << 3 | 2, len(data)]) + data
        return raw


@pytest.fixture
async def stand_in() -> AsyncIterator[tuple[StandIn, access.Endpoint]]:
    async with serving(StandIn(), "e0") as served:
        yield served


@contextlib.asynccontextmanager
async def serving(service: StandIn, name: str) -> AsyncIterator[tuple[StandIn, access.Endpoint]]:
    """``service`` on a loopback port, as the member ``name``."""
    server = grpc.aio.server()
    rpc_pb2_grpc.add_AuthServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    # Snapshot answers pre-serialized bytes (to append field 4), so register Maintenance with a bytes serializer;
    # looked up per call, so a test may replace service.Snapshot.
    async def snapshot_handler(request: rpc_pb2.SnapshotRequest, context: grpc.aio.ServicerContext) -> Any:
        async for raw in service.Snapshot(request, context):
            yield raw

    handlers = {
        "Status": grpc.unary_unary_rpc_method_handler(
            service.Status, request_deserializer=rpc_pb2.StatusRequest.FromString,
            response_serializer=rpc_pb2.StatusResponse.SerializeToString),
        "Snapshot": grpc.unary_stream_rpc_method_handler(
            snapshot_handler, request_deserializer=rpc_pb2.SnapshotRequest.FromString,
            response_serializer=lambda raw: raw),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("etcdserverpb.Maintenance", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield service, access.Endpoint(name, "127.0.0.1", client_port=port, metrics_port=None, schemes=("http",))
    finally:
        await server.stop(None)


def client(ep: access.Endpoint, password: str | None = PASSWORD) -> etcd_client.EtcdClient:
    creds = access.Credentials("root", password) if password is not None else None
    return etcd_client.EtcdClient([ep], timeout=2.0, credentials=creds)


# ---- the token interceptors -----------------------------------------------------------------------------------

async def test_first_call_logs_in_without_a_token_and_every_call_carries_it(stand_in: Any,
                                                                            tmp_path: pathlib.Path) -> None:
    service, ep = stand_in
    async with client(ep) as c:
        await c.maintenance.status("e0")
        await c.maintenance.status("e0")
        await c.snapshot("e0", tmp_path / "s.db", timeout=5)
        assert c.logins == 1
    assert service.seen == [("Authenticate", None), ("Status", "tok1"), ("Status", "tok1"),
                            ("Status", "tok1"), ("Snapshot", "tok1")]


async def test_without_credentials_nothing_is_added_and_etcd_asks_for_a_user(stand_in: Any) -> None:
    service, ep = stand_in
    async with client(ep, password=None) as c:
        with pytest.raises(errors.AuthRequired, match="user name is empty"):
            await c.maintenance.status("e0")
    assert service.seen == [("Status", None)]


async def test_a_forgotten_token_is_renewed_once_and_the_call_resent(stand_in: Any) -> None:
    service, ep = stand_in
    async with client(ep) as c:
        await c.maintenance.status("e0")
        service.valid.clear()  # TTL passed, or the member restarted
        await c.maintenance.status("e0")
        assert c.logins == 2
    assert service.seen[1:] == [("Status", "tok1"), ("Status", "tok1"), ("Authenticate", None), ("Status", "tok2")]


async def test_a_token_refused_again_after_the_renewal_is_raised_not_looped(stand_in: Any) -> None:
    service, ep = stand_in
    service.refuse_all_tokens = True
    async with client(ep) as c:
        with pytest.raises(errors.InvalidAuthToken) as caught:
            await c.maintenance.status("e0")
    assert errors.is_transient(caught.value)
    assert [m for m, _ in service.seen] == ["Authenticate", "Status", "Authenticate", "Status"]


async def test_the_snapshot_stream_renews_a_forgotten_token_too(stand_in: Any, tmp_path: pathlib.Path) -> None:
    service, ep = stand_in
    service.on_status = service.valid.clear  # the token dies between the Status and the stream
    async with client(ep) as c:
        result = await c.snapshot("e0", tmp_path / "s.db", timeout=5)
    assert result.path.read_bytes()[:-32] == b"".join(service.blobs)
    assert service.seen == [("Authenticate", None), ("Status", "tok1"), ("Snapshot", "tok1"),
                            ("Authenticate", None), ("Snapshot", "tok2")]


async def test_clients_of_one_cluster_share_a_token_through_their_board(stand_in: Any) -> None:
    """A second client takes the token the first got (a login needs a quorum: during a quorum loss that token is
    the only way in); a token etcd refused is withdrawn from the board and the new one posted."""
    service, ep = stand_in
    board = tokens.Board()
    creds = access.Credentials("root", PASSWORD)
    async with etcd_client.EtcdClient([ep], timeout=2.0, credentials=creds, board=board) as first:
        await first.maintenance.status("e0")
        async with etcd_client.EtcdClient([ep], timeout=2.0, credentials=creds, board=board) as second:
            await second.maintenance.status("e0")
            assert (first.logins, second.logins) == (1, 0)
            board.withdraw("tok1")  # as a client does when some member refused it
            await first.maintenance.status("e0")  # answered with it here: back on the board
            assert board.token == "tok1"
            service.valid.clear()  # etcd forgot tok1
            await second.maintenance.status("e0")
            assert second.logins == 1 and board.token == "tok2"
        async with etcd_client.EtcdClient([ep], timeout=2.0, credentials=access.Credentials("other", PASSWORD),
                                          board=board) as stranger:
            with pytest.raises(errors.AuthFailed):
                await stranger.maintenance.status("e0")  # another user's token is never taken
    assert service.seen == [("Authenticate", None), ("Status", "tok1"), ("Status", "tok1"), ("Status", "tok1"),
                            ("Status", "tok1"), ("Authenticate", None), ("Status", "tok2"), ("Authenticate", None)]


async def test_concurrent_calls_share_one_login(stand_in: Any) -> None:
    service, ep = stand_in
    async with client(ep) as c:
        await asyncio.gather(*(c.maintenance.status("e0") for _ in range(10)))
        assert c.logins == 1
        service.valid.clear()
        await asyncio.gather(*(c.maintenance.status("e0") for _ in range(10)))
        assert c.logins == 2
    assert [m for m, _ in service.seen].count("Authenticate") == 2


async def test_a_login_slower_than_every_calls_deadline_still_lands_and_is_made_once(stand_in: Any) -> None:
    """etcd's bcrypt check under load can take longer than a short call deadline: the login goes on after the call
    that started it gave up, and the calls after it take its token instead of starting (and cutting off) another."""
    service, ep = stand_in
    service.login_delay = 0.4
    loop = asyncio.get_running_loop()
    async with etcd_client.EtcdClient([ep], timeout=0.15, credentials=access.Credentials("root", PASSWORD)) as c:
        started = loop.time()
        with pytest.raises(errors.RequestTimeout, match="the login goes on"):
            await c.maintenance.status("e0")
        assert loop.time() - started < 0.35  # the call kept its own deadline
        answered, deadline = None, loop.time() + 5.0
        while answered is None:
            assert loop.time() < deadline, "no call got through within 5 s"
            with contextlib.suppress(errors.RequestTimeout):
                answered = await c.maintenance.status("e0")
        assert c.logins == 1
    assert [m for m, _ in service.seen].count("Authenticate") == 1
    assert service.seen[-1] == ("Status", "tok1")


async def test_a_call_joins_a_login_on_another_member_only_as_long_as_its_caller_would_wait(
        stand_in: Any) -> None:
    """A login stuck on a member that does not answer holds a call to another member no longer than the call that
    started it would have waited: then that call logs in on its own member."""
    cut, ep0 = stand_in
    cut.answers_logins = False
    async with serving(StandIn(), "e1") as (service, ep1):
        cut.valid = service.valid  # a token holds on every member of the cluster
        async with etcd_client.EtcdClient([ep0, ep1], timeout=0.3,
                                          credentials=access.Credentials("root", PASSWORD)) as c:
            first = asyncio.ensure_future(c.maintenance.status("e0"))
            await aeventually(lambda: ("Authenticate", None) in cut.seen, timeout=5.0, what="e0's login started")
            status = await c.maintenance.status("e1", timeout=2.0)  # joins e0's login, then logs in on e1
            assert status.member_id == 0x77 and c.logins == 1
            with pytest.raises(errors.RequestTimeout):
                await first
            assert await c.maintenance.status("e0") is not None  # e0 serves calls with the token e1 gave
    assert service.seen == [("Authenticate", None), ("Status", "tok1")]
    assert cut.seen == [("Authenticate", None), ("Status", "tok1")]


async def test_a_call_that_joined_a_login_which_timed_out_in_etcd_logs_in_again_in_its_own_time(
        stand_in: Any) -> None:
    service, ep = stand_in
    service.login_delay, service.logins_timing_out = 0.3, 1
    async with etcd_client.EtcdClient([ep], timeout=0.1, credentials=access.Credentials("root", PASSWORD)) as c:
        with pytest.raises(errors.RequestTimeout, match="the login goes on"):
            await c.maintenance.status("e0")
        status = await c.maintenance.status("e0", timeout=2.0)  # joins it, sees it fail, logs in again
        assert status.member_id == 0x77 and c.logins == 1
    assert service.seen == [("Authenticate", None), ("Authenticate", None), ("Status", "tok1")]


async def test_auth_off_means_no_token_until_etcd_asks_for_a_user(stand_in: Any) -> None:
    service, ep = stand_in
    service.enabled = False
    async with client(ep) as c:
        await asyncio.gather(*(c.maintenance.status("e0") for _ in range(5)))
        await c.maintenance.status("e0")
        assert service.seen.count(("Authenticate", None)) == 1  # asked once, remembered
        assert all(token is None for _, token in service.seen)
        service.enabled = True  # somebody enabled auth
        await c.maintenance.status("e0")
        assert c.logins == 1
    assert service.seen[-3:] == [("Status", None), ("Authenticate", None), ("Status", "tok1")]


async def test_a_wrong_password_is_auth_failed_and_never_printed(stand_in: Any) -> None:
    service, ep = stand_in
    async with client(ep, password="wrong-" + PASSWORD) as c:
        with pytest.raises(errors.AuthFailed) as caught:
            await c.maintenance.status("e0")
    text = f"{caught.value} {caught.value!r} {caught.value.details} {caught.value.__cause__}"
    assert "wrong-" not in text and PASSWORD not in text
    assert "'root'" in str(caught.value)
    assert service.seen == [("Authenticate", None)]


async def test_alternate_passwords_are_tried_in_turn_and_the_one_that_worked_first(stand_in: Any) -> None:
    service, ep = stand_in
    service.password = "next-pw"  # etcd already has the staged password
    creds = access.Credentials("root", "old-pw", alternates=("old-pw", "next-pw"))
    assert creds.passwords == ("old-pw", "next-pw")
    assert "next-pw" not in repr(creds) and "alternates=<2 redacted>" in repr(creds)
    async with etcd_client.EtcdClient([ep], timeout=2.0, credentials=creds) as c:
        await c.maintenance.status("e0")
        service.valid.clear()
        await c.maintenance.status("e0")
        assert c.logins == 2
    assert [m for m, _ in service.seen] == ["Authenticate", "Authenticate", "Status",  # old refused, next accepted
                                            "Status", "Authenticate", "Status"]  # next-pw tried first this time
    service.password = "another"
    async with etcd_client.EtcdClient([ep], timeout=2.0, credentials=creds) as c:
        with pytest.raises(errors.AuthFailed, match="tried 2 passwords") as caught:
            await c.maintenance.status("e0")
    assert "pw" not in str(caught.value).replace("root", "")


async def test_check_login_leaves_the_clients_token_alone(stand_in: Any) -> None:
    service, ep = stand_in
    async with client(ep) as c:
        await c.maintenance.status("e0")
        assert await c.check_login("e0", "root", PASSWORD) is True
        assert await c.check_login(None, "root", "nope") is False
        await c.maintenance.status("e0")
        assert c.logins == 1
    assert service.seen[-1] == ("Status", "tok1")  # not tok2, the token check_login got
    assert ("Authenticate", "tok1") not in service.seen  # Authenticate never carries a token
    service.enabled = False
    async with client(ep) as c:
        with pytest.raises(errors.AuthNotEnabled):
            await c.check_login("e0", "root", PASSWORD)


async def test_new_credentials_drop_the_token_and_equal_ones_keep_it(stand_in: Any) -> None:
    service, ep = stand_in
    async with client(ep) as c:
        await c.maintenance.status("e0")
        c.set_credentials(access.Credentials("root", PASSWORD))  # equal: nothing changes
        await c.maintenance.status("e0")
        assert c.logins == 1
        service.password = "next"
        c.set_credentials(access.Credentials("root", "next"))
        await c.maintenance.status("e0")
        assert c.logins == 2 and c.credentials == access.Credentials("root", "next")
        c.set_credentials(None)
        with pytest.raises(errors.AuthRequired):
            await c.maintenance.status("e0")
        with pytest.raises(TypeError):
            c.set_credentials(("root", "x"))  # type: ignore[arg-type]
    assert service.seen[-1] == ("Status", None)


async def test_should_renew_only_for_what_a_login_can_cure() -> None:
    login = tokens.Login(access.Credentials("root", PASSWORD))
    assert login.should_renew(rpc_error(C.UNAUTHENTICATED, "etcdserver: invalid auth token"), "t")
    assert login.should_renew(rpc_error(C.UNKNOWN, "auth: invalid auth token"), "t")
    assert login.should_renew(rpc_error(C.INVALID_ARGUMENT, "etcdserver: user name is empty"), None)
    assert login.should_renew(rpc_error(C.UNKNOWN, "auth: user not found"), None)  # as the cert's CN
    assert not login.should_renew(rpc_error(C.UNKNOWN, "auth: user not found"), "t")
    assert not login.should_renew(rpc_error(C.PERMISSION_DENIED, "etcdserver: permission denied"), "t")
    assert not login.should_renew(rpc_error(C.UNAVAILABLE, "connection refused"), "t")
    assert not tokens.Login().should_renew(rpc_error(C.UNAUTHENTICATED, "etcdserver: invalid auth token"), "t")


# ---- the snapshot file ----------------------------------------------------------------------------------------

async def test_the_snapshot_is_written_verified_and_reports_the_stream(stand_in: Any, tmp_path: pathlib.Path) -> None:
    service, ep = stand_in
    service.blobs = [bytes([i]) * 32768 for i in range(40)]  # 1.25 MiB in 32 KiB chunks, as etcd sends them
    service.header_revision, service.version = 1234, "3.6.0"
    dest = tmp_path / "snap.db"
    async with client(ep) as c:
        result = await c.snapshot("e0", dest, timeout=5)
    data = dest.read_bytes()
    db = b"".join(service.blobs)
    assert data == db + hashlib.sha256(db).digest()
    assert result == etcd_client.SnapshotResult(path=dest, size=len(data), sha256_hex=hashlib.sha256(data).hexdigest(),
                                                revision=1234, member_id=0x77, version="3.6.0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.db"]


@pytest.mark.parametrize("fault", ["trailer", "short"])
async def test_a_bad_stream_leaves_nothing_behind(stand_in: Any, tmp_path: pathlib.Path, fault: str) -> None:
    service, ep = stand_in
    service.header_revision = 5
    if fault == "trailer":
        service.trailer = b"\0" * 32
    dest = tmp_path / "snap.db"
    dest.write_bytes(b"the previous snapshot")
    async with client(ep) as c:
        if fault == "short":  # the member announces more than it sends (the stream is cut)
            service.blobs = [b"x" * 100]
            original = service.Snapshot

            async def cut(request: Any, context: Any) -> AsyncIterator[bytes]:
                async for raw in original(request, context):
                    message = rpc_pb2.SnapshotResponse.FromString(raw)
                    if message.remaining_bytes == 0 and len(message.blob) == 100:
                        message.remaining_bytes = 4096  # claims 4 KiB more to come
                    yield message.SerializeToString()

            service.Snapshot = cut  # type: ignore[method-assign]
        with pytest.raises(errors.SnapshotFailed, match="trailer mismatch" if fault == "trailer" else "announced"):
            await c.snapshot("e0", dest, timeout=5)
    assert dest.read_bytes() == b"the previous snapshot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.db"]


async def test_a_stream_that_stalls_past_the_deadline_is_a_timeout_and_leaves_nothing(
        stand_in: Any, tmp_path: pathlib.Path) -> None:
    service, ep = stand_in
    service.blobs = [b"a" * 32768, b"b" * 32768]
    original = service.Snapshot

    async def stall(request: Any, context: Any) -> AsyncIterator[bytes]:
        async for raw in original(request, context):
            yield raw
            await asyncio.sleep(30)  # the member stops sending after the first chunk

    service.Snapshot = stall  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    async with client(ep) as c:
        started = loop.time()
        with pytest.raises(errors.RequestTimeout, match="Snapshot"):
            await c.snapshot("e0", tmp_path / "s.db", timeout=1.0)
        assert loop.time() - started < 2.0
    assert list(tmp_path.iterdir()) == []


def test_snapshot_file_verifies_what_it_renames(tmp_path: pathlib.Path) -> None:
    db = b"backend" * 1000
    size, digest = snapshot.write_verified(tmp_path / "ok.db", db)
    assert size == len(db) + 32 and digest == hashlib.sha256((tmp_path / "ok.db").read_bytes()).hexdigest()
    out = snapshot.SnapshotFile(tmp_path / "bad.db")
    out.write(db[:10])
    out.write(db[10:] + hashlib.sha256(db).digest()[:5])  # trailer split over messages ...
    out.write(hashlib.sha256(db).digest()[5:])
    out.finish()  # ... is still found
    assert (tmp_path / "bad.db").read_bytes() == (tmp_path / "ok.db").read_bytes()
    short = snapshot.SnapshotFile(tmp_path / "short.db")
    short.write(b"x" * 31)
    with pytest.raises(ValueError, match="too short"):
        short.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.db", "ok.db"]


def test_the_3_6_version_field_is_read_from_unknown_fields() -> None:
    raw = rpc_pb2.SnapshotResponse(remaining_bytes=3).SerializeToString() + bytes([0x22, 5]) + b"3.6.0"
    message = rpc_pb2.SnapshotResponse.FromString(raw)
    assert maintenance.snapshot_version(message) == "3.6.0"
    assert maintenance.snapshot_version(rpc_pb2.SnapshotResponse(remaining_bytes=3)) == ""


# ---- one transport under every service --------------------------------------------------------------------------

async def test_every_service_goes_over_the_clients_one_transport_channel_and_login(stand_in: Any) -> None:
    service, ep = stand_in
    async with client(ep) as c:
        assert all(s.transport is c.transport for s in (c.kv, c.cluster, c.maintenance, c.auth))
        assert c.maintenance.cluster is c.cluster  # the leader outside the endpoints is found through MemberList
        # The client's own calls of the engine's seam are its services' methods, not a second code path.
        assert (c.statuses, c.members, c.compact, c.user_add) == (
            c.maintenance.statuses, c.cluster.members, c.kv.compact, c.auth.user_add)
        await c.maintenance.status("e0")
        assert await c.auth.check_login("e0", "root", PASSWORD)  # its own token, thrown away
        await c.maintenance.status("e0")
        assert c.logins == 1 and len(c.transport._conns) == 1  # one login, one channel for both services
    assert service.seen == [("Authenticate", None), ("Status", "tok1"), ("Authenticate", None), ("Status", "tok1")]
