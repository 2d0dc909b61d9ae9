"""opsmanager.backup: etcd snapshots in an S3-compatible object store.

- :mod:`.snapshot` — pure: what a complete etcd snapshot file is (:func:`~.snapshot.verify`), its object key
  (``<prefix>/<namespace>/<etcd>/<UTC timestamp>-rev<revision>.db``) and which snapshots retention prunes;
- :mod:`.store` — :class:`~.store.ObjectStore` over boto3 (upload with metadata, download, head, list, delete,
  prune; bounded timeouts and attempts; one error family, :class:`~.store.StoreError`) and its asyncio face.

This ``__init__`` re-exports names and imports nothing itself: each is loaded from its module on first use (PEP
562), so that the pure :mod:`.snapshot` can be imported without boto3.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opsmanager.backup.snapshot import SnapshotCheck, SnapshotKey, object_key, parse_key, to_prune, verify
    from opsmanager.backup.store import (
        AccessDenied,
        AsyncObjectStore,
        BucketNotFound,
        ObjectInfo,
        ObjectNotFound,
        ObjectStore,
        StoreError,
        StoreUnreachable,
        TLSVerificationFailed,
    )

# name → the module that defines it; keep in step with the imports above, which are what type checkers read
_SOURCES: dict[str, str] = {
    **dict.fromkeys(("SnapshotCheck", "SnapshotKey", "object_key", "parse_key", "to_prune", "verify"), "snapshot"),
    **dict.fromkeys(("AccessDenied", "AsyncObjectStore", "BucketNotFound", "ObjectInfo", "ObjectNotFound",
                     "ObjectStore", "StoreError", "StoreUnreachable", "TLSVerificationFailed"), "store"),
}

__all__ = [
    "AccessDenied",
    "AsyncObjectStore",
    "BucketNotFound",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "SnapshotCheck",
    "SnapshotKey",
    "StoreError",
    "StoreUnreachable",
    "TLSVerificationFailed",
    "object_key",
    "parse_key",
    "to_prune",
    "verify",
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
