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
    ├── AuthError                etcd's authentication refused or failed (never names a password)
    │   ├── AuthFailed           wrong user name or password (Authenticate)
    │   ├── PermissionDenied     the user may not do this (no root role, or no permission on the key)
    │   │   └── AuthRequired     auth is on and the call carried no user ("user name is empty")
    │   ├── InvalidAuthToken     the token is unknown or expired (internal: the client re-authenticates once)
    │   │   └── AuthOldRevision  the token predates the last users/roles change (internal, same treatment)
    │   ├── AuthNotEnabled       Authenticate while auth is off
    │   ├── UserExists / UserNotFound / RoleNotFound
    │   └── RootUserNotExist / RootRoleNotExist   AuthEnable before root exists with the root role
    ├── SnapshotFailed           a snapshot stream ended short or its sha256 trailer did not match
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


class AuthError(EtcdError):
    """etcd's authentication or user management refused the call. Messages carry etcd's text and the user name,
    never a password (etcd never echoes one, and the client never formats one)."""

    transient = False


class AuthFailed(AuthError):
    """Authenticate refused the user name and password ("authentication failed, invalid user ID or password"; etcd
    says the same for an unknown user). Fatal: the credentials are wrong (or were changed)."""


class PermissionDenied(AuthError):
    """etcd authentication/authorisation refused the call: the user lacks the root role (maintenance, membership,
    auth management) or a permission on the key. Fatal: needs a different user or role."""


class AuthRequired(PermissionDenied):
    """Auth is enabled and the call carried no user: no token and no client certificate CN ("user name is empty").
    Fatal for a client without credentials; a client with credentials authenticates and retries once."""


class InvalidAuthToken(AuthError):
    """etcd does not know the token (expired after ``--auth-token-ttl``, forgotten by a restarted member, dropped by
    a password change or by AuthDisable). Internal: the client re-authenticates once and retries, so callers only
    see it when that retry failed the same way. Transient."""

    transient = True


class AuthOldRevision(InvalidAuthToken):
    """The token was issued before the auth store's last change ("revision of auth store is old"; JWT tokens, or a
    race with a users/roles change). Treated as an invalid token: re-authenticate, retry."""


class AuthNotEnabled(AuthError):
    """Authenticate while auth is disabled ("authentication is not enabled"). The client then runs without a
    token; :meth:`~opsmanager.etcd.auth.Auth.check_login` raises it (there is no login to check)."""


class UserExists(AuthError):
    """UserAdd of a user that exists ("user name already exists"): treat as done when creating idempotently."""


class UserNotFound(AuthError):
    """No such user ("user name not found"): UserGet/UserGrantRole/UserChangePassword of an unknown user, or an
    admin call made as a client certificate CN that is not a user."""


class RoleNotFound(AuthError):
    """No such role ("role name not found"); the role ``root`` always exists."""


class RootUserNotExist(AuthError):
    """AuthEnable before the user ``root`` exists ("root user does not exist")."""


class RootRoleNotExist(AuthError):
    """AuthEnable while ``root`` lacks the role ``root`` ("root user does not have root role")."""


class SnapshotFailed(EtcdError):
    """A snapshot stream ended before the size it announced, or the sha256 trailer etcd appends does not match the
    bytes received. Transient: take it again (the partial file was removed)."""

    transient = True


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
    already, a read or hash there is no longer possible. A watch from below it is cancelled instead, with the last
    compaction's revision: ``compact_revision`` (0 when etcd did not say)."""

    transient = False
    compact_revision = 0


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


# etcd's auth errors by their text: the gRPC layer says "etcdserver: <text>" with the code of rpctypes; 3.5's
# maintenance calls (Defragment, HashKV, MoveLeader, Snapshot, ...) return the auth package's own error,
# "auth: <text>" (server/auth/store.go, partly other words: "user not found"), as UNKNOWN. The first phrase found
# wins.
_AUTH_MARKERS: tuple[tuple[str, type[EtcdError], str], ...] = (
    ("invalid auth token", InvalidAuthToken, "invalid auth token"),
    ("revision of auth store is old", AuthOldRevision, "the auth token predates the last auth change"),
    ("revision in header is old", AuthOldRevision, "the auth token predates the last auth change"),
    ("authentication failed", AuthFailed, "authentication failed"),
    ("authentication is not enabled", AuthNotEnabled, "authentication is not enabled"),
    ("user name is empty", AuthRequired, "authentication required (no user)"),
    ("user name already exists", UserExists, "the user exists"),
    ("auth: user already exists", UserExists, "the user exists"),
    ("user name not found", UserNotFound, "no such user"),
    ("auth: user not found", UserNotFound, "no such user"),
    ("role name not found", RoleNotFound, "no such role"),
    ("auth: role not found", RoleNotFound, "no such role"),
    ("root user does not exist", RootUserNotExist, "the root user does not exist"),
    ("root user does not have root role", RootRoleNotExist, "the root user lacks the root role"),
    ("auth: permission denied", PermissionDenied, "permission denied"),
    ("etcdserver: permission denied", PermissionDenied, "permission denied"),
)


def auth_error_class(details: str) -> type[EtcdError] | None:
    """Pure: the auth error class etcd's text names (either prefix), or None when it is not an auth error."""
    low = details.lower()
    for marker, cls, _what in _AUTH_MARKERS:
        if marker in low:
            return cls
    return None


def _classify(code: str, low: str) -> tuple[type[EtcdError], str, bool | None]:
    """(error class, what happened, per-instance transient override) for a gRPC code and lower-cased details."""
    if code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        for marker, cls, what in _AUTH_MARKERS:
            if marker in low:
                return cls, what, None
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


def past_deadline(err: EtcdError, deadline: float | None, now: float) -> EtcdError:
    """``err`` as a :class:`RequestTimeout` when it came once the caller's ``deadline`` (loop time) had passed: etcd
    may reset the stream when its copy of the deadline fires (gRPC then says CANCELLED "Received RST_STREAM"), a
    moment before our own timer would say DEADLINE_EXCEEDED. Other errors are returned as they are."""
    if deadline is None or now < deadline - 0.005 or isinstance(err, RequestTimeout):
        return err
    if isinstance(err, EtcdServerError) and err.code in ("CANCELLED", "DEADLINE_EXCEEDED", "UNKNOWN"):
        out = RequestTimeout(f"{err} (the deadline had passed)", endpoint=err.endpoint, code=err.code,
                             details=err.details)
        out.__cause__ = err.__cause__
        return out
    return err


def translate(err: BaseException, *, endpoint: str, call: str) -> EtcdError:
    """Like :func:`from_grpc` but for anything a gRPC call may raise (``grpc.RpcError`` or a plain OS/SSL error)."""
    if isinstance(err, EtcdError):
        return err
    if isinstance(err, grpc.RpcError):
        return from_grpc(err, endpoint=endpoint, call=call)
    if isinstance(err, TimeoutError):
        return RequestTimeout(f"{call} on {endpoint}: no answer before the deadline", endpoint=endpoint)
    return MemberUnreachable(f"{call} on {endpoint}: {type(err).__name__}: {err}", endpoint=endpoint)
