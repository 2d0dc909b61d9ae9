"""A request's status buffer: every change applies to the in-memory request at once and is written by the next
:meth:`RequestStatus.flush`, in **one** status transaction (``kube.transact_status``: re-read, optimistic lock, no
write when nothing changed).

Only the final state of a condition is written: set False then True before a flush, it is written True once, its
``lastTransitionTime`` that of the last change of status — or the live one when the live status is already the
final one.

Events and metrics ride on the flush: :meth:`RequestStatus.announce` (an Event on the request),
:meth:`RequestStatus.announce_step` (a step done) and :meth:`RequestStatus.on_written` (a metric observation) are
queued and go out right **after** the write that records what they announce (or at the next flush when nothing is
dirty), never before it. A process killed between the write and the Event loses the Event (a re-run finds the
transition recorded and does not repeat it); one killed before the write repeats the work and announces it then —
never twice for one recorded transition. The steps one write records done are one transition of the request: they
are announced in **one** Event (reason the last of them, the message naming each), and those the terminal write
records are folded into the terminal Event (:meth:`RequestStatus.take_steps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from opsmanager import kube
from opsmanager.api import conditions, constants

# (condition, message, type) of a step done, or (reason, message, type) of an Event.
Announced = tuple[str, str, str]


def steps_event(steps: list[Announced]) -> Announced:
    """One Event for the steps one write records done: reason the last step, the message naming each (one step:
    its own message), Warning if any is."""
    reason = steps[-1][0]
    type_ = "Warning" if any(t == "Warning" for _, _, t in steps) else "Normal"
    if len(steps) == 1:
        return reason, steps[0][1], type_
    return reason, "; ".join(f"{cond}: {message}" for cond, message, _ in steps), type_


def steps_suffix(steps: list[Announced]) -> str:
    """The steps a terminal write records done, for the terminal Event's message."""
    return "".join(f"; {cond}: {message}" for cond, message, _ in steps)


@dataclasses.dataclass
class RequestStatus:
    """The status of one request (``request``, the object as last read or written), changed in memory and written
    by :meth:`flush`. Subclasses add what their kind of request works with."""

    api_version: ClassVar[str] = constants.OPS_API_VERSION
    kind: ClassVar[str] = constants.OPS_KIND

    kube: kube.Kube
    request: dict[str, Any]
    # What changed in ``request["status"]`` since the last flush: condition types and top-level status fields.
    _dirty_conditions: set[str] = dataclasses.field(default_factory=set, kw_only=True)
    _dirty_fields: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True)
    # Events and metric observations that go out after the next flush's write.
    _events: list[Announced] = dataclasses.field(default_factory=list, kw_only=True)
    _steps: list[Announced] = dataclasses.field(default_factory=list, kw_only=True)
    _written: list[Callable[[], None]] = dataclasses.field(default_factory=list, kw_only=True)

    @property
    def name(self) -> str:
        return str(self.request["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.request["metadata"]["namespace"])

    @property
    def generation(self) -> int | None:
        gen = self.request["metadata"].get("generation")
        return int(gen) if gen is not None else None

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return list((self.request.get("status") or {}).get("conditions") or [])

    def condition(self, type_: str) -> dict[str, Any] | None:
        return conditions.get_condition(self.conditions, type_)

    def is_true(self, type_: str) -> bool:
        return conditions.is_true(self.conditions, type_)

    def _status(self) -> dict[str, Any]:
        st = self.request.get("status") or {}
        self.request["status"] = st
        return st

    def set_condition(self, type_: str, status: str, message: str | None = None, *,
                      reason: str | None = None) -> None:
        """Set one condition on the request: in memory at once, written by the next :meth:`flush`. A per-member
        condition (``<Step>--<pod>``) has no reason unless given; a step's has its own type."""
        if reason is None and constants.PER_POD_SEPARATOR not in type_:
            reason = type_
        st = self._status()
        before = st.get("conditions") or []
        after = conditions.set_condition(before, type_, status, reason=reason, message=message,
                                         observed_generation=self.generation)
        if after != before:
            st["conditions"] = after
            self._dirty_conditions.add(type_)

    def set_phase(self, phase: str) -> None:
        """The request's phase (and ``observedGeneration``), written by the next :meth:`flush`."""
        st = self._status()
        for key, value in (("phase", phase), ("observedGeneration", self.generation)):
            if st.get(key) != value:
                st[key] = value
                self._dirty_fields[key] = value

    def set_field(self, field: str, value: Any) -> None:
        """A top-level ``status`` field (JSON), replaced whole, written by the next :meth:`flush`."""
        st = self._status()
        if st.get(field) != value:
            st[field] = value
            self._dirty_fields[field] = value

    def field(self, field: str) -> Any:
        """A top-level ``status`` field as it is in memory (None when absent)."""
        return (self.request.get("status") or {}).get(field)

    @property
    def dirty(self) -> bool:
        """Is anything queued that :meth:`flush` would write?"""
        return bool(self._dirty_conditions or self._dirty_fields)

    async def flush(self) -> None:
        """Write every queued status change in one ``transact_status`` (one PATCH; no I/O when nothing is queued).
        A condition whose live status already is the final one keeps its live ``lastTransitionTime``. Then post the
        queued Events and run the queued observations (:meth:`announce`, :meth:`on_written`): the Events first, so
        a crash point (an observation) fires after the write and the Events that announce it: what a crash point
        tests is the resume from the recorded state, not a lost announcement."""
        if self.dirty:
            await self._write()
        events, self._events = self._events, []
        if self._steps:
            events.insert(0, steps_event(self.take_steps()))
        for reason, message, type_ in events:
            await self.kube.event(self.request, reason=reason, message=message, type_=type_)
        observations, self._written = self._written, []
        for observe in observations:
            observe()

    async def _write(self) -> None:
        final = [c for c in self.conditions if c.get("type") in self._dirty_conditions]
        fields = dict(self._dirty_fields)

        def mutate(st: dict[str, Any]) -> dict[str, Any]:
            st = {**st, **fields}
            if final:  # merge_conditions keeps the live lastTransitionTime when the live status is the final one
                st["conditions"] = conditions.merge_conditions(st.get("conditions"), final)
            return st

        updated = await self.kube.transact_status(self.api_version, self.kind, self.namespace, self.name, mutate)
        self._dirty_conditions.clear()
        self._dirty_fields.clear()
        if updated is not None:
            self.request = updated

    def announce(self, reason: str, message: str, type_: str = "Normal") -> None:
        """An Event on the request, posted after the next flush's write (the record of what it announces). Never
        Secret data or key material in ``message``."""
        self._events.append((reason, message, type_))

    def announce_step(self, condition: str, message: str, type_: str = "Normal") -> None:
        """A step done, announced after the next flush's write together with the other steps it records."""
        self._steps.append((condition, message, type_))

    def take_steps(self) -> list[Announced]:
        """The steps done and not yet announced (the terminal Event folds them into its own)."""
        steps, self._steps = self._steps, []
        return steps

    def on_written(self, observe: Callable[[], None]) -> None:
        """A metric observation made after the next flush's write: counted only once the transition is recorded."""
        self._written.append(observe)

    async def event(self, reason: str, message: str, type_: str = "Normal") -> None:
        """An Event on the request now (a terminal one, after the terminal write)."""
        await self.kube.event(self.request, reason=reason, message=message, type_=type_)
