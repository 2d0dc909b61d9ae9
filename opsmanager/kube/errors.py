"""The one error hierarchy of the Kubernetes layer: every failure of an API call is a :class:`KubeError`.

Why a hierarchy of our own (as kopf's ``clients/errors.py``): callers decide on *what happened* — the object
is not there, someone else changed it, the PodDisruptionBudget says "not now", the API server is down — not on
which HTTP library noticed it. The transport (aiohttp) and the configuration loader (the ``kubernetes``
package) are translated here, at the edge, with the original exception chained as ``__cause__``; a test asserts
none of their exception types escapes.

::

    KubeError                      status 0 when the server was not reached
    ├── ConfigError                no kubeconfig, no in-cluster service account, unreadable credentials
    ├── Unavailable                connection refused/reset, timeout, 5xx (retry later)
    ├── Unauthorized               401 (credentials refused even after a refresh)
    ├── Forbidden                  403
    ├── NotFound                   404
    ├── Conflict                   409: stale resourceVersion ...
    │   └── AlreadyExists          ... or a create of an existing name
    ├── Gone                       410: a watch's resourceVersion is too old (relist)
    ├── Invalid                    422: validation or an admission webhook said no
    └── TooManyRequests            429: e.g. an eviction a PodDisruptionBudget does not allow now

:func:`is_transient` is the one predicate for "try again later" versus "this will not get better by itself".
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator
from typing import Any, TypedDict

import aiohttp


class RawStatus(TypedDict, total=False):
    """A ``metav1.Status`` as the API server returns it with an error."""

    kind: str
    apiVersion: str
    status: str
    message: str
    reason: str
    code: int
    details: dict[str, Any]


class KubeError(Exception):
    """A Kubernetes API call failed. ``status`` is the HTTP code (0 when the server was not reached), ``reason``
    the Status reason (``NotFound``, ``AlreadyExists``, ...), ``body`` the Status object when there was one."""

    metric_kind = "kube"  # the ``kind`` label of ``opsmanager_reconcile_errors_total`` (opsmanager.metrics)

    def __init__(self, message: str, *, status: int = 0, reason: str = "", body: RawStatus | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body: RawStatus = body if body is not None else {}

    @property
    def message(self) -> str:
        """The API server's own message (without our ``METHOD path: HTTP nnn`` prefix) when it sent one."""
        return str(self.body.get("message") or self.args[0])


class ConfigError(KubeError):
    """No usable connection settings: no kubeconfig, not in a cluster, or credentials that cannot be read."""


class Unavailable(KubeError):
    """The API server did not answer (connection error, timeout) or answered 5xx."""

    metric_kind = "unavailable"


class Unauthorized(KubeError):
    """401: the credentials were refused."""

    metric_kind = "forbidden"


class Forbidden(KubeError):
    """403."""

    metric_kind = "forbidden"


class NotFound(KubeError):
    """404."""

    metric_kind = "not-found"


class Conflict(KubeError):
    """409: stale resourceVersion, or the object already exists (:class:`AlreadyExists`)."""

    metric_kind = "conflict"


class AlreadyExists(Conflict):
    """409 on the create of a name that exists."""


class Gone(KubeError):
    """410: the resourceVersion a watch started from is too old; list again."""


class Invalid(KubeError):
    """422: rejected by validation or an admission webhook."""


class TooManyRequests(KubeError):
    """429: e.g. an eviction a PodDisruptionBudget does not allow right now."""


_BY_STATUS: dict[int, type[KubeError]] = {
    401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid, 429: TooManyRequests,
}


def is_transient(exc: BaseException) -> bool:
    """True for failures that may go away by themselves (server down or overloaded, a PDB's "not now"); False
    for answers that will be the same next time (not found, invalid, forbidden, bad configuration)."""
    return isinstance(exc, Unavailable | TooManyRequests)


def parse_status(body: bytes | str) -> RawStatus | None:
    """The Status object of an error answer, or None when the body is not one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None  # type: ignore[return-value]


def from_status(status: int, body: bytes | str | RawStatus | None, where: str) -> KubeError:
    """The :class:`KubeError` of an HTTP error answer (``body`` raw, or an already parsed Status)."""
    parsed = body if isinstance(body, dict) else (parse_status(body) if body else None)
    reason = str((parsed or {}).get("reason") or "")
    message = str((parsed or {}).get("message") or "")
    if parsed is None and isinstance(body, bytes | str) and body:
        message = (body.decode("utf-8", "replace") if isinstance(body, bytes) else body)[:300]
    if status == 409 and reason == "AlreadyExists":
        cls: type[KubeError] = AlreadyExists
    else:
        cls = _BY_STATUS.get(status, Unavailable if status >= 500 else KubeError)
    text = f"{where}: HTTP {status} {reason}: {message}".replace("  ", " ").strip()
    return cls(text, status=status, reason=reason, body=parsed)


@contextlib.contextmanager
def translated(where: str) -> Iterator[None]:
    """Turn transport failures raised inside the block into :class:`Unavailable`, chaining the original.

    ``KubeError`` passes unchanged; cancellation is never caught."""
    try:
        yield
    except KubeError:
        raise
    except (aiohttp.ClientError, ssl.SSLError, OSError, TimeoutError) as exc:
        raise Unavailable(f"{where}: {type(exc).__name__}: {exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:  # a body that is not the JSON it claims to be
        raise Unavailable(f"{where}: unreadable answer: {exc}") from exc
