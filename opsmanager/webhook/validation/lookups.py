"""Where the admission rules read the other objects they need: an EtcdOpsRequest's Etcd, the EtcdOpsRequest holding
an Etcd paused, the EtcdVersion (the catalog, cluster-scoped) an Etcd's ``spec.version`` or an UpdateVersion's target
names.

A protocol rather than a client, so that the rules stay pure: the webhook's server plugs in
``opsmanager.webhook.lookup`` (the Kubernetes API, through a watch-fed cache), unit tests and the in-process sandbox
:class:`InMemoryEtcdLookup`. The rules are synchronous and run on the server's event loop, so a lookup answers from
memory or raises :class:`NotCached`, and the caller fetches and decides again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from opsmanager.api import catalog as catalog_api
from opsmanager.api import constants


class EtcdLookup(Protocol):
    """Where the webhook reads the objects its rules need: Etcds (an EtcdOpsRequest's ``databaseRef``) and
    EtcdOpsRequests (the request holding an Etcd paused).

    Synchronous, called on the server's event loop: an implementation answers from memory. One that may need I/O
    for an answer (an object not in its cache) raises :class:`NotCached` instead and offers
    :meth:`FetchingEtcdLookup.afetch`; :func:`opsmanager.webhook.admission.decide` awaits that and decides again.
    The rules never modify what a lookup returns, so a lookup may hand out its cached objects without copying."""

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Etcd object dict, or None when it does not exist. Raise :class:`EtcdLookupError` when unknown."""
        ...

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The EtcdOpsRequest object dict, or None when it does not exist. Raise :class:`EtcdLookupError` when
        unknown."""
        ...

    def get_etcdversion(self, name: str) -> dict[str, Any] | None:
        """The EtcdVersion (cluster-scoped) object dict, or None when the catalog has no such version. Raise
        :class:`EtcdLookupError` when unknown."""
        ...

    def get_storage_class(self, name: str) -> dict[str, Any] | None:
        """The StorageClass (cluster-scoped) a VolumeExpansion's Etcd names, or None when it does not exist. Raise
        :class:`EtcdLookupError` when unknown."""
        ...


class FetchingEtcdLookup(EtcdLookup, Protocol):
    """An :class:`EtcdLookup` whose ``get_*`` may raise :class:`NotCached`; :meth:`afetch` then reads the object."""

    async def afetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object of ``kind`` (Etcd, EtcdOpsRequest, or the cluster-scoped EtcdVersion and StorageClass, whose
        namespace is ignored), None when it does not exist; raise :class:`EtcdLookupError` when that cannot be
        told."""
        ...


class EtcdLookupError(Exception):
    """The lookup could not tell whether the object exists (API unreachable, forbidden, ...)."""


class NotCached(RuntimeError):
    """A lookup cannot answer from memory: the object is not in its cache (or the cache has not synced yet), and
    reading it needs I/O, which a synchronous call on the event loop must not do. Not an answer: the caller awaits
    the lookup's ``afetch(kind, namespace, name)`` and asks again (:func:`opsmanager.webhook.admission.decide`).
    A ``RuntimeError`` because anywhere else it is a misuse: a blocking lookup called on the loop."""

    def __init__(self, kind: str, namespace: str, name: str, why: str) -> None:
        super().__init__(f"{kind} {namespace}/{name}: {why}")
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.why = why


class InMemoryEtcdLookup:
    """An :class:`EtcdLookup` over a dict, for unit tests and the in-process sandbox. It starts with the catalog the
    install bundle ships (:func:`opsmanager.api.catalog.objects`) unless ``catalog`` is False, as a cluster with the
    bundle installed has it."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = (), *, catalog: bool = True) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        for obj in [*(catalog_api.objects() if catalog else ()), *objects]:
            self.put(obj)

    def put(self, obj: Mapping[str, Any]) -> None:
        """Add or replace an object (keyed by its kind — Etcd when not given —, namespace and name; an EtcdVersion
        has no namespace); a copy is kept, so the caller may go on changing ``obj``."""
        meta = obj.get("metadata") or {}
        kind = obj.get("kind") or constants.ETCD_KIND
        namespace = "" if kind == constants.ETCDVERSION_KIND else meta.get("namespace") or "default"
        self._objects[(kind, namespace, meta["name"])] = copy.deepcopy(dict(obj))

    def delete(self, namespace: str, name: str, *, kind: str = constants.ETCD_KIND) -> None:
        self._objects.pop((kind, namespace, name), None)

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((constants.ETCD_KIND, namespace, name))  # not copied: the rules only read

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((constants.OPS_KIND, namespace, name))

    def get_etcdversion(self, name: str) -> dict[str, Any] | None:
        return self._objects.get((constants.ETCDVERSION_KIND, "", name))

    def get_storage_class(self, name: str) -> dict[str, Any] | None:
        return self._objects.get((constants.STORAGE_CLASS_KIND, "default", name))
