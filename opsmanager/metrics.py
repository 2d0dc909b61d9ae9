"""The operator's Prometheus registry and the metrics every layer may count into.

One registry (:data:`REGISTRY`) is served on ``opsmanager run --metrics-port`` (:func:`opsmanager.lifecycle.metrics.serve`).
It lives at the bottom of the layers so the provisioner, the engine and the lifecycle can all count into it; the
certificate-lifecycle gauges are in :mod:`opsmanager.lifecycle.metrics`. Labels are names of Kubernetes objects,
never Secret data.
"""

from __future__ import annotations

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


def forget(namespace: str, etcd: str) -> None:
    """Remove the series of a deleted Etcd."""
    try:
        RECONCILES.remove(namespace, etcd)
    except KeyError:
        pass
