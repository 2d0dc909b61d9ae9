"""The one asynchronous Kubernetes client: REST verbs and watch streams over aiohttp.

Used by the operator (provisioner and ops engine, through ``kopf.Memo``), the admission webhook's Etcd lookup,
the sandbox's controllers (kubelet, StatefulSet controller, cert-manager) and the tools. Objects are plain dicts
addressed by ``(apiVersion, kind, namespace, name)``; the URL comes from the one resource table
(:mod:`opsmanager.kube.resources`), the connection from the one loader (:mod:`opsmanager.kube.config`), and every
failure is an :mod:`opsmanager.kube.errors` exception — aiohttp's never escape.

Why aiohttp and not the official client in threads (docs/decisions.md): watches are long streams, and the
sandbox controllers run many of them on the same event loop as the API server in tests; a thread per stream
(what the official client needs) would be paid for every one of those streams. aiohttp is already the
webhook's and the sandbox's HTTP stack; the official package remains only for loading credentials.

Sessions: an aiohttp session belongs to the event loop that created it, and a ``Kube`` is sometimes built before
its loop runs (``opsmanager run`` builds it before ``kopf.run``) or used from two loops (tests that drive a
threaded API server). So the client keeps one session per running loop, created on first use. :meth:`close`
works from synchronous code (it closes what it can at once) and can also be awaited.

Retries: none here except one — a 401 refreshes the credentials (an expired exec-plugin or service-account token)
and repeats the request once. Everything else is the caller's decision (:func:`errors.is_transient`).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import datetime
import json
import logging
import os
import ssl
import typing
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from typing import Any, NamedTuple

import aiohttp

from opsmanager.kube import config, errors, mergepatch, resources

log = logging.getLogger("opsmanager.kube")

Obj = dict[str, Any]

PATCH_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


class WatchEvent(NamedTuple):
    """One event of a watch stream: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``, and the object."""

    type: str
    object: Obj


class _Closing:
    """What :meth:`Kube.close` returns: the work is done or scheduled already; awaiting waits for it."""

    def __init__(self, pending: list[asyncio.Future[Any]]) -> None:
        self._pending = pending

    def __await__(self) -> Generator[Any, None, None]:
        if self._pending:
            yield from asyncio.gather(*self._pending, return_exceptions=True).__await__()


class Kube:
    """Async access to one Kubernetes API server (see the module doc)."""

    def __init__(self, connection: config.Connection, *, table: resources.Resources | None = None,
                 timeout: float = 30.0, pool_size: int = 32) -> None:
        self.connection = connection
        self.resources = table if table is not None else resources.DEFAULT.copy()
        self.timeout = timeout
        self._pool_size = pool_size
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._ssl: Any = None
        self._ssl_loaded = False
        self._closing: set[asyncio.Future[Any]] = set()

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str] | None = None, *, context: str | None = None) -> Kube:
        """Load a kubeconfig (``path``, else ``$KUBECONFIG``/``~/.kube/config``), else the in-cluster config;
        :class:`~opsmanager.kube.errors.ConfigError` when there is none."""
        return cls(config.load(path, context=context))

    @classmethod
    def for_url(cls, url: str, *, token: str | None = None, ca_path: str | None = None, **kwargs: Any) -> Kube:
        """A client of ``url`` (the sandbox's API server on loopback), with a bearer ``token`` if given;
        ``ca_path`` verifies an ``https`` server."""
        return cls(config.Connection.for_url(url, token=token, ca_path=ca_path), **kwargs)

    @property
    def host(self) -> str:
        return self.connection.base_url

    # --- sessions ---------------------------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            for other in [lp for lp in self._sessions if lp.is_closed()]:
                self._sessions.pop(other).detach()
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout),
            )
            self._sessions[loop] = session
        return session

    def _ssl_setting(self) -> Any:
        if not self._ssl_loaded:
            context = self.connection.ssl_context()
            self._ssl = context if context is not None else True
            self._ssl_loaded = True
        return self._ssl

    def close(self) -> _Closing:
        """Close every session. Callable from synchronous code; ``await k.close()`` also waits for the sockets."""
        sessions, self._sessions = self._sessions, {}
        pending: builtins.list[asyncio.Future[Any]] = []
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, session in sessions.items():
            if loop is current:
                task = loop.create_task(session.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
                pending.append(task)
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(session.close(), loop)
            else:  # the loop has ended (e.g. after kopf.run): nothing can be awaited on it any more
                session.detach()
        return _Closing(pending)

    async def aclose(self) -> None:
        await self.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the one transport call -------------------------------------------------------------------------------

    async def _headers(self, *, force: bool) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.connection.credentials is not None:
            if self.connection.is_fresh() and not force:
                header = self.connection.authorization()  # cached: no I/O
            else:
                header = await asyncio.to_thread(self.connection.authorization, force=force)
            if header:
                headers["Authorization"] = header
        return headers

    def _params(self, query: Mapping[str, Any] | None) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for key, value in (query or {}).items():
            if value is None:
                continue
            out.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
        return out

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                      content_type: str = "application/json", timeout: float | None = None) -> Any:
        """One API call; the decoded JSON answer (None for an empty body). Non-2xx raises a :class:`KubeError`."""
        where = f"{method} {path}"
        data = json.dumps(body).encode() if body is not None else None
        refreshed = tls_retried = False
        while True:
            headers = await self._headers(force=refreshed)
            if data is not None:
                headers["Content-Type"] = content_type
            with errors.translated(where):
                try:
                    async with self._session().request(
                            method, self.host + path, params=self._params(query), data=data, headers=headers,
                            ssl=self._ssl_setting(), server_hostname=self.connection.tls_server_name,
                            timeout=aiohttp.ClientTimeout(total=timeout or self.timeout)) as resp:
                        status, raw = resp.status, await resp.read()
                except aiohttp.ClientOSError as exc:
                    # A TLS error before any answer (a pooled connection the server dropped, or an error OpenSSL
                    # left behind from another connection of this thread): once more, on a new connection.
                    if tls_retried or not _tls_failure(exc):
                        raise
                    tls_retried = True
                    log.info("%s: %s; trying once more", where, exc)
                    continue
                if status == 401 and not refreshed and self.connection.credentials is not None:
                    refreshed = True
                    continue  # an expired token: refresh it and try once more
                if status >= 400:
                    raise errors.from_status(status, raw, where)
                return json.loads(raw) if raw else None

    # --- verbs ------------------------------------------------------------------------------------------------

    def path(self, api_version: str, kind: str, namespace: str | None, name: str | None = None,
             subresource: str | None = None) -> str:
        return self.resources.get(api_version, kind).path(namespace, name, subresource)

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            result: Obj = await self.request("GET", self.path(api_version, kind, namespace, name))
            return result
        except errors.NotFound:
            return None

    async def list(self, api_version: str, kind: str, namespace: str | None, *,
                   label_selector: str | None = None, field_selector: str | None = None) -> list[Obj]:
        """The objects (of every namespace when ``namespace`` is None), each with its apiVersion and kind."""
        items, _ = await self.list_for_watch(api_version, kind, namespace, label_selector=label_selector,
                                             field_selector=field_selector)
        return items

    async def list_for_watch(self, api_version: str, kind: str, namespace: str | None, *,
                             label_selector: str | None = None,
                             field_selector: str | None = None) -> tuple[builtins.list[Obj], str]:
        """The objects and the list's resourceVersion, to :meth:`watch` from."""
        doc = await self.request("GET", self.path(api_version, kind, namespace),
                                 query={"labelSelector": label_selector, "fieldSelector": field_selector})
        items: builtins.list[Obj] = (doc or {}).get("items") or []
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items, str(((doc or {}).get("metadata") or {}).get("resourceVersion") or "")

    async def create(self, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        res = self.resources.get(obj["apiVersion"], obj["kind"])
        if res.namespaced and not meta.get("namespace"):
            raise ValueError(f"{obj['kind']} {meta.get('name')}: metadata.namespace is required")
        result: Obj = await self.request("POST", res.path(meta.get("namespace")), body=obj)
        return result

    async def patch(self, api_version: str, kind: str, namespace: str | None, name: str, patch: Any, *,
                    subresource: str | None = None, patch_type: str = "merge") -> Obj:
        result: Obj = await self.request(
            "PATCH", self.path(api_version, kind, namespace, name, subresource), body=patch,
            content_type=PATCH_TYPES[patch_type])
        return result

    async def replace(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        meta = obj["metadata"]
        result: Obj = await self.request(
            "PUT", self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], subresource),
            body=obj)
        return result

    async def delete(self, api_version: str, kind: str, namespace: str | None, name: str, *,
                     uid: str | None = None, grace_period_seconds: int | None = None,
                     propagation_policy: str | None = None) -> bool:
        """Delete; False when it was already gone. ``uid`` makes it a precondition (never delete a successor)."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        try:
            await self.request("DELETE", self.path(api_version, kind, namespace, name), body=body)
            return True
        except errors.NotFound:
            return False

    async def evict(self, namespace: str, pod: str, *, grace_period_seconds: int | None = None) -> None:
        """Evict a pod through the Eviction API (honours PodDisruptionBudgets: ``TooManyRequests`` if not now);
        ``grace_period_seconds``: the pod's deletion grace instead of its own ``terminationGracePeriodSeconds``."""
        body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        if grace_period_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
        await self.request("POST", self.path("v1", "Pod", namespace, pod, "eviction"), body=body)

    async def apply(self, obj: Obj) -> Obj:
        """Create the object, or merge-patch what the operator owns (labels, annotations, spec/data/type) — only
        when that patch would change something (``stringData``, which the server never returns, always writes)."""
        meta = obj["metadata"]
        current = await self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        if current is None:
            try:
                return await self.create(obj)
            except errors.Conflict:
                current = await self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
                if current is None:
                    raise
        patch: Obj = {"metadata": {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}}
        for key in ("spec", "data", "stringData", "type"):
            if key in obj:
                patch[key] = obj[key]
        if "stringData" not in patch and not mergepatch.changes(current, patch):
            return current  # what the operator owns is as wanted: no write
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
            except errors.Conflict:
                continue
        raise errors.Conflict(f"status of {kind} {namespace}/{name}: still conflicting after {attempts} attempts",
                              status=409, reason="Conflict")

    async def event(self, involved: Obj, *, reason: str, message: str, type_: str = "Normal",
                    component: str = "opsmanager") -> None:
        """Record a core/v1 Event about ``involved``; failures to record are swallowed (events are best effort)."""
        meta = involved["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                         "namespace": meta.get("namespace") or "default"},
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
        with contextlib.suppress(errors.KubeError):
            await self.create(body)

    # --- watch ------------------------------------------------------------------------------------------------

    async def watch(self, api_version: str, kind: str, namespace: str | None = None, *,
                    resource_version: str | None = None, label_selector: str | None = None,
                    field_selector: str | None = None, timeout_seconds: int = 300) -> AsyncIterator[WatchEvent]:
        """Yield the events of one watch stream (``BOOKMARK`` included); it ends when the server closes it.
        An ``ERROR`` event raises its :class:`KubeError` (``Gone`` when the resourceVersion is too old)."""
        path = self.path(api_version, kind, namespace)
        where = f"WATCH {path}"
        query = {"watch": True, "allowWatchBookmarks": True, "timeoutSeconds": timeout_seconds,
                 "resourceVersion": resource_version or None, "labelSelector": label_selector,
                 "fieldSelector": field_selector}
        headers = await self._headers(force=False)
        with errors.translated(where):
            async with self._session().get(
                    self.host + path, params=self._params(query), headers=headers, ssl=self._ssl_setting(),
                    server_hostname=self.connection.tls_server_name,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout,
                                                  sock_read=timeout_seconds + 30)) as resp:
                if resp.status >= 400:
                    raise errors.from_status(resp.status, await resp.read(), where)
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        etype, obj = str(event.get("type", "")), event.get("object") or {}
                        if etype == "ERROR":
                            status = typing.cast(errors.RawStatus, obj)
                            raise errors.from_status(int(obj.get("code") or 500), status, where)
                        yield WatchEvent(etype, obj)



def _tls_failure(exc: aiohttp.ClientOSError) -> bool:
    """Is this connection error a TLS one (an alert or a protocol error), not a refused or reset connection?"""
    return isinstance(exc.__cause__, ssl.SSLError) or isinstance(exc, aiohttp.ClientSSLError) or "[SSL" in str(exc)
