"""opsmanager.backup.snapshot.content_revision: the highest revision inside an etcd snapshot, read from bbolt's B+tree.

Without etcd: :class:`Bolt` below writes bbolt files from scratch (pages, overflow pages, branch levels, inline and
tree buckets, two meta pages) holding a model of etcd's ``key`` bucket, so every property is checked against the
model — any number of levels, tombstones, empty buckets — and every truncation and corruption must end in
:class:`~opsmanager.backup.snapshot.SnapshotContentError`, never another exception or a hang. With etcd 3.5 and 3.6
(slow, built by ``make controlplane``): the answer must be ``etcdutl snapshot status``'s on real snapshots — a few
thousand keys (a tree with branch levels), after deletes, after a compaction, with a value on overflow pages.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opsmanager.backup import snapshot

# -- a bbolt writer ----------------------------------------------------------------------------------------------------


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    return h


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


Element = tuple[int, bytes, bytes]  # leaf: flags, key, value


class Bolt:
    """Writes a bbolt file page by page: nodes get consecutive page ids (a node of k pages takes k ids)."""

    def __init__(self, page_size: int = 4096) -> None:
        self.page_size = page_size
        self.pages: list[bytes] = []  # from page 2 on
        self.next = 2

    def _encode(self, pgid: int, flags: int, elements: list[tuple[bytes, bytes, int, int]]) -> bytes:
        """A node: (key, value, element flags or child pgid, kind) packed the way bbolt does."""
        header_end = 16 + 16 * len(elements)
        body = bytearray()
        heads = bytearray()
        for i, (key, value, extra, _kind) in enumerate(elements):
            pos = header_end + len(body) - (16 + 16 * i)
            if flags == 0x01:
                heads += struct.pack("<IIQ", pos, len(key), extra)
            else:
                heads += struct.pack("<IIII", extra, pos, len(key), len(value))
            body += key + value
        size = header_end + len(body)
        overflow = max(0, -(-size // self.page_size) - 1) if pgid else 0
        return struct.pack("<QHHI", pgid, flags, len(elements), overflow) + heads + body

    def node(self, flags: int, elements: list[tuple[bytes, bytes, int, int]]) -> int:
        pgid = self.next
        data = self._encode(pgid, flags, elements)
        pages = -(-len(data) // self.page_size)
        self.pages.append(data + bytes(pages * self.page_size - len(data)))
        self.next += pages
        return pgid

    def leaf(self, items: list[Element]) -> int:
        return self.node(0x02, [(k, v, f, 0) for f, k, v in items])

    def tree(self, items: list[Element], leaf_size: int, fanout: int) -> int:
        """A B+tree of ``items`` (sorted): leaves of ``leaf_size`` elements, branches of ``fanout`` children."""
        chunks = [items[i:i + leaf_size] for i in range(0, len(items), leaf_size)] or [[]]
        level = [(chunk[0][1] if chunk else b"", self.leaf(chunk)) for chunk in chunks]
        while len(level) > 1:
            level = [(group[0][0], self.node(0x01, [(k, b"", pgid, 1) for k, pgid in group]))
                     for group in (level[i:i + fanout] for i in range(0, len(level), fanout))]
        return level[0][1]

    def inline(self, items: list[Element]) -> bytes:
        """An inline bucket's value: its header (root 0) and its one leaf page."""
        return struct.pack("<QQ", 0, 0) + self._encode(0, 0x02, [(k, v, f, 0) for f, k, v in items])

    def bucket(self, items: list[Element], *, inline: bool, leaf_size: int = 8, fanout: int = 4) -> bytes:
        if inline:
            return self.inline(items)
        return struct.pack("<QQ", self.tree(items, leaf_size, fanout), 0)

    def finish(self, buckets: dict[bytes, bytes], *, txid: int = 7, trailer: bool = True,
               root_leaf_size: int = 64) -> bytes:
        root = self.tree([(0x01, name, value) for name, value in sorted(buckets.items())], root_leaf_size, 4)
        freelist = self.next
        self.pages.append(struct.pack("<QHHI", freelist, 0x10, 0, 0) + bytes(self.page_size - 16))
        self.next += 1
        meta = struct.pack("<IIIIQQQQQ", snapshot.BOLT_MAGIC, 2, self.page_size, 0, root, 0, freelist, self.next,
                           txid)
        meta += struct.pack("<Q", fnv1a64(meta))
        out = bytearray()
        for pgid in (0, 1):
            page = struct.pack("<QHHI", pgid, 0x04, 0, 0) + meta
            out += page + bytes(self.page_size - len(page))
        for page in self.pages:
            out += page
        assert len(out) == self.next * self.page_size
        return bytes(out) + (hashlib.sha256(out).digest() if trailer else b"")


