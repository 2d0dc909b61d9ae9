"""What the engine needs of an operation type: :class:`Operation`, the one value each type's module exports.

The engine, the queue and the ``UpdateDatabase`` step ask the registry (:mod:`opsmanager.ops.operations`) for the
request's type and use only this: how the type plans, what it observes once when it starts, what it records of the
Etcd before any step acts, what it writes back to the Etcd when it succeeds, its success message, and whether it
may start on an Etcd that is not Ready. None of them names a type.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import context
from opsmanager.ops import plan as plan_mod

# (``plan_mod``: inside :class:`Operation`, ``plan`` is the type's planner.)

# How a type plans: the Etcd as it was when the request started, the request, and what the type's ``observe``
# chose then (None for a type that observes nothing). Pure; a request the type cannot run raises ValueError, whose
# text becomes the request's failure message.
Planner = Callable[[etcd_api.Etcd, ops_api.EtcdOpsRequest, enum.Enum | None], plan_mod.Plan]
# What a type observes once, when the request starts (no step condition yet), and records in ``status.origin``
# before any step acts — so the plan never changes mid-run. Called on every reconcile: it reads the record back.
Observer = Callable[[context.OpsContext], Awaitable[enum.Enum | None]]
# What ``UpdateDatabase`` does for the type: the Etcd's spec (and status) brought to what the request achieved,
# then whatever is no longer used removed. Idempotent: a crash in between re-runs it.
WriteBack = Callable[[context.OpsContext, plan_mod.Step], Awaitable[context.StepResult]]
# The fields of ``status.origin`` a type reads back, from the Etcd's raw spec when the request started (only the
# type's own fields set).
Origin = Callable[[Mapping[str, Any]], ops_api.RequestOrigin]
# Why the Etcd is not Ready for a reason this type can fix (its certificates expired), "" when it is not: what the
# queue asks before it starts a request that ``rescues`` on an Etcd that is not Ready.
RescueReason = Callable[[context.OpsContext], Awaitable[str]]
# From the request's raw spec (the queue reads raw objects of every request of the Etcd).
ApplyPolicy = Callable[[Mapping[str, Any]], str]
Rescues = Callable[[Mapping[str, Any]], bool]


def requested_apply(spec: Mapping[str, Any]) -> str:
    """The request's own ``spec.apply`` (``IfReady`` unless it says ``Always``)."""
    return str(spec.get("apply", constants.APPLY_IF_READY))


def never(spec: Mapping[str, Any]) -> bool:
    return False


def nothing(spec: Mapping[str, Any]) -> ops_api.RequestOrigin:
    return ops_api.RequestOrigin()


@dataclasses.dataclass(frozen=True)
class Operation:
    """One ``EtcdOpsRequest`` type, as the engine sees it. ``success``: the ``Successful`` condition's message, or
    how to say it from the plan. ``apply``: the request's apply policy (a type that can only run on an Etcd that is
    not Ready says ``Always`` whatever the request says). ``rescues``: may the request start on an Etcd that is not
    Ready only because of what ``rescue_reason`` finds (:mod:`opsmanager.ops.core.queue`)?"""

    type: str
    plan: Planner
    success: str | Callable[[plan_mod.Plan], str]
    write_back: WriteBack | None = None
    observe: Observer | None = None
    origin: Origin = nothing
    apply: ApplyPolicy = requested_apply
    rescues: Rescues = never
    rescue_reason: RescueReason | None = None

    def success_message(self, p: plan_mod.Plan) -> str:
        return self.success if isinstance(self.success, str) else self.success(p)


def origin_field(key: str, value: object, kind: type) -> ops_api.RequestOrigin:
    """The origin with its field ``key`` (the API's name) set when ``value`` is a ``kind``, else nothing (a field
    the Etcd's spec lacks is not recorded)."""
    return ops_api.RequestOrigin.model_validate({key: value} if isinstance(value, kind) else {})
