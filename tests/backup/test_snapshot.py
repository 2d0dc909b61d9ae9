"""opsmanager.backup.snapshot without etcd: the file checks on synthetic bbolt files, key naming, retention.

The synthetic file is laid out as bbolt's ``Tx.WriteTo`` writes a database (two identical meta pages, then the data
pages, ``pgid × pageSize`` bytes in all) followed by etcd's sha256 trailer; tests/backup/test_snapshot_etcd.py checks
the same functions on snapshots of a real etcd.
"""

from __future__ import annotations

import datetime
import hashlib
import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opsmanager.backup import snapshot

UTC = datetime.UTC


def fnv1a64(data: bytes) -> int:  # an independent FNV-1a (64-bit), the checksum of bbolt's meta
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) % (1 << 64)
    return h


def bolt_db(pages: int = 6, page_size: int = 4096, txid: int = 9, seed: int = 1) -> bytes:
    meta = struct.pack("<IIIIQQQQQ", snapshot.BOLT_MAGIC, 2, page_size, 0, 3, 0, 2, pages, txid)
    meta += struct.pack("<Q", fnv1a64(meta))
    out = bytearray()
    for pgid in (0, 1):
        page = struct.pack("<QHHI", pgid, 0x04, 0, 0) + meta
        out += page + bytes(page_size - len(page))
    out += random.Random(seed).randbytes((pages - 2) * page_size)
    return bytes(out)


def snapshot_bytes(**kwargs: int) -> bytes:
    db = bolt_db(**kwargs)
    return db + hashlib.sha256(db).digest()


def write(tmp_path: Path, data: bytes, name: str = "s.db") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_fnv_matches_a_known_vector() -> None:
    assert snapshot._fnv1a64(b"a") == 0xAF63DC4C8601EC8C == fnv1a64(b"a")


def test_a_complete_snapshot_passes(tmp_path: Path) -> None:
    data = snapshot_bytes()
    check = snapshot.verify(write(tmp_path, data))
    assert check.ok and check.reason == ""
    assert check.size == len(data) and check.database_size == len(data) - 32
    assert check.embedded_sha256 == check.computed_sha256 == data[-32:].hex()
    assert check.page_size == 4096 and check.txid == 9
    check.raise_if_bad()
    assert snapshot.sha256_file(tmp_path / "s.db") == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(("cut", "words"), [
    (1, "truncated"), (32, "truncated"), (4096, "truncated"), (4096 * 4 + 32, "truncated"),
    (4096 * 6 + 32 - 2 * 512 - 31, "too short"),
])
def test_a_truncated_snapshot_says_so(tmp_path: Path, cut: int, words: str) -> None:
    data = snapshot_bytes()
    check = snapshot.verify(write(tmp_path, data[:-cut]))
    assert not check.ok and words in check.reason
    with pytest.raises(snapshot.InvalidSnapshot, match=words):
        check.raise_if_bad()


def test_the_truncation_reason_gives_the_numbers(tmp_path: Path) -> None:
    data = snapshot_bytes()
    check = snapshot.verify(write(tmp_path, data[:-100]))
    assert check.reason == (f"truncated: the bbolt meta page (txid 9) promises a {6 * 4096}-byte database, so "
                            f"{6 * 4096 + 32} bytes with the sha256 trailer; the file has {len(data) - 100} "
                            "(100 missing)")


def test_bytes_appended_are_reported(tmp_path: Path) -> None:
    data = snapshot_bytes()
    assert "no sha256 trailer" in snapshot.verify(write(tmp_path, data + b"x")).reason
    check = snapshot.verify(write(tmp_path, data + bytes(512)))
    assert "512 bytes more than the bbolt meta page" in check.reason


def test_a_flipped_data_byte_is_a_sha_mismatch(tmp_path: Path) -> None:
    data = bytearray(snapshot_bytes())
    data[3 * 4096 + 17] ^= 0x01
    check = snapshot.verify(write(tmp_path, bytes(data)))
    assert not check.ok and check.reason.startswith("sha256 mismatch: the trailer says ")
    assert "the file is corrupted" in check.reason and check.embedded_sha256 != check.computed_sha256