def revision_key(main: int, sub: int, tombstone: bool) -> bytes:
    return struct.pack(">Q", main) + b"_" + struct.pack(">Q", sub) + (b"t" if tombstone else b"")


def kv_value(key: bytes, main: int, value: bytes, tombstone: bool, mod_first: bool) -> bytes:
    """A marshalled mvccpb.KeyValue (key = 1, create_revision = 2, mod_revision = 3, value = 5)."""
    mod = b"\x18" + varint(main)
    body = b"\x0a" + varint(len(key)) + key + b"\x10" + varint(main)
    if not tombstone:
        body += b"\x2a" + varint(len(value)) + value
    return mod + body if mod_first else body + mod


def etcd_history(ops: list[tuple[str, int, int]], *, mod_first: bool = False) -> tuple[list[Element], int, int]:
    """The ``key`` bucket etcd writes for ``ops`` (put or delete of key i, a value of n bytes; one revision each,
    a delete of an absent key writes nothing), the expected revision and the live keys at the end."""
    items: list[Element] = []
    live: set[bytes] = set()
    revision = 1
    for op, k, n in ops:
        key = f"/registry/k{k}".encode()
        if op == "del" and key not in live:
            continue
        revision += 1
        tomb = op == "del"
        items.append((0, revision_key(revision, 0, tomb), kv_value(key, revision, b"v" * n, tomb, mod_first)))
        (live.discard if tomb else live.add)(key)
    return items, (revision if items else 0), len(live)


def meta_bucket(bolt: Bolt, *, consistent_index: int = 42, compact: int | None = None,
                version: bytes | None = b"3.6.0", inline: bool = True) -> bytes:
    items = [(0, b"consistent_index", struct.pack(">Q", consistent_index)), (0, b"term", struct.pack(">Q", 3))]
    if compact is not None:
        items += [(0, b"finishedCompactRev", revision_key(compact, 0, False)),
                  (0, b"scheduledCompactRev", revision_key(compact, 0, False))]
    if version is not None:
        items.append((0, b"storageVersion", version))
    return bolt.bucket(sorted(items, key=lambda e: e[1]), inline=inline)


def etcd_db(ops: list[tuple[str, int, int]], *, page_size: int = 4096, leaf_size: int = 8, fanout: int = 4,
            inline: bool = False, trailer: bool = True, compact: int | None = None,
            mod_first: bool = False) -> tuple[bytes, int, int, int]:
    """A database etcd could have written; (bytes, revision, entries, live keys)."""
    bolt = Bolt(page_size)
    items, revision, live = etcd_history(ops, mod_first=mod_first)
    buckets = {b"key": bolt.bucket(items, inline=inline, leaf_size=leaf_size, fanout=fanout),
               b"meta": meta_bucket(bolt, compact=compact), b"lease": bolt.inline([]), b"alarm": bolt.inline([]),
               b"members": bolt.inline([(0, b"8e9e05c52164694d", b'{"id":1}')])}
    return bolt.finish(buckets, trailer=trailer), revision, len(items), live


def write(tmp_path: Path, data: bytes, name: str = "s.db") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def levels(path: Path) -> int:
    """How many levels the ``key`` bucket's tree has (1: a single leaf page or an inline bucket)."""
    with path.open("rb") as f:
        reader = snapshot._BoltReader(str(path), f, path.stat().st_size)
        value = reader.buckets()[b"key"]
        root = struct.unpack_from("<Q", value)[0]
        if root == 0:
            return 1
        depth = 1
        while True:
            node, flags = reader.page(root, "test")
            if flags == 0x02:
                return depth
            root = reader.children(node, "test")[-1][0]
            depth += 1


# -- against the model ---------------------------------------------------------------------------------------------

ops_strategy = st.lists(st.tuples(st.sampled_from(["put", "put", "del"]), st.integers(0, 30), st.integers(0, 300)),
                        max_size=250)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops_strategy, page_size=st.sampled_from([512, 1024, 4096]), leaf_size=st.integers(1, 40),
       fanout=st.integers(2, 9), trailer=st.booleans(), mod_first=st.booleans())
