"""A small asyncio Kubernetes REST + watch client, for the sandbox's own controllers.

The sandbox's controllers (kubelet, StatefulSet controller, cert-manager) talk to the sandbox API server over
real HTTP, exactly as real controllers talk to a kube-apiserver: list, watch from a resourceVersion, create,
merge-patch (also on the ``status`` subresource) and delete. This module is that client, plus an
:class:`Informer` (list, then watch, with a local cache and a relist on ``410 Gone`` or a broken stream).

Why not the official ``kubernetes`` client: it is synchronous (its watch blocks a thread per stream), and the
controllers here are asyncio tasks that share one event loop with the API server in tests; kopf's client is
internal to kopf. This client is ~300 lines over aiohttp and knows only what the controllers use.

Errors: every non-2xx answer becomes an :class:`ApiError` (``NotFound``, ``Conflict``, ``AlreadyExists``,
``Gone``, ``Invalid``); transport failures become :class:`ApiUnavailable`. aiohttp's exceptions never leak.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Resource:
    """One served resource type: where its URLs live and how it is named."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
CONTROLLERREVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                               "ValidatingWebhookConfiguration", False)
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                             "MutatingWebhookConfiguration", False)
ISSUERS = Resource("cert-manager.io", "v1", "issuers", "Issuer")
CLUSTERISSUERS = Resource("cert-manager.io", "v1", "clusterissuers", "ClusterIssuer", namespaced=False)
CERTIFICATES = Resource("cert-manager.io", "v1", "certificates", "Certificate")

BUILTIN: tuple[Resource, ...] = (
    NAMESPACES, PODS, SECRETS, CONFIGMAPS, SERVICES, EVENTS, PVCS, STATEFULSETS, CONTROLLERREVISIONS, PDBS,
    LEASES, CRDS, VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS, ISSUERS, CLUSTERISSUERS, CERTIFICATES,
)


def resource_for(api_version: str, kind: str, extra: Iterable[Resource] = ()) -> Resource:
    """The :class:`Resource` of a manifest's ``apiVersion``/``kind``; ``extra`` adds kinds (e.g. from CRDs)."""
    for res in (*BUILTIN, *extra):
        if res.api_version == api_version and res.kind == kind:
            return res
    raise ValueError(f"unknown kind {kind!r} of apiVersion {api_version!r}: the sandbox client knows "
                     f"{sorted({r.kind for r in BUILTIN})}; pass extra=[Resource(...)] for custom kinds")


