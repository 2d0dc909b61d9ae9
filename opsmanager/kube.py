"""The operator's door to the Kubernetes API: a small async client over the official ``kubernetes`` client.

Why not the generated typed APIs: the operator handles plain dicts everywhere (CRs, cert-manager objects,
manifests from the renderer), so one generic ``request(method, path)`` plus get/list/create/patch/delete on
``(apiVersion, kind)`` covers it, while the ``kubernetes`` client still does what must not be hand-written:
kubeconfig and in-cluster loading, TLS to the API server, tokens and exec credential plugins.
Calls run in a thread (``asyncio.to_thread``) because that client is synchronous.

Errors are translated at this edge into :class:`KubeError` subclasses (``NotFound``, ``Conflict``, ``Invalid``,
``TooManyRequests``…); no ``kubernetes`` exception escapes. Secret data is never logged here.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes
import urllib3

Obj = dict[str, Any]

# (apiVersion, kind) -> (plural, namespaced)
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Service"): ("services", True),
    ("v1", "Event"): ("events", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("apps/v1", "ControllerRevision"): ("controllerrevisions", True),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("cert-manager.io/v1", "Certificate"): ("certificates", True),
    ("cert-manager.io/v1", "Issuer"): ("issuers", True),
    ("cert-manager.io/v1", "ClusterIssuer"): ("clusterissuers", False),
    ("opsmanager.dev/v1alpha1", "Etcd"): ("etcds", True),
    ("ops.opsmanager.dev/v1alpha1", "EtcdOpsRequest"): ("etcdopsrequests", True),
}


class KubeError(Exception):
    """A Kubernetes API call failed. ``status`` is the HTTP code (0 when the server was not reached)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: stale resourceVersion, or the object already exists."""


class Invalid(KubeError):
    """422: rejected by validation or an admission webhook."""


class Forbidden(KubeError):
    pass


class TooManyRequests(KubeError):
    """429: e.g. an eviction a PodDisruptionBudget does not allow right now."""


class Unavailable(KubeError):
    """The API server did not answer (connection error, 5xx)."""


_BY_STATUS: dict[int, type[KubeError]] = {
    404: NotFound, 409: Conflict, 422: Invalid, 403: Forbidden, 429: TooManyRequests,
}


def _error(status: int, body: bytes, where: str) -> KubeError:
    reason, message = "", ""
    try:
        doc = json.loads(body)
        reason, message = str(doc.get("reason", "")), str(doc.get("message", ""))
    except (ValueError, AttributeError):
        message = body[:300].decode("utf-8", "replace")
    cls = _BY_STATUS.get(status, Unavailable if status >= 500 else KubeError)
    return cls(f"{where}: HTTP {status} {reason}: {message}".strip(), status=status, reason=reason)


def resource(api_version: str, kind: str) -> tuple[str, bool]:
    try:
        return RESOURCES[(api_version, kind)]
    except KeyError:
        raise ValueError(f"unknown resource {api_version} {kind}: add it to opsmanager.kube.RESOURCES") from None


def path_for(api_version: str, kind: str, namespace: str | None, name: str | None = None,
             subresource: str | None = None) -> str:
    plural, namespaced = resource(api_version, kind)
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [base]
    if namespaced:
        if namespace is None:
            raise ValueError(f"{kind} is namespaced: a namespace is required")
        parts.append(f"namespaces/{urllib.parse.quote(namespace)}")
    parts.append(plural)
    if name is not None:
        parts.append(urllib.parse.quote(name))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


class Kube:
    """Async access to one Kubernetes API server."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._api = api_client

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, *, context: str | None = None) -> Kube:
        """Load a kubeconfig (``path``, else ``$KUBECONFIG``/``~/.kube/config``), else the in-cluster config."""
        config = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_kube_config(config_file=path, context=context, client_configuration=config)
        except (kubernetes.config.ConfigException, FileNotFoundError, TypeError):
            if path is not None:
                raise
            kubernetes.config.load_incluster_config(client_configuration=config)
        config.connection_pool_maxsize = 32
        config.retries = False
        return cls(kubernetes.client.ApiClient(configuration=config))

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    def close(self) -> None:
        self._api.close()

    # --- the one transport call -------------------------------------------------------------------------------

    def _request_sync(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
                      content_type: str, timeout: float) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        query_params = [(k, v) for k, v in (query or {}).items() if v is not None]
        method_, url, headers_, body_, post = self._api.param_serialize(
            method=method, resource_path=path, query_params=query_params, header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        where = f"{method} {path}"
        try:
            response = self._api.call_api(method_, url, header_params=headers_, body=body_, post_params=post,
                                          _request_timeout=timeout)
            response.read()
        except kubernetes.client.ApiException as exc:
            raise _error(int(exc.status or 0), (exc.body or "").encode(), where) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{where}: {exc}") from exc
        if response.status >= 400:
            raise _error(response.status, response.data, where)
        return json.loads(response.data) if response.data else None

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                      content_type: str = "application/json", timeout: float = 30.0) -> Any:
        return await asyncio.to_thread(self._request_sync, method, path, query, body, content_type, timeout)

    # --- verbs ------------------------------------------------------------------------------------------------

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            result: Obj = await self.request("GET", path_for(api_version, kind, namespace, name))
            return result
        except NotFound:
            return None

    async def list(self, api_version: str, kind: str, namespace: str | None, *,
                   label_selector: str | None = None) -> list[Obj]:
        doc = await self.request("GET", path_for(api_version, kind, namespace),
                                 query={"labelSelector": label_selector})
        items: list[Obj] = doc.get("items") or []
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    async def create(self, obj: Obj) -> Obj:
        meta = obj.get("metadata", {})
        result: Obj = await self.request(
            "POST", path_for(obj["apiVersion"], obj["kind"], meta.get("namespace")), body=obj)
        return result

    async def patch(self, api_version: str, kind: str, namespace: str | None, name: str, patch: Any, *,
                    subresource: str | None = None, patch_type: str = "merge") -> Obj:
        content_type = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[patch_type]
        result: Obj = await self.request(
            "PATCH", path_for(api_version, kind, namespace, name, subresource), body=patch,
            content_type=content_type)
        return result

    async def replace(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        meta = obj["metadata"]
        result: Obj = await self.request(
            "PUT", path_for(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], subresource),
            body=obj)
        return result

    async def delete(self, api_version: str, kind: str, namespace: str | None, name: str, *,
                     uid: str | None = None, grace_period_seconds: int | None = None) -> bool:
        """Delete; False when it was already gone. ``uid`` makes it a precondition (never delete a successor)."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self.request("DELETE", path_for(api_version, kind, namespace, name), body=body)
            return True
        except NotFound:
            return False

    async def evict(self, namespace: str, pod: str) -> None:
        """Evict a pod through the Eviction API (honours PodDisruptionBudgets: ``TooManyRequests`` if not now)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        await self.request("POST", path_for("v1", "Pod", namespace, pod, "eviction"), body=body)

    async def apply(self, obj: Obj) -> Obj:
        """Create the object, or merge-patch what the operator owns (labels, annotations, spec/data/type)."""
        meta = obj["metadata"]
        current = await self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if current is None:
            try:
                return await self.create(obj)
            except Conflict:
                current = await self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
                if current is None:
                    raise
        patch: Obj = {"metadata": {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}}
        for key in ("spec", "data", "stringData", "type"):
            if key in obj:
                patch[key] = obj[key]
        return await self.patch(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], patch)

    async def transact_status(self, api_version: str, kind: str, namespace: str | None, name: str,
                              *mutations: Callable[[Obj], Obj], attempts: int = 8) -> Obj | None:
        """Re-read, apply pure ``mutations`` to a copy of ``status``, skip a no-op, and write ``/status`` with an
        optimistic lock on ``resourceVersion``; retry on conflict. The one way status is written, so the
        provisioner and the ops engine never overwrite each other's conditions. None if the object is gone."""
        for _ in range(attempts):
            obj = await self.get(api_version, kind, namespace, name)
            if obj is None:
                return None
            before = obj.get("status") or {}
            after = copy.deepcopy(before)
            for mutate in mutations:
                after = mutate(after)
            if after == before:
                return obj
            body = {"metadata": {"resourceVersion": obj["metadata"].get("resourceVersion")}, "status": after}
            # A merge patch would merge nested maps and replace lists; send every status key, and null the
            # ones that went away.
            for key in before:
                if key not in after:
                    body["status"][key] = None
            try:
                return await self.patch(api_version, kind, namespace, name, body, subresource="status")
            except Conflict:
                continue
        raise Conflict(f"status of {kind} {namespace}/{name}: still conflicting after {attempts} attempts",
                       status=409, reason="Conflict")

    async def event(self, involved: Obj, *, reason: str, message: str, type_: str = "Normal",
                    component: str = "opsmanager") -> None:
        """Record a core/v1 Event about ``involved``; failures to record are swallowed (events are best effort)."""
        meta = involved["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta.get("namespace")},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"), "name": meta["name"],
                "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.create(body)
        except KubeError:
            pass
