"""The step loop: run the first step whose condition is not ``True`` while it answers at once, then persist.

Inside ``Progressing`` the current step is the first step of the plan whose condition is not ``True``; its ``False``
condition's ``lastTransitionTime`` is the step's timeout clock, and so is that of any per-member condition in
flight. A process killed at any point starts again with the same plan, the same current step, and steps that
re-derive their progress from what they observe.

A pass goes on with the next step (or the same step again) while the result is immediate — ``Done``, or
``Progress`` with no delay — at most :data:`MAX_ITERATIONS` times; it stops at a ``Progress`` with a delay, a
``Fail``, a transient error (retried on the next pass, within the step's timeout) or the end. A step's condition
going ``True`` is announced after the write that records it, and a crash point armed for that step of that request
fires right after that write (:mod:`.failpoints`). A crash point may also name a per-member condition
(``<Step>--<pod>``): it fires right after the write that records that member's part ``True`` while its step is
still in flight — a crash in the middle of a step, with the other members' parts still to do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from opsmanager.api import conditions, constants
from opsmanager.ops.core import failpoints
from opsmanager.ops.core.results import Done, Fail, StepResult
from opsmanager.ops.core.status import RequestStatus

log = logging.getLogger("opsmanager.ops")

# Steps run at most this many times in one pass (each ``Done`` or immediate ``Progress`` counts one); then the pass
# persists what it has and asks to be called again at once.
MAX_ITERATIONS = 25


class Step(Protocol):
    """What the loop needs of a step: the condition it owns and its message once done."""

    @property
    def condition(self) -> str: ...

    @property
    def message(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Finished:
    """The plan ended: every step done (``ok``), or a step failed or timed out."""

    ok: bool
    message: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Again:
    """Not finished: run the next pass after ``delay`` seconds (what is queued is written)."""

    delay: float


Ctx = TypeVar("Ctx", bound=RequestStatus)
S = TypeVar("S", bound=Step)


@dataclasses.dataclass(frozen=True)
class Loop(Generic[Ctx, S]):
    """How the loop runs the steps of one kind of request. ``execute`` runs one step; ``transient``: the errors a
    later pass retries; ``on_transient`` counts one; ``warning_steps``: conditions announced as a warning;
    ``quiet_steps``: conditions announced by something else (a pause's Event is the database's)."""

    execute: Callable[[Ctx, S], Awaitable[StepResult]]
    clock: Callable[[], datetime.datetime]
    transient: tuple[type[BaseException], ...] = ()
    on_transient: Callable[[BaseException], None] = lambda err: None
    on_step_finished: Callable[[str, float], None] = lambda condition, seconds: None
    crash_after: frozenset[tuple[str, str]] = frozenset()
    # ``hold-in`` failpoints not taken yet (:mod:`.failpoints`): the caller's, so each is taken once per process
    holds: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    warning_steps: frozenset[str] = frozenset()
    quiet_steps: frozenset[str] = frozenset()

    async def run(self, ctx: Ctx, steps: Sequence[S], timeout: datetime.timedelta) -> Finished | Again:
        """Steps until one waits, fails or all are done; what is queued is flushed unless the plan ended (the
        caller's terminal write carries it)."""
        delay = 0.0
        for _ in range(MAX_ITERATIONS):
            step = next((s for s in steps if not ctx.is_true(s.condition)), None)
            if step is None:
                return Finished(ok=True, message="", reason=constants.COND_SUCCESSFUL)
            if (why := timed_out(ctx, step.condition, timeout, self.clock())) is not None:
                return Finished(ok=False, message=why, reason="Timeout")
            if ctx.condition(step.condition) is None:
                ctx.set_condition(step.condition, constants.FALSE, f"{step.condition} in progress")
            if (hold := self.holds.pop((ctx.name, step.condition), None)) is not None:
                await ctx.flush()  # the step shown in flight, then held there
                log.warning("failpoint: holding %s %s/%s step %s in flight for %.1fs", ctx.kind, ctx.namespace,
                            ctx.name, step.condition, hold)
                await asyncio.sleep(hold)
            members = self._armed_members(ctx)
            try:
                result = await self.execute(ctx, step)
            except self.transient as err:
                log.info("%s %s/%s step %s: transient: %s", ctx.kind, ctx.namespace, ctx.name, step.condition, err)
                self.on_transient(err)
                delay = 1.0
                break
            if any(ctx.is_true(c) for c in members):
                ctx.on_written(failpoints.crash)
                await ctx.flush()  # the write that records that member's part, then the crash
            if isinstance(result, Fail):
                ctx.set_condition(step.condition, constants.FALSE, result.message, reason=result.reason)
                return Finished(ok=False, message=f"{step.condition}: {result.message}", reason=result.reason)
            if isinstance(result, Done):
                await self._done(ctx, step, result.message or step.message)
                continue
            if result.message:
                current = ctx.condition(step.condition) or {}
                if current.get("message") != result.message:
                    ctx.set_condition(step.condition, constants.FALSE, result.message)
            if result.delay > 0:
                delay = result.delay
                break
        await ctx.flush()
        return Again(delay)

    def _armed_members(self, ctx: Ctx) -> list[str]:
        """The per-member conditions of this request a crash point is armed for and that are not True yet."""
        return [c for r, c in self.crash_after
                if r == ctx.name and constants.PER_POD_SEPARATOR in c and not ctx.is_true(c)]

    async def _done(self, ctx: Ctx, step: S, message: str) -> None:
        """The step's condition goes True; its one Event and its duration go out after the write that records it
        (at once, then a crash, when a crash point is armed for it)."""
        started = (ctx.condition(step.condition) or {}).get("lastTransitionTime")
        ctx.set_condition(step.condition, constants.TRUE, message)
        ended = (ctx.condition(step.condition) or {}).get("lastTransitionTime")
        if step.condition not in self.quiet_steps:
            ctx.announce_step(step.condition, message,
                              "Warning" if step.condition in self.warning_steps else "Normal")
        if started and ended:
            seconds = (conditions.parse_rfc3339(ended) - conditions.parse_rfc3339(started)).total_seconds()
            condition, observe = step.condition, self.on_step_finished
            ctx.on_written(lambda: observe(condition, seconds))
        if (ctx.name, step.condition) in self.crash_after:
            ctx.on_written(failpoints.crash)
            await ctx.flush()  # the write that records exactly this step, then the crash


def timed_out(ctx: RequestStatus, condition: str, timeout: datetime.timedelta,
              now: datetime.datetime) -> str | None:
    """Why the step owning ``condition`` timed out, None while it has not. The per-member conditions in flight are
    looked at first: they name the member the step is stuck at (the step's own condition went False before any of
    them, so checked first it would always win and never name the member)."""
    in_flight = [
        c["type"] for c in ctx.conditions
        if constants.PER_POD_SEPARATOR in c["type"] and c.get("status") == constants.FALSE
    ] + [condition]
    for type_ in in_flight:
        if not conditions.is_false(ctx.conditions, type_):
            continue
        age = conditions.transition_age(ctx.conditions, type_, now=now)
        if age is not None and age > timeout:
            cond = conditions.get_condition(ctx.conditions, type_) or {}
            what = type_.replace(constants.PER_POD_SEPARATOR, " of ")
            return (f"step {condition} timed out after {int(timeout.total_seconds())}s at {what}: "
                    f"{cond.get('message') or 'no progress'}")
    return None
