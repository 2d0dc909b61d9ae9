"""In-memory object storage with one global resourceVersion, a bounded event history and a watch bus.

Like etcd under a real kube-apiserver, every write anywhere bumps a single cluster-wide counter, and that
number becomes the written object's ``metadata.resourceVersion``. Every change is appended to a bounded
history so that a watch can resume from any resourceVersion still in it; a version older than the history
(``compacted_rv``) is "too old" and answered with 410 Gone, as a compacted etcd would.

All methods are synchronous and run on the server's event loop, so a snapshot plus a subscription taken in
the same step can neither miss nor duplicate an event (the race kmock has, per the kopf probe).
Stored dicts are never mutated in place: writers pass a fresh dict, readers copy before changing.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import dataclasses
from collections.abc import Callable
from typing import Any

Key = tuple[str, str]  # storage key: (group, plural)
Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Change:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: Key
    namespace: str  # "" for cluster-scoped objects
    obj: Obj  # the object after the change (for DELETED: its last state, carrying the deletion's version)
    old: Obj | None


class TooOld(Exception):
    """The requested resourceVersion is older than the retained history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Subscription:
    """A watcher's queue of changes of one storage key (optionally one namespace); ``None`` means closed."""

    def __init__(self, store: Store, key: Key | None, namespace: str | None) -> None:
        self.store = store
        self.key = key
        self.namespace = namespace
        self.queue: asyncio.Queue[Change | None] = asyncio.Queue()

    def wants(self, change: Change) -> bool:
        if self.key is not None and change.key != self.key:
            return False
        return self.namespace is None or change.namespace == self.namespace

    def close(self) -> None:
        self.store._subscriptions.discard(self)


class Store:
    def __init__(self, history_size: int = 10000) -> None:
        self.rv = 0
        self.compacted_rv = 0
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        self._history: collections.deque[Change] = collections.deque()
        self._history_size = history_size
        self._subscriptions: set[Subscription] = set()
        self.listeners: list[Callable[[Change], None]] = []

    # -- reading -------------------------------------------------------------------------------------------

    def get(self, key: Key, namespace: str, name: str) -> Obj | None:
        return self._objects[key].get((namespace, name))

    def list(self, key: Key, namespace: str | None = None) -> builtins.list[Obj]:
        items = self._objects[key]
        if namespace is None:
            return [items[k] for k in sorted(items)]
        return [items[k] for k in sorted(k for k in items if k[0] == namespace)]

    def keys(self) -> builtins.list[Key]:
        return [k for k, v in self._objects.items() if v]

    def since(self, key: Key, namespace: str | None, rv: int) -> builtins.list[Change]:
        """Changes after ``rv`` of ``key`` (in ``namespace`` if given); TooOld if the history lost some."""
        if rv < self.compacted_rv or rv > self.rv:
            # Newer than anything stored: a client resuming against a restarted (in-memory) server. The real
            # server times out with "Too large resource version"; 410 makes every client relist instead.
            raise TooOld(rv, self.compacted_rv + 1)
        return [c for c in self._history
                if c.rv > rv and c.key == key and (namespace is None or c.namespace == namespace)]

    # -- writing -------------------------------------------------------------------------------------------

    def put(self, key: Key, obj: Obj, *, event: str) -> Obj:
        """Store ``obj`` (ADDED or MODIFIED) under a new resourceVersion and return it."""
        meta = obj["metadata"]
        ns, name = meta.get("namespace") or "", meta["name"]
        old = self._objects[key].get((ns, name))
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self._objects[key][(ns, name)] = obj
        self._emit(Change(self.rv, event, key, ns, obj, old))
        return obj

    def remove(self, key: Key, namespace: str, name: str, last: Obj | None = None) -> Obj:
        """Delete an object; the DELETED event carries ``last`` (default: the stored state)."""
        old = self._objects[key].pop((namespace, name))
        self.rv += 1
        last = dict(last if last is not None else old)
        last["metadata"] = dict(last["metadata"], resourceVersion=str(self.rv))
        self._emit(Change(self.rv, "DELETED", key, namespace, last, old))
        return last

    def subscribe(self, key: Key | None, namespace: str | None) -> Subscription:
        sub = Subscription(self, key, namespace)
        self._subscriptions.add(sub)
        return sub

    def close_all(self) -> None:
        for sub in list(self._subscriptions):
            sub.queue.put_nowait(None)
        self._subscriptions.clear()

    def _emit(self, change: Change) -> None:
        self._history.append(change)
        while len(self._history) > self._history_size:
            self.compacted_rv = self._history.popleft().rv
        for sub in list(self._subscriptions):
            if sub.wants(change):
                sub.queue.put_nowait(change)
        for listener in self.listeners:
            listener(change)
