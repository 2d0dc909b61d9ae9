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


def failpoints(text: str | None) -> frozenset[tuple[str, str]]:
    """``(request, condition)`` pairs of ``crash-after`` failpoints from :data:`FAILPOINTS_ENV`'s value."""
    out = set()
    for part in (text or "").split(","):
        kind, _, rest = part.strip().partition(":")
        request, _, condition = rest.partition(":")
        if kind == "crash-after" and request and condition:
            out.add((request, condition))
    return frozenset(out)


def holds(text: str | None) -> dict[tuple[str, str], float]:
    """``(request, condition) → seconds`` of ``hold-in`` failpoints from :data:`FAILPOINTS_ENV`'s value."""
    out: dict[tuple[str, str], float] = {}
    for part in (text or "").split(","):
        kind, _, rest = part.strip().partition(":")
        request, _, rest = rest.partition(":")
        condition, _, seconds = rest.partition(":")
        if kind == "hold-in" and request and condition:
            try:
                out[(request, condition)] = float(seconds)
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
