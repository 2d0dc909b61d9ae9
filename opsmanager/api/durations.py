"""Go / cert-manager durations (``720h``, ``90s``, ``1h30m``, ``500ms``, ``2.5h``) as :class:`datetime.timedelta`.

Pure. :func:`parse` accepts what Go's ``time.ParseDuration`` accepts (an optional sign, then one or more
``<number><unit>`` parts with units ``ns``, ``us``/``µs``, ``ms``, ``s``, ``m``, ``h``, or a bare ``0``); the
result is exact to the microsecond (the timedelta's resolution; nanoseconds are rounded). :func:`format` writes the
shortest such text back, so ``parse(format(d)) == d`` for every timedelta.

Usage::

    durations.parse("1h30m")                          # timedelta(seconds=5400)
    durations.format(datetime.timedelta(hours=720))   # "720h"
"""

from __future__ import annotations

import datetime
import decimal
import re
from typing import Final

# Microseconds per unit, as Decimals so "2.5h" is exact.
_UNIT_US: Final[dict[str, decimal.Decimal]] = {
    "ns": decimal.Decimal("0.001"), "us": decimal.Decimal(1), "µs": decimal.Decimal(1), "μs": decimal.Decimal(1),
    "ms": decimal.Decimal(1_000), "s": decimal.Decimal(1_000_000), "m": decimal.Decimal(60_000_000),
    "h": decimal.Decimal(3_600_000_000),
}
_PART: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_HINT: Final = "use a Go duration such as '90s', '10m', '1h30m' or '720h' (units ns, us, ms, s, m, h)"
_US_PER_S: Final = 1_000_000


def parse(text: str) -> datetime.timedelta:
    """The timedelta of a Go duration string; ``ValueError`` naming ``text`` when it is not one."""
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}: a duration is a string; {_HINT}")
    body, sign = text, 1
    if body[:1] in ("+", "-"):
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    if body == "0":
        return datetime.timedelta(0)
    pos, total = 0, decimal.Decimal(0)
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            break
        total += decimal.Decimal(match.group(1)) * _UNIT_US[match.group(2)]
        pos = match.end()
    if not body or pos != len(body):
        raise ValueError(f"invalid duration {text!r}: {_HINT}")
    micros = int(total.to_integral_value(rounding=decimal.ROUND_HALF_EVEN))
    try:
        return datetime.timedelta(microseconds=sign * micros)
    except OverflowError:
        raise ValueError(f"invalid duration {text!r}: too large") from None


def format(delta: datetime.timedelta) -> str:  # noqa: A001 - the module's verb, used as durations.format
    """The shortest Go duration text of ``delta``: ``720h``, ``1h30m``, ``1m0.5s``, ``500ms``, ``0s``."""
    micros = (delta.days * 86_400 + delta.seconds) * _US_PER_S + delta.microseconds
    if micros == 0:
        return "0s"
    if micros < 0:
        return "-" + format(datetime.timedelta(microseconds=-micros))
    if micros < _US_PER_S:
        return f"{micros // 1000}ms" if micros % 1000 == 0 else f"{micros}us"
    seconds, frac = divmod(micros, _US_PER_S)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = f"{hours}h" if hours else ""
    if minutes:
        out += f"{minutes}m"
    if secs or frac:
        out += f"{secs}.{frac:06d}".rstrip("0") + "s" if frac else f"{secs}s"
    return out


def is_positive(text: str) -> bool:
    """True when ``text`` parses to a duration greater than zero (False for unparsable text)."""
    try:
        return parse(text) > datetime.timedelta(0)
    except ValueError:
        return False
