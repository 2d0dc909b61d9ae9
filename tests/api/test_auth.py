"""The auth Secret's pure rules: when ``password.prev`` is due to be dropped, and the patch that drops it."""

from __future__ import annotations

import datetime
from typing import Any

from opsmanager.api import auth, conditions

NOW = datetime.datetime(2026, 12, 3, 12, 0, 0, tzinfo=datetime.UTC)


def secret(data: dict[str, str], until: str | None = None) -> dict[str, Any]:
    annotations = {auth.ANNOTATION_PREV_UNTIL: until} if until is not None else {}
    return {"metadata": {"name": "s", "annotations": annotations}, "data": auth.encode(data)}


def test_a_dated_previous_password_is_due_from_its_date_on() -> None:
    due = NOW - datetime.timedelta(seconds=1)
    assert auth.previous_due(secret({"password": "n", "password.prev": "o"}, conditions.rfc3339(due)), NOW)
    assert auth.previous_due(secret({"password": "n", "password.prev": "o"}, conditions.rfc3339(NOW)), NOW)
    later = conditions.rfc3339(NOW + datetime.timedelta(seconds=1))
    assert not auth.previous_due(secret({"password": "n", "password.prev": "o"}, later), NOW)


def test_nothing_to_drop_without_a_previous_password_or_without_a_date() -> None:
    assert not auth.previous_due(None, NOW)
    assert not auth.previous_due(secret({"password": "n"}, conditions.rfc3339(NOW)), NOW)
    assert not auth.previous_due(secret({"password": "n", "password.prev": "o"}), NOW)  # the user's own key


def test_a_damaged_date_never_keeps_the_old_password() -> None:
    assert auth.previous_due(secret({"password": "n", "password.prev": "o"}, "yesterday"), NOW)


def test_the_patches_that_date_and_drop_the_previous_password() -> None:
    assert auth.drop_previous() == {"metadata": {"annotations": {auth.ANNOTATION_PREV_UNTIL: None}},
                                    "data": {auth.KEY_PREV: None}}
    assert auth.previous_kept_until(NOW) == {"annotations": {auth.ANNOTATION_PREV_UNTIL: "2026-12-03T12:00:00Z"}}
