"""Label and field selectors: the query-string forms (``labelSelector=``, ``fieldSelector=``) and the
structured ``LabelSelector`` (``matchLabels``/``matchExpressions``) used by PDBs and webhook configurations.

Query-string label selectors support ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key`` (exists), ``!key``
(does not exist), ``>`` and ``<``. Field selectors support ``=``, ``==`` and ``!=`` on any dotted path of
the object (the real server allows only a per-kind list; being wider costs nothing and serves
``metadata.name``, ``metadata.namespace``, ``status.phase``, ``spec.nodeName``, ``involvedObject.uid`` ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from opsmanager_sandbox.apiserver import errors

Predicate = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|=|!=|>|<)\s*([^\s!=<>(),]*)\s*$")
_KEY_RE = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def _check_key(key: str, selector: str) -> None:
    if not _LABEL_KEY.match(key):
        raise errors.bad_request(f"unable to parse requirement: invalid label key {key!r} in {selector!r}")


def parse_label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool]:
    """Compile a query-string label selector into a predicate over a labels mapping."""
    checks: list[LabelCheck] = []
    for term in _split_terms(text or ""):
        if m := _SET_RE.match(term):
            key, op, raw = m.group(1), m.group(2), m.group(3)
            _check_key(key, text or "")
            values = {v.strip() for v in raw.split(",") if v.strip()}
            checks.append(_in_set(key, values, negate=(op == "notin")))
        elif m := _OP_RE.match(term):
            key, op, value = m.group(1), m.group(2), m.group(3)
            _check_key(key, text or "")
            if op in ("=", "==", "!="):
                checks.append(_equals(key, value, negate=(op == "!=")))
            else:
                try:
                    bound = int(value)
                except ValueError:
                    raise errors.bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value "
                                             f"must be an integer: {term!r}") from None
                checks.append(_bounded(key, bound, greater=(op == ">")))
        elif m := _KEY_RE.match(term):
            neg, key = m.group(1), m.group(2)
            _check_key(key, text or "")
            checks.append(_exists(key, negate=bool(neg)))
        else:
            raise errors.bad_request(f"unable to parse requirement: {term!r} in label selector {text!r}")
    return lambda labels: all(check(labels) for check in checks)


LabelCheck = Callable[[Mapping[str, str]], bool]


def _in_set(key: str, values: set[str], negate: bool) -> LabelCheck:
    def check(labels: Mapping[str, str]) -> bool:
        inside = key in labels and labels[key] in values
        return not inside if negate else inside
    return check


def _equals(key: str, value: str, negate: bool) -> LabelCheck:
    def check(labels: Mapping[str, str]) -> bool:
        return (labels.get(key) != value) if negate else (labels.get(key) == value)
    return check


def _bounded(key: str, bound: int, greater: bool) -> LabelCheck:
    def check(labels: Mapping[str, str]) -> bool:
        return _compare(labels.get(key), bound, greater)
    return check


def _exists(key: str, negate: bool) -> LabelCheck:
    def check(labels: Mapping[str, str]) -> bool:
        return (key not in labels) if negate else (key in labels)
    return check


def _field_equals(path: str, value: str, negate: bool) -> Predicate:
    def check(obj: dict[str, Any]) -> bool:
        same = _field_string(lookup(obj, path)) == value
        return not same if negate else same
    return check


def _compare(value: str | None, bound: int, greater: bool) -> bool:
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return False
    return number is not None and (number > bound if greater else number < bound)


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
    for term in _split_terms(text or ""):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise errors.bad_request(f"invalid selector: {text!r}; can't understand {term!r}")
        path, op, value = m.group(1), m.group(2), m.group(3).replace("\\,", ",").replace("\\=", "=")
        checks.append(_field_equals(path, value, negate=(op == "!=")))
    return lambda obj: all(check(obj) for check in checks)


def matches_selector_object(selector: dict[str, Any] | None, labels: Mapping[str, str],
                            *, none_matches: bool) -> bool:
    """A structured LabelSelector; ``none_matches`` says what a missing (null) selector means for the caller."""
    if selector is None:
        return none_matches
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and not (key in labels and labels[key] in values):
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selector_string(selector: dict[str, Any] | None) -> str:
    """``matchLabels``/``matchExpressions`` as the string form the Scale subresource reports."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), ",".join(expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}.get(op, key))
    return ",".join(parts)
