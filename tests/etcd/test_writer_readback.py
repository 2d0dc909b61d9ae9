"""The writer's read-back verdict (pure): every acknowledged sequence number must be stored; the missing ones are
named, runs collapsed, so a failure message says which writes were lost."""

from __future__ import annotations

import pytest

from e2e import writer
from opsmanager.etcd import access


def test_each_op_has_its_own_key_sorting_in_write_order() -> None:
    assert writer.key_for(b"/w", 7) == b"/w/00000007"
    assert sorted([writer.key_for(b"/w", 10), writer.key_for(b"/w", 9)]) == [b"/w/00000009", b"/w/00000010"]


def test_missing_writes_are_the_acknowledged_ones_not_stored() -> None:
    assert writer.missing_writes([1, 2, 3], [1, 2, 3, 4]) == ()
    assert writer.missing_writes([1, 2, 3, 5, 6, 9], [2, 9]) == (1, 3, 5, 6)


def test_lost_writes_name_the_missing_sequence_numbers() -> None:
    read = writer.ReadBack(prefix=b"/w", acknowledged=10, stored=5, missing=(1, 2, 3, 7), revision=42, via="m0/http")
    assert not read.ok
    with pytest.raises(AssertionError, match=r"4 of 10 acknowledged writes missing .* seq 1-3, 7$"):
        raise writer.LostWrites(read)
    assert writer.ReadBack(b"/w", 3, 3, (), 5, "m0/http").describe().startswith("all 3 acknowledged writes")


def test_a_prefix_with_a_trailing_slash_is_refused_and_each_writer_has_its_own_by_default() -> None:
    target = writer.Target(access.Endpoint("m0", "127.0.0.1"), "http")
    with pytest.raises(ValueError, match="prefix"):
        writer.Writer([target], prefix=b"/w/")
    # a second writer on the same cluster must not find the first one's keys under its own prefix
    assert writer.Writer([target]).prefix != writer.Writer([target]).prefix
