"""Selectors of the query string: ``labelSelector=`` through the one parser (:mod:`opsmanager.kube.selectors`,
which also reads the structured ``matchLabels``/``matchExpressions`` of PDBs and webhook configurations), and
``fieldSelector=``, which only this API server reads.

Field selectors support ``=``, ``==`` and ``!=`` on any dotted path of the object (the real server allows only a
per-kind list; being wider costs nothing and serves ``metadata.name``, ``metadata.namespace``, ``status.phase``,
``spec.nodeName``, ``involvedObject.uid`` ...). A selector that does not parse is a 400, with the real server's text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from opsmanager.kube import selectors as label_selectors
from opsmanager_sandbox.apiserver import errors

Predicate = Callable[[dict[str, Any]], bool]


def parse_label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool]:
    """A query-string label selector as a predicate over a labels mapping; a 400 when it does not parse."""
    try:
        return label_selectors.parse(text).matches
    except label_selectors.SelectorError as e:
        raise errors.bad_request(str(e)) from None


def _field_equals(path: str, value: str, negate: bool) -> Predicate:
    def check(obj: dict[str, Any]) -> bool:
        same = _field_string(lookup(obj, path)) == value
        return not same if negate else same
    return check


def lookup(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _field_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str | None) -> Predicate:
    checks: list[Predicate] = []
    for term in label_selectors.split_terms(text or ""):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise errors.bad_request(f"invalid selector: {text!r}; can't understand {term!r}")
        path, op, value = m.group(1), m.group(2), m.group(3).replace("\\,", ",").replace("\\=", "=")
        checks.append(_field_equals(path, value, negate=(op == "!=")))
    return lambda obj: all(check(obj) for check in checks)