def test_not_a_bbolt_file(tmp_path: Path) -> None:
    data = bytearray(snapshot_bytes())
    data[16:20] = b"\0\0\0\0"
    assert snapshot.verify(write(tmp_path, bytes(data))).reason.startswith(
        "not a bbolt database: no magic 0xed0cdaed in the meta page at offset 16 (found 0x00000000)")


def test_both_meta_pages_corrupted(tmp_path: Path) -> None:
    data = bytearray(snapshot_bytes())
    for page in (0, 1):
        data[page * 4096 + 16 + 40] ^= 0xFF  # the freelist pgid: the checksum no longer matches
    reason = snapshot.verify(write(tmp_path, bytes(data))).reason
    assert reason == "both bbolt meta pages are corrupted (page 0: checksum mismatch; page 1: checksum mismatch)"


def test_one_corrupted_meta_page_falls_back_to_the_other_and_the_sha_catches_it(tmp_path: Path) -> None:
    data = bytearray(snapshot_bytes())
    data[16 + 40] ^= 0xFF
    assert "sha256 mismatch" in snapshot.verify(write(tmp_path, bytes(data))).reason


def test_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        snapshot.verify(tmp_path / "nope.db")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pages=st.integers(2, 12), page_size=st.sampled_from([512, 1024, 4096, 16384]), data=st.data())
def test_any_truncation_or_single_bit_flip_fails(tmp_path: Path, pages: int, page_size: int,
                                                 data: st.DataObject) -> None:
    whole = snapshot_bytes(pages=pages, page_size=page_size)
    assert snapshot.verify(write(tmp_path, whole)).ok
    cut = data.draw(st.integers(1, len(whole) - 1), label="cut")
    check = snapshot.verify(write(tmp_path, whole[:-cut]))
    assert not check.ok and check.reason
    where = data.draw(st.integers(0, len(whole) - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    flipped = bytearray(whole)
    flipped[where] ^= 1 << bit
    check = snapshot.verify(write(tmp_path, bytes(flipped)))
    assert not check.ok and check.reason


# -- keys ----------------------------------------------------------------------------------------------------------

def test_object_key_layout() -> None:
    at = datetime.datetime(2026, 12, 2, 16, 4, 55, 999_999, tzinfo=UTC)
    assert snapshot.object_key("backups", "demo", "etcd-cluster", at, 1234) == \
        "backups/demo/etcd-cluster/20261202T160455Z-rev1234.db"
    assert snapshot.object_key("/a/b/", "demo", "db", at, 0) == "a/b/demo/db/20261202T160455Z-rev0.db"
    assert snapshot.object_key("", "demo", "db", at, 7) == "demo/db/20261202T160455Z-rev7.db"
    tokyo = datetime.timezone(datetime.timedelta(hours=9))
    assert snapshot.object_key("p", "n", "e", at.astimezone(tokyo), 1) == "p/n/e/20261202T160455Z-rev1.db"


@pytest.mark.parametrize(("args", "words"), [
    (("p", "demo", "db", datetime.datetime(2026, 1, 1), 1), "no timezone"),
    (("p", "demo", "db", datetime.datetime(2026, 1, 1, tzinfo=UTC), -1), "negative"),
    (("p", "Demo", "db", datetime.datetime(2026, 1, 1, tzinfo=UTC), 1), "namespace 'Demo'"),
    (("p", "demo", "a/b", datetime.datetime(2026, 1, 1, tzinfo=UTC), 1), "etcd 'a/b'"),
    (("a//b", "demo", "db", datetime.datetime(2026, 1, 1, tzinfo=UTC), 1), "empty, '.' or '..'"),
    (("a/../b", "demo", "db", datetime.datetime(2026, 1, 1, tzinfo=UTC), 1), "empty, '.' or '..'"),
])
def test_object_key_refuses(args: tuple[str, str, str, datetime.datetime, int], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        snapshot.object_key(*args)


@pytest.mark.parametrize(("key", "words"), [
    ("db/x.db", "is not <prefix>"),
    ("p/demo/db/20261202T160455Z.db", "is not <YYYYMMDDTHHMMSSZ>-rev<revision>.db"),
    ("p/demo/db/20261399T160455Z-rev1.db", "is not a date"),
    ("p/Demo/db/20261202T160455Z-rev1.db", "namespace 'Demo'"),
])
def test_parse_key_refuses(key: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        snapshot.parse_key(key)


def test_parse_key_checks_the_prefix() -> None:
    key = "a/b/demo/db/20261202T160455Z-rev5.db"
    assert snapshot.parse_key(key, "/a/b/").prefix == "a/b"
    with pytest.raises(ValueError, match="not under the prefix 'a'"):
        snapshot.parse_key(key, "a")


names = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")
prefixes = st.lists(st.from_regex(r"\A[A-Za-z0-9_.-]{1,8}\Z").filter(lambda s: s not in (".", "..")),
                    max_size=3).map("/".join)
times = st.datetimes(min_value=datetime.datetime(2000, 1, 1), max_value=datetime.datetime(2999, 12, 31),
                     timezones=st.just(UTC)).map(lambda t: t.replace(microsecond=0))


@given(prefix=prefixes, namespace=names, etcd=names, taken_at=times, revision=st.integers(0, 2**63))
def test_keys_round_trip(prefix: str, namespace: str, etcd: str, taken_at: datetime.datetime, revision: int) -> None:
    key = snapshot.object_key(prefix, namespace, etcd, taken_at, revision)
    parsed = snapshot.parse_key(key, prefix)
    assert (parsed.prefix, parsed.namespace, parsed.etcd, parsed.taken_at, parsed.revision) == \
        (prefix, namespace, etcd, taken_at, revision)
    assert parsed.key == key


# -- retention ------------------------------------------------------------------------------------------------------

def at(day: int, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 12, day, 0, 0, second, tzinfo=UTC)


def test_to_prune_keeps_the_newest_per_cluster_and_ignores_strangers() -> None:
    a = [snapshot.object_key("p", "ns", "a", at(d), 10 * d) for d in (1, 2, 3, 4)]
    b = [snapshot.object_key("p", "ns", "b", at(d), d) for d in (1, 5, 6)]
    strangers = ["p/ns/a/notes.txt", "p/ns/a/20261201T000000Z-rev007.db", "p/README"]
    assert snapshot.to_prune([*strangers, *reversed(a), *b], keep=2) == [b[0], a[0], a[1]]
    assert snapshot.to_prune(a, keep=4) == [] and snapshot.to_prune(a, keep=9) == []


def test_to_prune_orders_by_time_then_revision() -> None:
    same_second = [snapshot.object_key("p", "ns", "a", at(1), r) for r in (30, 10, 20)]
    assert snapshot.to_prune(same_second, keep=1) == [same_second[1], same_second[2]]


def test_to_prune_never_deletes_everything() -> None:
    with pytest.raises(ValueError, match="keep must be at least 1"):
        snapshot.to_prune([], keep=0)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 28), st.integers(0, 59),
                          st.integers(0, 10**6)), max_size=30, unique=True),
       st.integers(1, 6))
def test_to_prune_properties(entries: list[tuple[str, int, int, int]], keep: int) -> None:
    keys = [snapshot.object_key("p", "ns", etcd, at(day, second), rev) for etcd, day, second, rev in entries]
    doomed = snapshot.to_prune(keys, keep)
    assert set(doomed) <= set(keys) and len(doomed) == len(set(doomed))
    for etcd in "abc":
        mine = sorted((snapshot.parse_key(k) for k in set(keys) if f"/{etcd}/" in k), reverse=True)
        kept = [s.key for s in mine if s.key not in doomed]
        assert kept == [s.key for s in mine[:keep]]  # exactly the newest `keep` survive
    assert doomed == sorted(doomed, key=snapshot.parse_key)  # oldest first
