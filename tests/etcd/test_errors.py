"""Translation of gRPC errors into the client's own errors, and the transient/fatal predicate (pure, no I/O).

The inputs are the status codes and texts etcd 3.5 and gRPC really produce (etcd's rpctypes, gRPC's transport
messages); the live tests in test_client_mtls.py check the same translation on a real cluster.
"""

from __future__ import annotations

import grpc
import grpc.aio
import pytest

from opsmanager.etcd import errors


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


C = grpc.StatusCode

CASES = [
    (C.FAILED_PRECONDITION, "etcdserver: not leader", errors.NotLeader, True),
    (C.FAILED_PRECONDITION, "etcdserver: bad leader transferee", errors.BadLeaderTransferee, False),
    (C.UNAVAILABLE, "etcdserver: no leader", errors.NoQuorum, True),
    (C.UNAVAILABLE, "etcdserver: request timed out", errors.NoQuorum, True),
    (C.UNAVAILABLE, "etcdserver: request timed out, possibly due to connection lost", errors.NoQuorum, True),
    (C.UNAVAILABLE, "etcdserver: leader changed", errors.NoQuorum, True),
    (C.UNAVAILABLE, "etcdserver: rpc not supported for learner", errors.LearnerNotSupported, True),
    (C.UNAVAILABLE, "etcdserver: unhealthy cluster", errors.MembershipError, True),
    (C.UNAVAILABLE, "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:2379: "
                    "Failed to connect to remote host: Connection refused", errors.MemberUnreachable, True),
    (C.UNAVAILABLE, "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:2379: Ssl handshake "
                    "failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: CERTIFICATE_VERIFY_FAILED",
     errors.TLSHandshakeFailed, False),
    (C.DEADLINE_EXCEEDED, "Deadline Exceeded", errors.RequestTimeout, True),
    (C.UNKNOWN, "context deadline exceeded", errors.RequestTimeout, True),
    (C.NOT_FOUND, "etcdserver: member not found", errors.MemberNotFound, False),
    (C.FAILED_PRECONDITION, "etcdserver: Peer URLs already exists", errors.MembershipError, False),
    (C.FAILED_PRECONDITION, "etcdserver: re-configuration failed due to not enough started members",
     errors.MembershipError, True),
    (C.PERMISSION_DENIED, "etcdserver: permission denied", errors.PermissionDenied, False),
    (C.UNKNOWN, "etcdserver: request timed out, leader transfer took too long", errors.LeaderTransferTimeout, True),
    (C.RESOURCE_EXHAUSTED, "etcdserver: mvcc: database space exceeded", errors.EtcdServerError, False),
    (C.INVALID_ARGUMENT, "etcdserver: key is not provided", errors.EtcdServerError, False),
]


@pytest.mark.parametrize(("code", "details", "kind", "transient"), CASES, ids=[f"{c[0].name}-{c[2].__name__}" for c in CASES])
def test_grpc_errors_translate_to_own_types(code: grpc.StatusCode, details: str, kind: type[errors.EtcdError],
                                            transient: bool) -> None:
    err = errors.from_grpc(rpc_error(code, details), endpoint="m1 (127.0.0.2:2379)", call="MoveLeader")
    assert type(err) is kind
    assert errors.is_transient(err) is transient
    assert "m1 (127.0.0.2:2379)" in str(err) and "MoveLeader" in str(err)  # the message names where it happened
    assert err.code == code.name and err.details == details


def test_translate_chains_nothing_itself_but_keeps_our_errors() -> None:
    ours = errors.NoQuorum("x")
    assert errors.translate(ours, endpoint="e", call="c") is ours
    assert isinstance(errors.translate(TimeoutError(), endpoint="e", call="c"), errors.RequestTimeout)
    assert isinstance(errors.translate(ConnectionRefusedError(), endpoint="e", call="c"), errors.MemberUnreachable)


def test_the_predicate_says_no_for_foreign_exceptions() -> None:
    assert errors.is_transient(ValueError("bad input")) is False
    assert errors.is_transient(errors.MemberUnreachable("down")) is True
    assert errors.is_transient(errors.TLSHandshakeFailed("bad ca")) is False
    assert errors.is_transient(errors.NotRecovered("x", reason="catching up")) is True


def test_no_class_leaves_the_hierarchy() -> None:
    kinds = {k for _, _, k, _ in CASES}
    assert all(issubclass(k, errors.EtcdError) and not issubclass(k, grpc.RpcError) for k in kinds)
