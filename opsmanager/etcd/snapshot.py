"""A member's snapshot on disk: :class:`SnapshotFile` writes etcd's Snapshot stream to a temporary file, checks the
sha256 trailer and renames it into place; :func:`db_revision` reads the revision back out of the file.

The stream (``Maintenance.Snapshot``) is the member's bbolt database in 32 KiB chunks followed by one message whose
blob is the sha256 of every byte before it; etcdctl saves exactly these bytes, and ``etcdutl snapshot restore``
checks the trailer. So the file we keep is the same: the database plus its 32-byte digest. Nothing is held in
memory but one write buffer, and the destination only ever holds a complete, verified file.

Why read the revision from the file: etcd 3.5 and 3.6 send no ``header`` with the stream (every field 0), so the
point in time of a snapshot is only in the database itself: the highest key of the ``key`` bucket is
``<main revision, 8 bytes big-endian>_<sub revision>``, which is what ``etcdutl snapshot status`` reports.
:func:`db_revision` reads it with :mod:`opsmanager.snapshotfile` (the bbolt reader the backups use too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pathlib
import tempfile
import threading

from opsmanager import snapshotfile

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


# ---- the revision inside the file ------------------------------------------------------------------------------


def db_revision(path: str | os.PathLike[str]) -> int:
    """The main revision of the newest key in the bbolt database at ``path`` (a snapshot file with or without its
    trailer): what ``etcdutl snapshot status`` reports as ``revision``. 0 when the ``key`` bucket is empty.
    ValueError when the file is not a bbolt database with a ``key`` bucket (the reader of
    :mod:`opsmanager.snapshotfile`)."""
    return snapshotfile.content_revision(pathlib.Path(path)).revision
