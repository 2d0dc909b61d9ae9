"""The one writer of an Etcd's ``status``: typed changes, applied in one transaction.

Three parties keep parts of an Etcd's status (the provisioner its phase and conditions, the ops engine the pause and
what an operation achieved, the lifecycle its scans and what its filers remember). Each says what it changes as a
:class:`Change`, a small frozen value whose ``apply`` maps the live status to the new one, purely; :func:`write`
applies a batch of them in one ``transact_status`` (re-read, apply, skip a no-op, optimistic lock, retry on
conflict). No module writes an Etcd's status any other way (``tests/cluster/test_etcdstatus.py`` reads the
sources), so two parties never overwrite each other's fields, and every field has a named change that sets it.

A change type lives beside the logic that decides it (the pause contract's in :mod:`opsmanager.api.pause`, the
provisioner's in its status module, …): this module only applies them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from opsmanager import kube
from opsmanager.api import conditions, constants

Status = dict[str, Any]


class Change(Protocol):
    """One typed change of an Etcd's status: ``apply`` returns the new status from the live one, without I/O and
    without editing its argument."""

    def apply(self, status: Status) -> Status: ...


@dataclasses.dataclass(frozen=True)
class SetCondition:
    """One condition of the Etcd set (its ``lastTransitionTime`` kept when the status does not change)."""

    type: str
    status: str
    reason: str
    message: str
    observed_generation: int | None = None

    def apply(self, status: Status) -> Status:
        return {**status, "conditions": conditions.set_condition(
            status.get("conditions"), self.type, self.status, reason=self.reason, message=self.message,
            observed_generation=self.observed_generation)}


async def write(k: kube.Kube, namespace: str, name: str, *changes: Change) -> dict[str, Any] | None:
    """Apply ``changes``, in order, to the Etcd's live status in one transaction; the object as written (or as it
    was, when nothing changed), None when the Etcd is gone."""
    def mutate(st: Status) -> Status:
        for change in changes:
            st = change.apply(st)
        return st

    return await k.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, name, mutate)
