"""The outcome of one admission decision, independent of the wire format: allowed (with a JSON Patch and warnings)
or denied (with field errors, or a bare message and an HTTP code), and the ``metav1.Status`` of a denial.

Kept apart from the rules so that ``opsmanager.webhook.admission`` turns any verdict into an ``AdmissionReview``
response without knowing which rule made it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from opsmanager.webhook.validation.fielderrors import FieldError, invalid_message

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of one admission decision, independent of the wire format."""

    allowed: bool
    message: str = ""
    code: int = 200
    reason: str = ""
    errors: tuple[FieldError, ...] = ()
    kind: str = ""
    group: str = ""
    name: str = ""
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def allow(cls, *, patch: Sequence[dict[str, Any]] = (), warnings: Sequence[str] = ()) -> Verdict:
        return cls(True, patch=tuple(patch), warnings=tuple(warnings))

    @classmethod
    def invalid(
        cls, kind: str, group: str, name: str, errors: Sequence[FieldError], *, warnings: Sequence[str] = ()
    ) -> Verdict:
        return cls(
            False, invalid_message(kind, group, name, errors), 422, "Invalid", tuple(errors), kind, group, name,
            warnings=tuple(warnings),
        )

    @classmethod
    def deny(cls, message: str, *, code: int = 422, reason: str = "Invalid") -> Verdict:
        return cls(False, message, code, reason)

    def status(self) -> dict[str, Any]:
        """The ``metav1.Status`` for ``response.status`` of a denial."""
        status: dict[str, Any] = {
            "metadata": {}, "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code,
        }
        if self.errors or self.kind:
            status["details"] = {
                "name": self.name, "group": self.group, "kind": self.kind,
                "causes": [e.cause() for e in self.errors],
            }
        return status
