"""The writer's read-back verdict (pure): every acknowledged sequence number must be stored; the missing ones are
named, runs collapsed, so a failure message says which writes were lost. And its longest gap says where the time
went (a fake client)."""

from __future__ import annotations

import asyncio

import pytest

from e2e import writer
from opsmanager.etcd import access, errors


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


class _SlowFirstMember:
    """A client whose put to ``m0`` times out (after ``delay``) on the third op; every other put succeeds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.kv = self

    async def put(self, key: bytes, value: bytes, *, endpoint: access.Endpoint, scheme: str,
                  timeout: float) -> None:
        if endpoint.name == "m0" and value == b"3":
            await asyncio.sleep(self.delay)
            raise errors.RequestTimeout("no answer before the deadline", endpoint="m0")


async def test_the_longest_gap_names_the_failed_tries_of_the_op_that_ended_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    targets = [writer.Target(access.Endpoint(name, "127.0.0.1"), "http") for name in ("m0", "m1")]
    w = writer.Writer(targets, interval=0.01, try_timeout=0.5)
    fake = _SlowFirstMember(delay=0.3)
    monkeypatch.setattr(w, "_client_for", lambda target: fake)
    await w.start()
    await w.wait_ok(5)
    result = await w.stop()
    assert result.failed == 0
    assert result.max_gap >= 0.3
    tries = result.max_gap_tries
    assert len(tries) == 2, tries
    assert tries[0].startswith("m0/http: RequestTimeout: no answer before the deadline ("), tries
    assert 0.3 <= float(tries[0].rsplit("(", 1)[1].rstrip("s)")) < result.max_gap
    assert tries[1].startswith("acknowledged "), tries
    assert result.max_gap <= result.max_gap_end <= result.duration
    assert result.longest_gap().endswith(f"the op that ended it: {list(tries)}")
