"""etcd's own authentication: the ``root`` user's password in the auth Secret, and the credentials every client of
the operator logs in with.

The auth Secret holds ``username: root`` and ``password``. During a ``RotateAuth`` the new password is staged as
``password.next`` before etcd changes it, and once etcd has it the Secret holds it as ``password`` and the old one as
``password.prev`` (until the provisioner drops it, once a pod's copy of the Secret can no longer be the old one).
A client that re-reads the Secret therefore always finds a password that works: ``password`` until the change,
``password.next`` from the change until the Secret is rewritten, ``password`` again afterwards.
:func:`passwords` gives them in that order, and the operator's clients try them in turn.

Nothing here logs or returns a password in a message: :class:`~opsmanager.etcd.access.Credentials` hides it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from opsmanager import kube
from opsmanager.api import auth
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming
from opsmanager.etcd import access


def new_password() -> str:
    """A random password: 32 URL-safe characters (192 bits)."""
    return secrets.token_urlsafe(24)


def passwords(data: Mapping[str, str]) -> list[str]:
    """The passwords a client tries, in order: ``password``, then ``password.next`` (staged by a rotation)."""
    out: list[str] = []
    for key in (auth.KEY_PASSWORD, auth.KEY_NEXT):
        value = data.get(key) or ""
        if value and value not in out:
            out.append(value)
    return out


def credentials(datas: Sequence[Mapping[str, str]]) -> access.Credentials | None:
    """The root credentials from one or more auth Secrets' data (every password of each, in order); None when
    none has a password."""
    candidates: list[str] = []
    for data in datas:
        candidates += [p for p in passwords(data) if p not in candidates]
    if not candidates:
        return None
    return access.Credentials(auth.USERNAME, candidates[0], alternates=tuple(candidates[1:]))


async def source_password(k: kube.Kube, namespace: str, name: str) -> tuple[str | None, tuple[str, str] | None]:
    """The new password from Secret ``namespace/name``, or why there is none (see :func:`source_problem`)."""
    data = await read(k, namespace, name)
    problem = auth.source_problem(data, f"{namespace}/{name}")
    return (None, problem) if problem or data is None else (data[auth.KEY_PASSWORD], None)


def secret_manifest(db: etcd_api.Etcd, name: str, values: Mapping[str, str]) -> dict[str, Any]:
    """A new auth Secret for ``db`` (labelled as the operator's: ``WipeOut`` deletes it, ``Delete`` keeps it)."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": db.metadata.namespace or "default",
                     "labels": {**naming.labels(db.metadata.name or ""), naming.LABEL_COMPONENT: "auth"}},
        "data": auth.encode({auth.KEY_USERNAME: auth.USERNAME, **values}),
    }


def is_ours(secret: Mapping[str, Any] | None, db: str) -> bool:
    """True for an auth Secret the operator generated for ``db``."""
    labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
    return (labels.get(naming.LABEL_MANAGED_BY) == naming.MANAGED_BY and labels.get(naming.LABEL_INSTANCE) == db
            and labels.get(naming.LABEL_COMPONENT) == "auth")


async def read(k: kube.Kube, namespace: str, name: str) -> dict[str, str] | None:
    """The decoded data of Secret ``namespace/name``; None when it does not exist."""
    secret = await k.get("v1", "Secret", namespace, name)
    return None if secret is None else auth.decode(secret)


async def for_etcd(k: kube.Kube, db: etcd_api.Etcd, *, also: Sequence[str] = ()) -> access.Credentials | None:
    """The credentials the operator's clients of ``db`` use: from ``spec.authSecret`` and the Secrets named in
    ``also`` (a RotateAuth's staging and target Secrets); None when the Etcd has no authentication."""
    ns = db.metadata.namespace or "default"
    names = [db.spec.auth_secret.name] if db.spec.auth_secret is not None else []
    names += [n for n in also if n and n not in names]
    if not names:
        return None
    datas = [d for n in names if (d := await read(k, ns, n)) is not None]
    return credentials(datas)