def test_the_model_is_read_back_at_any_shape(tmp_path: Path, ops: list[tuple[str, int, int]], page_size: int,
                                            leaf_size: int, fanout: int, trailer: bool, mod_first: bool) -> None:
    data, revision, entries, live = etcd_db(ops, page_size=page_size, leaf_size=leaf_size, fanout=fanout,
                                            trailer=trailer, mod_first=mod_first)
    path = write(tmp_path, data)
    got = snapshot.content_revision(path, keys=True)
    assert (got.revision, got.revisions_count, got.keys) == (revision, entries, live)
    assert (got.consistent_index, got.term, got.storage_version, got.page_size) == (42, 3, "3.6.0", page_size)
    assert got.compact_revision is None and got.served_revision == max(revision, 1)
    assert snapshot.content_revision(path) == snapshot.SnapshotContent(**{**got.__dict__, "keys": None})


def test_a_deep_tree_with_overflow_pages(tmp_path: Path) -> None:
    ops = [("put", i % 700, (i * 37) % 900) for i in range(3000)] + [("del", i, 0) for i in range(0, 700, 3)]
    ops.append(("put", 1, 20000))  # a value of five 4 KiB pages: a leaf with overflow pages
    data, revision, entries, live = etcd_db(ops, leaf_size=7, fanout=5)
    path = write(tmp_path, data)
    got = snapshot.content_revision(path, keys=True)
    assert (got.revision, got.revisions_count, got.keys) == (revision, entries, live) == (3236, 3235, 700 - 234)
    assert levels(path) >= 5


def test_an_inline_key_bucket_and_an_empty_one(tmp_path: Path) -> None:
    data, revision, entries, _ = etcd_db([("put", 1, 3), ("put", 2, 3), ("del", 1, 0)], inline=True)
    got = snapshot.content_revision(write(tmp_path, data), keys=True)
    assert (got.revision, got.revisions_count, got.keys) == (4, 3, 1)
    empty = snapshot.content_revision(write(tmp_path, etcd_db([], inline=True)[0], "e.db"), keys=True)
    assert (empty.revision, empty.revisions_count, empty.keys, empty.served_revision) == (0, 0, 0, 1)
    assert snapshot.content_revision(write(tmp_path, etcd_db([])[0], "t.db")).revision == 0  # an empty root leaf


def test_compaction_revisions_and_the_served_revision(tmp_path: Path) -> None:
    bolt = Bolt()
    items, _, _ = etcd_history([("put", 1, 5), ("put", 2, 5)])  # revisions 2 and 3
    buckets = {b"key": bolt.bucket(items, inline=True), b"meta": meta_bucket(bolt, compact=9, version=None)}
    got = snapshot.content_revision(write(tmp_path, bolt.finish(buckets)))
    assert (got.revision, got.compact_revision, got.scheduled_compact_revision) == (3, 9, 9)
    assert got.served_revision == 9 and got.storage_version is None  # etcd 3.5 writes no storageVersion


def test_a_database_with_a_missing_meta_bucket_still_has_a_revision(tmp_path: Path) -> None:
    bolt = Bolt()
    items, _, _ = etcd_history([("put", 1, 5)])
    got = snapshot.content_revision(write(tmp_path, bolt.finish({b"key": bolt.bucket(items, inline=False)})))
    assert got.revision == 2 and got.consistent_index is None and got.term is None


def test_the_newer_meta_page_wins(tmp_path: Path) -> None:
    old_bolt, new_bolt = Bolt(), Bolt()
    old = old_bolt.finish({b"key": old_bolt.bucket(etcd_history([("put", 1, 5)])[0], inline=True)}, txid=5,
                          trailer=False)
    new = new_bolt.finish({b"key": new_bolt.bucket(etcd_history([("put", 1, 5)] * 4)[0], inline=True)}, txid=6,
                          trailer=False)
    assert len(old) == len(new)
    mixed = bytearray(new)
    mixed[:4096] = old[:4096]  # meta page 0 from txid 5 (same root page), meta page 1 from txid 6
    assert snapshot.content_revision(write(tmp_path, bytes(mixed))).txid == 6
    mixed[4096 + 16 + 20] ^= 1  # break meta 1's checksum: bbolt falls back to meta 0
    assert snapshot.content_revision(write(tmp_path, bytes(mixed), "b.db")).txid == 5


# -- what cannot be read says why ---------------------------------------------------------------------------------


def error(path: Path) -> str:
    with pytest.raises(snapshot.SnapshotContentError) as caught:
        snapshot.content_revision(path)
    assert isinstance(caught.value, snapshot.InvalidSnapshot) and isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_short_empty_and_foreign_files(tmp_path: Path) -> None:
    assert "too short for a bbolt database" in error(write(tmp_path, b""))
    assert "too short" in error(write(tmp_path, b"x" * 1000, "short.db"))
    assert "not a bbolt database: no magic" in error(write(tmp_path, b"SQLite format 3\0" + bytes(8192), "f.db"))
    with pytest.raises(FileNotFoundError):
        snapshot.content_revision(tmp_path / "missing.db")


