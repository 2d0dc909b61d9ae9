"""The auth Secret's shape (etcd's own authentication): pure rules shared by the webhook, the engine and the
provisioner.

``username`` is always ``root``; ``password`` is what clients log in with. A ``RotateAuth`` stages the new password
as ``password.next`` before etcd changes it and keeps the old one as ``password.prev`` afterwards, until every
client could have moved: the time the kubelet may take to deliver the changed Secret into a running pod (the
operator's ``--certificate-delivery-timeout``). The Secret's annotation ``ANNOTATION_PREV_UNTIL`` says when, and the
provisioner then drops it: a password rotated because it leaked does not stay readable beside the new one.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Final

from opsmanager.api import conditions

USERNAME: Final = "root"  # the one user this operator manages (KubeDB's rule: the auth Secret's user is root)
ROOT_ROLE: Final = "root"
KEY_USERNAME: Final = "username"
KEY_PASSWORD: Final = "password"
KEY_NEXT: Final = "password.next"
KEY_PREV: Final = "password.prev"
# On the auth Secret, written with ``password.prev``: when the provisioner drops it (RFC 3339).
ANNOTATION_PREV_UNTIL: Final = "ops.opsmanager.dev/password-prev-until"


def decode(secret: Mapping[str, Any] | None) -> dict[str, str]:
    """A Secret's ``data`` (base64) and ``stringData`` as text; keys that do not decode are left out."""
    if not secret:
        return {}
    out: dict[str, str] = {}
    data = secret.get("data")
    for key, raw in (data.items() if isinstance(data, Mapping) else ()):
        try:
            out[key] = base64.b64decode(raw).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError, TypeError):
            continue
    strings = secret.get("stringData")
    out.update({k: v for k, v in (strings.items() if isinstance(strings, Mapping) else ()) if isinstance(v, str)})
    return out


def encode(values: Mapping[str, str]) -> dict[str, str]:
    """``data`` for a Secret."""
    return {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}


def source_problem(data: Mapping[str, str] | None, where: str) -> tuple[str, str] | None:
    """Why a Secret named to hold a new root password cannot (KubeDB's words, with a reason), or None:
    missing, no ``password``, or a ``username`` other than ``root`` (absent counts as root)."""
    if data is None:
        return "SecretNotFound", f"referenced secret {where} not found"
    if not data.get(KEY_PASSWORD):
        return "NoPassword", f'referenced secret {where} must contain a non-empty "password"'
    if data.get(KEY_USERNAME, USERNAME) != USERNAME:
        return "NotRoot", f'username in referenced secret {where} must be "root"'
    return None


def previous_kept_until(until: datetime.datetime) -> dict[str, Any]:
    """The metadata patch that dates ``password.prev``: the provisioner drops it after ``until``."""
    return {"annotations": {ANNOTATION_PREV_UNTIL: conditions.rfc3339(until)}}


def previous_due(secret: Mapping[str, Any] | None, now: datetime.datetime) -> bool:
    """True when ``secret`` still holds ``password.prev`` past the time its annotation gives. A ``password.prev``
    without the annotation (written by hand) is the user's and kept; an unreadable date is treated as due, so a
    damaged annotation never keeps an old password for good."""
    if not secret or KEY_PREV not in (secret.get("data") or {}):
        return False
    until = ((secret.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PREV_UNTIL)
    if until is None:
        return False
    try:
        return conditions.parse_rfc3339(str(until)) <= now
    except ValueError:
        return True


def drop_previous() -> dict[str, Any]:
    """The merge patch that removes ``password.prev`` and its date from the auth Secret."""
    return {"metadata": {"annotations": {ANNOTATION_PREV_UNTIL: None}}, "data": {KEY_PREV: None}}


@dataclasses.dataclass(frozen=True)
class AuthEnabled:
    """The Etcd's ``status.authEnabled: true``: etcd's authentication is on with the auth Secret's password. A
    change for :func:`opsmanager.cluster.etcdstatus.write`, made by the provisioner when it turns authentication on
    and by a ``RotateAuth`` request's write-back."""

    def apply(self, status: Mapping[str, Any]) -> dict[str, Any]:
        return {**status, "authEnabled": True}
