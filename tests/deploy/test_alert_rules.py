"""deploy/base/prometheus-rule.yaml: a PrometheusRule whose alerts promtool accepts (``check rules``) and whose unit tests
(tests/deploy/alert_rules_test.yaml: each alert firing and not firing) pass (``test rules``).

promtool comes from Debian's ``prometheus`` package; ``make test`` (and .ci/run) installs it when it is missing, so
these tests never skip."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE = ROOT / "deploy" / "base" / "prometheus-rule.yaml"
UNIT_TESTS = Path(__file__).resolve().parent / "alert_rules_test.yaml"
ALERTS = {"EtcdCertificateExpiringSoon", "EtcdCertificateExpiryCritical", "EtcdCAExpiringSoon",
          "EtcdServedCertificateMismatch", "EtcdTLSScanStale", "EtcdOpsRequestFailed", "EtcdDatabaseNearQuota",
          "EtcdBackupTooOld", "EtcdVolumeNearFull"}
METRICS = ("opsmanager_etcd_certificate_not_after_timestamp_seconds", "opsmanager_etcd_certificate_matches_secret",
           "opsmanager_etcd_ca_not_after_timestamp_seconds", "opsmanager_etcd_tls_last_scan_timestamp_seconds",
           "opsmanager_etcd_tls_scan_errors_total", "opsmanager_opsrequests_total", "opsmanager_etcd_db_size_bytes",
           "opsmanager_etcd_db_quota_bytes", "opsmanager_etcd_backup_last_success_timestamp_seconds",
           "opsmanager_etcd_backup_interval_seconds", "opsmanager_etcd_volume_capacity_bytes")


def _rule() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(RULE.read_text()) if d]
    return doc


def _alerts() -> list[dict[str, Any]]:
    return [r for group in _rule()["spec"]["groups"] for r in group["rules"] if "alert" in r]


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make test` installs Debian's prometheus package"
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _rules_dir(tmp_path: Path) -> Path:
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": _rule()["spec"]["groups"]}, sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


def test_is_a_prometheus_rule_with_the_nine_alerts() -> None:
    rule = _rule()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert {a["alert"] for a in _alerts()} == ALERTS
    severities = {a["alert"]: a["labels"]["severity"] for a in _alerts()}
    assert severities["EtcdCertificateExpiringSoon"] == "warning"
    assert severities["EtcdCertificateExpiryCritical"] == "critical"
    used = " ".join(a["expr"] for a in _alerts())
    assert all(metric in used for metric in METRICS)


def test_every_alert_names_what_it_is_about_and_points_to_the_runbook() -> None:
    leaf = ("namespace", "etcd", "member", "port")
    named = {"EtcdCertificateExpiringSoon": leaf, "EtcdCertificateExpiryCritical": leaf,
             "EtcdServedCertificateMismatch": leaf, "EtcdCAExpiringSoon": ("namespace", "etcd"),
             "EtcdTLSScanStale": ("namespace", "etcd"), "EtcdOpsRequestFailed": ("type",),
             "EtcdDatabaseNearQuota": ("namespace", "etcd", "member"), "EtcdBackupTooOld": ("namespace", "etcd"),
             "EtcdVolumeNearFull": ("namespace", "etcd", "member")}
    for alert in _alerts():
        annotations = alert["annotations"]
        runbook = {"EtcdOpsRequestFailed": "when-a-request-fails",
                   "EtcdDatabaseNearQuota": "storage-lifecycle-sizes-alert-and-auto-defragment",
                   "EtcdBackupTooOld": "backups-and-restore",
                   "EtcdVolumeNearFull": "data-volumes-expansion-and-autoscaling"}.get(
            alert["alert"], "certificate-lifecycle-metrics-and-alerts")
        assert annotations["runbook_url"] == f"docs/operations.md#{runbook}"
        assert annotations["runbook_url"] in annotations["description"], alert["alert"]
        for label in named[alert["alert"]]:
            assert f"$labels.{label}" in annotations["summary"], (alert["alert"], label)
            assert f"$labels.{label}" in annotations["description"], (alert["alert"], label)


def test_the_runbook_sections_exist() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    assert "\n## Certificate lifecycle: metrics and alerts\n" in text
    assert "\n## When a request fails\n" in text
    assert "\n## Storage lifecycle: sizes, alert and auto-defragment\n" in text
    assert "\n## Backups and Restore\n" in text
    assert "\n## Data volumes: expansion and autoscaling\n" in text


def test_promtool_check_rules(tmp_path: Path) -> None:
    done = _promtool("check", "rules", "rules.yml", cwd=_rules_dir(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(_alerts())} rules found" in done.stdout


def test_promtool_test_rules(tmp_path: Path) -> None:
    done = _promtool("test", "rules", UNIT_TESTS.name, cwd=_rules_dir(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr
