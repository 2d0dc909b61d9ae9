"""opsmanager.etcd: what the operator sees and does inside etcd.

* :mod:`~opsmanager.etcd.access` — :class:`Endpoint` (member address, ports, URL schemes) and :class:`TLSIdentity`
  (trust bundle + client certificate as bytes).
* :mod:`~opsmanager.etcd.client` — :class:`EtcdClient`, the async admin client over gRPC (Status, MemberList,
  MemberUpdate, MoveLeader routed to the leader, health, the recovery gate, served certificates).
* :mod:`~opsmanager.etcd.errors` — the error hierarchy and :func:`is_transient`.
* :mod:`~opsmanager.etcd.probes` — non-gRPC probes (served certificate, plain-HTTP ``/health``).
* ``proto/rpc.proto`` → ``_pb/`` (``python -m opsmanager.etcd.protogen``).

Inside the package, import modules (``from opsmanager.etcd import errors``); these re-exports are for callers.
"""

from opsmanager.etcd.access import SCHEMES, Endpoint, TLSIdentity
from opsmanager.etcd.client import EtcdClient, KVHash, LeaderMove, Member, MemberStatus, Recovery
from opsmanager.etcd.errors import (
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
    TLSHandshakeFailed,
    is_transient,
)
from opsmanager.etcd.probes import Health, served_certificate

__all__ = [
    "SCHEMES", "Endpoint", "TLSIdentity",
    "EtcdClient", "KVHash", "LeaderMove", "Member", "MemberStatus", "Recovery", "Health", "served_certificate",
    "EtcdError", "MemberUnreachable", "TLSHandshakeFailed", "RequestTimeout", "DeadlinePassed", "NoQuorum",
    "NotLeader", "LeaderTransferTimeout", "LearnerNotSupported", "MembershipError", "MemberNotFound",
    "BadLeaderTransferee", "PermissionDenied", "NotRecovered", "DataInconsistent", "EtcdServerError", "is_transient",
]
