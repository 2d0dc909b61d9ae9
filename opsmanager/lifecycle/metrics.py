"""Prometheus metrics of the certificate lifecycle, in a registry of their own.

Published from an Etcd's ``status.tls`` (:func:`publish`), removed when the Etcd goes (:func:`forget`)::

    opsmanager_etcd_certificate_not_after_timestamp_seconds{namespace,etcd,member,port}  the served leaf's notAfter
    opsmanager_etcd_certificate_matches_secret{namespace,etcd,member,port}               1 / 0
    opsmanager_etcd_ca_not_after_timestamp_seconds{namespace,etcd}                       the earliest CA's notAfter
    opsmanager_etcd_tls_last_scan_timestamp_seconds{namespace,etcd}                      the last scan's time
    opsmanager_etcd_tls_scan_errors_total                                                scans that failed

``port`` is ``client`` or ``peer``. Timestamps are absolute (Unix seconds), as cert-manager's and the x509
exporter's are. A port whose scan recorded an ``error`` has no series (the alert on a missing scan covers it). No
label carries a serial, a key or anything from a Secret.

Serving: ``opsmanager run --metrics-port N`` (default 8081, 0 = off) calls :func:`serve`, which is prometheus_client's
``start_http_server`` on :data:`REGISTRY` — a daemon thread of its own, so a busy event loop never delays a scrape
and kopf's loop is not touched. Path ``/metrics`` (that server answers on every path).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any
from wsgiref.simple_server import WSGIServer

import prometheus_client

from opsmanager import metrics as operator_metrics
from opsmanager.api import conditions

DEFAULT_PORT = 8081
PORTS = ("client", "peer")

REGISTRY = operator_metrics.REGISTRY  # one registry for the process (:mod:`opsmanager.metrics`)

CERTIFICATE_NOT_AFTER = prometheus_client.Gauge(
    "opsmanager_etcd_certificate_not_after_timestamp_seconds",
    "notAfter of the leaf certificate an etcd member serves on a port (Unix seconds)",
    ["namespace", "etcd", "member", "port"], registry=REGISTRY)
CERTIFICATE_MATCHES_SECRET = prometheus_client.Gauge(
    "opsmanager_etcd_certificate_matches_secret",
    "1 when the leaf an etcd member serves on a port is the one in its Secret, else 0",
    ["namespace", "etcd", "member", "port"], registry=REGISTRY)
CA_NOT_AFTER = prometheus_client.Gauge(
    "opsmanager_etcd_ca_not_after_timestamp_seconds",
    "notAfter of the earliest CA in an Etcd's trust bundle (Unix seconds)",
    ["namespace", "etcd"], registry=REGISTRY)
LAST_SCAN = prometheus_client.Gauge(
    "opsmanager_etcd_tls_last_scan_timestamp_seconds",
    "When the operator last scanned the certificates an Etcd's members serve (Unix seconds)",
    ["namespace", "etcd"], registry=REGISTRY)
SCAN_ERRORS = prometheus_client.Counter(
    "opsmanager_etcd_tls_scan_errors_total",
    "Certificate scans that failed (a member not reachable, no handshake, an unreadable Secret)",
    registry=REGISTRY)

_lock = threading.Lock()
# (namespace, etcd) -> the (member, port) label pairs published for it, to remove those that disappear.
_published: dict[tuple[str, str], set[tuple[str, str]]] = {}


def timestamp(value: str) -> float:
    """Unix seconds of an RFC 3339 time (``Z`` or an offset)."""
    return conditions.parse_rfc3339(value).timestamp()


def _optional_timestamp(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return timestamp(value)
    except ValueError:
        return None


def publish(namespace: str, etcd: str, status_tls: Mapping[str, Any]) -> None:
    """Set the metrics of one Etcd from its ``status.tls``; drop the series of members and ports gone from it."""
    current: dict[tuple[str, str], tuple[float, bool]] = {}
    for member in status_tls.get("members") or ():
        if not isinstance(member, Mapping) or not isinstance(member.get("name"), str):
            continue
        for port in PORTS:
            served = member.get(port)
            if not isinstance(served, Mapping) or served.get("error"):
                continue
            not_after = _optional_timestamp(served.get("notAfter"))
            if not_after is None:
                continue
            current[(member["name"], port)] = (not_after, served.get("matchesSecret") is True)
    ca_not_after = _optional_timestamp(status_tls.get("caNotAfter"))
    last_scan = _optional_timestamp(status_tls.get("lastScanTime"))
    with _lock:
        for member_name, port in _published.get((namespace, etcd), set()) - current.keys():
            _remove(CERTIFICATE_NOT_AFTER, namespace, etcd, member_name, port)
            _remove(CERTIFICATE_MATCHES_SECRET, namespace, etcd, member_name, port)
        for (member_name, port), (not_after, matches) in current.items():
            CERTIFICATE_NOT_AFTER.labels(namespace, etcd, member_name, port).set(not_after)
            CERTIFICATE_MATCHES_SECRET.labels(namespace, etcd, member_name, port).set(1 if matches else 0)
        _published[(namespace, etcd)] = set(current)
        for gauge, value in ((CA_NOT_AFTER, ca_not_after), (LAST_SCAN, last_scan)):
            if value is None:
                _remove(gauge, namespace, etcd)
            else:
                gauge.labels(namespace, etcd).set(value)


def forget(namespace: str, etcd: str) -> None:
    """Remove every series of a deleted Etcd."""
    with _lock:
        for member_name, port in _published.pop((namespace, etcd), set()):
            _remove(CERTIFICATE_NOT_AFTER, namespace, etcd, member_name, port)
            _remove(CERTIFICATE_MATCHES_SECRET, namespace, etcd, member_name, port)
        _remove(CA_NOT_AFTER, namespace, etcd)
        _remove(LAST_SCAN, namespace, etcd)
        operator_metrics.forget(namespace, etcd)


def scan_failed() -> None:
    """Count one failed scan."""
    SCAN_ERRORS.inc()


def _remove(gauge: prometheus_client.Gauge, *labels: str) -> None:
    operator_metrics.remove_series(gauge, *labels)


def serve(port: int, addr: str = "0.0.0.0") -> tuple[WSGIServer, threading.Thread]:
    """Serve :data:`REGISTRY` on ``http://addr:port/metrics`` from a daemon thread; ``server.shutdown()`` stops it."""
    return prometheus_client.start_http_server(port, addr=addr, registry=REGISTRY)


