"""The watch check: did a watcher that reconnects after every error see every change exactly once, in order, with no
gap — and was it told, never silently moved, when the cluster's history started again?

Pure: it reads what the watcher logged (:class:`Connected`, :class:`Delivered`, :class:`Broken`, in the order they
happened; :class:`e2e.history.Watcher` writes them) and the changes the clients made (:func:`changes`, from an
:class:`e2e.history.History`), and returns the problems it found, each a sentence; none: the guarantees held.

**The guarantees, as etcd gives them** (and the checks, in :func:`check`):

* *in order*: events arrive by increasing revision, across reconnects too (a reconnect asks for the revision after
  the last one seen);
* *exactly once*: no (revision, key) twice;
* *no gap*: every change the clients made under the watched prefix at a known revision between the watch's start
  and the last revision it covers was delivered; an event the clients never wrote is refused too (a watch that
  jumped into another history delivers values nobody wrote here, or known values at other revisions);
* *a new history is an error, not a jump*: within a segment every response names the same cluster ID. A segment
  ends only at a clear error — ``compacted`` (etcd cancels a watch whose start revision is at or below the last
  compaction, with the compaction's revision) or ``new-cluster`` (the watcher saw another cluster ID and stopped
  before taking any of its events). A response from another cluster without either is a *silent jump*.

**What etcd does, measured on 3.5.35 and 3.6.16 (docs/reliability.md, "What etcd gives")**: a watch from a
compacted revision is cancelled at once with ``compact_revision`` = the last compaction (clientv3's
``ErrCompacted``); from the compaction's own revision it works. A watch from a revision the cluster has not reached
yet waits, silently, until the cluster gets there. So after a restore (the operator keeps the snapshot's revisions:
D27.5) a watcher reconnecting from its last revision + 1 gets no error from etcd: it waits, then receives the new
history's events as if they followed. The only clear signal is the new cluster ID in every response header — the
confirmation that opens the stream already carries it — so the watcher must compare it, and this check refuses a
stream that changed cluster without saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

CLEAR_ERRORS = ("compacted", "new-cluster")
"""The errors after which a watcher may start over (a new segment): the history it watched is gone by design."""


@dataclasses.dataclass(frozen=True)
class Event:
    """One event as the watch delivered it."""

    kind: str  # put | delete
    key: str
    value: str
    revision: int  # the event's revision (its key's mod revision)


@dataclasses.dataclass(frozen=True)
class Connected:
    """The watcher (re)opened the watch from ``start_revision`` on ``member``."""

    start_revision: int
    member: str


@dataclasses.dataclass(frozen=True)
class Delivered:
    """One response: its events and its header (store revision, cluster ID, the member that sent it)."""

    revision: int
    cluster_id: int
    member: str
    events: tuple[Event, ...] = ()


@dataclasses.dataclass(frozen=True)
class Broken:
    """The watch ended with an error: ``kind`` ``compacted`` (``compact_revision`` set), ``new-cluster`` (the watcher
    saw another cluster ID: ``detail`` names both), or ``transient`` (the stream broke: the watcher reconnects)."""

    kind: str
    detail: str = ""
    compact_revision: int = 0


Entry = Connected | Delivered | Broken


@dataclasses.dataclass(frozen=True)
class Change:
    """A change the clients made: ``value`` written to ``key`` at ``revision`` — None when the write's outcome is
    unknown (it may not have happened) and no read showed its revision — in the history of ``cluster_id`` (None:
    whichever a segment watches; a restore keeps revisions, so two histories can both have a revision 9)."""

    key: str
    value: str
    revision: int | None
    cluster_id: int | None = None


def changes(writes: Iterable[tuple[str, str, int | None]],
            reads: Iterable[tuple[str, str, int]] = ()) -> list[Change]:
    """Pure: the changes from ``(key, value, revision or None)`` writes; a read ``(key, value, mod revision)`` of a
    value written with an unknown outcome says that it happened, and at which revision."""
    seen = {(key, value): mod for key, value, mod in reads}
    out = []
    for key, value, revision in writes:
        out.append(Change(key, value, revision if revision is not None else seen.get((key, value))))
    return out


@dataclasses.dataclass
class _Segment:
    """One stretch of the log between clear errors."""

    start: int | None = None  # the first start revision asked for
    cluster_id: int | None = None
    events: list[tuple[Event, Delivered]] = dataclasses.field(default_factory=list)


def _describe(e: Event) -> str:
    return f"{e.kind} {e.key}={e.value!r} at revision {e.revision}"


def _segments(log: Sequence[Entry], problems: list[str]) -> list[_Segment]:
    """Split the log at clear errors, checking order, duplicates, reconnects and the cluster ID on the way."""
    segments = [_Segment()]
    last = 0  # the revision of the last event of the current segment
    seen: set[tuple[int, str]] = set()
    for entry in log:
        seg = segments[-1]
        if isinstance(entry, Broken):
            if entry.kind in CLEAR_ERRORS:
                segments.append(_Segment())
                last, seen = 0, set()
            continue
        if isinstance(entry, Connected):
            if seg.start is None:
                seg.start = entry.start_revision
            elif last and entry.start_revision > last + 1:
                problems.append(f"reconnected on {entry.member} from revision {entry.start_revision}, past the "
                                f"last revision seen ({last}) + 1: the revisions between were skipped")
            continue
        if seg.cluster_id is None:
            seg.cluster_id = entry.cluster_id
        elif entry.cluster_id != seg.cluster_id:
            problems.append(f"silent jump: {entry.member} answered for cluster {entry.cluster_id:x} after "
                            f"cluster {seg.cluster_id:x}, with no error between (a new history must end the "
                            "watch with 'compacted' or 'new-cluster')")
            seg.cluster_id = entry.cluster_id
        for event in entry.events:
            where = (event.revision, event.key)
            if where in seen:
                problems.append(f"duplicate: {_describe(event)} delivered again (by {entry.member})")
                continue
            if event.revision < last:
                problems.append(f"out of order: {_describe(event)} (by {entry.member}) after revision {last}")
            seen.add(where)
            last = max(last, event.revision)
            seg.events.append((event, entry))
    return [s for s in segments if s.start is not None or s.events]


def check(log: Sequence[Entry], made: Sequence[Change], *, prefix: str = "",
          until: int | None = None) -> list[str]:
    """The problems of a watch log against the changes the clients made under the watched ``prefix`` (events on
    other keys are not compared). ``until``: the revision the watcher is known to have reached in its last segment
    (it was stopped only after seeing it): every known change up to it must be there; without it, up to the last
    event seen. A segment is compared with the changes of its own cluster (and those whose cluster is not known).
    Empty: every guarantee held."""
    problems: list[str] = []
    segments = _segments(log, problems)
    written: set[tuple[str, str, int | None]] = set()
    for c in made:
        if (c.key, c.value, c.cluster_id) in written:
            problems.append(f"the clients wrote {c.key}={c.value!r} twice: values must be unique to be compared")
        written.add((c.key, c.value, c.cluster_id))
    for index, seg in enumerate(segments):
        final = index == len(segments) - 1
        start = seg.start or 0
        mine = [c for c in made if c.cluster_id is None or c.cluster_id == seg.cluster_id]
        by_value = {(c.key, c.value): c for c in mine}
        delivered: dict[int, list[Event]] = {}
        for event, _response in seg.events:
            if not event.key.startswith(prefix):
                continue
            delivered.setdefault(event.revision, []).append(event)
            ours = by_value.get((event.key, event.value))
            if event.kind != "put" or ours is None:
                problems.append(f"not in the history: {_describe(event)} — no client wrote it")
            elif ours.revision is not None and ours.revision != event.revision:
                problems.append(f"not in the history: {_describe(event)} — it was written at revision "
                                f"{ours.revision}")
        reached = max((e.revision for e, _ in seg.events), default=start - 1)
        if final and until is not None:
            reached = max(reached, until)
        missing = [c for c in mine if c.revision is not None and start <= c.revision <= reached
                   and not any(e.key == c.key and e.value == c.value for e in delivered.get(c.revision, ()))]
        for c in sorted(missing, key=lambda c: c.revision or 0)[:20]:
            problems.append(f"gap: {c.key}={c.value!r} written at revision {c.revision} was never delivered (the "
                            f"watch covered revisions {start}-{reached})")
        if len(missing) > 20:
            problems.append(f"gap: {len(missing) - 20} more changes never delivered")
    return problems


def summary(log: Sequence[Entry]) -> Mapping[str, int]:
    """Counts for a report: responses, events, reconnects, errors by kind."""
    out = {"responses": 0, "events": 0, "connects": 0}
    for entry in log:
        if isinstance(entry, Delivered):
            out["responses"] += 1
            out["events"] += len(entry.events)
        elif isinstance(entry, Connected):
            out["connects"] += 1
        else:
            out[entry.kind] = out.get(entry.kind, 0) + 1
    return out


__all__ = ["CLEAR_ERRORS", "Broken", "Change", "Connected", "Delivered", "Entry", "Event", "changes", "check",
           "summary"]
