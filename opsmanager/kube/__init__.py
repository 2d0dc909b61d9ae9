"""The one Kubernetes access layer of opsmanager: one resource table, one error hierarchy, one loader, async.

Shared by the operator (provisioner and ops engine), the admission webhook's Etcd lookup and the sandbox's
controllers. Modules:

- :mod:`.resources` — where each ``(apiVersion, kind)`` is served; extendable from CRDs;
- :mod:`.errors` — :class:`KubeError` and its subclasses; transport exceptions never escape;
- :mod:`.config` — kubeconfig / in-cluster loading (through the ``kubernetes`` package) into a base URL, an SSL
  context and a refreshed ``Authorization`` header;
- :mod:`.client` — :class:`Kube`, the async client over aiohttp (verbs, ``transact_status``, events, watch);
- :mod:`.informer` — list + watch cache for controllers;
- :mod:`.cache` — :class:`CachedKube`, the client whose reads come from informers (the operator's);
- :mod:`.mergepatch` and :mod:`.selectors` — pure: JSON merge patch and label selectors, for the client, the
  caches, the webhook's validation and the sandbox's API server alike.

This ``__init__`` is the only place that re-exports names (``from opsmanager import kube`` then ``kube.Kube``,
``kube.NotFound``); inside the package, modules import modules. It imports nothing itself: each name is loaded
from its module on first use (PEP 562), so that a pure module can import ``opsmanager.kube.mergepatch`` or
``opsmanager.kube.selectors`` without bringing in aiohttp and the ``kubernetes`` package, which the webhook's
validation may not load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# name → the module that defines it; keep in step with the imports above, which are what type checkers read
_SOURCES: dict[str, str] = {
    "CachedKube": "cache",
    "Kube": "client", "Obj": "client", "WatchEvent": "client",
    "Connection": "config",
    **dict.fromkeys(("AlreadyExists", "ConfigError", "Conflict", "Forbidden", "Gone", "Invalid", "KubeError",
                     "NotFound", "TooManyRequests", "Unauthorized", "Unavailable", "is_transient"), "errors"),
    "Informer": "informer", "key_of": "informer",
    "Resource": "resources", "Resources": "resources", "path_for": "resources", "resource": "resources",
}

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


def __getattr__(name: str) -> Any:
    """Load ``name`` from its module the first time it is asked for, and keep it here for the next time."""
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{source}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
