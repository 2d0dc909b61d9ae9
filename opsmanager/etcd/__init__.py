"""opsmanager.etcd: what the operator sees and does inside etcd.

* :mod:`~opsmanager.etcd.access` — :class:`Endpoint` (member address, ports, URL schemes), :class:`TLSIdentity`
  (trust bundle + client certificate as bytes) and :class:`Credentials` (an etcd user, for auth).
* :mod:`~opsmanager.etcd.client` — :class:`EtcdClient`, the async admin client over gRPC: one transport and a
  service per etcd service (``client.kv``, ``client.cluster``, ``client.maintenance``, ``client.auth``), plus health,
  the recovery gate and served certificates.
* :mod:`~opsmanager.etcd.transport` — the channels, TLS identity, login, endpoint choice, deadlines and error
  translation every service shares.
* :mod:`~opsmanager.etcd.kv`, :mod:`~opsmanager.etcd.cluster`, :mod:`~opsmanager.etcd.maintenance`,
  :mod:`~opsmanager.etcd.auth` — etcd's KV (and Watch), Cluster, Maintenance and Auth services.
* :mod:`~opsmanager.etcd.tokens` — the client's etcd login: the token interceptors of its channels.
* :mod:`~opsmanager.etcd.snapshot` — the verified snapshot file and the revision inside it.
* :mod:`~opsmanager.etcd.errors` — the error hierarchy and :func:`is_transient`.
* :mod:`~opsmanager.etcd.probes` — non-gRPC probes (served certificate, plain-HTTP ``/health``).
* ``proto/rpc.proto`` → ``_pb/`` (``python -m opsmanager.etcd.protogen``).

Inside the package, import modules (``from opsmanager.etcd import errors``); these re-exports are for callers.
"""

from opsmanager.etcd.access import SCHEMES, Credentials, Endpoint, TLSIdentity
from opsmanager.etcd.client import EtcdClient, KVHash, LeaderMove, Member, MemberStatus, Recovery
from opsmanager.etcd.errors import (
    AuthError,
    AuthFailed,
    AuthNotEnabled,
    AuthRequired,
    BadLeaderTransferee,
    DataInconsistent,
    DeadlinePassed,
    EtcdError,
    EtcdServerError,
    LeaderTransferTimeout,
    LearnerNotSupported,
    MemberNotFound,
    MembershipError,
    MemberUnreachable,
    NoQuorum,
    NotLeader,
    NotRecovered,
    PermissionDenied,
    RequestTimeout,
    RoleNotFound,
    RootRoleNotExist,
    RootUserNotExist,
    SnapshotFailed,
    TLSHandshakeFailed,
    UserExists,
    UserNotFound,
    is_transient,
)
from opsmanager.etcd.probes import Health, served_certificate
from opsmanager.etcd.snapshot import SnapshotResult

__all__ = [
    "SCHEMES", "Endpoint", "TLSIdentity", "Credentials",
    "EtcdClient", "KVHash", "LeaderMove", "Member", "MemberStatus", "Recovery", "Health", "served_certificate",
    "SnapshotResult",
    "EtcdError", "MemberUnreachable", "TLSHandshakeFailed", "RequestTimeout", "DeadlinePassed", "NoQuorum",
    "NotLeader", "LeaderTransferTimeout", "LearnerNotSupported", "MembershipError", "MemberNotFound",
    "BadLeaderTransferee", "PermissionDenied", "NotRecovered", "DataInconsistent", "EtcdServerError", "is_transient",
    "AuthError", "AuthFailed", "AuthRequired", "AuthNotEnabled", "UserExists", "UserNotFound", "RoleNotFound",
    "RootUserNotExist", "RootRoleNotExist", "SnapshotFailed",
]
