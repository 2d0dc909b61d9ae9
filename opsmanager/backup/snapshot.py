"""Snapshots in the object store: how a snapshot's object is named, which to prune — and, re-exported, what a
snapshot file must look like (:mod:`opsmanager.snapshotfile`).

**The key.** ``<prefix>/<namespace>/<etcd>/<UTC timestamp>-rev<revision>.db``, e.g.
``backups/demo/etcd-cluster/20261202T160455Z-rev1234.db``: one folder per cluster, names that sort by time, the
revision readable without downloading. :func:`parse_key` reads one back; anything else under the prefix is not a
snapshot of ours and is never selected for pruning.

**Retention.** :func:`to_prune` keeps the newest ``keep`` snapshots of each cluster (by timestamp, then revision)
and returns the others, oldest first.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Iterable
from typing import Final

# The file's checks, where the backups (and their tests) find them.
from opsmanager.snapshotfile import (
    BOLT_MAGIC,
    BoltMeta,
    InvalidSnapshot,
    SnapshotCheck,
    SnapshotContent,
    SnapshotContentError,
    _BoltReader,
    _fnv1a64,
    content_revision,
    parse_meta,
    sha256_file,
    verify,
)

# -- object keys -----------------------------------------------------------------------------------------------------

TIMESTAMP_FORMAT: Final = "%Y%m%dT%H%M%SZ"
_NAME = re.compile(r"^(\d{8}T\d{6}Z)-rev(\d+)\.db$")
_SEGMENT = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a namespace or an object name (DNS-1123)


@dataclasses.dataclass(frozen=True, order=True)
class SnapshotKey:
    """A snapshot's object key, parsed. Ordered by time, then revision (then the rest, for a total order)."""

    taken_at: datetime.datetime
    revision: int
    namespace: str
    etcd: str
    prefix: str = ""

    @property
    def key(self) -> str:
        return object_key(self.prefix, self.namespace, self.etcd, self.taken_at, self.revision)

    @property
    def cluster(self) -> tuple[str, str, str]:
        return self.prefix, self.namespace, self.etcd


def cluster_prefix(prefix: str, namespace: str, etcd: str) -> str:
    """``<prefix>/<namespace>/<etcd>/``: where one cluster's snapshots are (the folder to list)."""
    for what, value in (("namespace", namespace), ("etcd", etcd)):
        if not _SEGMENT.match(value):
            raise ValueError(f"{what} {value!r} is not a DNS-1123 name")
    root = normalize_prefix(prefix)
    return f"{root}/{namespace}/{etcd}/" if root else f"{namespace}/{etcd}/"


def normalize_prefix(prefix: str) -> str:
    """The prefix without leading or trailing slashes (``""`` for the bucket's root); no empty or dot segments."""
    stripped = prefix.strip("/")
    if stripped and any(part in ("", ".", "..") for part in stripped.split("/")):
        raise ValueError(f"prefix {prefix!r} has an empty, '.' or '..' segment")
    return stripped


def object_key(prefix: str, namespace: str, etcd: str, taken_at: datetime.datetime, revision: int) -> str:
    """``<prefix>/<namespace>/<etcd>/<YYYYMMDDTHHMMSSZ>-rev<revision>.db``; ``taken_at`` must be timezone-aware (it
    is written in UTC, to the second)."""
    if taken_at.tzinfo is None or taken_at.utcoffset() is None:
        raise ValueError(f"taken_at {taken_at!r} has no timezone: pass an aware datetime (UTC)")
    if revision < 0:
        raise ValueError(f"revision {revision} is negative")
    stamp = taken_at.astimezone(datetime.UTC).strftime(TIMESTAMP_FORMAT)
    return f"{cluster_prefix(prefix, namespace, etcd)}{stamp}-rev{revision}.db"


def parse_key(key: str, prefix: str | None = None) -> SnapshotKey:
    """The parts of a key :func:`object_key` made; :class:`ValueError` naming what does not fit. With ``prefix``,
    the key must be under it."""
    parts = key.split("/")
    if len(parts) < 3:
        raise ValueError(f"{key!r} is not <prefix>/<namespace>/<etcd>/<timestamp>-rev<revision>.db")
    *root, namespace, etcd, name = parts
    found_prefix = "/".join(root)
    if prefix is not None and found_prefix != normalize_prefix(prefix):
        raise ValueError(f"{key!r} is not under the prefix {normalize_prefix(prefix)!r}")
    match = _NAME.match(name)
    if not match:
        raise ValueError(f"{key!r}: the name {name!r} is not <YYYYMMDDTHHMMSSZ>-rev<revision>.db")
    for what, value in (("namespace", namespace), ("etcd", etcd)):
        if not _SEGMENT.match(value):
            raise ValueError(f"{key!r}: {what} {value!r} is not a DNS-1123 name")
    try:
        taken_at = datetime.datetime.strptime(match.group(1), TIMESTAMP_FORMAT).replace(tzinfo=datetime.UTC)
    except ValueError as err:
        raise ValueError(f"{key!r}: the timestamp {match.group(1)!r} is not a date ({err})") from None
    return SnapshotKey(taken_at, int(match.group(2)), namespace, etcd, found_prefix)


def to_prune(keys: Iterable[str], keep: int) -> list[str]:
    """The keys to delete so that each cluster (prefix, namespace, etcd) keeps its ``keep`` newest snapshots, oldest
    first. Keys that are not snapshot keys are never selected; ``keep`` is at least 1 (retention never deletes a
    cluster's last snapshot)."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    clusters: dict[tuple[str, str, str], list[SnapshotKey]] = {}
    for key in keys:
        try:
            parsed = parse_key(key)
        except ValueError:
            continue
        if parsed.key != key:  # a look-alike (e.g. 'rev007'): not a name we wrote
            continue
        clusters.setdefault(parsed.cluster, []).append(parsed)
    doomed: list[SnapshotKey] = []
    for snapshots in clusters.values():
        snapshots.sort(reverse=True)
        doomed.extend(snapshots[keep:])
    return [s.key for s in sorted(doomed)]


__all__ = ["BOLT_MAGIC", "BoltMeta", "InvalidSnapshot", "SnapshotCheck", "SnapshotContent", "SnapshotContentError", "SnapshotKey", "TIMESTAMP_FORMAT", "_BoltReader", "_fnv1a64", "cluster_prefix", "content_revision", "normalize_prefix", "object_key", "parse_key", "parse_meta", "sha256_file", "to_prune", "verify"]
