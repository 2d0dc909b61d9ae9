"""The one Kubernetes access layer of opsmanager: one resource table, one error hierarchy, one loader, async.

Shared by the operator (provisioner and ops engine), the admission webhook's Etcd lookup and the sandbox's
controllers. Modules:

- :mod:`.resources` — where each ``(apiVersion, kind)`` is served; extendable from CRDs;
- :mod:`.errors` — :class:`KubeError` and its subclasses; transport exceptions never escape;
- :mod:`.config` — kubeconfig / in-cluster loading (through the ``kubernetes`` package) into a base URL, an SSL
  context and a refreshed ``Authorization`` header;
- :mod:`.client` — :class:`Kube`, the async client over aiohttp (verbs, ``transact_status``, events, watch);
- :mod:`.informer` — list + watch cache for controllers;
- :mod:`.cache` — :class:`CachedKube`, the client whose reads come from informers (the operator's).

This ``__init__`` is the only place that re-exports names (``from opsmanager import kube`` then ``kube.Kube``,
``kube.NotFound``); inside the package, modules import modules.
"""

from opsmanager.kube.cache import CachedKube
from opsmanager.kube.client import Kube, Obj, WatchEvent
from opsmanager.kube.config import Connection
from opsmanager.kube.errors import (
    AlreadyExists,
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    TooManyRequests,
    Unauthorized,
    Unavailable,
    is_transient,
)
from opsmanager.kube.informer import Informer, key_of
from opsmanager.kube.resources import Resource, Resources, path_for, resource

__all__ = [
    "AlreadyExists",
    "CachedKube",
    "ConfigError",
    "Conflict",
    "Connection",
    "Forbidden",
    "Gone",
    "Informer",
    "Invalid",
    "Kube",
    "KubeError",
    "NotFound",
    "Obj",
    "Resource",
    "Resources",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "WatchEvent",
    "is_transient",
    "key_of",
    "path_for",
    "resource",
]
