"""Label selectors, the one parser and matcher (``opsmanager/kube/selectors.py``), without I/O.

We test these aspects: the string grammar (equality, inequality, sets, existence, absence, integer bounds,
prefixed keys, the empty selector) and its errors, with the API server's texts; which selectors are equalities
only (what the informer cache answers itself); the structured form (``matchLabels``/``matchExpressions``), what a
missing selector means, an unknown operator, and its string form (the Scale subresource's); plain label maps;
and that the module stays importable without aiohttp.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from opsmanager.kube import selectors


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ("a=1", {"a": "1"}, True), ("a==1", {"a": "2"}, False), ("a!=1", {}, True), ("a in (1, 2)", {"a": "2"}, True),
    ("a notin (1,2)", {"a": "3"}, True), ("a notin (1)", {}, True), ("a", {"a": ""}, True), ("!a", {"a": "x"}, False),
    ("a,b=2", {"a": "1", "b": "2"}, True), ("a<5", {"a": "4"}, True), ("a>5", {"a": "x"}, False),
    ("a>5", {}, False), ("example.com/role=db", {"example.com/role": "db"}, True), ("", {"anything": "x"}, True),
    (None, {}, True), ("a=1,b in (x,y),!c", {"a": "1", "b": "y"}, True), ("a=1,b in (x,y),!c", {"a": "1"}, False),
])
def test_label_selector_grammar(selector: str | None, labels: dict[str, str], expected: bool) -> None:
    assert selectors.parse(selector).matches(labels) is expected


@pytest.mark.parametrize(("bad", "message"), [
    ("a in 1", "unable to parse requirement: 'a in 1' in label selector 'a in 1'"),
    ("a>x", "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: 'a>x'"),
    ("=1", "unable to parse requirement: '=1' in label selector '=1'"),
    ("a b", "unable to parse requirement: 'a b' in label selector 'a b'"),
    ("-a=1", "unable to parse requirement: invalid label key '-a' in '-a=1'"),
])
def test_bad_label_selectors(bad: str, message: str) -> None:
    with pytest.raises(selectors.SelectorError) as info:
        selectors.parse(bad)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_equalities_are_what_a_cache_indexed_by_label_answers() -> None:
    assert selectors.parse("a=b, c==d").equalities() == {"a": "b", "c": "d"}
    assert selectors.parse("").equalities() == {}
    assert selectors.parse("a!=b").equalities() is None
    assert selectors.parse("a in (b)").equalities() is None
    assert selectors.parse("a").equalities() is None
    assert selectors.parse("a=b,a=c").equalities() is None  # selects nothing; the API server says so
    assert selectors.parse("a=b,a=b").equalities() == {"a": "b"}


def test_structured_selectors() -> None:
    selector = {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "tier", "operator": "NotIn",
                                                                   "values": ["web"]}]}
    match = selectors.from_object(selector, none_matches=False)
    assert match.matches({"app": "x", "tier": "db"})
    assert not match.matches({"app": "x", "tier": "web"})
    assert str(match) == "app=x,tier notin (web)"
    assert selectors.parse(str(match)) == match, "the string form reads back as the same selector"
    assert selectors.from_object({}, none_matches=False).matches({"any": "thing"})
    exists = {"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "DoesNotExist"},
                                   {"key": "c", "operator": "In", "values": ["1", "2"]}]}
    assert str(selectors.from_object(exists, none_matches=False)) == "a,!b,c in (1,2)"
    assert selectors.from_object(exists, none_matches=False).matches({"a": "", "c": "2"})
    assert not selectors.from_object(exists, none_matches=False).matches({"a": "", "b": "", "c": "2"})


def test_a_missing_selector_means_what_the_caller_says_and_an_unknown_operator_selects_nothing() -> None:
    assert not selectors.from_object(None, none_matches=False).matches({})
    assert selectors.from_object(None, none_matches=True).matches({})
    assert str(selectors.from_object(None, none_matches=False)) == ""
    odd = {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}
    assert not selectors.from_object(odd, none_matches=True).matches({"a": "2"})


def test_label_maps() -> None:
    assert selectors.matches_set({"app": "x"}, {"app": "x", "tier": "db"})
    assert not selectors.matches_set({"app": "x", "tier": "web"}, {"app": "x", "tier": "db"})
    assert selectors.matches_set({}, {})


def test_pure_modules_import_it_without_aiohttp() -> None:
    code = ("import sys, opsmanager.kube.selectors, opsmanager.kube.mergepatch; "
            "assert 'aiohttp' not in sys.modules and 'kubernetes' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
