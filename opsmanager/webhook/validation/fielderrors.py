"""Field errors formatted like ``k8s.io/apimachinery``'s ``field.Error``, and the models' schema check as such errors.

Why Go's format: every denial carries the text of Kubernetes' ``NewInvalid``, ``<Kind>.<group> "<name>" is invalid:
<field error>`` (several errors: ``[<e1>, <e2>]``), where a field error reads like Go's ``field.Error``, e.g.
``spec.tls: Invalid value: "my-op": only one TLS reconfiguration operation is allowed at a time``; clients and
tools written against the API server (and KubeDB) parse and show exactly that. So values print as Go prints them
(:func:`go_value`, floats included), and each error is also a ``metav1.StatusCause`` (:meth:`FieldError.cause`).

KubeDB returns its type/databaseRef checks and the ops-request precondition bare (HTTP 403 via
controller-runtime); we wrap them the same way as the rest (422) so a client sees one format. The rule text itself
is always contained verbatim.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import pydantic

ErrorType = Literal[
    "FieldValueInvalid", "FieldValueRequired", "FieldValueDuplicate", "FieldValueNotSupported", "FieldValueForbidden",
]
_TYPE_TEXT: Final[dict[str, str]] = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
}
_NO_VALUE: Final = object()


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float64 (``strconv.FormatFloat(f, 'g', -1, 64)``): 3, 1.5, 1e+06, 1e-05."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    digs = "".join(map(str, digits))
    point = len(digs) + exponent  # position of the decimal point
    exp = point - 1
    neg = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mantissa = digs[0] + ("." + digs[1:] if len(digs) > 1 else "")
        return f"{neg}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{digs}"
    if point >= len(digs):
        return f"{neg}{digs}{'0' * (point - len(digs))}"
    return f"{neg}{digs[:point]}.{digs[point:]}"


def go_value(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value (``map[string]interface{}`` and friends), map keys sorted."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_float(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{go_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, Sequence):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    return str(value)


def _bad_value(value: Any) -> str:
    """The bad value of an error as ``field.Error`` prints it: JSON (null, true, quoted strings, compact objects
    with sorted keys), except that a float prints as Go's ``%v`` does."""
    if isinstance(value, float):
        return _go_float(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One field error; ``str()`` is the text of Go's ``field.Error.Error()``."""

    type: ErrorType
    field: str
    detail: str = ""
    value: Any = _NO_VALUE

    @property
    def body(self) -> str:
        """``ErrorBody()``: the text after ``<field>: ``, also the ``message`` of a StatusCause."""
        text = _TYPE_TEXT[self.type]
        if self.type not in ("FieldValueRequired", "FieldValueForbidden") and self.value is not _NO_VALUE:
            text += f": {_bad_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"

    def cause(self) -> dict[str, str]:
        """The ``metav1.StatusCause`` of this error."""
        return {"reason": self.type, "message": self.body, "field": self.field}


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, detail, value)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, "", value)


def not_supported(field: str, value: Any, supported: Sequence[str]) -> FieldError:
    detail = "supported values: " + ", ".join(json.dumps(s) for s in supported) if supported else ""
    return FieldError("FieldValueNotSupported", field, detail, value)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, detail)


def invalid_message(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> str:
    """``apierrors.NewInvalid(...).Error()``: ``Kind.group "name" is invalid: <aggregate>``."""
    texts = list(dict.fromkeys(str(e) for e in errors))  # ToAggregate drops exact duplicates
    head = f"{kind}.{group} {json.dumps(name, ensure_ascii=False)} is invalid"
    if not texts:
        return head
    return f"{head}: {texts[0]}" if len(texts) == 1 else f"{head}: [{', '.join(texts)}]"


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def schema_errors(model: type[pydantic.BaseModel], obj: Mapping[str, Any]) -> list[FieldError]:
    """Check ``obj`` against the CRD's model, strictly and by camelCase names only, as the API server would."""
    try:
        model.model_validate(obj, strict=True, by_alias=True, by_name=False)
    except pydantic.ValidationError as exc:
        errors = []
        for err in exc.errors(include_url=False):
            path = _path(err["loc"])
            kind = err["type"]
            if kind == "missing":
                errors.append(required(path))
            elif kind == "extra_forbidden":
                errors.append(forbidden(path, "unknown field; check its spelling (`kubectl explain`)"))
            elif kind in ("literal_error", "enum"):
                expected = _QUOTED.findall(str((err.get("ctx") or {}).get("expected", "")))
                errors.append(not_supported(path, err.get("input"), expected))
            else:
                message = err["msg"].removeprefix("Value error, ")
                errors.append(invalid(path, err.get("input"), message))
        return errors
    return []
