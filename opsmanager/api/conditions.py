"""Condition helpers on plain lists of dicts (``status.conditions`` as it comes from the API).

The rules, from KubeDB and metav1 (``shared/reference/kubedb-etcd-ops.md`` §1.4, §3.2, §7):

- a condition is keyed by ``type``; setting an existing type updates it in place, so the list keeps
  first-insertion order (the order the steps ran in);
- ``lastTransitionTime`` changes only when ``status`` changes. The ops engine depends on this: a step's timeout
  counts from the ``lastTransitionTime`` of its ``False`` condition, so re-writing the same in-flight condition
  (with a new message, say) must not restart the clock;
- times are RFC 3339 with second precision in UTC (``2026-11-29T14:39:00Z``), as ``metav1.Time`` serialises.

Every function is pure: it returns a new list and never mutates its input, so it can be used inside a
"re-read, apply, compare, patch" status transaction. The clock is injectable (``now=``) for tests.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opsmanager.api import constants

ConditionDict = dict[str, Any]

_OPTIONAL_FIELDS = ("reason", "message", "observedGeneration", "severity")


def rfc3339(moment: datetime.datetime) -> str:
    """Format a time as ``metav1.Time`` does: UTC, whole seconds, ``Z`` suffix. Naive times are taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime.datetime:
    """Parse an RFC 3339 time (``...Z``/``...z`` or with an offset, fractional seconds allowed) to an aware UTC
    time. A time without an offset is taken as UTC, as :func:`rfc3339` does."""
    parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.astimezone(datetime.UTC)


def _now_text(now: datetime.datetime | None) -> str:
    return rfc3339(now if now is not None else datetime.datetime.now(datetime.UTC))


def make_condition(
    type_: str,
    status: str,
    *,
    reason: str | None = None,
    message: str | None = None,
    observed_generation: int | None = None,
    severity: str | None = None,
    now: datetime.datetime | None = None,
) -> ConditionDict:
    """A new condition dict with ``lastTransitionTime`` = now. ``status`` is ``True``, ``False`` or ``Unknown``."""
    if status not in constants.CONDITION_STATUSES:
        raise ValueError(f"condition status must be one of True, False, Unknown; got {status!r}")
    if not type_:
        raise ValueError("condition type must not be empty")
    cond: ConditionDict = {"type": type_, "status": status}
    for key, value in (
        ("reason", reason), ("message", message), ("observedGeneration", observed_generation),
        ("severity", severity),
    ):
        if value is not None:
            cond[key] = value
    cond["lastTransitionTime"] = _now_text(now)
    return cond


def _merge_one(existing: Mapping[str, Any], new: Mapping[str, Any], now: datetime.datetime | None) -> ConditionDict:
    merged: ConditionDict = {k: copy.deepcopy(v) for k, v in existing.items() if k not in _OPTIONAL_FIELDS}
    merged.update({k: copy.deepcopy(v) for k, v in new.items() if k != "lastTransitionTime"})
    if existing.get("status") == new.get("status") and existing.get("lastTransitionTime"):
        merged["lastTransitionTime"] = existing["lastTransitionTime"]
    else:
        merged["lastTransitionTime"] = new.get("lastTransitionTime") or _now_text(now)
    return merged


def merge_conditions(
    conditions: Sequence[Mapping[str, Any]] | None,
    updates: Iterable[Mapping[str, Any]],
    *,
    now: datetime.datetime | None = None,
) -> list[ConditionDict]:
    """Merge ``updates`` into ``conditions`` by ``type``; new types are appended in the order given.

    An update replaces reason, message, observedGeneration and severity (a field left out of the update is
    removed); ``lastTransitionTime`` is kept when the status is unchanged, otherwise taken from the update or set
    to ``now``.
    """
    result = [copy.deepcopy(dict(c)) for c in conditions or ()]
    index = {c.get("type"): i for i, c in enumerate(result)}
    for update in updates:
        type_ = update.get("type")
        if not type_:
            raise ValueError("every condition needs a non-empty 'type'")
        if type_ in index:
            result[index[type_]] = _merge_one(result[index[type_]], update, now)
        else:
            new = copy.deepcopy(dict(update))
            new.setdefault("lastTransitionTime", _now_text(now))
            index[type_] = len(result)
            result.append(new)
    return result


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: str,
    *,
    reason: str | None = None,
    message: str | None = None,
    observed_generation: int | None = None,
    severity: str | None = None,
    now: datetime.datetime | None = None,
) -> list[ConditionDict]:
    """Return ``conditions`` with the condition ``type_`` set (updated in place in the order, or appended)."""
    cond = make_condition(
        type_, status, reason=reason, message=message, observed_generation=observed_generation,
        severity=severity, now=now,
    )
    cond.pop("lastTransitionTime")
    return merge_conditions(conditions, [cond], now=now)


def get_condition(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> ConditionDict | None:
    """The condition of that type (a copy), or None."""
    for cond in conditions or ():
        if cond.get("type") == type_:
            return copy.deepcopy(dict(cond))
    return None


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    """True when the condition exists with status ``True``."""
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == constants.TRUE


def is_false(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    """True when the condition exists with status ``False`` (for a step: in flight or failed)."""
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == constants.FALSE


def remove_condition(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> list[ConditionDict]:
    """Return ``conditions`` without the condition of that type (unchanged if absent)."""
    return [copy.deepcopy(dict(c)) for c in conditions or () if c.get("type") != type_]


def transition_age(
    conditions: Sequence[Mapping[str, Any]] | None, type_: str, *, now: datetime.datetime | None = None
) -> datetime.timedelta | None:
    """How long ago the condition last changed status (for step timeouts), or None when absent/unparseable."""
    cond = get_condition(conditions, type_)
    if cond is None or not isinstance(cond.get("lastTransitionTime"), str):
        return None
    try:
        since = parse_rfc3339(cond["lastTransitionTime"])
    except ValueError:
        return None
    current = now if now is not None else datetime.datetime.now(datetime.UTC)
    if current.tzinfo is None:
        current = current.replace(tzinfo=datetime.UTC)
    return current - since
