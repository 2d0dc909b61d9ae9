"""etcd snapshot files: what one must look like and what it holds (shared by the etcd client, which checks a snapshot
it saves, and the backups, which check one before upload and restore).

Pure logic: the only I/O is reading the one file it is given (:func:`verify`, :func:`sha256_file`,
:func:`content_revision`).

**The file.** etcd's ``Snapshot`` RPC streams the backend's bbolt database and then one more message with the
SHA-256 of the bytes it sent (etcd ``server/etcdserver/api/v3rpc/maintenance.go``); ``etcdctl snapshot save``
(``client/v3/snapshot``) writes both, and refuses a stream whose length is not ``512·k + 32`` (``hasChecksum``).
``etcdutl snapshot restore`` (``etcdutl/snapshot/v3_snapshot.go``, ``copyAndVerifyDB``) reads the last 32 bytes,
hashes the rest and refuses a mismatch unless ``--skip-hash-check``. :func:`verify` checks the same, and what a
restore would trip over later: the bbolt meta pages (magic ``0xED0CDAED``, version 2, their FNV-64a checksum; bbolt
``internal/common/meta.go``) and the database length they promise (``pgid × pageSize``: ``Tx.WriteTo`` writes
exactly ``Tx.Size()`` bytes), so a truncated file is told apart from a corrupted one.

**What it holds.** :func:`content_revision` walks the bbolt B+tree (meta page → root bucket → the ``key``
bucket, inline or a tree of branch and leaf pages) to the highest revision — ``etcdutl snapshot status``'s
``revision`` — and reads the ``meta`` bucket's consistent index, term, compaction revisions and storage version;
with ``keys=True`` it counts the live keys as etcdutl 3.6 does (``totalKey``). Every page id, element and offset is
checked against the file, so a truncated or corrupted database is a :class:`SnapshotContentError` saying where.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Final

SHA256_SIZE: Final = 32
"""The trailer etcd appends: the SHA-256 of the database bytes."""
SECTOR: Final = 512
"""etcd's ``hasChecksum``: a database is a whole number of 512-byte sectors, so ``size % 512 == 32`` has a trailer."""
BOLT_MAGIC: Final = 0xED0CDAED
BOLT_VERSION: Final = 2
PAGE_HEADER_SIZE: Final = 16  # pgid u64, flags u16, count u16, overflow u32
# magic, version, pageSize, flags, root {pgid, sequence}, freelist, pgid, txid, checksum (little-endian, as written)
META_FORMAT: Final = "<IIIIQQQQQQ"
META_SIZE: Final = struct.calcsize(META_FORMAT)  # 64
META_CHECKSUMMED: Final = META_SIZE - 8  # the checksum covers every field before it
MIN_PAGE_SIZE: Final = 512
MAX_PAGE_SIZE: Final = 1 << 16
_CHUNK: Final = 1 << 20

_FNV64_OFFSET: Final = 0xCBF29CE484222325
_FNV64_PRIME: Final = 0x100000001B3


def _fnv1a64(data: bytes) -> int:
    h = _FNV64_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


@dataclasses.dataclass(frozen=True)
class BoltMeta:
    """One of the two bbolt meta pages (page 0 at offset 0, page 1 at ``page_size``)."""

    page: int
    magic: int
    version: int
    page_size: int
    txid: int
    high_water: int  # pgid: the number of pages the database holds
    checksum_ok: bool
    root: int = 0  # the page of the root bucket's B+tree

    @property
    def valid(self) -> bool:
        return self.magic == BOLT_MAGIC and self.version == BOLT_VERSION and self.checksum_ok

    @property
    def database_size(self) -> int:
        return self.high_water * self.page_size


def parse_meta(page: bytes, index: int) -> BoltMeta | None:
    """The meta of one page's bytes (the header and the meta struct), or None when too short."""
    if len(page) < PAGE_HEADER_SIZE + META_SIZE:
        return None
    body = page[PAGE_HEADER_SIZE:PAGE_HEADER_SIZE + META_SIZE]
    magic, version, page_size, _flags, root, _seq, _freelist, pgid, txid, checksum = struct.unpack(META_FORMAT, body)
    return BoltMeta(index, magic, version, page_size, txid, pgid, _fnv1a64(body[:META_CHECKSUMMED]) == checksum, root)


