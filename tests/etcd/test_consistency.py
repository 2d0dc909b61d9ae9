"""Comparing HashKV results (pure): equal hashes at one revision pass; a member that disagrees is named;
members whose compaction differs are not compared (their hashes legitimately differ)."""

from __future__ import annotations

from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import kv, maintenance


def h(name: str, value: int, *, revision: int = 10, compacted: int = 0) -> etcd_client.KVHash:
    return etcd_client.KVHash(endpoint=name, member_id=hash(name) & 0xFFFF, revision=revision, hash=value,
                              compact_revision=compacted)


def test_equal_hashes_are_consistent() -> None:
    assert maintenance.inconsistent_hashes([h("m0", 7), h("m1", 7), h("m2", 7)]) == []


def test_a_diverged_member_is_named() -> None:
    problems = maintenance.inconsistent_hashes([h("m0", 7), h("m1", 7), h("m2", 9)])
    assert len(problems) == 1 and "m2=00000009" in problems[0] and "revision 10" in problems[0]


def test_different_compaction_is_not_compared() -> None:
    assert maintenance.inconsistent_hashes([h("m0", 7, compacted=5), h("m1", 8, compacted=6)]) == []


def test_prefix_end_covers_every_key_under_the_prefix() -> None:
    assert kv.prefix_end(b"/w/") == b"/w0"
    assert kv.prefix_end(b"a\xff") == b"b"
    assert kv.prefix_end(b"\xff\xff") == b"\x00"
