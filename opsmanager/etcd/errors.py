"""Errors of the etcd admin client: one hierarchy for everything that can go wrong talking to etcd.

gRPC errors are translated at the edge (:func:`from_grpc`, :func:`translate`) and never escape the client's public
calls; the original ``grpc.RpcError`` is chained as ``__cause__`` for debugging. Every message names the endpoint
(member name and address) and the call, so an operator status or event built from ``str(err)`` says where it
happened.

::

    EtcdError
    ├── MemberUnreachable        no connection / no answer from that endpoint (down, restarting, wrong port)
    ├── TLSHandshakeFailed       the TLS handshake failed: trust bundle, client identity or server name mismatch
    ├── RequestTimeout           the member is connected but the call did not finish within its deadline
    │   └── DeadlinePassed       the caller's overall deadline ran out before this call was tried
    ├── NoQuorum                 the cluster has no leader, or a consensus operation cannot complete
    ├── NotLeader                a leader-only RPC (MoveLeader) reached a member that is not the leader
    ├── LeaderTransferTimeout    MoveLeader did not complete (or was not seen by every member) in time
    ├── LearnerNotSupported      the member is a learner; it answers only Status and serializable reads
    ├── MembershipError          a membership change was refused (unknown member, duplicate peer URL, ...)
    │   ├── MemberNotFound
    │   └── BadLeaderTransferee  MoveLeader target is not a voting member
    ├── PermissionDenied         etcd auth refused the call
    ├── NotRecovered             wait_recovered's gate did not pass before its deadline (reason attached)
    ├── DataInconsistent         members hash their key-value store differently at the same revision
    └── EtcdServerError          anything else etcd or gRPC reported (the gRPC code name is kept)

Transient versus fatal: :func:`is_transient` is the one predicate callers use to choose between "retry later"
(kopf ``TemporaryError``) and "stop" (``PermanentError``). Each class carries ``transient`` with the reasoning in its
docstring; the rule of thumb is "would the very same call succeed later without anyone changing configuration?".
"""

from __future__ import annotations

import grpc


