"""Authentication of the sandbox API server: bearer tokens to users, and the TokenRequest API that issues them.

Two kinds of token are accepted in ``Authorization: Bearer <token>``:

* the **admin token**, random per server start and written into the sandbox's kubeconfig: user
  ``system:admin`` in ``system:masters`` (which bypasses authorization, as on a real cluster);
* **ServiceAccount tokens** issued by ``POST .../serviceaccounts/<name>/token`` (TokenRequest) or
  :meth:`Authenticator.issue` from Python (what the kubelet projects into pods). They authenticate as
  ``system:serviceaccount:<ns>:<name>`` in ``system:serviceaccounts``, ``system:serviceaccounts:<ns>`` and
  ``system:authenticated`` while they have not expired, their ServiceAccount still exists with the same uid,
  the object they are bound to (``boundObjectRef``, a Pod or Secret) still exists with the same uid, and one
  of their audiences is the API server's.

The tokens are opaque random strings, not JWTs: clients never look inside a service-account token, and a
server-side table makes revocation on ServiceAccount deletion exact. Only a SHA-256 of each token is kept, so
nothing the server holds (or logs) can be replayed. A request without credentials is ``system:anonymous`` in
``system:unauthenticated``; a token that is unknown, expired or revoked is a 401 ``Unauthorized`` Status.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence
from typing import Any

from opsmanager_sandbox.apiserver import errors, rbac, store

Obj = dict[str, Any]
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
_BOUND_KINDS = {"Pod": ("", "pods"), "Secret": ("", "secrets")}


def unauthorized() -> errors.StatusError:
    return errors.StatusError(401, "Unauthorized", "Unauthorized")


@dataclasses.dataclass(frozen=True)
class _Issued:
    namespace: str
    service_account: str
    sa_uid: str
    audiences: tuple[str, ...]
    expires: float  # time.time()
    bound: tuple[str, str, str] | None  # (kind, name, uid) of the object the token is bound to


@dataclasses.dataclass(frozen=True)
class Token:
    """An issued token: the secret itself and when it stops working (wall clock)."""

    token: str = dataclasses.field(repr=False)
    expiration: datetime.datetime

    @property
    def expiration_timestamp(self) -> str:
        return self.expiration.strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    """Maps bearer tokens to users; issues ServiceAccount tokens against the objects in ``objects``."""

    def __init__(self, objects: store.Store) -> None:
        self.store = objects
        self.admin_token = secrets.token_urlsafe(32)
        self._issued: dict[str, _Issued] = {}

    def authenticate(self, header: str | None) -> rbac.UserInfo:
        """The user of an ``Authorization`` header value; anonymous without one; 401 when it does not prove one."""
        if not header:
            return rbac.UserInfo.anonymous()
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized()
        if hmac.compare_digest(token, self.admin_token):
            return rbac.ADMIN
        issued = self._issued.get(_digest(token))
        if issued is None:
            raise unauthorized()
        if time.time() >= issued.expires or not self._still_valid(issued):
            self._issued.pop(_digest(token), None)
            raise unauthorized()
        extra: tuple[tuple[str, str], ...] = ()
        if issued.bound is not None and issued.bound[0] == "Pod":
            extra = ((rbac.POD_NAME_EXTRA, issued.bound[1]), (rbac.POD_UID_EXTRA, issued.bound[2]))
        return rbac.UserInfo.service_account(issued.namespace, issued.service_account, issued.sa_uid, extra)

    def _still_valid(self, issued: _Issued) -> bool:
        if API_AUDIENCE not in issued.audiences:
            return False
        sa = self.store.get(("", "serviceaccounts"), issued.namespace, issued.service_account)
        if sa is None or sa["metadata"].get("uid") != issued.sa_uid or sa["metadata"].get("deletionTimestamp"):
            return False
        if issued.bound is not None:
            kind, name, uid = issued.bound
            obj = self.store.get(_BOUND_KINDS[kind], issued.namespace, name)
            if obj is None or (uid and obj["metadata"].get("uid") != uid) or obj["metadata"].get("deletionTimestamp"):
                return False
        return True

    def issue(self, namespace: str, service_account: str, *, audiences: Sequence[str] | None = None,
              expiration_seconds: int = DEFAULT_EXPIRATION, bound: Obj | None = None) -> Token:
        """A token for an existing ServiceAccount (404 if there is none). ``bound`` is a ``boundObjectRef``
        (``kind`` Pod or Secret, ``name``, optional ``uid``): the token dies with that object."""
        sa = self.store.get(("", "serviceaccounts"), namespace, service_account)
        if sa is None:
            raise errors.not_found("", "serviceaccounts", service_account)
        if expiration_seconds <= 0:
            raise errors.bad_request(f"expiration_seconds must be positive, got {expiration_seconds}")
        bound_ref: tuple[str, str, str] | None = None
        if bound:
            kind, name = bound.get("kind", ""), bound.get("name", "")
            if kind not in _BOUND_KINDS:
                raise errors.invalid("authentication.k8s.io", "TokenRequest", service_account, [{
                    "reason": "FieldValueNotSupported", "field": "spec.boundObjectRef.kind",
                    "message": f'Unsupported value: "{kind}": supported values: "Pod", "Secret"'}])
            obj = self.store.get(_BOUND_KINDS[kind], namespace, name)
            if obj is None:
                raise errors.not_found("", _BOUND_KINDS[kind][1], name)
            uid = bound.get("uid") or ""
            if uid and obj["metadata"].get("uid") != uid:
                raise errors.conflict("", _BOUND_KINDS[kind][1], name,
                                      f"the UID in the bound object reference ({uid}) does not match the UID in "
                                      f"record. The object might have been deleted and then recreated")
            bound_ref = (kind, name, obj["metadata"]["uid"])
        token = secrets.token_urlsafe(32)
        expires = time.time() + expiration_seconds
        self._issued[_digest(token)] = _Issued(namespace, service_account, sa["metadata"]["uid"],
                                               tuple(audiences or (API_AUDIENCE,)), expires, bound_ref)
        self._forget_expired()
        return Token(token, datetime.datetime.fromtimestamp(int(expires), datetime.UTC))

    def token_request(self, namespace: str, service_account: str, body: Any) -> Obj:
        """The TokenRequest subresource: validate the request like the real server, issue, answer it."""
        body = body if isinstance(body, dict) else {}
        spec = dict(body.get("spec") or {})
        expiration = spec.get("expirationSeconds")
        if expiration is None:
            expiration = DEFAULT_EXPIRATION
        if not isinstance(expiration, int) or expiration < MIN_EXPIRATION:
            raise errors.invalid("authentication.k8s.io", "TokenRequest", service_account, [{
                "reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                "message": f"Invalid value: {expiration}: may not specify a duration less than 10 minutes"}])
        issued = self.issue(namespace, service_account, audiences=spec.get("audiences") or None,
                            expiration_seconds=expiration, bound=spec.get("boundObjectRef"))
        spec["expirationSeconds"] = expiration
        spec["audiences"] = list(spec.get("audiences") or [API_AUDIENCE])
        spec.setdefault("boundObjectRef", None)
        meta = dict(body.get("metadata") or {}, name=service_account, namespace=namespace)
        meta.setdefault("creationTimestamp", None)
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "metadata": meta, "spec": spec,
                "status": {"token": issued.token, "expirationTimestamp": issued.expiration_timestamp}}

    def _forget_expired(self) -> None:
        now = time.time()
        for key in [k for k, v in self._issued.items() if v.expires <= now]:
            del self._issued[key]
