"""The Kubernetes-API implementations of the admission rules' lookup
(:class:`opsmanager.webhook.validation.lookups.EtcdLookup`), on the one client.

They read Etcds (the ``databaseRef`` of a new EtcdOpsRequest), EtcdOpsRequests (the request holding an Etcd
paused, when an update changes that Etcd's ``spec.tls``) and EtcdVersions (the catalog: an Etcd's ``spec.version``,
an UpdateVersion's target).

:class:`CachedEtcdLookup` — what ``opsmanager webhook serve`` uses — keeps a watch-fed cache of these kinds, and
of cert-manager's Issuers and ClusterIssuers (the warning about an issuer that does not exist yet)
(:class:`opsmanager.kube.informer.Informer`: list, then watch from the list's resourceVersion, relist on ``410
Gone``), and the rules read it in memory on the event loop. An object not in a synced cache (an Etcd created a
moment ago whose ADDED event is still on its way, or one that does not exist), or any object before the caches
have synced, is a miss: ``get_*`` raises :class:`~opsmanager.webhook.validation.lookups.NotCached`, and the
admission driver awaits :meth:`CachedEtcdLookup.afetch` — exactly one GET, logged with the kind, namespace and
name — and decides again. A miss is not remembered: the watch, not the fallback, keeps the cache.

:class:`KubernetesEtcdLookup` is that one GET, and a lookup by itself (every lookup a GET): from a worker thread its
``get_*`` hands the GET to the loop it is bound to and waits; on that loop ``get_*`` raises ``NotCached`` (it
must not block) and ``aget_*`` / ``afetch`` are the same GET for async callers.

404 means "no such object" (for an Etcd the webhook then denies with KubeDB's ``spec.databaseRef ... is invalid
or not found``; a missing EtcdOpsRequest holds no pause); any other failure — API unreachable, 403, no
kubeconfig, a timeout — raises :class:`~opsmanager.webhook.validation.lookups.EtcdLookupError`, so the webhook
says it could not decide instead of claiming the object is missing. No client exception escapes this module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from typing import Any, Final

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.kube import informer
from opsmanager.webhook.validation.lookups import EtcdLookupError, NotCached

log = logging.getLogger("opsmanager.webhook.lookup")

ISSUER_API: Final = "cert-manager.io/v1"
_KINDS: Final[dict[str, tuple[str, str]]] = {  # kind → (apiVersion, plural): the watched kinds
    constants.ETCD_KIND: (constants.ETCD_API_VERSION, constants.ETCD_PLURAL),
    constants.OPS_KIND: (constants.OPS_API_VERSION, constants.OPS_PLURAL),
    constants.ETCDVERSION_KIND: (constants.CATALOG_API_VERSION, constants.ETCDVERSION_PLURAL),  # cluster-scoped
}
# Read, never watched: only a VolumeExpansion asks, once per request (cluster-scoped).
_STORAGE_CLASS: Final = (constants.STORAGE_CLASS_API_VERSION, "storageclasses")
# Watched apart from the kinds above: cert-manager's, which a cluster may not have installed (then they never sync,
# the core caches do, and an issuer lookup is one GET as before). Every review naming an issuer asks, so an
# uncached lookup put a GET on kube-apiserver per such review.
_ISSUER_KINDS: Final = (constants.ISSUER_KIND, constants.CLUSTER_ISSUER_KIND)
# Seconds between relists of an issuer cache whose list failed: cert-manager absent costs a LIST this often, not
# the core caches' twice a second.
ISSUER_RELIST_DELAY: Final = 5.0


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

    async def _aget(self, api_version: str, kind: str, plural: str, namespace: str | None,
                    name: str) -> dict[str, Any] | None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        where = f"GET {plural} {namespace}/{name}" if namespace else f"GET {plural} {name}"
        try:
            async with asyncio.timeout(self._timeout):
                return await self._kube().get(api_version, kind, namespace, name)
        except kube.KubeError as exc:
            status = f"HTTP {exc.status} {exc.reason}".strip() if exc.status else "unreachable"
            raise EtcdLookupError(f"{where}: {status}: {exc}") from exc
        except TimeoutError as exc:
            raise EtcdLookupError(f"{where}: no answer within {self._timeout}s") from exc

    def _get(self, api_version: str, kind: str, plural: str, namespace: str, name: str, *,
             cluster_scoped: bool = False) -> dict[str, Any] | None:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise EtcdLookupError("the Etcd lookup is not bound to a running event loop")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise NotCached(kind, namespace, name,
                            f"KubernetesEtcdLookup.get_* blocks (GET {plural}): call it from a worker "
                            "thread, or await its aget_* twin on the loop")
        future = asyncio.run_coroutine_threadsafe(
            self._aget(api_version, kind, plural, None if cluster_scoped else namespace, name), loop)
        try:
            return future.result(self._timeout + 1.0)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise EtcdLookupError(f"GET {plural} {namespace}/{name}: no answer within {self._timeout}s") \
                from exc

    async def aget_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Etcd, None when it does not exist; :class:`EtcdLookupError` when that cannot be told."""
        return await self._aget(constants.ETCD_API_VERSION, constants.ETCD_KIND, constants.ETCD_PLURAL, namespace,
                                name)

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """:meth:`aget_etcd` from a worker thread; on the lookup's loop it raises ``NotCached`` (see the module doc)."""
        return self._get(constants.ETCD_API_VERSION, constants.ETCD_KIND, constants.ETCD_PLURAL, namespace, name)

    async def aget_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The EtcdOpsRequest, None when it does not exist; :class:`EtcdLookupError` when that cannot be told."""
        return await self._aget(constants.OPS_API_VERSION, constants.OPS_KIND, constants.OPS_PLURAL, namespace,
                                name)

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """:meth:`aget_opsrequest` from a worker thread; on the lookup's loop it raises ``NotCached``."""
        return self._get(constants.OPS_API_VERSION, constants.OPS_KIND, constants.OPS_PLURAL, namespace, name)

    async def aget_etcdversion(self, name: str) -> dict[str, Any] | None:
        """The EtcdVersion (the catalog), None when there is none of that name."""
        return await self._aget(constants.CATALOG_API_VERSION, constants.ETCDVERSION_KIND,
                                constants.ETCDVERSION_PLURAL, None, name)

    def get_etcdversion(self, name: str) -> dict[str, Any] | None:
        """:meth:`aget_etcdversion` from a worker thread; on the lookup's loop it raises ``NotCached``."""
        return self._get(constants.CATALOG_API_VERSION, constants.ETCDVERSION_KIND, constants.ETCDVERSION_PLURAL,
                         "", name, cluster_scoped=True)

    def get_storage_class(self, name: str) -> dict[str, Any] | None:
        """The StorageClass from a worker thread; on the lookup's loop it raises ``NotCached``."""
        api_version, plural = _STORAGE_CLASS
        return self._get(api_version, constants.STORAGE_CLASS_KIND, plural, "", name, cluster_scoped=True)

    async def afetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The Etcd, EtcdOpsRequest, EtcdVersion or StorageClass (by ``kind``; the last two have no namespace),
        one GET; None when it does not exist."""
        if kind == constants.STORAGE_CLASS_KIND:
            api_version, plural = _STORAGE_CLASS
            return await self._aget(api_version, kind, plural, None, name)
        api_version, plural = _KINDS[kind]
        return await self._aget(api_version, kind, plural, None if kind == constants.ETCDVERSION_KIND else namespace,
                                name)

    async def aissuer(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A cert-manager ``Issuer`` (in ``namespace``) or ``ClusterIssuer``, one GET; None when it does not exist
        (for the admission warning about an issuer that does not exist yet)."""
        cluster = kind == constants.CLUSTER_ISSUER_KIND
        return await self._aget(ISSUER_API, kind, "clusterissuers" if cluster else "issuers",
                                None if cluster else namespace, name)

    async def aclose(self) -> None:
        """Close the client (only when this lookup created it)."""
        if self._client is not None and self._owns_client:
            await self._client.close()
            self._client = None