@dataclasses.dataclass(frozen=True)
class SnapshotCheck:
    """What :func:`verify` found. ``ok`` or not, ``reason`` says why in one sentence (empty when ok)."""

    path: str
    size: int
    ok: bool
    reason: str = ""
    database_size: int | None = None
    """The bytes before the trailer (``size - 32``), when the file is long enough to have one."""
    embedded_sha256: str | None = None
    """The trailer, hex."""
    computed_sha256: str | None = None
    """The SHA-256 of the bytes before the trailer, hex (computed only once the layout checks passed)."""
    page_size: int | None = None
    txid: int | None = None

    def raise_if_bad(self) -> None:
        if not self.ok:
            raise InvalidSnapshot(f"{self.path}: {self.reason}")


class InvalidSnapshot(ValueError):
    """A file that is not a complete etcd snapshot (the message says why)."""


def verify(path: str | Path) -> SnapshotCheck:
    """Check an etcd snapshot file as ``etcdutl snapshot restore`` would (see the module docstring). Never raises for
    a bad file (``ok=False`` with a reason); an unreadable path raises :class:`OSError` as ``open`` does."""
    path = Path(path)
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        head = f.read(2 * MAX_PAGE_SIZE)
        return _verify(str(path), size, head, f)


def _verify(name: str, size: int, head: bytes, f: BinaryIO) -> SnapshotCheck:
    smallest = 2 * MIN_PAGE_SIZE + SHA256_SIZE
    if size < smallest:
        return SnapshotCheck(name, size, False, f"{size} bytes is too short for an etcd snapshot (two bbolt meta "
                                                f"pages and a {SHA256_SIZE}-byte sha256 trailer: at least {smallest})")
    first = parse_meta(head, 0)
    assert first is not None  # size ≥ 2 pages
    page_size = first.page_size
    if first.magic != BOLT_MAGIC:
        return SnapshotCheck(name, size, False, f"not a bbolt database: no magic {BOLT_MAGIC:#010x} in the meta page "
                                                f"at offset {PAGE_HEADER_SIZE} (found {first.magic:#010x})")
    if not MIN_PAGE_SIZE <= page_size <= MAX_PAGE_SIZE or page_size & (page_size - 1):
        return SnapshotCheck(name, size, False, f"the bbolt meta page is corrupted: page size {page_size} is not a "
                                                f"power of two in [{MIN_PAGE_SIZE}, {MAX_PAGE_SIZE}]")
    second = parse_meta(head[page_size:], 1)
    metas = [m for m in (first, second) if m is not None and m.valid]
    if not metas:
        problems = [_meta_problem(m) for m in (first, second) if m is not None]
        return SnapshotCheck(name, size, False, "both bbolt meta pages are corrupted (" + "; ".join(problems) + ")",
                             page_size=page_size)
    meta = max(metas, key=lambda m: m.txid)  # bbolt opens the valid meta with the higher txid
    expected = meta.database_size + SHA256_SIZE
    if size < expected:
        return SnapshotCheck(
            name, size, False,
            f"truncated: the bbolt meta page (txid {meta.txid}) promises a {meta.database_size}-byte database, so "
            f"{expected} bytes with the sha256 trailer; the file has {size} ({expected - size} missing)",
            database_size=size - SHA256_SIZE, page_size=page_size, txid=meta.txid)
    if size % SECTOR != SHA256_SIZE:
        return SnapshotCheck(
            name, size, False,
            f"no sha256 trailer: {size} bytes is not 512·k + {SHA256_SIZE} (etcdutl's check); the file was cut or "
            "has bytes appended", page_size=page_size, txid=meta.txid)
    if size > expected:
        return SnapshotCheck(
            name, size, False,
            f"{size - expected} bytes more than the bbolt meta page (txid {meta.txid}) promises "
            f"({meta.database_size}-byte database + {SHA256_SIZE}-byte sha256 trailer): bytes appended, or the meta "
            "page is corrupted", database_size=size - SHA256_SIZE, page_size=page_size, txid=meta.txid)
    database_size = size - SHA256_SIZE
    digest = hashlib.sha256()
    f.seek(0)
    left = database_size
    while left:
        chunk = f.read(min(_CHUNK, left))
        if not chunk:
            return SnapshotCheck(name, size, False, f"the file shrank while it was read ({left} bytes short)")
        digest.update(chunk)
        left -= len(chunk)
    embedded = f.read(SHA256_SIZE).hex()
    computed = digest.hexdigest()
    reason = "" if embedded == computed else (
        f"sha256 mismatch: the trailer says {embedded}, the {database_size} database bytes hash to {computed}: the "
        "file is corrupted")
    return SnapshotCheck(name, size, not reason, reason, database_size=database_size, embedded_sha256=embedded,
                         computed_sha256=computed, page_size=page_size, txid=meta.txid)


