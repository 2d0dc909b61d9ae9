"""The linearizability checker on fabricated histories: what it accepts, what it refuses, and how it reads an
operation whose outcome is unknown.

We test these aspects:
* a valid concurrent history of puts, reads and compare-and-swaps is accepted;
* a stale read is refused, and the refusal comes with porcupine's visualisation;
* a put that timed out may take effect at any time after its call (even after later reads saw the old value), but
  once read it stays; a read of a value no one wrote is refused;
* a read whose outcome is unknown constrains nothing;
* revisions across keys follow real time; a compare-and-swap holds only against the current mod revision;
* a malformed history is an error, not a verdict.
"""

from __future__ import annotations

import pathlib

import pytest

from e2e import history, lincheck

Op = history.Operation


def put(client: int, key: str, value: str, call: int, ret: int | None, rev: int = 0, *,
        unknown: bool = False) -> Op:
    if unknown:
        return Op(client=client, kind="put", key=key, value=value, call=call, return_=ret, outcome="unknown",
                  error="RequestTimeout: no answer before the deadline")
    return Op(client=client, kind="put", key=key, value=value, call=call, return_=ret, outcome="ok", revision=rev)


def get(client: int, key: str, call: int, ret: int, rev: int, value: str | None = None, mod: int = 0) -> Op:
    return Op(client=client, kind="get", key=key, call=call, return_=ret, outcome="ok", revision=rev,
              found=value is not None, read_value=value or "", mod_revision=mod)


def txn(client: int, key: str, value: str, expect: int, call: int, ret: int, rev: int, *, held: bool,
        current: str | None = None, mod: int = 0) -> Op:
    return Op(client=client, kind="txn", key=key, value=value, expect=expect, call=call, return_=ret, outcome="ok",
              revision=rev, succeeded=held, found=current is not None, read_value=current or "", mod_revision=mod)


async def verdict(tmp_path: pathlib.Path, *ops: Op) -> lincheck.Verdict:
    return await lincheck.check(history.History(prefix="/t", operations=ops), tmp_path)


# Two clients racing on k; a third reading; revisions jump (someone else writes elsewhere in the cluster).
VALID = (
    put(0, "k", "a", 0, 10, rev=5),
    get(1, "k", 2, 12, rev=5, value="a", mod=5),  # overlaps the put: may see it
    txn(2, "k", "b", 5, 13, 20, rev=9, held=True),
    put(0, "k", "c", 15, 25, rev=11),  # overlaps the txn, lands after it
    txn(1, "k", "d", 9, 26, 30, rev=12, held=False, current="c", mod=11),
    get(2, "j", 31, 35, rev=14),  # another key, absent
    get(0, "k", 31, 40, rev=14, value="c", mod=11),
)


