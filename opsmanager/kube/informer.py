"""List-then-watch of one resource type with a local cache, like client-go's informer.

Why it lives in the Kubernetes layer: the sandbox's controllers (kubelet, StatefulSet controller, cert-manager)
are built the way real controllers are — an informer per kind feeding a work queue — and the informer is pure
API access (list, watch from a resourceVersion, relist on ``410 Gone`` or a broken stream), so it sits on the
one client and its one error hierarchy rather than beside a second client.

Handlers run synchronously on each event and should only enqueue work. After a relist the cache is diffed
against the new list, so handlers see ADDED/MODIFIED/DELETED for what changed while the stream was down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from opsmanager.kube import client as kube_client
from opsmanager.kube import errors

log = logging.getLogger(__name__)

Obj = dict[str, Any]

EventHandler = Callable[[str, Obj, Obj | None], None]
"""``handler(event_type, new_object, old_object_or_None)``; DELETED passes the last known object as new."""


def _uid(obj: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("uid")


def key_of(obj: Obj) -> tuple[str, str]:
    """``(namespace, name)`` of an object ("" for a cluster-scoped object's namespace)."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def resource_version(obj: Obj) -> int | None:
    """An object's resourceVersion as a number. Kubernetes calls it opaque, but every API server in use
    (etcd-backed kube-apiserver, the sandbox) hands out increasing integers; None when it is not one."""
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


def newer(a: Obj, b: Obj) -> bool:
    """Is ``a`` a later version of the object than ``b``? (Unknown order counts as later: the newest arrival wins.)"""
    va, vb = resource_version(a), resource_version(b)
    if va is None or vb is None:
        return True
    return va > vb


def older(a: Obj, b: Obj) -> bool:
    """Is ``a`` known to be an earlier version than ``b``?"""
    va, vb = resource_version(a), resource_version(b)
    return va is not None and vb is not None and va < vb


class Informer:
    """The cache of one kind (optionally one namespace / label selector), kept current by a watch."""

    def __init__(self, client: kube_client.Kube, api_version: str, kind: str, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 relist_delay: float = 0.5) -> None:
        self.client = client
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.cache: dict[tuple[str, str], Obj] = {}
        # (label, value) → the keys of the cached objects that carry it: a list by label selector looks at those
        # only (with many Etcds in one namespace, a reconcile's "pods of this Etcd" would otherwise go over all
        # of their pods).
        self._by_label: dict[tuple[str, str], set[tuple[str, str]]] = {}
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

    def labelled(self, namespace: str | None, label: tuple[str, str]) -> list[Obj]:
        """The cached objects (of ``namespace``, None: every one) that carry the label ``(key, value)``."""
        keys = self._by_label.get(label, ())
        return [self.cache[k] for k in sorted(keys) if namespace is None or k[0] == namespace]

    def _put(self, key: tuple[str, str], obj: Obj) -> None:
        self._unindex(key)
        self.cache[key] = obj
        for label in ((obj.get("metadata") or {}).get("labels") or {}).items():
            self._by_label.setdefault(label, set()).add(key)

    def _pop(self, key: tuple[str, str]) -> Obj | None:
        self._unindex(key)
        return self.cache.pop(key, None)

    def _unindex(self, key: tuple[str, str]) -> None:
        prev = self.cache.get(key)
        if prev is None:
            return
        for label in ((prev.get("metadata") or {}).get("labels") or {}).items():
            keys = self._by_label.get(label)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_label[label]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"informer-{self.kind}")

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
                log.exception("informer %s: handler failed on %s %s", self.kind, etype, key_of(obj))

    async def _relist(self) -> str:
        items, version = await self.client.list_for_watch(self.api_version, self.kind, self.namespace,
                                                          label_selector=self.label_selector,
                                                          field_selector=self.field_selector)
        self._replace({key_of(o): o for o in items})
        return version

    def _replace(self, fresh: dict[tuple[str, str], Obj]) -> None:
        """Make ``fresh`` (a list's answer) the cache; tell the handlers what changed since; synced from now on."""
        old = self.cache
        self.cache, self._by_label = {}, {}
        for key, obj in fresh.items():
            self._put(key, obj)
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._emit("ADDED", obj, None)
            elif _uid(prev) != _uid(obj):
                # The name is another object's now: the one cached was deleted (and its name taken again) while
                # the watch was down. Handlers that keep state per object (a kubelet's pod worker) must see it go.
                self._emit("DELETED", prev, prev)
                self._emit("ADDED", obj, None)
            elif (prev.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                    "resourceVersion"):
                self._emit("MODIFIED", obj, prev)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj, obj)
        self.synced.set()

    def _apply(self, event: kube_client.WatchEvent) -> None:
        obj = event.object
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.kind)
        key = key_of(obj)
        prev = self.cache.get(key)
        if event.type == "DELETED":
            self._pop(key)
            self._emit("DELETED", obj, prev)
        else:
            if prev is not None and older(obj, prev):
                return  # a write of ours already put a later version here (:meth:`observe`)
            self._put(key, obj)
            self._emit("ADDED" if prev is None else "MODIFIED", obj, prev)

    def observe(self, obj: Obj) -> bool:
        """Put ``obj`` — the answer to a write or a read of ours — into the cache when it is later than what the
        watch delivered so far, so a reconcile reads its own writes before the watch event arrives. The watch's
        event for the same version is then a no-op. False when the cache already had that version or a later one."""
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.kind)
        key = key_of(obj)
        prev = self.cache.get(key)
        if prev is not None and not newer(obj, prev):
            return False
        self._put(key, obj)
        self._emit("ADDED" if prev is None else "MODIFIED", obj, prev)
        return True

    def forget(self, obj: Obj) -> None:
        """Drop ``obj`` (deleted by us) from the cache before the watch says so."""
        key = key_of(obj)
        prev = self._pop(key)
        if prev is not None:
            self._emit("DELETED", prev, prev)

    async def _run(self) -> None:
        version = ""
        while True:
            try:
                if not version:
                    version = await self._relist()
                async for event in self.client.watch(self.api_version, self.kind, self.namespace,
                                                     resource_version=version,
                                                     label_selector=self.label_selector,
                                                     field_selector=self.field_selector):
                    new_version = (event.object.get("metadata") or {}).get("resourceVersion")
                    if new_version:
                        version = str(new_version)
                    if event.type != "BOOKMARK":
                        self._apply(event)
            except asyncio.CancelledError:
                raise
            except errors.Gone:
                version = ""
            except errors.KubeError as exc:
                log.debug("informer %s: %s; relisting", self.kind, exc)
                version = ""
                await asyncio.sleep(self._relist_delay)  # back-off before the relist, not a synchronisation
            except Exception:
                log.exception("informer %s failed; relisting", self.kind)
                version = ""
                await asyncio.sleep(self._relist_delay)