class EtcdError(Exception):
    """Base class. ``endpoint`` is the ``name (host:port)`` of the member the call went to, when there was one."""

    metric_kind = "etcd"  # the ``kind`` label of ``opsmanager_reconcile_errors_total`` (opsmanager.metrics)
    transient: bool = False  # class default; a few kinds override it per instance (see _classify)

    def __init__(self, message: str, *, endpoint: str | None = None, code: str | None = None,
                 details: str | None = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.code = code          # gRPC status code name (e.g. "UNAVAILABLE"), when the error came from gRPC
        self.details = details    # the server's or transport's own text


class MemberUnreachable(EtcdError):
    """No connection to the member, or it did not answer at all. Transient: members restart and come back."""

    transient = True


class TLSHandshakeFailed(EtcdError):
    """The TLS handshake failed: the member's certificate is not trusted, our client certificate was refused, or the
    name does not match. Fatal: retrying with the same trust and identity fails the same way. A caller that knows it
    is mid-rotation may retry with another identity (the live writer does exactly that)."""

    transient = False


class RequestTimeout(EtcdError):
    """The member accepted the call but did not finish it before the deadline. Transient (load, election)."""

    transient = True


class DeadlinePassed(RequestTimeout):
    """The caller's overall deadline passed before the call could even be tried. Transient."""


class NoQuorum(EtcdError):
    """No leader, or a consensus read/write could not complete. Transient: quorum returns when members return."""

    transient = True


class NotLeader(EtcdError):
    """A leader-only call reached a follower ("etcdserver: not leader"). Transient: re-resolve the leader, resend."""

    transient = True


class LeaderTransferTimeout(EtcdError):
    """MoveLeader did not finish, or not every member reported the new leader, before the deadline. Transient."""

    transient = True


class LearnerNotSupported(EtcdError):
    """The member is a learner and refuses everything but Status and serializable Range. Transient: ask a voter, or
    wait for the learner to be promoted."""

    transient = True


class MembershipError(EtcdError):
    """A membership change was refused. Fatal unless the reason is one etcd lifts by itself (``transient`` set per
    instance: "unhealthy cluster" right after start and "not enough started members" pass once members are up)."""

    transient = False


class MemberNotFound(MembershipError):
    """The member ID is not in the cluster. Fatal: the caller's view of the membership is wrong."""


class LearnerNotReady(MembershipError):
    """MemberPromote refused: the learner has not caught up with the leader yet ("can only promote a learner member
    which is in sync with leader"). Transient: it catches up, or the caller gives up on it."""

    transient = True


class BadLeaderTransferee(MembershipError):
    """MoveLeader's target is not a voting member ("etcdserver: bad leader transferee"). Fatal."""


class PermissionDenied(EtcdError):
    """etcd authentication/authorisation refused the call. Fatal: needs a different user or role."""

    transient = False


class NotRecovered(EtcdError):
    """``wait_recovered`` gave up: ``reason`` says which gate did not pass (the last one seen). Transient."""

    transient = True

    def __init__(self, message: str, *, reason: str, endpoint: str | None = None) -> None:
        super().__init__(message, endpoint=endpoint)
        self.reason = reason


class DataInconsistent(EtcdError):
    """Members disagree on the key-value store at the same revision (HashKV). Fatal: it does not heal by waiting —
    the diverged member must be replaced. (etcd 3.5.0-3.5.2 can diverge when a member is killed mid-apply,
    etcd-io/etcd#13766; we run 3.5.1.)"""

    transient = False


class Compacted(EtcdError):
    """The revision asked for is at or below the last compaction (``OUT_OF_RANGE``): a compaction there is done
    already, a read or hash there is no longer possible."""

    transient = False


class EtcdServerError(EtcdError):
    """Anything else. ``transient`` is set per instance from the gRPC code (UNAVAILABLE, ABORTED and CANCELLED are
    transient; INVALID_ARGUMENT, RESOURCE_EXHAUSTED "database space exceeded", DATA_LOSS ... are not)."""



def is_transient(exc: BaseException) -> bool:
    """True when the same call may succeed later without a configuration change (retry with backoff); False for
    configuration or logic errors (stop and report). Non-etcd exceptions are not transient."""
    return isinstance(exc, EtcdError) and bool(exc.transient)


# ---- translation ------------------------------------------------------------------------------------------------

_TLS_MARKERS = ("handshake", "ssl", "tsi_", "certificate", "x509", "tls:", "verification check")
_NO_QUORUM_MARKERS = (
    "etcdserver: no leader",
    "etcdserver: request timed out",  # also "..., possibly due to previous leader failure / connection lost"
    "etcdserver: leader changed",
)
_TRANSIENT_MEMBERSHIP = ("unhealthy cluster", "not enough started members")
_TRANSIENT_CODES = {"UNAVAILABLE", "ABORTED", "CANCELLED", "DEADLINE_EXCEEDED"}


def _code_and_details(err: grpc.RpcError) -> tuple[str, str]:
    code = err.code() if hasattr(err, "code") else None  # grpc.aio.AioRpcError and grpc.Call both have these
    details = err.details() if hasattr(err, "details") else None
    return (code.name if code is not None else "UNKNOWN"), (details or str(err))


def _classify(code: str, low: str) -> tuple[type[EtcdError], str, bool | None]:
    """(error class, what happened, per-instance transient override) for a gRPC code and lower-cased details."""
    if code == "UNAVAILABLE":
        if "rpc not supported for learner" in low:
            return LearnerNotSupported, "the member is a learner and only answers Status", None
        if any(m in low for m in _NO_QUORUM_MARKERS):
            return NoQuorum, "no quorum", None
        if "unhealthy cluster" in low:
            return MembershipError, "refused, cluster not yet healthy", True
        if any(m in low for m in _TLS_MARKERS):
            return TLSHandshakeFailed, "TLS handshake failed", None
        return MemberUnreachable, "member unreachable", None
    if code == "DEADLINE_EXCEEDED" or (code in ("UNKNOWN", "CANCELLED") and "context deadline exceeded" in low):
        # etcd may answer first with its own context's error (UNKNOWN "context deadline exceeded"): same meaning.
        return RequestTimeout, "no answer before the deadline", None
    if code == "FAILED_PRECONDITION":
        if "not leader" in low:
            return NotLeader, "the member is not the leader", None
        if "bad leader transferee" in low:
            return BadLeaderTransferee, "the target is not a voting member", None
        if "in sync with leader" in low:
            return LearnerNotReady, "the learner has not caught up with the leader", None
        return MembershipError, "refused", any(m in low for m in _TRANSIENT_MEMBERSHIP)
    if code == "NOT_FOUND" and "member not found" in low:
        return MemberNotFound, "member not found", None
    if code in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
        return PermissionDenied, "permission denied", None
    if code == "OUT_OF_RANGE" and "compacted" in low:
        return Compacted, "the revision has been compacted", None
    if "leader transfer took too long" in low:
        return LeaderTransferTimeout, "leader transfer took too long", None
    return EtcdServerError, code, code in _TRANSIENT_CODES


def from_grpc(err: grpc.RpcError, *, endpoint: str, call: str) -> EtcdError:
    """Translate one gRPC error from ``call`` on ``endpoint`` into the matching :class:`EtcdError`.

    Pure: it only reads the status code and details. Raise the result ``from err`` to keep the cause.
    """
    code, details = _code_and_details(err)
    cls, what, transient = _classify(code, details.lower())
    out = cls(f"{call} on {endpoint}: {what} ({details})", endpoint=endpoint, code=code, details=details)
    if transient is not None:
        out.transient = transient
    return out


def translate(err: BaseException, *, endpoint: str, call: str) -> EtcdError:
    """Like :func:`from_grpc` but for anything a gRPC call may raise (``grpc.RpcError`` or a plain OS/SSL error)."""
    if isinstance(err, EtcdError):
        return err
    if isinstance(err, grpc.RpcError):
        return from_grpc(err, endpoint=endpoint, call=call)
    if isinstance(err, TimeoutError):
        return RequestTimeout(f"{call} on {endpoint}: no answer before the deadline", endpoint=endpoint)
    return MemberUnreachable(f"{call} on {endpoint}: {type(err).__name__}: {err}", endpoint=endpoint)