def test_both_meta_pages_corrupted(tmp_path: Path) -> None:
    data = bytearray(etcd_db([("put", 1, 1)])[0])
    data[16 + 40] ^= 1
    data[4096 + 16 + 40] ^= 1
    assert "both bbolt meta pages are corrupted (page 0: checksum mismatch; page 1: checksum mismatch)" in error(
        write(tmp_path, bytes(data)))


@pytest.mark.parametrize("keep", [8192 + 1, 4096 * 5, 4096 * 9 - 1])
def test_a_truncated_file_says_truncated(tmp_path: Path, keep: int) -> None:
    data = etcd_db([("put", i, 100) for i in range(60)])[0]
    assert "truncated: the bbolt meta page (txid 7) promises a" in error(write(tmp_path, data[:keep]))


def test_a_loop_in_the_tree(tmp_path: Path) -> None:
    data, *_ = etcd_db([("put", i, 10) for i in range(40)], leaf_size=2, fanout=3, trailer=False)
    path = write(tmp_path, data)
    with path.open("rb") as f:
        reader = snapshot._BoltReader(str(path), f, len(data))
        root = struct.unpack_from("<Q", reader.buckets()[b"key"])[0]
        node, _ = reader.page(root, "test")
        child = reader.children(node, "test")[0][0]
    looped = bytearray(data)
    struct.pack_into("<Q", looped, child * 4096 + 16 + 8, root)  # the first child's first child is the root
    assert f"page {root} appears twice in the tree of bucket 'key'" in error(write(tmp_path, bytes(looped), "l.db"))


def test_a_page_that_is_not_where_it_says(tmp_path: Path) -> None:
    data = bytearray(etcd_db([("put", i, 10) for i in range(40)], leaf_size=4, trailer=False)[0])
    struct.pack_into("<Q", data, 3 * 4096, 99)
    assert "page 3 (bucket 'key', level 2) says it is page 99" in error(write(tmp_path, bytes(data)))


def test_no_key_bucket_is_not_etcd(tmp_path: Path) -> None:
    bolt = Bolt()
    data = bolt.finish({b"widgets": bolt.inline([]), b"meta": meta_bucket(bolt)})
    assert "not an etcd database: no 'key' bucket (buckets: meta, widgets)" in error(write(tmp_path, data))


def test_a_key_that_is_not_a_revision(tmp_path: Path) -> None:
    bolt = Bolt()
    data = bolt.finish({b"key": bolt.bucket([(0, b"/registry/pods/x", b"v")], inline=True)})
    assert "b'/registry/pods/x' in the 'key' bucket (the inline page of bucket 'key') is not a revision" in error(
        write(tmp_path, data))


def test_keys_out_of_order(tmp_path: Path) -> None:
    items, _, _ = etcd_history([("put", i, 5) for i in range(10)])
    bolt = Bolt()
    data = bolt.finish({b"key": bolt.bucket(items[5:] + items[:5], inline=False, leaf_size=5)})
    assert "the 'key' bucket's keys are out of order" in error(write(tmp_path, data))


