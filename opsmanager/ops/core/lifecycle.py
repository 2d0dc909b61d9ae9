"""The phase state machine of a request (``transitions``), rebuilt from the persisted phase on every call, so no
state lives in memory: ``New → Pending → Progressing → Successful | Failed``, ``Pending → Skipped``."""

from __future__ import annotations

from typing import Any

import transitions

from opsmanager.api import constants


class Lifecycle:
    """The phase state machine; ``state`` is the request's ``status.phase``."""

    states = ["New", *constants.OPS_PHASES]
    transitions_table: list[Any] = [
        {"trigger": "enqueue", "source": "New", "dest": constants.PHASE_PENDING},
        {"trigger": "start", "source": constants.PHASE_PENDING, "dest": constants.PHASE_PROGRESSING},
        {"trigger": "skip", "source": constants.PHASE_PENDING, "dest": constants.PHASE_SKIPPED},
        {"trigger": "succeed", "source": constants.PHASE_PROGRESSING, "dest": constants.PHASE_SUCCESSFUL},
        {"trigger": "fail", "source": ["New", constants.PHASE_PENDING, constants.PHASE_PROGRESSING],
         "dest": constants.PHASE_FAILED},
    ]

    def __init__(self, phase: str | None) -> None:
        # The machine is built at the first transition: most passes only read the phase, and building a
        # ``transitions.Machine`` is costly enough to matter when it happens on every pass of every request.
        self._phase = phase or "New"
        self._model: _PhaseModel | None = None

    @property
    def state(self) -> str:
        return self._model.state if self._model is not None else self._phase

    def _trigger(self, name: str) -> bool:
        if self._model is None:
            model = _PhaseModel()
            transitions.Machine(model=model, states=self.states, transitions=self.transitions_table,
                                initial=self._phase, auto_transitions=False)
            self._model = model
        return bool(getattr(self._model, name)())

    def enqueue(self) -> bool:
        return self._trigger("enqueue")

    def start(self) -> bool:
        return self._trigger("start")

    def skip(self) -> bool:
        return self._trigger("skip")

    def succeed(self) -> bool:
        return self._trigger("succeed")

    def fail(self) -> bool:
        return self._trigger("fail")


class _PhaseModel:
    """What :class:`Lifecycle`'s machine drives (``transitions`` adds ``state`` and the triggers)."""

    state: str
