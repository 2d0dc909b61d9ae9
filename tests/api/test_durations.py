"""Go / cert-manager durations: parse to timedelta, format back, reject everything else by name.

We test these aspects: the forms the policy uses (720h, 90s, 1h30m, 500ms, 2.5h, 0, a sign) give the exact
timedelta; garbage raises a ValueError naming the text; format writes the shortest text; format then parse is the
identity for any timedelta, and parse then format then parse is stable for any generated duration text.
"""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsmanager.api import durations

td = datetime.timedelta


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("720h", td(hours=720)), ("90s", td(seconds=90)), ("1h30m", td(minutes=90)), ("500ms", td(milliseconds=500)),
        ("2.5h", td(hours=2, minutes=30)), ("0", td(0)), ("0s", td(0)), ("-5m", td(minutes=-5)), ("+1s", td(seconds=1)),
        ("1m0.5s", td(seconds=60.5)), (".5s", td(milliseconds=500)), ("1.h", td(hours=1)), ("250us", td(microseconds=250)),
        ("3µs", td(microseconds=3)), ("1500ns", td(microseconds=2)), ("1440m", td(hours=24)), ("1h1h", td(hours=2)),
    ],
)
def test_parse(text: str, delta: datetime.timedelta) -> None:
    assert durations.parse(text) == delta


@pytest.mark.parametrize("text", ["", "5", "h", "1d", "5 m", " 5m", "--5m", "1e3s", "1.5.5h", "five minutes", "-", "1H"])
def test_garbage_is_a_value_error_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError, match=f"invalid duration {text!r}: use a Go duration"):
        durations.parse(text)


def test_non_strings_and_overflow_are_value_errors() -> None:
    with pytest.raises(ValueError, match="invalid duration 5"):
        durations.parse(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="too large"):
        durations.parse("99999999999999h")


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (td(hours=720), "720h"), (td(minutes=90), "1h30m"), (td(seconds=90), "1m30s"), (td(milliseconds=500), "500ms"),
        (td(microseconds=7), "7us"), (td(0), "0s"), (td(minutes=-5), "-5m"), (td(seconds=60.5), "1m0.5s"),
        (td(hours=1, seconds=1), "1h1s"),
    ],
)
def test_format(delta: datetime.timedelta, text: str) -> None:
    assert durations.format(delta) == text


def test_is_positive() -> None:
    assert durations.is_positive("1ms")
    assert not durations.is_positive("0s") and not durations.is_positive("-1h") and not durations.is_positive("x")


@settings(max_examples=300, deadline=None, database=None)
@given(st.timedeltas(min_value=td(days=-10**6), max_value=td(days=10**6)))
def test_format_then_parse_is_the_identity(delta: datetime.timedelta) -> None:
    assert durations.parse(durations.format(delta)) == delta


_PARTS = st.tuples(
    st.one_of(st.integers(0, 10**6).map(str), st.decimals(0, 10**4, places=3).map(str)),
    st.sampled_from(["ns", "us", "µs", "ms", "s", "m", "h"]),
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.sampled_from(["", "-", "+"]), st.lists(_PARTS, min_size=1, max_size=4))
def test_generated_text_round_trips(sign: str, parts: list[tuple[str, str]]) -> None:
    text = sign + "".join(number + unit for number, unit in parts)
    delta = durations.parse(text)
    assert durations.parse(durations.format(delta)) == delta