def resource_from_crd(crd: Obj) -> Resource:
    """The :class:`Resource` of a CustomResourceDefinition's storage version."""
    spec = crd["spec"]
    versions = spec.get("versions") or []
    version = next((v["name"] for v in versions if v.get("storage")), versions[0]["name"] if versions else "v1")
    return Resource(spec["group"], version, spec["names"]["plural"], spec["names"]["kind"],
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced")


class ApiError(Exception):
    """A non-2xx answer of the API server; ``status`` is the HTTP code, ``reason`` the Status reason."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """409 on a stale resourceVersion."""


class AlreadyExists(Conflict):
    """409 on create of an existing name."""


class Gone(ApiError):
    """410: the resourceVersion to watch from is too old; relist."""


class Invalid(ApiError):
    """422 (invalid object, or a JSON-patch ``test`` that did not match)."""


class ApiUnavailable(ApiError):
    """The API server could not be reached (connection refused, reset, timeout)."""


def _error(status: int, body: Obj | None, text: str) -> ApiError:
    reason = str((body or {}).get("reason") or "")
    message = str((body or {}).get("message") or text[:500])
    if status == 404:
        return NotFound(status, reason or "NotFound", message, body)
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(status, reason or "Conflict", message, body)
    if status == 410:
        return Gone(status, reason or "Expired", message, body)
    if status == 422:
        return Invalid(status, reason or "Invalid", message, body)
    return ApiError(status, reason or "Error", message, body)


class KubeClient:
    """Asynchronous client of one API server (no authentication: the sandbox serves plain HTTP on loopback)."""

    def __init__(self, base_url: str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=64, force_close=False),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str = "application/json") -> Obj:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            async with self._sess().request(method, self.base_url + path, params=params, data=data,
                                            headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=self._timeout)) as resp:
                text = await resp.text()
                parsed: Any = None
                with contextlib.suppress(ValueError):
                    parsed = json.loads(text) if text else {}
                if resp.status >= 400:
                    raise _error(resp.status, parsed if isinstance(parsed, dict) else None, text)
                return parsed if isinstance(parsed, dict) else {}
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiUnavailable(0, "Unavailable", f"{method} {path}: {exc!r}") from exc

    # -- verbs -----------------------------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        return await self.request("GET", res.path(namespace, name))

    async def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return await self.get(res, name, namespace)
        except NotFound:
            return None

    async def list(self, res: Resource, namespace: str | None = None, *, label_selector: str | None = None,
                   field_selector: str | None = None) -> Obj:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        return await self.request("GET", res.path(namespace), params=params)

    async def create(self, res: Resource, body: Obj, namespace: str | None = None) -> Obj:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        return await self.request("POST", res.path(ns), body=body)

    async def replace(self, res: Resource, body: Obj, *, subresource: str | None = None) -> Obj:
        meta = body["metadata"]
        return await self.request("PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=body)

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None, *,
                    subresource: str | None = None, patch_type: str = "merge") -> Obj:
        ctype = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[patch_type]
        return await self.request("PATCH", res.path(namespace, name, subresource), body=patch, content_type=ctype)

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     grace_period_seconds: int | None = None, propagation: str | None = None,
                     uid: str | None = None) -> Obj | None:
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if propagation:
            body["propagationPolicy"] = propagation
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            return await self.request("DELETE", res.path(namespace, name), body=body)
        except NotFound:
            return None

    async def watch(self, res: Resource, namespace: str | None = None, *, resource_version: str | None = None,
                    timeout_seconds: int = 300, label_selector: str | None = None) -> AsyncIterator[tuple[str, Obj]]:
        """Yield ``(type, object)`` events; ends when the server closes the stream. ERROR events raise."""
        params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        if resource_version:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        url = self.base_url + res.path(namespace)
        try:
            async with self._sess().get(url, params=params, headers={"Accept": "application/json"},
                                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout,
                                                                      sock_read=timeout_seconds + 30)) as resp:
                if resp.status >= 400:
                    text = await resp.text()
                    parsed = None
                    with contextlib.suppress(ValueError):
                        parsed = json.loads(text)
                    raise _error(resp.status, parsed if isinstance(parsed, dict) else None, text)
                buf = b""
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        etype, obj = event.get("type", ""), event.get("object") or {}
                        if etype == "ERROR":
                            raise _error(int(obj.get("code") or 500), obj, json.dumps(obj))
                        yield etype, obj
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiUnavailable(0, "Unavailable", f"watch {res.plural}: {exc!r}") from exc


EventHandler = Callable[[str, Obj, Obj | None], None]
"""``handler(event_type, new_object, old_object_or_None)``; DELETED passes the last known object as new."""


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


class Informer:
    """List-then-watch of one resource type with a local cache, like client-go's informer.

    Handlers run synchronously on each event (they should only enqueue work). After a relist the cache is
    diffed against the new list so handlers see ADDED/MODIFIED/DELETED for what changed while disconnected.
    """

    def __init__(self, client: KubeClient, res: Resource, *, namespace: str | None = None,
                 label_selector: str | None = None, relist_delay: float = 0.5) -> None:
        self.client = client
        self.res = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.cache: dict[tuple[str, str], Obj] = {}
        self.synced = asyncio.Event()
        self._handlers: list[EventHandler] = []
        self._relist_delay = relist_delay
        self._task: asyncio.Task[None] | None = None

    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.cache.get((namespace, name))

    def items(self, namespace: str | None = None) -> list[Obj]:
        return [o for (ns, _), o in self.cache.items() if namespace is None or ns == namespace]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"informer-{self.res.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _emit(self, etype: str, obj: Obj, old: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(etype, obj, old)
            except Exception:  # a handler bug must not stop the informer
                log.exception("informer %s: handler failed on %s %s", self.res.plural, etype, key_of(obj))

    async def _relist(self) -> str:
        listed = await self.client.list(self.res, self.namespace, label_selector=self.label_selector)
        fresh = {key_of(o): o for o in listed.get("items") or []}
        old = self.cache
        self.cache = fresh
        for key, obj in fresh.items():
            obj.setdefault("apiVersion", self.res.api_version)
            obj.setdefault("kind", self.res.kind)
            prev = old.get(key)
            if prev is None:
                self._emit("ADDED", obj, None)
            elif (prev.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                    "resourceVersion"):
                self._emit("MODIFIED", obj, prev)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj, obj)
        self.synced.set()
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    async def _run(self) -> None:
        rv = ""
        while True:
            try:
                if not rv:
                    rv = await self._relist()
                async for etype, obj in self.client.watch(self.res, self.namespace, resource_version=rv,
                                                          label_selector=self.label_selector):
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if new_rv:
                        rv = str(new_rv)
                    if etype == "BOOKMARK":
                        continue
                    key = key_of(obj)
                    prev = self.cache.get(key)
                    if etype == "DELETED":
                        self.cache.pop(key, None)
                        self._emit("DELETED", obj, prev)
                    else:
                        self.cache[key] = obj
                        self._emit("ADDED" if prev is None else "MODIFIED", obj, prev)
            except asyncio.CancelledError:
                raise
            except Gone:
                rv = ""
            except ApiError as exc:
                log.debug("informer %s: %s; relisting", self.res.plural, exc)
                rv = ""
                await asyncio.sleep(self._relist_delay)
            except Exception:
                log.exception("informer %s failed; relisting", self.res.plural)
                rv = ""
                await asyncio.sleep(self._relist_delay)
