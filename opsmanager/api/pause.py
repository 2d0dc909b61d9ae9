"""The "paused" contract between the provisioner and the ops engine — one definition, pure.

An Etcd is paused while its status carries ``Paused=True``. While it does, the provisioner changes nothing it
owns (it only reports); whoever set the pause removes it. Two kinds of holder:

- **an EtcdOpsRequest**: ``reason`` is the request's name and ``message`` is exactly
  ``EtcdOpsRequest <name> is in process`` (:data:`MESSAGE`). The ops engine writes it (:func:`pause`), removes it
  when that request ends, fails or is deleted (:func:`release`), and heals it away when the request no longer
  exists or has finished (:func:`held_by_request` names the request to look up);
- **anyone else** (a person, a backup tool, a benchmark's naive strategy): any other reason/message. The operator
  honours it like any pause and never removes it; a request waits while it is there.

Each function takes and returns a ``status`` mapping; :class:`Pause` and :class:`Release` wrap the two that change
it as typed changes for :func:`opsmanager.cluster.etcdstatus.write` (re-read, apply, skip a no-op, optimistic lock).
Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from opsmanager.api import conditions, constants

Status = dict[str, Any]

MESSAGE: Final = "EtcdOpsRequest {} is in process"


def _condition(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return conditions.get_condition((status or {}).get("conditions"), constants.COND_PAUSED)


def is_paused(status: Mapping[str, Any] | None) -> bool:
    """True while anyone holds a pause (``Paused=True``)."""
    return conditions.is_true((status or {}).get("conditions"), constants.COND_PAUSED)


def holder(status: Mapping[str, Any] | None) -> str:
    """Who holds the pause, as its ``reason`` says (a request's name, or whatever a person wrote); ``""`` when
    the Etcd is not paused."""
    cond = _condition(status)
    if cond is None or cond.get("status") != constants.TRUE:
        return ""
    return str(cond.get("reason") or "")


def held_by_request(status: Mapping[str, Any] | None) -> str | None:
    """The name of the EtcdOpsRequest holding the pause, or None: not paused, or paused by someone else (whose
    pause the operator never removes)."""
    name = holder(status)
    cond = _condition(status)
    if not name or cond is None or cond.get("message") != MESSAGE.format(name):
        return None
    return name


def request_holds(request: Mapping[str, Any] | None) -> bool:
    """Whether the EtcdOpsRequest object ``request`` (as read from the API, or None when it does not exist) still
    holds a pause it set: it exists, is not being deleted and has not finished. A pause whose request does not
    hold it is a leaked one — the engine heals it away, and nothing else need honour it."""
    if request is None or (request.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (request.get("status") or {}).get("phase") not in constants.TERMINAL_OPS_PHASES


def pause(status: Mapping[str, Any], request: str) -> Status:
    """``status`` with the pause of ``request`` set."""
    out = dict(status)
    out["conditions"] = conditions.set_condition(out.get("conditions"), constants.COND_PAUSED, constants.TRUE,
                                                 reason=request, message=MESSAGE.format(request))
    return out


def release(status: Mapping[str, Any], request: str) -> Status:
    """``status`` without the pause, if ``request`` holds it; unchanged otherwise (someone else's pause stays)."""
    cond = _condition(status)
    if cond is None or cond.get("reason") != request:
        return dict(status)
    out = dict(status)
    out["conditions"] = conditions.remove_condition(out.get("conditions"), constants.COND_PAUSED)
    return out


@dataclasses.dataclass(frozen=True)
class Pause:
    """The pause of EtcdOpsRequest ``request`` set (:func:`pause`)."""

    request: str

    def apply(self, status: Mapping[str, Any]) -> Status:
        return pause(status, self.request)


@dataclasses.dataclass(frozen=True)
class Release:
    """The pause removed if EtcdOpsRequest ``request`` holds it; anyone else's stays (:func:`release`)."""

    request: str

    def apply(self, status: Mapping[str, Any]) -> Status:
        return release(status, self.request)