def _meta_problem(meta: BoltMeta) -> str:
    if meta.magic != BOLT_MAGIC:
        return f"page {meta.page}: magic {meta.magic:#010x}"
    if meta.version != BOLT_VERSION:
        return f"page {meta.page}: version {meta.version}, not {BOLT_VERSION}"
    return f"page {meta.page}: checksum mismatch"


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of the whole file, hex (what the store's ``sha256`` metadata of an upload holds)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# -- what a snapshot holds -------------------------------------------------------------------------------------------
#
# bbolt's on-disk layout (go.etcd.io/bbolt internal/common: page.go, bucket.go): every page starts with a 16-byte
# header (id u64, flags u16, count u16, overflow u32; a page of ``overflow + 1`` pages is one node). A branch page
# holds ``count`` 16-byte elements (pos u32, ksize u32, pgid u64), a leaf page ``count`` 16-byte elements (flags u32,
# pos u32, ksize u32, vsize u32); ``pos`` counts from the element itself to its key, the value follows the key. The
# meta page's root names the root bucket's tree, whose leaf elements (flag 0x01) are the buckets: a 16-byte header
# (root pgid u64, sequence u64), and when the root is 0 the bucket is inline — one leaf page follows the header inside
# the value. etcd's ``key`` bucket maps a revision (8-byte big-endian main, '_', 8-byte big-endian sub; one more byte
# 't' for a tombstone) to a marshalled ``mvccpb.KeyValue``, so its keys sort by revision.

KEY_BUCKET: Final = b"key"
META_BUCKET: Final = b"meta"
REVISION_KEY_SIZE: Final = 17  # main (8) '_' sub (8)
TOMBSTONE_MARK: Final = ord("t")
_BRANCH_PAGE: Final = 0x01
_LEAF_PAGE: Final = 0x02
_BUCKET_LEAF: Final = 0x01
_PAGE_HEADER: Final = struct.Struct("<QHHI")  # id, flags, count, overflow
_LEAF_ELEMENT: Final = struct.Struct("<IIII")  # flags, pos, ksize, vsize
_BRANCH_ELEMENT: Final = struct.Struct("<IIQ")  # pos, ksize, pgid
_BUCKET_HEADER: Final = struct.Struct("<QQ")  # root pgid (0: inline), sequence
_MAX_DEPTH: Final = 64  # bbolt's trees are a handful of levels deep; deeper is a loop or garbage


class SnapshotContentError(InvalidSnapshot):
    """The bbolt database cannot be read: truncated, corrupted, or not an etcd backend (the message says which)."""


@dataclasses.dataclass(frozen=True)
class SnapshotContent:
    """What :func:`content_revision` read out of a snapshot's bbolt database."""

    revision: int
    """The main revision of the highest key of the ``key`` bucket (0 when it is empty): what ``etcdutl snapshot
    status`` reports as ``revision``."""
    revisions_count: int
    """Entries of the ``key`` bucket: one per stored revision of a key, tombstones included."""
    consistent_index: int | None = None
    """The ``meta`` bucket's ``consistent_index`` (the raft index the backend had applied); None when absent."""
    term: int | None = None
    """The ``meta`` bucket's ``term`` (etcd 3.5+)."""
    compact_revision: int | None = None
    """The last finished compaction (``meta``/``finishedCompactRev``), None when there was none."""
    scheduled_compact_revision: int | None = None
    """The last compaction scheduled (``meta``/``scheduledCompactRev``), None when there was none."""
    storage_version: str | None = None
    """``meta``/``storageVersion`` (``3.6.0``; etcd 3.6+ writes it), what ``etcdutl snapshot status`` reports as
    ``version``."""
    keys: int | None = None
    """Live keys (not deleted at ``revision``): ``etcdutl snapshot status``'s ``totalKey``; counted only when asked
    (``content_revision(path, keys=True)`` reads every value of the ``key`` bucket)."""
    page_size: int = 0
    txid: int = 0

    @property
    def served_revision(self) -> int:
        """The revision etcd serves once it opens this database: its restore takes the highest of :attr:`revision`
        and the two compaction revisions (a compaction may have removed the newest revision's tombstone), and an
        empty store is at revision 1."""
        return max(1, self.revision, self.compact_revision or 0, self.scheduled_compact_revision or 0)


def content_revision(path: str | Path, *, keys: bool = False) -> SnapshotContent:
    """The highest revision in an etcd snapshot (or a member's ``db`` file: the trailer is optional), read by walking
    bbolt's B+tree from the meta page with the higher txid through the root bucket to the ``key`` bucket, and its
    other facts (:class:`SnapshotContent`). Reads the pages of the buckets it looks at, never the whole file into
    memory (a page at a time; ``keys=True`` also parses every value of the ``key`` bucket). Raises :class:`SnapshotContentError` naming what is wrong with a truncated or corrupted
    file; an unreadable path raises :class:`OSError` as ``open`` does."""
    path = Path(path)
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size < 2 * MIN_PAGE_SIZE:
            raise SnapshotContentError(f"{path}: {size} bytes is too short for a bbolt database (two meta pages: at "
                                       f"least {2 * MIN_PAGE_SIZE})")
        try:
            return _BoltReader(str(path), f, size).content(count_keys=keys)
        except SnapshotContentError:
            raise
        except (struct.error, IndexError, OverflowError) as err:  # a bound not checked above; still corruption
            raise SnapshotContentError(f"{path}: corrupted bbolt database ({type(err).__name__}: {err})") from err


_Node = tuple[bytes, int, int, int]
"""One B+tree node: (buffer, offset of its page header in it, end of its page(s), element count)."""


class _BoltReader:
    """Read-only walk of one bbolt file; every offset is checked against the page it belongs to."""

    def __init__(self, name: str, f: BinaryIO, size: int) -> None:
        self.name = name
        self.f = f
        self.size = size
        first = parse_meta(self.read(0, PAGE_HEADER_SIZE + META_SIZE), 0)
        assert first is not None  # size ≥ 2 pages of the smallest size
        candidates = [first]
        if first.magic == BOLT_MAGIC and MIN_PAGE_SIZE <= first.page_size <= MAX_PAGE_SIZE:
            second = parse_meta(self.read(first.page_size, PAGE_HEADER_SIZE + META_SIZE), 1)
            if second is not None:
                candidates.append(second)
        valid = [m for m in candidates if m.valid and _power_of_two(m.page_size)]
        if not valid:
            if first.magic != BOLT_MAGIC:
                raise self.error(f"not a bbolt database: no magic {BOLT_MAGIC:#010x} in the meta page (found "
                                 f"{first.magic:#010x})")
            raise self.error("both bbolt meta pages are corrupted ("
                             + "; ".join(_meta_problem(m) for m in candidates) + ")")
        meta = max(valid, key=lambda m: m.txid)  # bbolt opens the valid meta with the higher txid
        self.meta = meta
        self.page_size = meta.page_size
        self.database_size = meta.database_size
        if meta.high_water < 3 or meta.root < 2 or meta.root >= meta.high_water:
            raise self.error(f"the bbolt meta page (txid {meta.txid}) is corrupted: root page {meta.root} of "
                             f"{meta.high_water} pages")
        if size < self.database_size:
            raise self.error(f"truncated: the bbolt meta page (txid {meta.txid}) promises a {self.database_size}-byte "
                             f"database; the file has {size} bytes ({self.database_size - size} missing)")

    def error(self, message: str) -> SnapshotContentError:
        return SnapshotContentError(f"{self.name}: {message}")

    def read(self, offset: int, n: int) -> bytes:
        self.f.seek(offset)
        data = self.f.read(n)
        if len(data) != n:
            raise self.error(f"the file shrank while it was read ({n - len(data)} bytes short at offset {offset})")
        return data

    # -- pages and nodes --------------------------------------------------------------------------------------------

    def page(self, pgid: int, what: str) -> tuple[_Node, int]:
        """The node of page ``pgid`` (and its flags), its bounds checked."""
        if not 2 <= pgid < self.meta.high_water:
            raise self.error(f"corrupted: {what} points to page {pgid}, outside the database's pages 2.."
                             f"{self.meta.high_water - 1}")
        offset = pgid * self.page_size
        page_id, flags, count, overflow = _PAGE_HEADER.unpack(self.read(offset, PAGE_HEADER_SIZE))
        if page_id != pgid:
            raise self.error(f"corrupted: page {pgid} ({what}) says it is page {page_id}")
        if flags not in (_BRANCH_PAGE, _LEAF_PAGE):
            raise self.error(f"corrupted: page {pgid} ({what}) is not a branch or leaf page (flags {flags:#x})")
        end = offset + (overflow + 1) * self.page_size
        if end > self.database_size:
            raise self.error(f"corrupted: page {pgid} ({what}) runs {overflow} overflow pages past the database's "
                             f"end")
        return self.node(self.read(offset, end - offset), 0, end - offset, count, f"page {pgid} ({what})"), flags

    def node(self, buf: bytes, offset: int, end: int, count: int, where: str) -> _Node:
        if offset + PAGE_HEADER_SIZE + count * _LEAF_ELEMENT.size > end:
            raise self.error(f"corrupted: {where} claims {count} elements, more than it can hold")
        return buf, offset, end, count

    def leaf(self, node: _Node, i: int, where: str) -> tuple[int, int, int, int, int]:
        """Element ``i`` of a leaf: (flags, key start, key end, value start, value end) in the node's buffer."""
        buf, offset, end, _count = node
        at = offset + PAGE_HEADER_SIZE + i * _LEAF_ELEMENT.size
        flags, pos, ksize, vsize = _LEAF_ELEMENT.unpack_from(buf, at)
        key = at + pos
        value = key + ksize
        if value + vsize > end:
            raise self.error(f"corrupted: element {i} of {where} points past its page")
        return flags, key, value, value, value + vsize

    def children(self, node: _Node, where: str) -> list[tuple[int, bytes]]:
        """A branch's (child pgid, first key) in key order."""
        buf, offset, end, count = node
        if count == 0:
            raise self.error(f"corrupted: {where} is a branch without elements")
        out = []
        for i in range(count):
            at = offset + PAGE_HEADER_SIZE + i * _BRANCH_ELEMENT.size
            pos, ksize, child = _BRANCH_ELEMENT.unpack_from(buf, at)
            if at + pos + ksize > end:
                raise self.error(f"corrupted: element {i} of {where} points past its page")
            out.append((child, buf[at + pos:at + pos + ksize]))
        return out

    def leaves(self, bucket: bytes, header: bytes, at: int, end: int) -> Iterator[tuple[_Node, str]]:
        """Every leaf of a bucket in key order, given its 16-byte header at ``header[at:]`` (an inline bucket's page
        follows it, up to ``end``). Each page is visited once (a loop in the tree is corruption)."""
        what = f"bucket {bucket.decode(errors='replace')!r}"
        if at + _BUCKET_HEADER.size > end:
            raise self.error(f"corrupted: the header of {what} is cut short")
        root, _sequence = _BUCKET_HEADER.unpack_from(header, at)
        if root == 0:  # inline: one leaf page inside the value
            inline = at + _BUCKET_HEADER.size
            if inline + PAGE_HEADER_SIZE > end:
                raise self.error(f"corrupted: the inline page of {what} is cut short")
            _id, flags, count, _overflow = _PAGE_HEADER.unpack_from(header, inline)
            if flags != _LEAF_PAGE:
                raise self.error(f"corrupted: the inline page of {what} is not a leaf (flags {flags:#x})")
            yield self.node(header, inline, end, count, f"the inline page of {what}"), f"the inline page of {what}"
            return
        yield from self.tree(root, what)

    def tree(self, root: int, what: str) -> Iterator[tuple[_Node, str]]:
        seen: set[int] = set()
        stack: list[tuple[int, int]] = [(root, 0)]  # pgid, depth
        while stack:
            pgid, depth = stack.pop()
            if pgid in seen:
                raise self.error(f"corrupted: page {pgid} appears twice in the tree of {what}")
            if depth > _MAX_DEPTH:
                raise self.error(f"corrupted: the tree of {what} is more than {_MAX_DEPTH} levels deep")
            seen.add(pgid)
            node, flags = self.page(pgid, f"{what}, level {depth}")
            where = f"page {pgid} ({what})"
            if flags == _LEAF_PAGE:
                yield node, where
                continue
            stack.extend((child, depth + 1) for child, _key in reversed(self.children(node, where)))

    # -- buckets ------------------------------------------------------------------------------------------------

    def buckets(self) -> dict[bytes, bytes]:
        """The root bucket: bucket name → its value (header, and inline page if any)."""
        out: dict[bytes, bytes] = {}
        for node, where in self.tree(self.meta.root, "the root bucket"):
            buf = node[0]
            for i in range(node[3]):
                flags, k0, k1, v0, v1 = self.leaf(node, i, where)
                if not flags & _BUCKET_LEAF:
                    raise self.error(f"corrupted: {buf[k0:k1]!r} in the root bucket is not a bucket")
                out[buf[k0:k1]] = buf[v0:v1]
        return out

    def content(self, *, count_keys: bool) -> SnapshotContent:
        buckets = self.buckets()
        if KEY_BUCKET not in buckets:
            names = ", ".join(sorted(b.decode(errors="replace") for b in buckets)) or "none"
            raise self.error(f"not an etcd database: no 'key' bucket (buckets: {names})")
        meta = self.meta_values(buckets.get(META_BUCKET))
        value = buckets[KEY_BUCKET]
        last: bytes | None = None
        count = 0
        live: set[bytes] | None = set() if count_keys else None
        for node, where in self.leaves(KEY_BUCKET, value, 0, len(value)):
            buf, _offset, _end, n = node
            count += n
            if not n:
                continue
            indexes = range(n) if live is not None else (0, n - 1) if n > 1 else (0,)
            for i in indexes:
                _flags, k0, k1, v0, v1 = self.leaf(node, i, where)
                key = buf[k0:k1]
                _check_revision_key(key, where, self.error)
                if last is not None and key <= last:
                    raise self.error(f"corrupted: the 'key' bucket's keys are out of order at {where}")
                last = key
                if live is not None:
                    user_key = _kv_key(buf[v0:v1])
                    if user_key is None:
                        raise self.error(f"corrupted: the value of revision {_revision_text(key)} ({where}) is not "
                                         "an etcd KeyValue")
                    if len(key) > REVISION_KEY_SIZE:
                        live.discard(user_key)
                    else:
                        live.add(user_key)
        return SnapshotContent(
            revision=int.from_bytes(last[:8], "big") if last is not None else 0, revisions_count=count,
            consistent_index=_u64(meta.get(b"consistent_index")), term=_u64(meta.get(b"term")),
            compact_revision=_main(meta.get(b"finishedCompactRev")),
            scheduled_compact_revision=_main(meta.get(b"scheduledCompactRev")),
            storage_version=meta[b"storageVersion"].decode(errors="replace") if b"storageVersion" in meta else None,
            keys=len(live) if live is not None else None, page_size=self.page_size, txid=self.meta.txid)

    def meta_values(self, value: bytes | None) -> dict[bytes, bytes]:
        if value is None:
            return {}
        out: dict[bytes, bytes] = {}
        for node, where in self.leaves(META_BUCKET, value, 0, len(value)):
            buf = node[0]
            for i in range(node[3]):
                _flags, k0, k1, v0, v1 = self.leaf(node, i, where)
                out[buf[k0:k1]] = buf[v0:v1]
        return out


def _power_of_two(n: int) -> bool:
    return MIN_PAGE_SIZE <= n <= MAX_PAGE_SIZE and not n & (n - 1)


def _check_revision_key(key: bytes, where: str, error: Callable[[str], SnapshotContentError]) -> None:
    if len(key) == REVISION_KEY_SIZE or (len(key) == REVISION_KEY_SIZE + 1 and key[-1] == TOMBSTONE_MARK):
        if key[8] == ord("_"):
            return
    raise error(f"corrupted: {key[:40]!r} in the 'key' bucket ({where}) is not a revision (<8-byte main>_<8-byte sub>, "
                "'t' after a tombstone's)")


def _revision_text(key: bytes) -> str:
    return f"{int.from_bytes(key[:8], 'big')}_{int.from_bytes(key[9:17], 'big')}"


def _u64(value: bytes | None) -> int | None:
    return int.from_bytes(value, "big") if value is not None and len(value) == 8 else None


def _main(value: bytes | None) -> int | None:
    return int.from_bytes(value[:8], "big") if value is not None and len(value) >= 8 else None


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while at < end and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    raise ValueError("varint runs past its message")


def _kv_key(value: bytes) -> bytes | None:
    """Field 1 (``key``) of a marshalled ``mvccpb.KeyValue``; None when the bytes are not one."""
    at, end = 0, len(value)
    try:
        while at < end:
            tag, at = _varint(value, at, end)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                _, at = _varint(value, at, end)
            elif wire == 2:
                length, at = _varint(value, at, end)
                if at + length > end:
                    return None
                if field == 1:
                    return bytes(value[at:at + length])
                at += length
            elif wire in (1, 5):
                at += 8 if wire == 1 else 4
            else:
                return None
    except ValueError:
        return None
    return None
