"""Errors of the sandbox API server, shaped like the real kube-apiserver's ``Status`` bodies.

Every failure inside the server is raised as :class:`StatusError` and turned into a ``kind: Status`` JSON body
at the HTTP edge (``server.py``), with the same ``code``/``reason``/``message``/``details`` the real server
uses, so clients (the ``kubernetes`` package, kopf, kubectl) classify and print them exactly as on a real
cluster (e.g. kubectl prints ``Error from server (NotFound): ...`` from ``reason`` and ``message``).
"""

from __future__ import annotations

from typing import Any


class StatusError(Exception):
    """An API error that is answered with a ``kind: Status`` body and ``code`` as the HTTP status."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        return body


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def _details(name: str | None, group: str, plural: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": plural}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details.update(extra)
    return details


def not_found(group: str, plural: str, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{_qualified(plural, group)} "{name}" not found',
                       _details(name, group, plural))


def already_exists(group: str, plural: str, name: str) -> StatusError:
    return StatusError(409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists',
                       _details(name, group, plural))


def conflict(group: str, plural: str, name: str, why: str) -> StatusError:
    return StatusError(409, "Conflict",
                       f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
                       _details(name, group, plural))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(group: str, kind: str, name: str, causes: list[dict[str, str]]) -> StatusError:
    """422 Invalid with field causes; ``causes`` items carry ``field``, ``reason`` and ``message``."""
    what = f"{kind}.{group}" if group else kind
    parts = [c["message"] if not c.get("field") else f'{c["field"]}: {c["message"]}' for c in causes]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return StatusError(422, "Invalid", f'{what} "{name}" is invalid: {text}',
                       {"name": name, "group": group, "kind": kind, "causes": causes})


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def forbidden(group: str, plural: str, name: str, why: str) -> StatusError:
    return StatusError(403, "Forbidden", f'{_qualified(plural, group)} "{name}" is forbidden: {why}',
                       _details(name, group, plural))


def method_not_allowed(message: str = "the server does not allow this method on the requested resource"
                       ) -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> StatusError:
    return StatusError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                       f"accepted media types include: application/json-patch+json, "
                       f"application/merge-patch+json, application/apply-patch+yaml (got {content_type!r})")


def not_acceptable(message: str) -> StatusError:
    return StatusError(406, "NotAcceptable", message)


def internal(message: str) -> StatusError:
    return StatusError(500, "InternalError", f"Internal error occurred: {message}",
                       {"causes": [{"message": message}]})


def unprocessable(message: str) -> StatusError:
    """422 for patches that cannot be applied (the real server's generic 422, e.g. a failed JSON-patch test)."""
    return StatusError(422, "Invalid", message, {"causes": [{"reason": "FieldValueInvalid", "message": message}]})


def no_resource(path: str) -> StatusError:
    return StatusError(404, "NotFound", "the server could not find the requested resource",
                       {"causes": [{"reason": "UnexpectedServerResponse", "message": f"404 page not found: {path}"}]})
