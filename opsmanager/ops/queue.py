"""May this request start? The queue rules, pure: one Progressing request per Etcd, FIFO, same-type collapse.

KubeDB's rules (``shared/reference/kubedb-etcd-ops.md`` §3.4, §7):

- one request per Etcd is ``Progressing`` at a time; the others wait in ``Pending``;
- a ``Pending`` request that has a *newer* request of the same type (not yet finished) is ``Skipped`` — the
  newer one supersedes it (it has not started, so nothing is half-done);
- among the waiting ones the oldest goes first;
- ``apply: IfReady`` waits for the Etcd's phase ``Ready``; ``Always`` does not.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from opsmanager.api import constants


class Verdict(enum.Enum):
    START = "Start"
    WAIT = "Wait"
    SKIP = "Skip"


@dataclasses.dataclass(frozen=True)
class Queued:
    """What the queue needs to know about one request of the same Etcd."""

    name: str
    type: str
    phase: str  # "" when the engine has not seen it yet
    created: str  # creationTimestamp, RFC 3339 (sorts as text)
    apply: str = constants.APPLY_IF_READY

    @property
    def order(self) -> tuple[str, str]:
        return (self.created, self.name)

    @property
    def active(self) -> bool:
        return self.phase not in constants.TERMINAL_OPS_PHASES


@dataclasses.dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str


def decide(me: Queued, siblings: Sequence[Queued], db_phase: str | None) -> Decision:
    """The verdict for ``me`` (not yet Progressing), given every other request on the same Etcd."""
    others = [s for s in siblings if s.name != me.name]
    newer_same = [s for s in others if s.type == me.type and s.active and s.order > me.order]
    if newer_same:
        newest = max(newer_same, key=lambda s: s.order)
        return Decision(Verdict.SKIP, f"a newer {me.type} request, {newest.name}, supersedes this one")
    running = [s for s in others if s.phase == constants.PHASE_PROGRESSING]
    if running:
        return Decision(Verdict.WAIT, f"waiting for {running[0].name} to finish")
    # Requests that will be skipped do not hold the queue.
    waiting = [
        s for s in others
        if s.active and s.order < me.order
        and not any(o.type == s.type and o.active and o.order > s.order for o in [*others, me])
    ]
    if waiting:
        first = min(waiting, key=lambda s: s.order)
        return Decision(Verdict.WAIT, f"waiting for the older request {first.name} to run first")
    if me.apply == constants.APPLY_IF_READY and db_phase != constants.DB_PHASE_READY:
        return Decision(Verdict.WAIT, f"apply is IfReady and the Etcd is {db_phase or 'not yet reporting a phase'}")
    return Decision(Verdict.START, "first in line")
