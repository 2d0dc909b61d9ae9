"""The operator's Prometheus registry and the metrics every layer may count into.

One registry (:data:`REGISTRY`) is served on ``opsmanager run --metrics-port`` (:func:`opsmanager.lifecycle.metrics.serve`).
It lives at the bottom of the layers so the provisioner, the engine and the lifecycle can all count into it; the
certificate-lifecycle gauges are in :mod:`opsmanager.lifecycle.metrics`. Here: the provisioner's passes, and the
ops engine's requests, steps, restarts, leader moves and reconcile errors (docs/operations.md, "Events and metrics
of a request"). Labels are names of Kubernetes objects, request types, phases, step names and error kinds — never
Secret data, a key or a token.
"""

from __future__ import annotations

from collections.abc import Iterable

import prometheus_client

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)

RECONCILES = prometheus_client.Counter(
    "opsmanager_etcd_reconciles_total",
    "Reconcile passes of the provisioner over an Etcd (each timer tick and each triggered pass)",
    ["namespace", "etcd"], registry=REGISTRY)


def reconciled(namespace: str, etcd: str) -> None:
    """Count one provisioner pass over an Etcd. Passes read from watch caches and write only changes, so this is
    how tests and people see that they happen."""
    RECONCILES.labels(namespace, etcd).inc()


def remove_series(metric: prometheus_client.Gauge | prometheus_client.Counter, *labels: str) -> None:
    """Remove one labelled series; nothing when it does not exist."""
    try:
        metric.remove(*labels)
    except KeyError:
        pass


def forget(namespace: str, etcd: str) -> None:
    """Remove the series of a deleted Etcd."""
    remove_series(RECONCILES, namespace, etcd)


# --- the ops engine: requests, steps, restarts, leader moves, reconcile errors -----------------------
# Labels are request types, phases, step (condition) names and error kinds only: never an object's name, never
# anything from a Secret. Buckets: seconds to an hour (a step takes from under a second — a MoveLeader — to minutes
# — a rolling restart of a large member; a request up to its timeout, 10 min by default, more when it queued).
DURATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)

OPSREQUESTS = prometheus_client.Counter(
    "opsmanager_opsrequests_total",
    "EtcdOpsRequests this operator process moved to a terminal phase (Successful, Failed, Skipped)",
    ["type", "phase"], registry=REGISTRY)
OPSREQUEST_DURATION = prometheus_client.Histogram(
    "opsmanager_opsrequest_duration_seconds",
    "Seconds from an EtcdOpsRequest's creation (metadata.creationTimestamp: queueing included) to its terminal "
    "phase",
    ["type"], buckets=DURATION_BUCKETS, registry=REGISTRY)
STEP_DURATION = prometheus_client.Histogram(
    "opsmanager_step_duration_seconds",
    "Seconds a step of an EtcdOpsRequest took: its condition's lastTransitionTime going False to going True "
    "(whole seconds: the conditions' resolution)",
    ["step"], buckets=DURATION_BUCKETS, registry=REGISTRY)
MEMBER_RESTARTS = prometheus_client.Counter(
    "opsmanager_member_restarts_total",
    "etcd member pods the ops engine restarted (evicted, or deleted by the CA rescue)", registry=REGISTRY)
LEADER_MOVES = prometheus_client.Counter(
    "opsmanager_leader_moves_total",
    "etcd leadership moves (MoveLeader) the ops engine made", registry=REGISTRY)
OPS_RECONCILES = prometheus_client.Counter(
    "opsmanager_opsrequest_reconciles_total",
    "Reconcile passes of the ops engine over EtcdOpsRequests (each wake-up by a watch event or a step's delay)",
    registry=REGISTRY)
RECONCILE_ERRORS = prometheus_client.Counter(
    "opsmanager_reconcile_errors_total",
    "Transient errors caught in the ops engine's and the provisioner's reconcile loops (retried), by kind",
    ["kind"], registry=REGISTRY)

ERROR_KINDS = ("etcd", "conflict", "forbidden", "not-found", "unavailable", "kube", "other")


def error_kind(err: BaseException) -> str:
    """The ``kind`` label of a reconcile error: the error class's ``metric_kind`` (``etcd`` for every
    :class:`~opsmanager.etcd.errors.EtcdError`; ``conflict``, ``forbidden``, ``not-found``, ``unavailable`` or
    ``kube`` for :class:`~opsmanager.kube.errors.KubeError`), else ``other`` — from the class only, never the text.
    (Declared on the error classes, so this bottom module imports neither layer.)"""
    kind = getattr(type(err), "metric_kind", None)
    return kind if isinstance(kind, str) and kind in ERROR_KINDS else "other"


def reconcile_error(err: BaseException) -> None:
    """Count one transient error caught in a reconcile loop."""
    RECONCILE_ERRORS.labels(error_kind(err)).inc()


def declare_requests(types: Iterable[str], phases: Iterable[str]) -> None:
    """Create every (type, terminal phase) series at 0 (the engine does, at import), so the first failure is an
    increase Prometheus sees — a counter series born at 1 shows none; the EtcdOpsRequestFailed alert depends on it.
    (The names come from the caller: this module is below the API layer.)"""
    phases = tuple(phases)
    for type_ in types:
        for phase in phases:
            OPSREQUESTS.labels(type_, phase)


def request_finished(type_: str, phase: str, seconds: float | None) -> None:
    """Count a request this process moved to a terminal phase, and observe its duration (None: unknown)."""
    OPSREQUESTS.labels(type_, phase).inc()
    if seconds is not None:
        OPSREQUEST_DURATION.labels(type_).observe(max(seconds, 0.0))


def step_finished(step: str, seconds: float) -> None:
    STEP_DURATION.labels(step).observe(max(seconds, 0.0))


def member_restarted(count: int = 1) -> None:
    MEMBER_RESTARTS.inc(count)


def leader_moved() -> None:
    LEADER_MOVES.inc()
