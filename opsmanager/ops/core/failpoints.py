"""Crash points, for the fault tests (as etcd's gofail).

``OPSMANAGER_FAILPOINTS="crash-after:<request>:<Condition>,…"`` makes the process SIGKILL itself right after the
status write that records that step of that request True — a crash at an exact step boundary, which a test polling
the conditions can miss (a zero-restart rotate passes several boundaries within one second). ``<Condition>`` may be a
per-member condition (``EvictPod--db-1``): the crash then comes right after the write that records that member's
part of the step, in the middle of the step. ``hold-in:<request>:<Condition>:<seconds>`` holds that step in
flight instead: its condition is written False, then the step waits that long before it runs (once per process) —
a step that would otherwise start and end within one write (``RotateAuth``'s, ``Backup``'s) shown in flight, so a
fault test can strike while it is. Unset in production: nothing is armed.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("opsmanager.ops")

FAILPOINTS_ENV = "OPSMANAGER_FAILPOINTS"


def _points(text: str | None, kind: str) -> list[list[str]]:
    """The colon-separated fields after ``<kind>:`` of each comma-separated failpoint of that kind in ``text``."""
    return [part.strip().split(":")[1:] for part in (text or "").split(",")
            if part.strip().startswith(f"{kind}:")]


def failpoints(text: str | None) -> frozenset[tuple[str, str]]:
    """``(request, condition)`` pairs of ``crash-after`` failpoints from :data:`FAILPOINTS_ENV`'s value."""
    return frozenset((f[0], f[1]) for f in _points(text, "crash-after") if len(f) == 2 and all(f))


def holds(text: str | None) -> dict[tuple[str, str], float]:
    """``(request, condition) → seconds`` of ``hold-in`` failpoints from :data:`FAILPOINTS_ENV`'s value."""
    out: dict[tuple[str, str], float] = {}
    for f in _points(text, "hold-in"):
        if len(f) == 3 and f[0] and f[1]:
            try:
                out[(f[0], f[1])] = float(f[2])
            except ValueError:
                continue
    return out


def armed_holds() -> dict[tuple[str, str], float]:
    """The ``hold-in`` failpoints this process was started with (each is taken once)."""
    return holds(os.environ.get(FAILPOINTS_ENV))


def armed() -> frozenset[tuple[str, str]]:
    """The failpoints this process was started with."""
    return failpoints(os.environ.get(FAILPOINTS_ENV))


def crash() -> None:
    log.warning("failpoint: crashing after a step boundary (%s)", FAILPOINTS_ENV)
    os.kill(os.getpid(), signal.SIGKILL)