async def test_a_valid_concurrent_history_is_accepted(tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    result = await verdict(tmp_path, *VALID)
    assert result.ok, result.describe()
    assert (result.operations, result.keys, result.unknown) == (7, 2, 0)
    assert result.visualization is None and not (tmp_path / "history.html").exists()


async def test_a_stale_read_is_refused_with_a_visualisation(tmp_path: pathlib.Path,
                                                           lincheck_binary: pathlib.Path) -> None:
    # c was acknowledged (rev 11) before this read started; the read still answers b.
    stale = get(2, "k", 41, 45, rev=14, value="b", mod=9)
    result = await verdict(tmp_path, *VALID, stale)
    assert result.verdict == "not linearizable"
    assert result.visualization == tmp_path / "history.html"
    page = result.visualization.read_text()
    assert "get(k) -\\u003e b@9 (rev 14)" in page  # the refused read, in the page's data (JSON: '>' escaped)
    with pytest.raises(lincheck.NotLinearizable, match="not linearizable.*visualisation"):
        result.raise_for_problems()


async def test_a_timed_out_put_may_take_effect_later(tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    result = await verdict(
        tmp_path,
        put(0, "k", "a", 0, 10, rev=5),
        put(1, "k", "lost?", 11, 20, unknown=True),
        get(2, "k", 21, 25, rev=5, value="a", mod=5),  # not yet applied
        get(2, "k", 26, 30, rev=7, value="lost?", mod=7),  # applied now, after the client gave up
    )
    assert result.ok, result.describe()
    assert result.unknown == 1


async def test_a_timed_out_put_that_was_never_read_is_fine(tmp_path: pathlib.Path,
                                                          lincheck_binary: pathlib.Path) -> None:
    result = await verdict(tmp_path, put(0, "k", "a", 0, 10, rev=5), put(1, "k", "b", 11, None, unknown=True),
                           get(2, "k", 21, 25, rev=8, value="a", mod=5))
    assert result.ok, result.describe()


async def test_once_read_a_timed_out_put_stays(tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    result = await verdict(
        tmp_path,
        put(0, "k", "a", 0, 10, rev=5),
        put(1, "k", "b", 11, 20, unknown=True),
        get(2, "k", 21, 25, rev=7, value="b", mod=7),
        get(2, "k", 26, 30, rev=7, value="a", mod=5),  # back to a: b cannot be undone
    )
    assert result.verdict == "not linearizable"


async def test_a_timed_out_put_is_not_read_before_its_call(tmp_path: pathlib.Path,
                                                          lincheck_binary: pathlib.Path) -> None:
    result = await verdict(tmp_path, get(0, "k", 0, 10, rev=3, value="b", mod=3),
                           put(1, "k", "b", 11, 20, unknown=True))
    assert result.verdict == "not linearizable"


async def test_a_read_of_a_value_never_written_is_refused(tmp_path: pathlib.Path,
                                                         lincheck_binary: pathlib.Path) -> None:
    result = await verdict(tmp_path, put(0, "k", "a", 0, 10, rev=5), put(1, "k", "b", 11, 20, unknown=True),
                           get(2, "k", 21, 25, rev=7, value="zzz", mod=6))
    assert result.verdict == "not linearizable"


async def test_a_read_whose_outcome_is_unknown_constrains_nothing(tmp_path: pathlib.Path,
                                                                 lincheck_binary: pathlib.Path) -> None:
    failed_read = Op(client=1, kind="get", key="k", call=11, return_=20, outcome="unknown",
                     error="MemberUnreachable: member unreachable")
    result = await verdict(tmp_path, put(0, "k", "a", 0, 10, rev=5), failed_read,
                           get(2, "k", 21, 25, rev=5, value="a", mod=5))
    assert result.ok, result.describe()
    assert result.unknown == 1


async def test_revisions_follow_real_time_across_keys(tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    # Each key alone is fine; but the read of j started after the put of k returned at revision 9, and answered at 4.
    result = await verdict(tmp_path, put(0, "k", "a", 0, 10, rev=9), get(1, "j", 11, 20, rev=4))
    assert result.verdict == "not linearizable"
    assert any("revision went back" in p for p in result.problems), result.problems


async def test_two_writes_never_share_a_revision(tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    result = await verdict(tmp_path, put(0, "k", "a", 0, 10, rev=9), put(1, "j", "b", 0, 10, rev=9))
    assert any("two writes at revision 9" in p for p in result.problems), result.problems


async def test_a_compare_and_swap_holds_only_against_the_current_mod_revision(
        tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    result = await verdict(tmp_path, put(0, "k", "a", 0, 10, rev=5), put(0, "k", "b", 11, 20, rev=6),
                           txn(1, "k", "c", 5, 21, 30, rev=7, held=True))
    assert result.verdict == "not linearizable"
    result = await verdict(tmp_path, put(0, "k", "a", 0, 10, rev=5), put(0, "k", "b", 11, 20, rev=6),
                           txn(1, "k", "c", 6, 21, 30, rev=7, held=True))
    assert result.ok, result.describe()


async def test_a_malformed_history_is_an_error(tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    without_revision = Op(client=0, kind="put", key="k", value="a", call=0, return_=10, outcome="ok")
    with pytest.raises(RuntimeError, match="a known outcome needs the response's revision"):
        await verdict(tmp_path, without_revision)


def test_operations_round_trip_through_json() -> None:
    h = history.History(prefix="/t", operations=VALID)
    raw = h.to_json()
    assert raw["operations"][0]["return"] == 10 and "return_" not in raw["operations"][0]
    assert history.History(prefix="/t", operations=tuple(history.Operation.from_json(o)
                                                          for o in raw["operations"])) == h
