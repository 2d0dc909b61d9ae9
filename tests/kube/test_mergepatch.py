"""JSON merge patch (RFC 7386), the one implementation (``opsmanager/kube/mergepatch.py``): apply, diff, changes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsmanager.kube import mergepatch


def test_apply_merges_maps_deletes_with_null_and_replaces_the_rest() -> None:
    target = {"a": {"b": 1, "c": 2}, "d": [1]}
    assert mergepatch.apply(target, {"a": {"b": None}, "d": [2]}) == {"a": {"c": 2}, "d": [2]}
    assert target == {"a": {"b": 1, "c": 2}, "d": [1]}, "the input is not changed"
    assert mergepatch.apply({"a": 1}, [1]) == [1]


def test_diff_removes_what_is_gone_and_patches_what_changed() -> None:
    assert mergepatch.diff({"a": 1, "b": {"c": 1, "d": 2}, "e": 1}, {"a": 1, "b": {"c": 2, "d": 2}}) == \
        {"e": None, "b": {"c": 2}}


@pytest.mark.parametrize(("current", "patch", "changes"), [
    ({"a": 1, "b": {"c": 2}}, {"b": {"c": 2}}, False),  # maps merge: keys the patch leaves out stay
    ({"a": 1}, {"a": 2}, True),
    ({"a": 1}, {"b": None}, False),  # null deletes: nothing to delete
    ({"a": 1}, {"a": None}, True),
    ({"a": 1}, {"b": {}}, True),  # a new key, even empty
    ({"l": [{"x": 1, "defaulted": True}]}, {"l": [{"x": 1}]}, False),  # items with server defaults
    ({"l": [{"x": 1}]}, {"l": [{"x": 1}, {"x": 2}]}, True),
    ({"l": [1, 2]}, {"l": [2, 1]}, True),
    ({"a": "s"}, {"a": {"b": 1}}, True),
])
def test_changes(current: dict[str, Any], patch: dict[str, Any], changes: bool) -> None:
    assert mergepatch.changes(current, patch) is changes



# JSON without null (a null in a value is a deletion in a patch, not a value)
values = st.recursive(st.integers() | st.text(max_size=3) | st.booleans(),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
                      max_leaves=10)
objects = st.dictionaries(st.text(max_size=2), values, max_size=4)


@given(objects, objects)
def test_the_diff_applied_gives_the_new_object_and_changes_nothing_between_equals(old: dict[str, Any],
                                                                                     new: dict[str, Any]) -> None:
    patch = mergepatch.diff(old, new)
    assert mergepatch.apply(old, patch) == new
    assert not mergepatch.changes(old, mergepatch.diff(old, old))
    # (not the converse: list items compare as subsets, so a patch may "change nothing" that drops an item's key)
    assert not mergepatch.changes(old, patch) or old != new