class CachedEtcdLookup:
    """Etcds, EtcdOpsRequests and EtcdVersions from watch-fed caches; a miss is one GET (see the module doc).

    ``client`` / ``kubeconfig`` / ``context`` / ``timeout`` as for :class:`KubernetesEtcdLookup` (the GET of a
    miss). Call :meth:`start` on the loop that serves, :meth:`wait_synced` to wait for the first lists, and
    :meth:`aclose` at the end. ``fallbacks`` counts the GETs made for misses.
    """

    def __init__(self, client: kube.Kube | None = None, *, kubeconfig: str | os.PathLike[str] | None = None,
                 context: str | None = None, timeout: float = 5.0) -> None:
        self._api = KubernetesEtcdLookup(client, kubeconfig=kubeconfig, context=context, timeout=timeout)
        self._informers: dict[str, informer.Informer] = {}
        self._issuers: dict[str, informer.Informer] = {}
        self.fallbacks = 0

    async def start(self) -> None:
        """Start the list-and-watch of both kinds. Without a usable kubeconfig nothing is watched (logged), and
        every lookup is a GET that reports the same error."""
        try:
            client = self._api._kube()
        except kube.KubeError as exc:
            log.warning("not caching Etcds and EtcdOpsRequests: %s; every lookup will try one GET", exc)
            return
        for kind, (api_version, _) in _KINDS.items():
            if kind not in self._informers:
                self._informers[kind] = informer.Informer(client, api_version, kind)
                self._informers[kind].start()
        for kind in _ISSUER_KINDS:
            if kind not in self._issuers:
                self._issuers[kind] = informer.Informer(client, ISSUER_API, kind, relist_delay=ISSUER_RELIST_DELAY)
                self._issuers[kind].start()

    @property
    def synced(self) -> bool:
        """Both caches hold their first list (until then every lookup is a GET)."""
        return len(self._informers) == len(_KINDS) and all(i.synced.is_set() for i in self._informers.values())

    async def wait_synced(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :attr:`synced`; return it."""
        if not self._informers:
            return False
        try:
            async with asyncio.timeout(timeout):
                for each in self._informers.values():
                    await each.synced.wait()
        except TimeoutError:
            return False
        log.info("the Etcd, EtcdOpsRequest and EtcdVersion caches have synced (%d Etcds, %d EtcdOpsRequests, "
                 "%d EtcdVersions)", len(self._informers[constants.ETCD_KIND].cache),
                 len(self._informers[constants.OPS_KIND].cache),
                 len(self._informers[constants.ETCDVERSION_KIND].cache))
        return True

    def _cached(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        cache = self._informers.get(kind)
        if cache is None or not cache.synced.is_set():
            raise NotCached(kind, namespace, name, "the cache has not synced yet")
        obj = cache.get(namespace, name)
        if obj is None:
            raise NotCached(kind, namespace, name, "not in the cache")
        return obj

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached Etcd; :class:`~opsmanager.webhook.validation.lookups.NotCached` on a miss (then
        :meth:`afetch`)."""
        return self._cached(constants.ETCD_KIND, namespace, name)

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached EtcdOpsRequest; ``NotCached`` on a miss."""
        return self._cached(constants.OPS_KIND, namespace, name)

    def get_etcdversion(self, name: str) -> dict[str, Any] | None:
        """The cached EtcdVersion; ``NotCached`` on a miss."""
        return self._cached(constants.ETCDVERSION_KIND, "", name)

    def get_storage_class(self, name: str) -> dict[str, Any] | None:
        """Never cached (only a VolumeExpansion asks): always ``NotCached``, then one GET (:meth:`afetch`)."""
        raise NotCached(constants.STORAGE_CLASS_KIND, "", name, "StorageClasses are read, not watched")

    async def afetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One GET of an object the cache does not have, logged."""
        synced = kind in self._informers and self._informers[kind].synced.is_set()
        log.info("%s %s/%s is %s: one GET", kind, namespace, name,
                 "not in the cache" if synced else "not cached yet (the cache has not synced)")
        self.fallbacks += 1
        return await self._api.afetch(kind, namespace, name)

    async def aissuer(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A cert-manager Issuer or ClusterIssuer from its synced cache (None: not there — at worst one created a
        moment ago, and the warning it gives is only advice); before that cache syncs, one GET."""
        cache = self._issuers.get(kind)
        if cache is not None and cache.synced.is_set():
            return cache.get("" if kind == constants.CLUSTER_ISSUER_KIND else namespace, name)
        log.info("%s %s/%s: the issuer cache has not synced: one GET", kind, namespace, name)
        self.fallbacks += 1
        return await self._api.aissuer(kind, namespace, name)

    async def aget_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Etcd from the cache, else one GET; None when it does not exist."""
        try:
            return self.get_etcd(namespace, name)
        except NotCached:
            return await self.afetch(constants.ETCD_KIND, namespace, name)

    async def aget_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The EtcdOpsRequest from the cache, else one GET; None when it does not exist."""
        try:
            return self.get_opsrequest(namespace, name)
        except NotCached:
            return await self.afetch(constants.OPS_KIND, namespace, name)

    async def aclose(self) -> None:
        """Stop watching; close the client when this lookup created it."""
        for each in (*self._informers.values(), *self._issuers.values()):
            await each.stop()
        self._informers.clear()
        self._issuers.clear()
        await self._api.aclose()