# --- storage ------------------------------------------------------------------------------------------------------

DB_SIZE = prometheus_client.Gauge(
    "opsmanager_etcd_db_size_bytes", "Size of an etcd member's database file (Status dbSize)",
    ["namespace", "etcd", "member"], registry=REGISTRY)
DB_SIZE_IN_USE = prometheus_client.Gauge(
    "opsmanager_etcd_db_size_in_use_bytes", "The part of an etcd member's database file in use (Status dbSizeInUse)",
    ["namespace", "etcd", "member"], registry=REGISTRY)
DB_QUOTA = prometheus_client.Gauge(
    "opsmanager_etcd_db_quota_bytes", "An etcd member's backend quota (--quota-backend-bytes): NOSPACE beyond it",
    ["namespace", "etcd", "member"], registry=REGISTRY)
VOLUME_CAPACITY = prometheus_client.Gauge(
    "opsmanager_etcd_volume_capacity_bytes",
    "Capacity of an etcd member's data volume (its claim's status.capacity); absent for ephemeral storage",
    ["namespace", "etcd", "member"], registry=REGISTRY)
_STORAGE = (DB_SIZE, DB_SIZE_IN_USE, DB_QUOTA, VOLUME_CAPACITY)
_storage_series: dict[tuple[str, str], set[str]] = {}


def publish_storage(namespace: str, etcd: str, sizes: Mapping[str, Any]) -> None:
    """The storage scan's sizes (``lifecycle.MemberStorage`` by member); a member not scanned loses its series."""
    with _lock:
        for member in _storage_series.get((namespace, etcd), set()) - set(sizes):
            for gauge in _STORAGE:
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, etcd, member)
        for member, size in sizes.items():
            DB_SIZE.labels(namespace, etcd, member).set(size.db_size_bytes)
            DB_SIZE_IN_USE.labels(namespace, etcd, member).set(size.db_size_in_use_bytes)
            if size.quota_bytes is not None:
                DB_QUOTA.labels(namespace, etcd, member).set(size.quota_bytes)
            if getattr(size, "volume_capacity_bytes", None) is not None:
                VOLUME_CAPACITY.labels(namespace, etcd, member).set(size.volume_capacity_bytes)
        _storage_series[(namespace, etcd)] = set(sizes)


def forget_storage(namespace: str, etcd: str) -> None:
    publish_storage(namespace, etcd, {})
    with _lock:
        _storage_series.pop((namespace, etcd), None)


BACKUP_LAST_SUCCESS = prometheus_client.Gauge(
    "opsmanager_etcd_backup_last_success_timestamp_seconds",
    "When the last good backup of an Etcd was taken (Unix seconds); absent before the first",
    ["namespace", "etcd"], registry=REGISTRY)
BACKUP_INTERVAL = prometheus_client.Gauge(
    "opsmanager_etcd_backup_interval_seconds",
    "The interval of an Etcd's backup schedule (spec.backup.schedule), in seconds",
    ["namespace", "etcd"], registry=REGISTRY)


def publish_backup(namespace: str, etcd: str, *, last_success: float | None, interval: float) -> None:
    """The backup schedule's view of one Etcd: its interval, and its last good backup once there is one."""
    BACKUP_INTERVAL.labels(namespace, etcd).set(interval)
    if last_success is not None:
        BACKUP_LAST_SUCCESS.labels(namespace, etcd).set(last_success)


def forget_backup(namespace: str, etcd: str) -> None:
    for gauge in (BACKUP_LAST_SUCCESS, BACKUP_INTERVAL):
        try:
            gauge.remove(namespace, etcd)
        except KeyError:
            pass