class FedInformer(Informer):
    """The cache of a kind another watch of this process already streams — the operator's kopf watch of Etcds and
    EtcdOpsRequests — so the kind is watched once per process: it lists, but instead of watching it is fed that
    watch's events (:meth:`feed`).

    A watch that restarts (``410 Gone``, a broken stream, an operator replica taking over) lists again and says
    nothing of what was deleted in between, so when the feeding watch lists (events of type None) this informer
    lists too, and it does every ``relist_interval`` seconds in any case: an object deleted unseen leaves the cache
    within one of those. A list never undoes what the feed already said: a cached object later than the listed one
    stays, and a deletion fed after the list was taken (a tombstone: the deleted object's resourceVersion) keeps
    the listed object out.
    """

    def __init__(self, client: kube_client.Kube, api_version: str, kind: str, *, namespace: str | None = None,
                 label_selector: str | None = None, relist_delay: float = 0.5,
                 relist_interval: float = 300.0) -> None:
        super().__init__(client, api_version, kind, namespace=namespace, label_selector=label_selector,
                         relist_delay=relist_delay)
        self._relist_interval = relist_interval
        self._relist_wanted = asyncio.Event()
        self._tombstones: dict[tuple[str, str], int] = {}

    def _buried(self, obj: Obj) -> bool:
        """Is ``obj`` a version at or before a deletion the feed reported?"""
        version = resource_version(obj)
        return version is not None and version <= self._tombstones.get(key_of(obj), -1)

    def feed(self, etype: str | None, obj: Obj) -> None:
        """One event of the feeding watch: ``ADDED``, ``MODIFIED``, ``DELETED``, or None for an object its list
        found (which also asks for a list of our own, see the class doc)."""
        key = key_of(obj)
        if etype is None:
            self._relist_wanted.set()
            etype = "MODIFIED" if key in self.cache else "ADDED"
        if etype == "DELETED":
            version = resource_version(obj)
            if version is not None:
                self._tombstones[key] = max(version, self._tombstones.get(key, 0))
        elif self._buried(obj):
            return  # an older version than its deletion: a late event
        self._apply(kube_client.WatchEvent(etype, obj))

    def observe(self, obj: Obj) -> bool:
        if self._buried(obj):
            return False
        return super().observe(obj)

    async def _relist(self) -> str:
        items, version = await self.client.list_for_watch(self.api_version, self.kind, self.namespace,
                                                          label_selector=self.label_selector,
                                                          field_selector=self.field_selector)
        fresh: dict[tuple[str, str], Obj] = {}
        for obj in items:
            if self._buried(obj):
                continue  # deleted after the list was taken: the feed said so already
            key = key_of(obj)
            prev = self.cache.get(key)
            fresh[key] = prev if prev is not None and older(obj, prev) else obj
        listed_at = resource_version({"metadata": {"resourceVersion": version}})
        if listed_at is not None:
            for key, obj in self.cache.items():  # fed after the list was taken: not in it, yet there
                if key not in fresh and (rv := resource_version(obj)) is not None and rv > listed_at:
                    fresh[key] = obj
            # deletions the list already reflects need no tombstone any more
            self._tombstones = {k: rv for k, rv in self._tombstones.items() if rv > listed_at}
        self._replace(fresh)
        return version

    async def _run(self) -> None:
        while True:
            self._relist_wanted.clear()
            try:
                await self._relist()
            except asyncio.CancelledError:
                raise
            except errors.KubeError as exc:
                log.debug("informer %s: %s; listing again", self.kind, exc)
                await asyncio.sleep(self._relist_delay)  # back-off before the next list, not a synchronisation
                continue
            except Exception:
                log.exception("informer %s: list failed", self.kind)
                await asyncio.sleep(self._relist_delay)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._relist_wanted.wait(), self._relist_interval)
