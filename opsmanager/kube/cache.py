"""Reads from watches: the operator's client, whose ``get`` and ``list`` answer from watch-fed caches.

Why: an operator that GETs what it needs on every pass costs the shared API server thousands of requests per
operation and several per second per idle cluster: its requests grow with every reconcile. Controllers read
from informers instead (client-go's cache, kopf's own watches), and so does this one: :class:`CachedKube` is a
:class:`~opsmanager.kube.client.Kube` — every caller keeps calling ``get``/``list`` — that answers from one
:class:`~opsmanager.kube.informer.Informer` per kind it was told to cache, and goes to the API server only when
the cache cannot answer.

What is cached (:meth:`CachedKube.cache`): a kind, in every namespace or one, optionally narrowed by an equality
label selector (``app.kubernetes.io/managed-by=opsmanager``: the operator caches its own StatefulSets, Pods,
Secrets …, not every Secret of the cluster). :meth:`CachedKube.track_by_name` names kinds whose objects outside
those selections (a user's CA Secret, a BYO Secret) get a watch of their own, by name (``fieldSelector
metadata.name=…``), the first time they are read and found — so they too cost a request only when they change.

Rules, each for a failure it prevents:

- **Read your writes.** The answer of every create, patch or replace is put into the cache when it is later than
  what the watch delivered (:meth:`Informer.observe`, by resourceVersion), and a later watch event of an older
  version does not overwrite it. A reconcile never reads an object older than its own last write.
- **A miss is asked, not assumed.** An object a label-selected cache does not hold may exist unlabelled (a
  foreign object with our name); one an unselected cache does not hold may have been created a moment ago. Either
  way the client GETs it. The answer "absent" is believed for :data:`ABSENT_TTL` seconds (a create that collides
  forgets it at once); only a per-name watch, which sees exactly that name, answers "absent" by itself.
- **A conflict re-reads.** A write refused with 409 marks the object stale: the next read goes to the API
  server (and refreshes the cache), so an optimistic-lock retry never spins on a stale resourceVersion.
- **Callers get copies.** Cached objects are shared; ``get``/``list`` hand out deep copies (:func:`copy_json`).
- **Not synced yet → the API server.** Until an informer has listed, reads of its kind go to the API server.

Who else sees the events (:meth:`CachedKube.subscribe`): a component that reacts to changes of a kind (the scan
triggers of :mod:`opsmanager.lifecycle.triggers`) subscribes to the cache of that kind instead of watching it, so
each kind is watched once per process (docs/decisions.md D25.6).

Counters (:attr:`CachedKube.stats`: hits, misses, by kind) tell where requests still go; the operator logs them
at debug level. The cost of a watch is one request when it opens and one each time the server closes it
(``timeoutSeconds``, 5 minutes), for every cached kind together — not per object, not per pass.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import copy
import logging
import marshal
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opsmanager.kube import client as kube_client
from opsmanager.kube import errors, informer, selectors

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name

# A label-selected cache cannot tell "absent" from "exists without our label", so a miss asks the API server; the
# answer "absent" is then believed for this long (most such names are ours, about to be created and labelled; a
# create that collides, or any conflict, forgets it at once).
ABSENT_TTL = 10.0

# Per-name watches are a convenience for the few objects outside the label selections; past this many, reads of
# further such objects go to the API server (and a warning says so once).
MAX_NAMED_WATCHES = 1000


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON document (dicts, lists and scalars, as the API server's answers are).

    ``copy.deepcopy`` handles any object graph and pays for it in Python, a memo entry per node; ``marshal``
    copies the same core types in C, about four times faster — and every read from the cache makes a copy. A
    value marshal cannot write (none should reach the cache) falls back to ``copy.deepcopy``."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return copy.deepcopy(value)


def matches(obj: Obj, selector: dict[str, str]) -> bool:
    """Does ``obj`` carry every label of the equality ``selector`` (:meth:`selectors.Selector.equalities`)?"""
    return selectors.matches_set(selector, (obj.get("metadata") or {}).get("labels") or {})


class _Cached:
    """One informer and what it covers."""

    def __init__(self, source: informer.Informer, selector: dict[str, str], name: str | None = None) -> None:
        self.informer = source
        self.selector = selector
        self.name = name  # a per-name watch: it sees exactly this object, present or absent

    def covers(self, namespace: str | None, name: str | None = None) -> bool:
        if self.name is not None and name != self.name:
            return False
        return self.informer.namespace is None or self.informer.namespace == (namespace or "")

    def admits(self, obj: Obj) -> bool:
        return matches(obj, self.selector) and (self.name is None or informer.key_of(obj)[1] == self.name)

    @property
    def synced(self) -> bool:
        return self.informer.synced.is_set()


OwnerOf = Callable[[Obj], "tuple[str, str] | None"]
Accept = Callable[[str, Obj, "Obj | None"], bool]


class Wakeups:
    """Wake the loops that wait on an owner (e.g. ``(namespace, Etcd name)``) when one of its objects changes.

    ``owner_of`` says which owner an object belongs to (None: none). A loop holds a :meth:`subscribe` for as long as
    it runs, clears the event before it looks at the world and waits on it (with its own bound) afterwards, so a
    change that arrives while it looks is not lost. ``accept`` narrows what wakes it (e.g. only a Certificate that
    was re-issued)."""

    def __init__(self, owner_of: OwnerOf) -> None:
        self.owner_of = owner_of
        self._subscribers: dict[tuple[str, str], list[tuple[asyncio.Event, Accept | None]]] = \
            collections.defaultdict(list)

    def __call__(self, etype: str, obj: Obj, old: Obj | None) -> None:
        owner = self.owner_of(obj)
        if owner is None:
            return
        for event, accept in self._subscribers.get(owner, ()):
            if accept is None or accept(etype, obj, old):
                event.set()

    @contextlib.contextmanager
    def subscribe(self, namespace: str, owner: str, accept: Accept | None = None) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        entry = (event, accept)
        key = (namespace, owner)
        self._subscribers[key].append(entry)
        try:
            yield event
        finally:
            self._subscribers[key].remove(entry)
            if not self._subscribers[key]:
                del self._subscribers[key]


def _selected(handler: informer.EventHandler, namespace: str | None,
              wanted: dict[str, str]) -> informer.EventHandler:
    """``handler``, called only for objects of ``namespace`` (None: any) that carry the labels ``wanted``: a cache
    may hold more than a subscriber asked for (every namespace, a wider selector)."""

    def call(etype: str, obj: Obj, old: Obj | None) -> None:
        if (namespace is None or informer.key_of(obj)[0] == namespace) and matches(obj, wanted):
            handler(etype, obj, old)

    return call


def wakeups_of(client: kube_client.Kube) -> Wakeups | None:
    """The client's :class:`Wakeups` — None unless it is a :class:`CachedKube` with wakeups on (without them, a loop
    waiting for a change waits its whole bound)."""
    return client.wakeups if isinstance(client, CachedKube) else None


async def wait(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds passed; True when it was set."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except TimeoutError:
        return False


class CachedKube(kube_client.Kube):
    """A :class:`~opsmanager.kube.client.Kube` that reads from watch-fed caches (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("pool_size", 0)  # watches hold connections: do not let them starve the requests
        super().__init__(*args, **kwargs)
        self._caches: dict[tuple[str, str], list[_Cached]] = collections.defaultdict(list)
        self._named: dict[Key, _Cached] = {}
        self._track: set[tuple[str, str]] = set()
        self._stale: set[Key] = set()
        self._absent: dict[Key, float] = {}  # key -> monotonic time the API server said 404
        self._running = False
        self._named_full_warned = False
        self._handlers: list[informer.EventHandler] = []
        # Watches opened for subscribers where no cache holds what they asked for (kind, namespace, selector):
        # never read from, one per selection however many subscribe.
        self._subscribed: dict[tuple[str, str, str | None, str], informer.Informer] = {}
        self.stats: collections.Counter[str] = collections.Counter()
        self.wakeups: Wakeups | None = None

    # --- configuration ----------------------------------------------------------------------------------------

    def cache(self, api_version: str, kind: str, *, namespaces: Iterable[str | None] = (None,),
              label_selector: str | None = None, relist_delay: float = 1.0,
              fed: bool = False) -> list[informer.Informer]:
        """Cache ``kind`` in each of ``namespaces`` (None: all), narrowed by an equality ``label_selector``.
        ``fed``: another watch of this process streams the kind and passes its events to :meth:`feed` (the
        operator's kopf watch), so the cache lists but does not watch (:class:`~opsmanager.kube.informer.FedInformer`)."""
        selector = selectors.parse(label_selector).equalities()
        if selector is None:
            raise ValueError(f"cache of {kind}: only equality label selectors are supported, got {label_selector!r}")
        made = []
        for ns in namespaces:
            kind_of = informer.FedInformer if fed else informer.Informer
            source = kind_of(self, api_version, kind, namespace=ns, label_selector=label_selector or None,
                             relist_delay=relist_delay)
            for handler in self._handlers:
                source.add_handler(handler)
            self._caches[(api_version, kind)].append(_Cached(source, selector))
            made.append(source)
            if self._running:
                source.start()
        return made

    def add_handler(self, handler: informer.EventHandler) -> None:
        """Call ``handler`` on every change any cache sees (those made later included). Handlers run on the event
        loop, synchronously: they should only set events or enqueue work."""
        self._handlers.append(handler)
        for source in self.informers():
            source.add_handler(handler)

    def feed(self, etype: str | None, obj: Obj) -> bool:
        """Pass one event of another watch of this process (type None: found by its list) to the fed cache that
        covers the object; False when none does. The object is copied: the other watch keeps its own."""
        meta = obj.get("metadata") or {}
        cached = self._covering(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), meta.get("namespace"))
        if cached is None or not isinstance(cached.informer, informer.FedInformer):
            return False
        cached.informer.feed(etype, copy_json(obj))
        return True

    def subscribe(self, api_version: str, kind: str, handler: informer.EventHandler, *,
                  namespaces: Iterable[str | None] = (None,),
                  label_selector: str | None = None) -> list[informer.Informer]:
        """Call ``handler`` on every change of a ``kind`` object in ``namespaces`` (None: all) that carries the
        equality ``label_selector``, as the cache of that kind sees it — its own writes included — so that the
        subscriber opens no watch of its own. Where no cache holds all those objects (``--no-watch-cache``, a kind
        nobody caches, a narrower selector), one watch per kind, namespace and selector is opened for the
        subscribers, started and stopped with the client, and never read from (reads still go to the API server).
        Subscribe before :meth:`start` to see the first listing. Returns the informer serving each namespace: until
        its ``synced`` is set, its events are the first listing (what already was), not changes."""
        wanted = selectors.parse(label_selector).equalities()
        if wanted is None:
            raise ValueError(f"subscription to {kind}: only equality label selectors are supported, "
                             f"got {label_selector!r}")
        served = []
        for ns in namespaces:
            cached = self._covering(api_version, kind, ns)
            if cached is not None and all(wanted.get(k) == v for k, v in cached.selector.items()):
                source = cached.informer
            else:
                source = self._subscription_watch(api_version, kind, ns, label_selector or "")
            source.add_handler(_selected(handler, ns, wanted))
            served.append(source)
        return served

    def _subscription_watch(self, api_version: str, kind: str, namespace: str | None,
                            label_selector: str) -> informer.Informer:
        key = (api_version, kind, namespace, label_selector)
        source = self._subscribed.get(key)
        if source is None:
            # relist_delay: a watch refused (e.g. an older ClusterRole without `watch`) is retried every few
            # seconds, not every second; what subscribes to it has a slower way to find out meanwhile.
            source = self._subscribed[key] = informer.Informer(
                self, api_version, kind, namespace=namespace, label_selector=label_selector or None,
                relist_delay=5.0)
            if self._running:
                source.start()
        return source

    def use_wakeups(self, owner_of: OwnerOf) -> Wakeups:
        """Make :attr:`wakeups` a :class:`Wakeups` fed by every cache."""
        self.wakeups = Wakeups(owner_of)
        self.add_handler(self.wakeups)
        return self.wakeups

    def track_by_name(self, api_version: str, kind: str) -> None:
        """Objects of ``kind`` that no cache holds get a watch of their own, by name, when first read."""
        self._track.add((api_version, kind))

    def informers(self) -> list[informer.Informer]:
        return [c.informer for group in self._caches.values() for c in group] + \
            [c.informer for c in self._named.values()]

    def _sources(self) -> list[informer.Informer]:
        """Every informer: the caches' (:meth:`informers`) and the subscribers' own watches."""
        return self.informers() + list(self._subscribed.values())

    def informer(self, api_version: str, kind: str, namespace: str | None = None) -> informer.Informer | None:
        """The informer that caches ``kind`` in ``namespace`` (for handlers that react to its events)."""
        found = self._covering(api_version, kind, namespace)
        return found.informer if found is not None else None

    async def start(self) -> None:
        """Start every informer (they list, then watch, in the background)."""
        self._running = True
        for source in self._sources():
            source.start()

    async def wait_synced(self, timeout: float) -> bool:
        """Wait until every informer has listed once; False when ``timeout`` passed first."""
        try:
            await asyncio.wait_for(asyncio.gather(*(s.synced.wait() for s in self._sources())), timeout)
            return True
        except TimeoutError:
            return False

    async def stop(self) -> None:
        self._running = False
        for source in self._sources():
            await source.stop()

    # --- lookups ----------------------------------------------------------------------------------------------

    def _covering(self, api_version: str, kind: str, namespace: str | None,
                  name: str | None = None) -> _Cached | None:
        if name is not None and (named := self._named.get((api_version, kind, namespace or "", name))) is not None:
            return named
        for cached in self._caches.get((api_version, kind), ()):
            if cached.covers(namespace):
                return cached
        return None

    def _observe(self, obj: Obj) -> None:
        """Put an object we just read or wrote into the cache that covers it (if it admits it)."""
        meta = obj.get("metadata") or {}
        api_version, kind, name = obj.get("apiVersion"), obj.get("kind"), meta.get("name")
        if not api_version or not kind or not name:
            return
        ns = meta.get("namespace")
        for cached in (self._named.get((api_version, kind, ns or "", name)),
                       self._covering(api_version, kind, ns)):
            if cached is not None and cached.synced and cached.admits(obj):
                cached.informer.observe(copy_json(obj))

    def _watch_by_name(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        if (api_version, kind) not in self._track or not self._running:
            return
        key = (api_version, kind, namespace or "", name)
        if key in self._named:
            return
        if len(self._named) >= MAX_NAMED_WATCHES:
            if not self._named_full_warned:
                log.warning("%d objects are watched by name; further ones are read from the API server",
                            MAX_NAMED_WATCHES)
                self._named_full_warned = True
            return
        source = informer.Informer(self, api_version, kind, namespace=namespace,
                                   field_selector=f"metadata.name={name}", relist_delay=1.0)
        for handler in self._handlers:
            source.add_handler(handler)
        self._named[key] = _Cached(source, {}, name=name)
        source.start()

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        key = (api_version, kind, namespace or "", name)
        cached = self._covering(api_version, kind, namespace, name)
        if cached is not None and cached.synced and key not in self._stale:
            obj = cached.informer.get(namespace or "", name)
            if obj is not None:
                self.stats[f"hit {kind}"] += 1
                return copy_json(obj)  # type: ignore[no-any-return]
            if cached.name is not None:  # a per-name watch answers "absent" too
                self.stats[f"hit {kind}"] += 1
                return None
            asked = self._absent.get(key)
            if asked is not None and time.monotonic() - asked < ABSENT_TTL:
                self.stats[f"hit absent {kind}"] += 1
                return None
        self.stats[f"miss {kind}"] += 1
        log.debug("cache miss: GET %s %s/%s", kind, namespace or "", name)
        obj = await super().get(api_version, kind, namespace, name)
        self._stale.discard(key)
        if obj is None:
            self._absent[key] = time.monotonic()
        else:
            self._absent.pop(key, None)
        if obj is not None:
            self._observe(obj)
        if obj is not None and (cached is None or (cached.name is None and not cached.admits(obj))):
            # It exists, and no cache holds it: watch it by name from now on. (An absent object is not watched:
            # most are ours and about to be created — labelled, so the cache will hold them.)
            self._watch_by_name(api_version, kind, namespace, name)
        return obj

    async def list(self, api_version: str, kind: str, namespace: str | None, *,
                   label_selector: str | None = None, field_selector: str | None = None) -> builtins.list[Obj]:
        try:
            wanted = selectors.parse(label_selector).equalities()
        except selectors.SelectorError:
            wanted = None  # the API server answers why
        cached = self._covering(api_version, kind, namespace)
        if (cached is not None and cached.synced and not field_selector and wanted is not None
                and all(wanted.get(k) == v for k, v in cached.selector.items())):
            self.stats[f"hit list {kind}"] += 1
            # Only the objects with one of the wanted labels are looked at (the informer's label index).
            extra = [label for label in wanted.items() if cached.selector.get(label[0]) != label[1]]
            found = cached.informer.labelled(namespace, extra[0]) if extra else cached.informer.items(namespace)
            return [copy_json(o) for o in found if matches(o, wanted)]
        self.stats[f"miss list {kind}"] += 1
        log.debug("cache miss: LIST %s in %s (labels %s, fields %s)", kind, namespace or "every namespace",
                  label_selector, field_selector)
        return await super().list(api_version, kind, namespace, label_selector=label_selector,
                                  field_selector=field_selector)

    # --- writes: read your own --------------------------------------------------------------------------------

    def _stale_on_conflict(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        key = (api_version, kind, namespace or "", name)
        self._stale.add(key)
        self._absent.pop(key, None)

    async def create(self, obj: Obj) -> Obj:
        try:
            created = await super().create(obj)
        except errors.Conflict:  # AlreadyExists: something the cache did not hold has this name
            meta = obj.get("metadata") or {}
            self._stale_on_conflict(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta.get("name", ""))
            raise
        self._observe(created)
        return created

    async def patch(self, api_version: str, kind: str, namespace: str | None, name: str, patch: Any, *,
                    subresource: str | None = None, patch_type: str = "merge") -> Obj:
        try:
            result = await super().patch(api_version, kind, namespace, name, patch, subresource=subresource,
                                         patch_type=patch_type)
        except errors.Conflict:
            self._stale_on_conflict(api_version, kind, namespace, name)
            raise
        self._observe(result)
        return result

    async def replace(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        try:
            result = await super().replace(obj, subresource=subresource)
        except errors.Conflict:
            meta = obj.get("metadata") or {}
            self._stale_on_conflict(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta.get("name", ""))
            raise
        self._observe(result)
        return result

