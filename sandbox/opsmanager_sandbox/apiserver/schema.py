"""Structural-schema handling for custom resources: defaulting, pruning, validation and the one CEL rule
worth having (``self == oldSelf`` immutability), as the real apiextensions-apiserver does on create/update.

Order, as on a real server: drop ``null`` of non-nullable fields, apply ``default``s (also inside defaulted
values), prune unknown fields (reporting them, so ``fieldValidation=Strict`` can reject instead), then
validate (type, enum, required, bounds, lengths, pattern, items) and check transition rules.
Other CEL rules are ignored: this is a sandbox, not a CEL interpreter.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

Cause = dict[str, str]
_ROOT_KEEP = ("apiVersion", "kind", "metadata")
_CEL_SAME = re.compile(r"^\s*self((?:\.\w+)*)\s*==\s*oldSelf((?:\.\w+)*)\s*$")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def default(schema: dict[str, Any], value: Any, root: bool = True) -> Any:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if root and key in _ROOT_KEEP:
                continue
            if key in value and value[key] is None and not sub.get("nullable"):
                del value[key]
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = default(sub, value[key], root=False)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in props:
                    value[key] = default(extra, value[key], root=False)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [default(schema["items"], item, root=False) for item in value]
    return value


def prune(schema: dict[str, Any], value: Any, path: str = "", root: bool = True) -> list[str]:
    """Remove fields the schema does not declare (in place); return their paths."""
    unknown: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        embedded = schema.get("x-kubernetes-embedded-resource") is True
        for key in list(value):
            if (root or embedded) and key in _ROOT_KEEP:
                continue
            if props is not None and key in props:
                unknown += prune(props[key], value[key], _join(path, key), root=False)
            elif isinstance(extra, dict):
                unknown += prune(extra, value[key], _join(path, key), root=False)
            elif extra is True or preserve:
                continue
            elif props is not None or schema.get("type") == "object":
                unknown.append(_join(path, key))
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            unknown += prune(schema["items"], item, f"{path}[{i}]", root=False)
    return unknown


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str | int | float | bool) or value is None else f'"{_type_of(value)}"'


# The JSON type of a Python value, first match wins (bool before int: a bool is an int in Python).
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"),
)


def _type_of(value: Any) -> str:
    return next((name for python_type, name in _JSON_TYPES if isinstance(value, python_type)), "null")


def _type_ok(expected: str, value: Any) -> bool:
    actual = _type_of(value)
    if expected == "number":
        return actual in ("number", "integer")
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return actual == expected


# The bounds validate() checks, in its order: (keyword, the value types it bounds, True when it is a lower bound,
# reason, message in the apiserver's words). A number is measured by its value, a string or an array by its
# length (``{size}``).
_NUMBER = ("integer", "number")
_BOUNDS: tuple[tuple[str, tuple[str, ...], bool, str, str], ...] = (
    ("minimum", _NUMBER, True, "FieldValueInvalid",
     "Invalid value: {value}: {path} in body should be greater than or equal to {bound}"),
    ("maximum", _NUMBER, False, "FieldValueInvalid",
     "Invalid value: {value}: {path} in body should be less than or equal to {bound}"),
    ("minLength", ("string",), True, "FieldValueInvalid",
     'Invalid value: "{value}": {path} in body should be at least {bound} chars long'),
    ("maxLength", ("string",), False, "TooLong", "Too long: may not be more than {bound} bytes"),
    ("minItems", ("array",), True, "FieldValueInvalid",
     "Invalid value: {size}: {path} in body should have at least {bound} items"),
    ("maxItems", ("array",), False, "TooMany", "Too many: {size}: must have at most {bound} items"),
)


def validate(schema: dict[str, Any], value: Any, path: str = "", root: bool = True) -> list[Cause]:
    causes: list[Cause] = []
    if value is None:
        if not schema.get("nullable") and not root:
            causes.append({"reason": "FieldValueTypeInvalid", "field": path,
                           "message": f'Invalid value: "null": {path} in body must be of type '
                                      f'{schema.get("type", "object")}: "null"'})
        return causes
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            causes.append({"reason": "FieldValueTypeInvalid", "field": path,
                           "message": f"Invalid value: {_shown(value)}: {path} in body must be of type "
                                      f"integer or string: {_shown(value)}"})
        return causes
    expected = schema.get("type")
    if expected and not _type_ok(expected, value):
        return [{"reason": "FieldValueTypeInvalid", "field": path,
                 "message": f'Invalid value: "{_type_of(value)}": {path} in body must be of type {expected}: '
                            f'"{_type_of(value)}"'}]
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(json.dumps(v) for v in schema["enum"])
        causes.append({"reason": "FieldValueNotSupported", "field": path,
                       "message": f"Unsupported value: {json.dumps(value)}: supported values: {supported}"})
    value_type = _type_of(value)
    for keyword, bounded, below, reason, message in _BOUNDS:
        if value_type in bounded and keyword in schema:
            measure = value if value_type in _NUMBER else len(value)
            if (measure < schema[keyword]) if below else (measure > schema[keyword]):
                causes.append({"reason": reason, "field": path,
                               "message": message.format(value=value, size=measure, path=path,
                                                         bound=schema[keyword])})
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append({"reason": "FieldValueInvalid", "field": path,
                           "message": f'Invalid value: "{value}": {path} in body should match '
                                      f"'{schema['pattern']}'"})
    if isinstance(value, list):
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                causes += validate(schema["items"], item, f"{path}[{i}]", root=False)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key in schema.get("required") or []:
            if key not in value:
                causes.append({"reason": "FieldValueRequired", "field": _join(path, key),
                               "message": "Required value"})
        for key, sub in props.items():
            if key in value and not (root and key in _ROOT_KEEP):
                causes += validate(sub, value[key], _join(path, key), root=False)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in props:
                    causes += validate(extra, item, _join(path, key), root=False)
    return causes


def _walk(value: Any, dotted: str) -> tuple[bool, Any]:
    for part in [p for p in dotted.split(".") if p]:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


# What kube-apiserver adds to the schema's errors when the schema has CEL rules: they are not run on an invalid object.
RULES_NOT_CHECKED: Cause = {
    "reason": "FieldValueInvalid", "field": "<nil>",
    "message": "Invalid value: null: some validation rules were not checked because the object was invalid; "
               "correct the existing errors to complete validation"}


def has_rules(schema: Any) -> bool:
    """Whether the schema has an ``x-kubernetes-validations`` rule anywhere."""
    if isinstance(schema, dict):
        return bool(schema.get("x-kubernetes-validations")) or any(has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_rules(v) for v in schema)
    return False


def _rule_value(value: Any) -> str:
    """The value in a rule's ``Invalid value: …`` as kube-apiserver 1.37 writes it (Go's field.Invalid): a string
    quoted, a number or boolean as it is, an object or a list not at all."""
    if isinstance(value, (dict, list)):
        return ""
    if isinstance(value, bool):
        return f"{str(value).lower()}: "
    if isinstance(value, str):
        return f"{json.dumps(value)}: "
    return f"{value}: "


def transition_rules(schema: dict[str, Any], new: Any, old: Any, path: str = "") -> list[Cause]:
    """Check ``self == oldSelf``-shaped x-kubernetes-validations where both old and new values exist.

    Rules inside list items are not checked (they need list-type correlation).
    """
    causes: list[Cause] = []
    if new is None or old is None:
        return causes
    for rule in schema.get("x-kubernetes-validations") or []:
        m = _CEL_SAME.match(rule.get("rule", ""))
        if not m or m.group(1) != m.group(2):
            continue
        has_new, new_value = _walk(new, m.group(1))
        has_old, old_value = _walk(old, m.group(1))
        if has_new and has_old and new_value != old_value:
            message = rule.get("message") or f"failed rule: {rule['rule'].strip()}"
            causes.append({"reason": rule.get("reason", "FieldValueInvalid"), "field": path or "<nil>",
                           "message": f"Invalid value: {_rule_value(new_value)}{message}"})
    if isinstance(new, dict) and isinstance(old, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in new and key in old:
                causes += transition_rules(sub, new[key], old[key], _join(path, key))
    return causes