def test_a_value_that_is_not_a_key_value_when_counting_keys(tmp_path: Path) -> None:
    bolt = Bolt()
    data = bolt.finish({b"key": bolt.bucket([(0, revision_key(2, 0, False), b"\x0a\x7fshort")], inline=True)})
    path = write(tmp_path, data)
    assert snapshot.content_revision(path).revision == 2  # the values are read only to count keys
    with pytest.raises(snapshot.SnapshotContentError, match=r"the value of revision 2_0 .* is not an etcd KeyValue"):
        snapshot.content_revision(path, keys=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_corruption_is_an_answer_or_a_clear_error(tmp_path: Path, data: st.DataObject) -> None:
    """Flipped bytes anywhere, or a cut anywhere: a :class:`SnapshotContent` (the damage was where nothing is read,
    or read as other valid values) or :class:`SnapshotContentError` — nothing else, and in bounded time."""
    original, *_ = etcd_db([("put", i % 25, (i * 13) % 200) for i in range(120)], page_size=512, leaf_size=6,
                           fanout=3, trailer=False)
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        damaged = damaged[:data.draw(st.integers(0, len(damaged)))]
    path = write(tmp_path, bytes(damaged))
    started = time.monotonic()
    try:
        got = snapshot.content_revision(path, keys=data.draw(st.booleans()))
    except snapshot.SnapshotContentError as err:
        assert str(err).startswith(f"{path}: ")
    else:
        assert got.revision >= 0 and got.revisions_count >= 0
    assert time.monotonic() - started < 2


# -- against etcdutl, on real snapshots (slow) ----------------------------------------------------------------------


class Member:
    """One etcd member on loopback (its own throwaway cluster: :class:`e2e.localcluster.LocalEtcdCluster`, on a
    reserved address), spoken to through the JSON gateway."""

    def __init__(self, component: str, base: Path) -> None:
        from e2e import localcluster
        from opsmanager_sandbox import realcp

        self.tool = lambda name: str(realcp.binary(component, name))
        self.cluster = localcluster.LocalEtcdCluster(1, mode="plain", base_dir=base, log_level="warn")
        self.cluster.binary = realcp.binary(component, "etcd")
        self.cluster.start()
        endpoint = self.cluster.endpoints()[0]
        self.url = endpoint.url("http")
        self.http = http.client.HTTPConnection(endpoint.host, endpoint.client_port, timeout=10)

    def call(self, path: str, body: dict[str, object]) -> dict[str, object]:
        self.http.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = self.http.getresponse()
        payload = response.read()
        assert response.status == 200, payload
        result: dict[str, object] = json.loads(payload)
        return result

    def put(self, key: str, value: bytes) -> int:
        got = self.call("/v3/kv/put", {"key": b64(key.encode()), "value": b64(value)})
        return int(got["header"]["revision"])  # type: ignore[index]

    def delete_prefix(self, prefix: str) -> int:
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        got = self.call("/v3/kv/deleterange", {"key": b64(prefix.encode()), "range_end": b64(end.encode())})
        return int(got["header"]["revision"])  # type: ignore[index]

    def compact(self, revision: int) -> None:
        self.call("/v3/kv/compaction", {"revision": revision, "physical": True})

    def save(self, path: Path) -> Path:
        subprocess.run([self.tool("etcdctl"), f"--endpoints={self.url}", "snapshot", "save", str(path)],
                       capture_output=True, check=True, timeout=60)
        return path

    def status(self, path: Path, etcdutl: str | None = None) -> dict[str, object]:
        out = subprocess.run([etcdutl or self.tool("etcdutl"), "snapshot", "status", str(path), "-w", "json"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
        result: dict[str, object] = json.loads(out)
        return result

    def close(self) -> None:
        self.http.close()
        self.cluster.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module", params=["etcd-3.5", "etcd-3.6"])
def member(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Member]:
    m = Member(request.param, tmp_path_factory.mktemp(request.param))
    try:
        yield m
    finally:
        m.close()


@pytest.mark.slow
def test_etcdutl_agrees_on_real_snapshots(member: Member, tmp_path: Path) -> None:
    """An empty store, one key, 3000 keys (branch levels), a range deleted, a compaction at the newest revision (a
    tombstone), a value on overflow pages: each snapshot's revision (and live keys) is etcdutl's, and the revision
    the member served when the snapshot was taken."""
    taken: list[tuple[str, Path, int]] = []

    def save(label: str, served: int) -> None:
        taken.append((label, member.save(tmp_path / f"{label}.db"), served))

    status = member.call("/v3/maintenance/status", {})
    save("empty", int(status["header"]["revision"]))  # type: ignore[index]
    save("one", member.put("/a", b"1"))
    for i in range(3000):
        revision = member.put(f"/registry/k{i:05d}", b"v" * (i * 7 % 600))
    save("thousands", revision)
    save("deleted", member.delete_prefix("/registry/k029"))
    member.put("/x", b"y")
    last = member.delete_prefix("/x")
    member.compact(last)
    save("compacted", last)
    save("overflow", member.put("/big", b"z" * 100_000))
    from opsmanager_sandbox import realcp

    etcdutl_36 = str(realcp.binary("etcd-3.6", "etcdutl"))  # 3.5's etcdutl counts every bucket's entries as keys
    for label, path, served in taken:
        got = snapshot.content_revision(path, keys=True)
        want, want_36 = member.status(path), member.status(path, etcdutl_36)
        assert (got.revision, got.keys) == (want["revision"], want_36["totalKey"]), label
        assert want_36["revision"] == want["revision"], label
        assert got.served_revision == served and got.revision == (served if label != "empty" else 0), label
        assert got.storage_version == (want_36["version"] or None), label
        assert snapshot.verify(path).ok, label
    contents = {label: snapshot.content_revision(path) for label, path, _ in taken}
    assert contents["thousands"].revisions_count == 3001 and levels(tmp_path / "thousands.db") >= 2
    assert contents["deleted"].revisions_count == 3101  # 100 tombstones, one revision (subs 0..99)
    assert contents["compacted"].compact_revision == last and contents["compacted"].revisions_count < 3103
