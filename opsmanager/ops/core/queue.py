"""May this request start? The queue rules, pure: one Progressing request per Etcd, FIFO, same-type collapse, and
why a request waits.

KubeDB's rules (``shared/reference/kubedb-etcd-ops.md`` §3.4, §7), with what they miss added:

- one request per Etcd is ``Progressing`` at a time; the others wait in ``Pending``;
- a ``Pending`` request that has a *newer* request of the same type (not yet finished) is ``Skipped`` — the
  newer one supersedes it (it has not started, so nothing is half-done) — **unless the newer one could not start
  where this one could** (``apply: IfReady`` on an Etcd that is not Ready): superseding would leave the Etcd with
  nothing that can run — e.g. the operator's own rescue request replaced by a hand-filed one that then waits for a
  Ready only the rescue could bring;
- among the waiting ones the oldest goes first;
- ``apply: IfReady`` waits for the Etcd's phase ``Ready``; ``Always`` does not. One exception, decided by expiry as
  the rescue is: a request that can rescue (a ``ReconfigureTLS`` rotate or issuer change) starts on an Etcd that is
  not Ready **only because its certificates expired** — an expired cluster is never Ready, so waiting for Ready
  would wait for ever;
- the Etcd paused by someone else (a person, another tool) holds every request until it is resumed.

Every wait has a reason (the request's ``Pending`` condition, shown by ``kubectl get``) and a message that names
what it waits for and, where the user can act, what to do.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Final

from opsmanager.api import constants

# The ``Pending`` condition's reasons: True while the request waits, False once it started.
REASON_WAITING_FOR_REQUEST: Final = "WaitingForRequest"  # another request of the Etcd runs or is older
REASON_WAITING_FOR_READY: Final = "WaitingForReady"  # apply IfReady and the Etcd is not Ready
REASON_ETCD_PAUSED: Final = "EtcdPaused"  # someone other than a request paused the Etcd
REASON_STARTED: Final = "Started"  # first in line
REASON_STARTED_AS_RESCUE: Final = "StartedAsRescue"  # IfReady, not Ready only because the certificates expired
REASON_SUPERSEDED: Final = constants.COND_SKIPPED
WAITING_REASONS: Final = (REASON_WAITING_FOR_REQUEST, REASON_WAITING_FOR_READY, REASON_ETCD_PAUSED)


class Verdict(enum.Enum):
    START = "Start"
    WAIT = "Wait"
    SKIP = "Skip"


@dataclasses.dataclass(frozen=True)
class Queued:
    """What the queue needs to know about one request of the same Etcd. ``rescues``: a ``ReconfigureTLS`` that
    rotates the certificates or changes the issuer — the requests that bring an expired cluster back."""

    name: str
    type: str
    phase: str  # "" when the engine has not seen it yet
    created: str  # creationTimestamp, RFC 3339 (sorts as text)
    apply: str = constants.APPLY_IF_READY
    rescues: bool = False

    @property
    def order(self) -> tuple[str, str]:
        return (self.created, self.name)

    @property
    def active(self) -> bool:
        return self.phase not in constants.TERMINAL_OPS_PHASES


@dataclasses.dataclass(frozen=True)
class EtcdState:
    """What the queue needs to know about the Etcd. ``not_ready``: why it is not Ready (its ``Ready`` condition's
    message); ``paused_by``: who holds a pause that no request of it holds (``""``: none); ``expired``: non-empty
    when its certificates expired and nothing else keeps it from Ready — what expired (the engine observes it, by
    expiry, only when a request could use it)."""

    phase: str | None
    not_ready: str = ""
    paused_by: str = ""
    expired: str = ""


@dataclasses.dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str  # the Pending condition's reason (or Skipped)
    message: str


def may_start_on(q: Queued, etcd: EtcdState) -> bool:
    """Whether ``apply`` lets ``q`` start on the Etcd as it is (the other rules aside)."""
    if q.apply != constants.APPLY_IF_READY or etcd.phase == constants.DB_PHASE_READY:
        return True
    return q.rescues and bool(etcd.expired)


def superseded_by(q: Queued, others: Sequence[Queued], etcd: EtcdState) -> Queued | None:
    """The newest request of ``q``'s type, newer than ``q`` and not finished, that supersedes it: one that can start
    where ``q`` can (a request that can start is never replaced by one that cannot); None when none does."""
    newer = [s for s in others if s.name != q.name and s.type == q.type and s.active and s.order > q.order]
    if not newer:
        return None
    newest = max(newer, key=lambda s: s.order)
    if may_start_on(newest, etcd) or not may_start_on(q, etcd):
        return newest
    return None


def needs_expiry(me: Queued, siblings: Sequence[Queued], etcd: EtcdState) -> bool:
    """Whether :func:`decide` could use ``etcd.expired`` for ``me``: the Etcd is not Ready (nor halted, nor still
    being set up) and ``me`` or a newer request of its type could rescue with ``apply: IfReady``. The engine observes
    expiry only then: it costs a handshake with every member."""
    if etcd.phase not in (constants.DB_PHASE_NOT_READY, constants.DB_PHASE_CRITICAL):
        return False
    return any(q.rescues and q.apply == constants.APPLY_IF_READY and q.active
               for q in [me, *siblings] if q.type == me.type and q.order >= me.order)


def _not_ready_message(etcd: EtcdState) -> str:
    phase = etcd.phase or "not yet reporting a phase"
    why = f": {etcd.not_ready}" if etcd.not_ready else ""
    if etcd.phase == constants.DB_PHASE_HALTED:
        hint = "it starts once spec.halted is false and the Etcd is Ready"
    elif etcd.phase in (None, constants.DB_PHASE_PROVISIONING):
        hint = "it starts once the Etcd has been provisioned and is Ready (its conditions say what it waits for)"
    else:
        hint = ("it starts once the Etcd is Ready; to run it on an Etcd that is not Ready, file it again with "
                "apply: Always")
    return f"apply is IfReady and the Etcd is {phase}{why} — {hint}"


def decide(me: Queued, siblings: Sequence[Queued], etcd: EtcdState) -> Decision:
    """The verdict for ``me`` (not yet Progressing), given every other request on the same Etcd."""
    others = [s for s in siblings if s.name != me.name]
    newest = superseded_by(me, others, etcd)
    if newest is not None:
        return Decision(Verdict.SKIP, REASON_SUPERSEDED, f"a newer {me.type} request, {newest.name}, supersedes "
                                                         "this one")
    running = [s for s in others if s.phase == constants.PHASE_PROGRESSING]
    if running:
        return Decision(Verdict.WAIT, REASON_WAITING_FOR_REQUEST,
                        f"waiting for {running[0].name} ({running[0].type}) to finish")
    # Requests that will be skipped do not hold the queue.
    everyone = [*others, me]
    waiting = [s for s in others if s.active and s.order < me.order and superseded_by(s, everyone, etcd) is None]
    if waiting:
        first = min(waiting, key=lambda s: s.order)
        return Decision(Verdict.WAIT, REASON_WAITING_FOR_REQUEST,
                        f"waiting for the older request {first.name} ({first.type}) to run first")
    if etcd.paused_by:
        return Decision(Verdict.WAIT, REASON_ETCD_PAUSED,
                        f"the Etcd is paused by {etcd.paused_by} (its Paused condition) — the request starts when "
                        "whoever paused it removes the Paused condition")
    if not may_start_on(me, etcd):
        return Decision(Verdict.WAIT, REASON_WAITING_FOR_READY, _not_ready_message(etcd))
    if me.apply == constants.APPLY_IF_READY and etcd.phase != constants.DB_PHASE_READY:
        return Decision(Verdict.START, REASON_STARTED_AS_RESCUE,
                        f"the Etcd is {etcd.phase} only because its certificates expired ({etcd.expired}): a "
                        "rotate or issuer change is the rescue, so apply IfReady starts it as apply: Always would")
    return Decision(Verdict.START, REASON_STARTED, "first in line")
