"""Who asked for what: one structured record per request the sandbox API server answered.

``APIServer.audit`` is an :class:`AuditLog`. Each :class:`AuditRecord` holds the authenticated user (and its
groups), the verb and resource as the authorizer saw them (``pods/status``, ``serviceaccounts/token``; the path
for a non-resource request such as ``/version``), the namespace, the name and the HTTP status. A watch is
recorded when its stream opens (status 200), not when it ends, so counts taken while an operator runs include
its open watches. Tokens, headers and request bodies are never recorded.

    t0 = time.monotonic()
    ...                                           # let the operator work
    srv.audit.counts(user="system:serviceaccount:opsmanager:opsmanager", since=t0)
    # Counter({("patch", "etcds/status"): 12, ("get", "secrets"): 4, ("watch", "etcds"): 1, ...})
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Iterator

from opsmanager_sandbox.apiserver import rbac


@dataclasses.dataclass(frozen=True)
class AuditRecord:
    at: float
    """``time.monotonic()`` when the response was decided (a watch: when its stream opened)."""
    user: str
    groups: tuple[str, ...]
    verb: str
    """get, list, watch, create, update, patch, delete, deletecollection; the lower-cased method for a path."""
    resource: str
    """``resource`` or ``resource/subresource``; for a non-resource request, the path (``/version``)."""
    api_group: str
    namespace: str
    name: str
    code: int
    pod: str = ""
    """The pod a Pod-bound ServiceAccount token belongs to (its ``user.extra`` pod-name), else empty: which
    replica of a Deployment made the request."""

    @classmethod
    def of(cls, at: float, attrs: rbac.Attributes, code: int) -> AuditRecord:
        resource = attrs.combined_resource if attrs.resource_request else attrs.path
        return cls(at, attrs.user.name, attrs.user.groups, attrs.verb, resource, attrs.api_group,
                   attrs.namespace, attrs.name, code,
                   attrs.user.extra_value(rbac.POD_NAME_EXTRA))


class AuditLog:
    """The last ``size`` records (all of them: None), oldest first; safe to read from another thread (a
    ThreadedAPIServer's test)."""

    def __init__(self, size: int | None = 100000) -> None:
        self._records: collections.deque[AuditRecord] = collections.deque(maxlen=size)
        self._lock = threading.Lock()

    def append(self, record: AuditRecord) -> None:
        with self._lock:
            self._records.append(record)

    def records(self, *, user: str | None = None, since: float | None = None) -> list[AuditRecord]:
        """Records of ``user`` (all users if None) at or after ``since`` (a ``time.monotonic()`` value)."""
        with self._lock:
            snapshot = list(self._records)
        return [r for r in snapshot if (user is None or r.user == user) and (since is None or r.at >= since)]

    def counts(self, *, user: str | None = None, since: float | None = None) -> collections.Counter[tuple[str, str]]:
        """How many requests per ``(verb, resource)``, e.g. ``("patch", "etcds/status")``, filtered as
        :meth:`records`."""
        return collections.Counter((r.verb, r.resource) for r in self.records(user=user, since=since))

    def __iter__(self) -> Iterator[AuditRecord]:
        return iter(self.records())

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
