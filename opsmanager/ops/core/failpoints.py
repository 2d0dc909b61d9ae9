"""Crash points, for the fault tests (as etcd's gofail).

``OPSMANAGER_FAILPOINTS="crash-after:<request>:<Condition>,…"`` makes the process SIGKILL itself right after the
status write that records that step of that request True — a crash at an exact step boundary, which a test polling
the conditions can miss (a zero-restart rotate passes several boundaries within one second). ``<Condition>`` may be a
per-member condition (``EvictPod--db-1``): the crash then comes right after the write that records that member's
part of the step, in the middle of the step. Unset in production: nothing is armed.
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


def armed() -> frozenset[tuple[str, str]]:
    """The failpoints this process was started with."""
    return failpoints(os.environ.get(FAILPOINTS_ENV))


def crash() -> None:
    log.warning("failpoint: crashing after a step boundary (%s)", FAILPOINTS_ENV)
    os.kill(os.getpid(), signal.SIGKILL)
