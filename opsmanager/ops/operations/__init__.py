"""The operation types the engine runs: one module per ``EtcdOpsRequest`` type (the TLS family a package), each
exporting its :class:`~opsmanager.ops.operations.base.Operation` as ``OPERATION``, and the registry that maps a
type to it.

The engine, the queue and the ``UpdateDatabase`` step look a request's type up here and use only what
:class:`~opsmanager.ops.operations.base.Operation` offers; none of them names a type. Adding a type is its module,
a line in :data:`REGISTRY`, its API model and its webhook rule (``docs/architecture.md``, "Adding an operation
type"). :func:`registered` adds one for the length of a block — a test's example type.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator, Mapping
from typing import Any

from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import plan
from opsmanager.ops.operations import (
    backup,
    base,
    compact,
    defragment,
    horizontal_scaling,
    move_leader,
    reconfigure,
    recover_from_quorum_loss,
    restart,
    restore,
    rotate_auth,
    storage_migration,
    update_version,
    vertical_scaling,
    volume_expansion,
)
from opsmanager.ops.operations.reconfigure_tls import operation as reconfigure_tls

Operation = base.Operation

REGISTRY: dict[str, Operation] = {op.type: op for op in (
    update_version.OPERATION,
    horizontal_scaling.OPERATION,
    vertical_scaling.OPERATION,
    restart.OPERATION,
    reconfigure.OPERATION,
    reconfigure_tls.OPERATION,
    rotate_auth.OPERATION,
    move_leader.OPERATION,
    compact.OPERATION,
    defragment.OPERATION,
    recover_from_quorum_loss.OPERATION,
    restore.OPERATION,
    backup.OPERATION,
    volume_expansion.OPERATION,
    storage_migration.OPERATION,
)}


def get(type_: str) -> Operation | None:
    """The operation of a request type, None for a type the engine does not run."""
    return REGISTRY.get(type_)


def of(type_: str) -> Operation:
    """The operation of a request type; ValueError (the request's failure message) for one the engine does not
    run."""
    op = REGISTRY.get(type_)
    if op is None:
        raise ValueError(f"unsupported EtcdOpsRequest type {type_!r}")
    return op


def plan_for(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, variant: enum.Enum | None = None) -> plan.Plan:
    """The plan of any supported request (``variant``: what its type observed when it started, if anything)."""
    return of(request.spec.type).plan(db, request, variant)


def origin(db_spec: Mapping[str, Any]) -> ops_api.RequestOrigin:
    """What every type records of the Etcd's spec in ``status.origin`` when a request starts. One record for all
    types, as it always was: a request's ``status.origin`` holds every field any type reads back."""
    out = ops_api.RequestOrigin()
    for op in REGISTRY.values():
        out = out.model_copy(update=op.origin(db_spec).model_dump(exclude_unset=True, by_alias=False))
    return out


def apply_policy(spec: Mapping[str, Any]) -> str:
    """The apply policy of a request (its raw spec): its type's, else what it says."""
    op = REGISTRY.get(str(spec.get("type", "")))
    return (op.apply if op is not None else base.requested_apply)(spec)


def rescues(spec: Mapping[str, Any]) -> bool:
    """May the request (its raw spec) start on an Etcd that is not Ready only because its certificates expired?"""
    op = REGISTRY.get(str(spec.get("type", "")))
    return op is not None and op.rescues(spec)


@contextlib.contextmanager
def registered(op: Operation) -> Iterator[Operation]:
    """``op`` in the registry for the length of the block (an example type in a test); what was there before is
    put back after."""
    before = REGISTRY.get(op.type)
    REGISTRY[op.type] = op
    try:
        yield op
    finally:
        if before is None:
            del REGISTRY[op.type]
        else:
            REGISTRY[op.type] = before
