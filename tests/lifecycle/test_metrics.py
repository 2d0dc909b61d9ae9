"""opsmanager.lifecycle.metrics: the five metrics set from an Etcd's ``status.tls``, stale series removed, no secret
in any label, the counter present at 0, and ``serve`` answering on ``/metrics``."""

from __future__ import annotations

import datetime
import urllib.request
from collections.abc import Iterator

import prometheus_client
import pytest

from opsmanager.lifecycle import metrics
from opsmanager_sandbox import children

NOT_AFTER = "2027-03-01T12:00:00Z"
CA_NOT_AFTER = "2036-01-01T00:00:00+00:00"
SCANNED = "2026-12-01T00:30:00Z"


def _ts(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _leaf(serial: str, not_after: str = NOT_AFTER, matches: bool = True) -> dict[str, object]:
    return {"serial": serial, "notAfter": not_after, "issuer": "CN=etcd-ca", "matchesSecret": matches}


def _status(*members: dict[str, object]) -> dict[str, object]:
    return {"lastScanTime": SCANNED, "caNotAfter": CA_NOT_AFTER, "members": list(members),
            "nextExpiry": {"notAfter": NOT_AFTER, "member": "db-0", "port": "client"}}


def _value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def _leaf_labels(member: str, port: str, namespace: str = "ns", etcd: str = "db") -> dict[str, str]:
    return {"namespace": namespace, "etcd": etcd, "member": member, "port": port}


def _forget_all() -> None:
    for namespace, etcd in list(metrics._published):
        metrics.forget(namespace, etcd)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    # Before too: the registry is process-wide, and an earlier module in this process (a pytest-xdist worker runs
    # many, in any order) may have published an Etcd these tests expect to be absent.
    _forget_all()
    yield
    _forget_all()


def test_publish_sets_every_series_from_status_tls() -> None:
    metrics.publish("ns", "db", _status(
        {"name": "db-0", "client": _leaf("0a1b"), "peer": _leaf("0c2d", "2027-02-01T00:00:00Z", matches=False)},
        {"name": "db-1", "client": _leaf("0e3f"), "peer": {"error": "connection refused"}},
    ))
    not_after, matches = ("opsmanager_etcd_certificate_not_after_timestamp_seconds",
                          "opsmanager_etcd_certificate_matches_secret")
    assert _value(not_after, **_leaf_labels("db-0", "client")) == _ts(NOT_AFTER)
    assert _value(not_after, **_leaf_labels("db-0", "peer")) == _ts("2027-02-01T00:00:00Z")
    assert _value(matches, **_leaf_labels("db-0", "client")) == 1
    assert _value(matches, **_leaf_labels("db-0", "peer")) == 0
    assert _value(not_after, **_leaf_labels("db-1", "client")) == _ts(NOT_AFTER)
    assert _value(not_after, **_leaf_labels("db-1", "peer")) is None  # a port with an error has no series
    assert _value(matches, **_leaf_labels("db-1", "peer")) is None
    assert _value("opsmanager_etcd_ca_not_after_timestamp_seconds", namespace="ns", etcd="db") == _ts(CA_NOT_AFTER)
    assert _value("opsmanager_etcd_tls_last_scan_timestamp_seconds", namespace="ns", etcd="db") == _ts(SCANNED)


def test_no_label_carries_a_serial() -> None:
    metrics.publish("ns", "db", _status({"name": "db-0", "client": _leaf("deadbeef01"), "peer": _leaf("cafef00d02")}))
    exposition = prometheus_client.generate_latest(metrics.REGISTRY).decode()
    assert 'member="db-0"' in exposition and 'port="peer"' in exposition
    assert "deadbeef01" not in exposition and "cafef00d02" not in exposition and "serial" not in exposition
    # Label names in the registry: object names and the ops metrics' kinds (type, phase, step, kind, histogram le).
    for family in metrics.REGISTRY.collect():
        for sample in family.samples:
            assert set(sample.labels) <= {"namespace", "etcd", "member", "port", "type", "phase", "step", "kind", "le"}


def test_members_and_ports_that_go_are_removed_and_others_stay() -> None:
    metrics.publish("ns", "db", _status({"name": "db-0", "client": _leaf("01"), "peer": _leaf("02")},
                                        {"name": "db-1", "client": _leaf("03"), "peer": _leaf("04")}))
    metrics.publish("ns", "other", _status({"name": "other-0", "client": _leaf("05"), "peer": _leaf("06")}))
    metrics.publish("ns", "db", _status({"name": "db-0", "client": _leaf("01"), "peer": {"error": "handshake"}}))
    not_after = "opsmanager_etcd_certificate_not_after_timestamp_seconds"
    assert _value(not_after, **_leaf_labels("db-0", "client")) == _ts(NOT_AFTER)
    assert _value(not_after, **_leaf_labels("db-0", "peer")) is None
    assert _value("opsmanager_etcd_certificate_matches_secret", **_leaf_labels("db-0", "peer")) is None
    assert _value(not_after, **_leaf_labels("db-1", "client")) is None
    assert _value(not_after, **_leaf_labels("other-0", "peer", etcd="other")) == _ts(NOT_AFTER)


def test_forget_removes_one_etcd_only() -> None:
    metrics.publish("ns", "db", _status({"name": "db-0", "client": _leaf("01"), "peer": _leaf("02")}))
    metrics.publish("ns2", "db", _status({"name": "db-0", "client": _leaf("01"), "peer": _leaf("02")}))
    metrics.forget("ns", "db")
    exposition = prometheus_client.generate_latest(metrics.REGISTRY).decode()
    assert 'namespace="ns"' not in exposition
    assert _value("opsmanager_etcd_tls_last_scan_timestamp_seconds", namespace="ns2", etcd="db") == _ts(SCANNED)
    assert _value("opsmanager_etcd_certificate_not_after_timestamp_seconds",
                  **_leaf_labels("db-0", "client", namespace="ns2")) == _ts(NOT_AFTER)
    metrics.forget("ns", "db")  # twice: nothing to do, no error


def test_a_status_without_a_scan_yet_publishes_nothing_for_that_etcd() -> None:
    metrics.publish("ns", "db", {})
    assert 'etcd="db"' not in prometheus_client.generate_latest(metrics.REGISTRY).decode()
    metrics.publish("ns", "db", _status({"name": "db-0", "client": _leaf("01")}))
    metrics.publish("ns", "db", {"members": []})  # lastScanTime and caNotAfter gone: their series go too
    assert 'etcd="db"' not in prometheus_client.generate_latest(metrics.REGISTRY).decode()


def test_scan_failed_counts_and_the_counter_is_there_at_zero() -> None:
    before = metrics.REGISTRY.get_sample_value("opsmanager_etcd_tls_scan_errors_total")
    assert before is not None
    metrics.scan_failed()
    metrics.scan_failed()
    assert metrics.REGISTRY.get_sample_value("opsmanager_etcd_tls_scan_errors_total") == before + 2


def test_serve_answers_on_metrics() -> None:
    port = children.free_port()
    server, thread = metrics.serve(port, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
        assert "# TYPE opsmanager_etcd_tls_scan_errors_total counter" in body
        assert "# TYPE opsmanager_etcd_certificate_matches_secret gauge" in body
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_timestamp_accepts_rfc3339_forms() -> None:
    assert metrics.timestamp("2026-12-01T00:00:00Z") == metrics.timestamp("2026-12-01T01:00:00+01:00")
    assert metrics.timestamp("2026-12-01T00:00:00.5Z") == metrics.timestamp("2026-12-01T00:00:00Z") + 0.5
