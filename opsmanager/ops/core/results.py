"""What a step answers: done, not yet (look again later), or failed for good."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Done:
    message: str | None = None


@dataclasses.dataclass(frozen=True)
class Progress:
    """Not finished; look again after ``delay`` seconds. ``message`` (if any) updates the in-flight condition."""

    message: str | None = None
    delay: float = 0.5


@dataclasses.dataclass(frozen=True)
class Fail:
    message: str
    reason: str = "Failed"


StepResult = Done | Progress | Fail
