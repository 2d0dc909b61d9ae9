"""A member's snapshot on disk: :class:`SnapshotFile` writes etcd's Snapshot stream to a temporary file, checks the
sha256 trailer and renames it into place; :func:`db_revision` reads the revision back out of the file.

The stream (``Maintenance.Snapshot``) is the member's bbolt database in 32 KiB chunks followed by one message whose
blob is the sha256 of every byte before it; etcdctl saves exactly these bytes, and ``etcdutl snapshot restore``
checks the trailer. So the file we keep is the same: the database plus its 32-byte digest. Nothing is held in
memory but one write buffer, and the destination only ever holds a complete, verified file.

Why read the revision from the file: etcd 3.5 and 3.6 send no ``header`` with the stream (every field 0), so the
point in time of a snapshot is only in the database itself: the highest key of the ``key`` bucket is
``<main revision, 8 bytes big-endian>_<sub revision>``, which is what ``etcdutl snapshot status`` reports.
:func:`db_revision` walks the bbolt B+tree read-only (meta page with the higher txid, root bucket, the ``key``
bucket's rightmost leaf) without loading the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import mmap
import os
import pathlib
import struct
import tempfile
import threading

TRAILER = 32  # sha256 digest etcd appends to the stream
_BUFFER = 1 << 18  # bytes collected before one write(2): 8 of etcd's 32 KiB chunks


@dataclasses.dataclass(frozen=True)
class SnapshotResult:
    """A verified snapshot file. ``size`` and ``sha256_hex`` cover the whole file (database + trailer);
    ``revision`` is the key-value revision it holds, ``member_id`` the member that sent it, ``version`` the storage
    version etcd 3.6+ names in the stream ("" before 3.6)."""

    path: pathlib.Path
    size: int
    sha256_hex: str
    revision: int
    member_id: int
    version: str


class SnapshotFile:
    """Receives the stream's blobs in order (:meth:`write`) into ``<dest dir>/.<name>.*.part``; :meth:`finish`
    checks the trailer and the announced size, fsyncs and renames onto ``dest``; :meth:`abort` removes the part
    file. ``expected_db_size`` is what the first message announced (its blob + ``remaining_bytes``), None when
    unknown. Errors are ``ValueError`` (bad stream) or ``OSError``; the caller maps them. :meth:`finish` may run in a
    worker thread while the caller, cancelled, calls :meth:`abort`: the two never touch the file at once."""

    def __init__(self, dest: str | os.PathLike[str]) -> None:
        self.dest = pathlib.Path(dest)
        fd, name = tempfile.mkstemp(dir=self.dest.parent, prefix=f".{self.dest.name}.", suffix=".part")
        self.part = pathlib.Path(name)
        self._fd: int | None = fd
        self._whole = hashlib.sha256()  # every byte: the file's digest
        self._db = hashlib.sha256()  # every byte but the last TRAILER: what etcd's trailer is the digest of
        self._tail = b""  # the last TRAILER bytes seen (not yet known to be database or trailer)
        self._buffer = bytearray()
        self._fd_lock = threading.Lock()
        self.size = 0
        self.expected_db_size: int | None = None

    def write(self, blob: bytes) -> None:
        if self._fd is None:
            raise ValueError("snapshot file already finished or aborted")
        self._whole.update(blob)
        data = self._tail + blob
        self._db.update(data[:-TRAILER] if len(data) > TRAILER else b"")
        self._tail = data[-TRAILER:]
        self.size += len(blob)
        self._buffer += blob
        if len(self._buffer) >= _BUFFER:
            self._flush()

    def _flush(self) -> None:
        assert self._fd is not None
        view = memoryview(self._buffer)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        view.release()
        self._buffer.clear()

    def finish(self) -> tuple[int, str]:
        """Verify, fsync, rename onto ``dest``; (file size, sha256 hex of the file). ValueError when the stream is
        short or the trailer does not match (the part file is removed)."""
        with self._fd_lock:
            return self._finish()

    def _finish(self) -> tuple[int, str]:
        try:
            db_size = self.size - TRAILER
            if db_size <= 0:
                raise ValueError(f"snapshot stream too short: {self.size} bytes")
            if self.expected_db_size is not None and db_size != self.expected_db_size:
                raise ValueError(f"snapshot stream has {db_size} database bytes, the member announced "
                                 f"{self.expected_db_size}")
            if self._db.digest() != self._tail:
                raise ValueError(f"sha256 trailer mismatch: the {db_size} database bytes hash to "
                                 f"{self._db.hexdigest()}, the stream's trailer says {self._tail.hex()}")
            self._flush()
            assert self._fd is not None
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            os.replace(self.part, self.dest)
            _fsync_dir(self.dest.parent)
        except BaseException:
            self._abort()
            raise
        return self.size, self._whole.hexdigest()

    def abort(self) -> None:
        """Close and remove the part file (safe to call twice, and after :meth:`finish`: a finished file stays)."""
        with self._fd_lock:
            self._abort()

    def _abort(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        with contextlib.suppress(FileNotFoundError):
            self.part.unlink()


def _fsync_dir(path: pathlib.Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened or synced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_verified(dest: str | os.PathLike[str], db: bytes) -> tuple[int, str]:
    """Write ``db`` + its sha256 trailer as :class:`SnapshotFile` does (for fakes and tests); (size, sha256 hex)."""
    out = SnapshotFile(dest)
    try:
        out.write(db)
        out.write(hashlib.sha256(db).digest())
    except BaseException:
        out.abort()
        raise
    return out.finish()


# ---- the revision inside a bbolt file -----------------------------------------------------------------------------

_MAGIC = 0xED0CDAED
_BRANCH, _LEAF = 0x01, 0x02
_BUCKET_LEAF = 0x01
_PAGE_HEADER = struct.Struct("<QHHI")  # id, flags, count, overflow
_META_STRUCT = struct.Struct("<IIII QQ QQQ Q")  # magic, version, page size, flags, root (pgid, seq), freelist,
# high-water pgid, txid, checksum
_BRANCH_ELEMENT = struct.Struct("<IIQ")  # pos, ksize, pgid
_LEAF_ELEMENT = struct.Struct("<IIII")  # flags, pos, ksize, vsize
_BUCKET_HEADER = struct.Struct("<QQ")  # root pgid (0: inline bucket), sequence
KEY_BUCKET = b"key"


def _fnv64a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class _Bolt:
    def __init__(self, mem: mmap.mmap) -> None:
        self.mem = mem
        first = self._meta(0)  # page 0; its page size places page 1 (bbolt falls back to the OS page size)
        second = self._meta(first[2] if first is not None else 4096)
        metas = [m for m in (first, second) if m is not None]
        if not metas:
            raise ValueError("not a bbolt file: no valid meta page")
        best = max(metas, key=lambda m: m[8])  # the higher txid: the last committed transaction
        self.page_size = best[2]
        self.root = best[4]

    def _meta(self, offset: int) -> tuple[int, ...] | None:
        start = offset + _PAGE_HEADER.size
        raw = self.mem[start:start + _META_STRUCT.size]
        if len(raw) < _META_STRUCT.size:
            return None
        meta = _META_STRUCT.unpack(raw)
        if meta[0] != _MAGIC or _fnv64a(raw[:-8]) != meta[9]:
            return None
        return meta

    def page(self, pgid: int) -> tuple[int, int, int]:
        """(offset of the page, flags, element count)."""
        offset = pgid * self.page_size
        _id, flags, count, _overflow = _PAGE_HEADER.unpack_from(self.mem, offset)
        return offset, flags, count

    def leaf_elements(self, buf: memoryview | mmap.mmap, offset: int,
                      count: int) -> list[tuple[int, bytes, bytes]]:
        out = []
        for i in range(count):
            at = offset + _PAGE_HEADER.size + i * _LEAF_ELEMENT.size
            flags, pos, ksize, vsize = _LEAF_ELEMENT.unpack_from(buf, at)
            key = bytes(buf[at + pos:at + pos + ksize])
            value = bytes(buf[at + pos + ksize:at + pos + ksize + vsize])
            out.append((flags, key, value))
        return out

    def branch_children(self, offset: int, count: int) -> list[int]:
        return [_BRANCH_ELEMENT.unpack_from(self.mem, offset + _PAGE_HEADER.size + i * _BRANCH_ELEMENT.size)[2]
                for i in range(count)]

    def bucket_value(self, name: bytes) -> bytes | None:
        """The root bucket's entry for bucket ``name`` (its 16-byte header, plus the inline page if any)."""
        stack = [self.root]
        while stack:
            offset, flags, count = self.page(stack.pop())
            if flags & _BRANCH:
                stack.extend(self.branch_children(offset, count))
            elif flags & _LEAF:
                for eflags, key, value in self.leaf_elements(self.mem, offset, count):
                    if key == name and eflags & _BUCKET_LEAF:
                        return value
        return None

    def last_key(self, bucket: bytes) -> bytes | None:
        """The greatest key of a bucket given its root-bucket entry, or None when it is empty."""
        root, _seq = _BUCKET_HEADER.unpack_from(bucket, 0)
        if root == 0:  # inline bucket: one leaf page right after the header, inside the value
            inline = memoryview(bucket)[_BUCKET_HEADER.size:]
            _id, _flags, count, _overflow = _PAGE_HEADER.unpack_from(inline, 0)
            elements = self.leaf_elements(inline, 0, count)
            return elements[-1][1] if elements else None
        return self._last_in(root)

    def _last_in(self, pgid: int) -> bytes | None:
        offset, flags, count = self.page(pgid)
        if flags & _LEAF:
            elements = self.leaf_elements(self.mem, offset, count)
            return elements[-1][1] if elements else None
        if not flags & _BRANCH:
            raise ValueError(f"bbolt page {pgid} is neither branch nor leaf (flags {flags:#x})")
        for child in reversed(self.branch_children(offset, count)):  # rightmost non-empty subtree
            key = self._last_in(child)
            if key is not None:
                return key
        return None


def db_revision(path: str | os.PathLike[str]) -> int:
    """The main revision of the newest key in the bbolt database at ``path`` (a snapshot file with or without its
    trailer): what ``etcdutl snapshot status`` reports as ``revision``. 0 when the ``key`` bucket is empty.
    ValueError when the file is not a bbolt database with a ``key`` bucket."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mem:
        bolt = _Bolt(mem)
        bucket = bolt.bucket_value(KEY_BUCKET)
        if bucket is None:
            raise ValueError(f"{path}: no {KEY_BUCKET!r} bucket; not an etcd backend")
        key = bolt.last_key(bucket)
    if key is None:
        return 0
    if len(key) < 17:
        raise ValueError(f"{path}: key bucket holds {key!r}, not a revision")
    return int.from_bytes(key[:8], "big")
