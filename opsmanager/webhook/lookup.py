"""The Kubernetes-API implementation of :class:`opsmanager.webhook.validation.EtcdLookup`, on the one client.

It reads Etcds (the ``databaseRef`` of a new EtcdOpsRequest) and EtcdOpsRequests (the request holding an Etcd
paused, when an update changes that Etcd's ``spec.tls``).

The GET goes through :class:`opsmanager.kube.Kube` (async, aiohttp) on the webhook server's event loop. The
admission rules are pure and synchronous and run in a worker thread (``asyncio.to_thread`` in the server), so
:meth:`KubernetesEtcdLookup.get_etcd` — what the rules call — hands the GET back to the loop the lookup is bound
to and waits for it; :meth:`KubernetesEtcdLookup.aget_etcd` is the same lookup for async callers (and likewise
``get_opsrequest`` / ``aget_opsrequest``).

404 means "no such object" (for an Etcd the webhook then denies with KubeDB's ``spec.databaseRef ... is invalid
or not found``; a missing EtcdOpsRequest holds no pause); any other failure — API unreachable, 403, no
kubeconfig, a timeout — raises :class:`~opsmanager.webhook.validation.EtcdLookupError`, so the webhook says it
could not decide instead of claiming the object is missing. No client exception escapes this module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from typing import Any

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.webhook import validation


class KubernetesEtcdLookup:
    """Read Etcd and EtcdOpsRequest objects from an API server.

    Pass a ``client`` (tests, the sandbox), or a ``kubeconfig`` path; with neither, the one loader's order
    applies (``$KUBECONFIG``/``~/.kube/config``, else the in-cluster service account). A client this lookup
    loads itself is created on first use and closed by :meth:`aclose`. ``loop`` is the event loop the GETs run
    on; by default the loop running when the lookup is created or first used asynchronously.
    """

    def __init__(self, client: kube.Kube | None = None, *, kubeconfig: str | os.PathLike[str] | None = None,
                 context: str | None = None, timeout: float = 5.0,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._client = client
        self._owns_client = client is None
        self._kubeconfig = kubeconfig
        self._context = context
        self._timeout = timeout
        self._loop = loop
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                pass

    def _kube(self) -> kube.Kube:
        if self._client is None:
            self._client = kube.Kube.from_kubeconfig(self._kubeconfig, context=self._context)
        return self._client

    async def _aget(self, api_version: str, kind: str, plural: str, namespace: str,
                    name: str) -> dict[str, Any] | None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        where = f"GET {plural} {namespace}/{name}"
        try:
            async with asyncio.timeout(self._timeout):
                return await self._kube().get(api_version, kind, namespace, name)
        except kube.KubeError as exc:
            status = f"HTTP {exc.status} {exc.reason}".strip() if exc.status else "unreachable"
            raise validation.EtcdLookupError(f"{where}: {status}: {exc}") from exc
        except TimeoutError as exc:
            raise validation.EtcdLookupError(f"{where}: no answer within {self._timeout}s") from exc

    def _get(self, api_version: str, kind: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise validation.EtcdLookupError("the Etcd lookup is not bound to a running event loop")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError(f"KubernetesEtcdLookup.get_* blocks ({plural} {namespace}/{name}): call it from a "
                               "worker thread, or await its aget_* twin on the loop")
        future = asyncio.run_coroutine_threadsafe(self._aget(api_version, kind, plural, namespace, name), loop)
        try:
            return future.result(self._timeout + 1.0)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise validation.EtcdLookupError(f"GET {plural} {namespace}/{name}: no answer within {self._timeout}s") \
                from exc

    async def aget_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Etcd, None when it does not exist; :class:`EtcdLookupError` when that cannot be told."""
        return await self._aget(constants.ETCD_API_VERSION, constants.ETCD_KIND, constants.ETCD_PLURAL, namespace,
                                name)

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """:meth:`aget_etcd` for the synchronous rules, called from a worker thread (never from the loop)."""
        return self._get(constants.ETCD_API_VERSION, constants.ETCD_KIND, constants.ETCD_PLURAL, namespace, name)

    async def aget_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The EtcdOpsRequest, None when it does not exist; :class:`EtcdLookupError` when that cannot be told."""
        return await self._aget(constants.OPS_API_VERSION, constants.OPS_KIND, constants.OPS_PLURAL, namespace,
                                name)

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """:meth:`aget_opsrequest` for the synchronous rules, called from a worker thread (never from the loop)."""
        return self._get(constants.OPS_API_VERSION, constants.OPS_KIND, constants.OPS_PLURAL, namespace, name)

    async def aclose(self) -> None:
        """Close the client (only when this lookup created it)."""
        if self._client is not None and self._owns_client:
            await self._client.close()
            self._client = None
