"""Label selectors, the one parser and matcher: the query-string form and the structured ``LabelSelector``.

Two forms say the same thing. The string form is what ``labelSelector=`` carries on a list or a watch:
``a=b,c!=d,e in (x,y),f notin (z),g,!h`` — equality (``=`` or ``==``), inequality, set membership, existence,
absence, and ``>`` / ``<`` on integer values. The structured form is what objects hold (a PDB's or a
StatefulSet's ``spec.selector``, a webhook's ``namespaceSelector``): ``matchLabels`` and ``matchExpressions``
with the operators ``In``, ``NotIn``, ``Exists`` and ``DoesNotExist``. Both become one :class:`Selector`, a list
of :class:`Requirement` that must all hold, so a label is matched the same way whoever asks: the operator's
informer cache (which answers equality selectors from memory and leaves the rest to the API server, see
:meth:`Selector.equalities`) and the sandbox's API server (list, watch, PDBs, webhooks, the Scale subresource).
A plain map of labels (a Service's selector, ``matchLabels`` alone) is matched by :func:`matches_set`.

Pure: no I/O, importable by the webhook's validation and other pure modules. An unparsable selector is a
:class:`SelectorError` whose text is the API server's (the sandbox answers it as a 400).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any, Literal

Operator = Literal["=", "!=", "in", "notin", "exists", "!", ">", "<"]

# The string form of each structured operator, and back.
_STRUCTURED: dict[str, Operator] = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}

_SET_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|=|!=|>|<)\s*([^\s!=<>(),]*)\s*$")
_KEY_RE = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class SelectorError(ValueError):
    """A selector that does not parse; the text is the API server's."""


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One condition on one label: ``values`` holds the value for ``=``, ``!=``, ``>`` and ``<`` (an integer's
    text for the last two), the set for ``in`` and ``notin``, nothing for ``exists`` and ``!``."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op, key = self.operator, self.key
        if op == "=":
            return labels.get(key) == self.values[0]
        if op == "!=":
            return labels.get(key) != self.values[0]
        if op == "in":
            return key in labels and labels[key] in self.values
        if op == "notin":
            return not (key in labels and labels[key] in self.values)
        if op == "exists":
            return key in labels
        if op == "!":
            return key not in labels
        try:
            number = int(labels[key])
        except (KeyError, ValueError):
            return False
        bound = int(self.values[0])
        return number > bound if op == ">" else number < bound

    def __str__(self) -> str:
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return f"!{self.key}"
        return f"{self.key}{self.operator}{self.values[0]}"


@dataclasses.dataclass(frozen=True)
class Selector:
    """Requirements that must all hold; no requirement selects everything, ``nothing`` selects nothing (what a
    missing structured selector means to some callers, see :func:`from_object`)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and all(r.matches(labels) for r in self.requirements)

    def equalities(self) -> dict[str, str] | None:
        """The selector as the labels it requires (``a=b,c==d`` → ``{"a": "b", "c": "d"}``, no requirement →
        ``{}``), for :func:`matches_set`; None when it needs anything but equalities (``!=``, ``in``, existence),
        or one key twice, which a cache indexed by label leaves to the API server."""
        if self.nothing:
            return None
        out: dict[str, str] = {}
        for r in self.requirements:
            if r.operator != "=" or out.get(r.key, r.values[0]) != r.values[0]:
                return None
            out[r.key] = r.values[0]
        return out

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def split_terms(text: str) -> list[str]:
    """A selector's comma-separated terms, commas inside parentheses (``in (x,y)``) kept; blank terms dropped.
    The field selectors of the sandbox's API server split the same way."""
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


def _checked_key(key: str, text: str) -> str:
    if not _LABEL_KEY.match(key):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    return key


def _requirement(term: str, text: str) -> Requirement:
    if m := _SET_RE.match(term):
        values = tuple(dict.fromkeys(v.strip() for v in m.group(3).split(",") if v.strip()))
        return Requirement(_checked_key(m.group(1), text), "in" if m.group(2) == "in" else "notin", values)
    if m := _OP_RE.match(term):
        key, op, value = _checked_key(m.group(1), text), m.group(2), m.group(3)
        if op in ("=", "=="):
            return Requirement(key, "=", (value,))
        if op == "!=":
            return Requirement(key, "!=", (value,))
        try:
            int(value)
        except ValueError:
            raise SelectorError(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an "
                                f"integer: {term!r}") from None
        return Requirement(key, ">" if op == ">" else "<", (value,))
    if m := _KEY_RE.match(term):
        return Requirement(_checked_key(m.group(2), text), "!" if m.group(1) else "exists")
    raise SelectorError(f"unable to parse requirement: {term!r} in label selector {text!r}")


@functools.lru_cache(maxsize=512)
def parse(text: str | None) -> Selector:
    """The string form (``labelSelector=``); None or blank selects everything. Raises :class:`SelectorError`.
    Remembered: callers parse the same few selectors over and over, and a :class:`Selector` is immutable."""
    return Selector(tuple(_requirement(term, text or "") for term in split_terms(text or "")))


def from_object(selector: Mapping[str, Any] | None, *, none_matches: bool) -> Selector:
    """The structured form (``matchLabels``, then ``matchExpressions`` in order); ``{}`` selects everything.
    ``none_matches`` says what a missing (null) selector means for the caller: a webhook without one is called for
    every object, a PDB without one covers no pod. An operator other than In, NotIn, Exists and DoesNotExist,
    which the API server refuses to store, selects nothing."""
    if selector is None:
        return Selector(nothing=not none_matches)
    requirements = [Requirement(key, "=", (value,))
                    for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = _STRUCTURED.get(expr.get("operator"))
        if op is None:
            return Selector(nothing=True)
        values = tuple(expr.get("values") or ()) if op in ("in", "notin") else ()
        requirements.append(Requirement(expr.get("key") or "", op, values))
    return Selector(tuple(requirements))


def matches_set(wanted: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Does ``labels`` carry every label of ``wanted`` (a Service's selector, ``matchLabels``, or
    :meth:`Selector.equalities`)? An empty ``wanted`` selects everything."""
    return all(labels.get(k) == v for k, v in wanted.items())
