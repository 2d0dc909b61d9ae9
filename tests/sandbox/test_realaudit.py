"""kube-apiserver's JSON audit log read as the embedded server's records (``sandbox/opsmanager_sandbox/realaudit.py``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from opsmanager_sandbox import realaudit


def event(stage: str, verb: str, *, resource: str = "secrets", sub: str = "", code: int = 200,
          user: str = "opsmanager-operator", stamp: str = "2026-12-02T06:00:00.123456Z",
          pod: str | None = None) -> dict[str, Any]:
    ref = {"resource": resource, "namespace": "demo", "name": "x", "apiVersion": "v1"}
    if sub:
        ref["subresource"] = sub
    who: dict[str, Any] = {"username": user, "groups": ["system:masters"]}
    if pod:
        who["extra"] = {"authentication.kubernetes.io/pod-name": [pod]}
    return {"kind": "Event", "stage": stage, "verb": verb, "objectRef": ref, "user": who,
            "responseStatus": {"code": code}, "stageTimestamp": stamp, "requestURI": "/api/v1/..."}


def write(path: Path, events: list[dict[str, Any]], tail: bytes = b"") -> None:
    with path.open("ab") as f:
        f.write(b"".join(json.dumps(e).encode() + b"\n" for e in events) + tail)


def test_one_record_per_request_a_watch_when_it_opens(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = realaudit.KubeAuditLog(path)
    assert log.records() == []  # no file yet
    write(path, [event("ResponseComplete", "get"), event("ResponseStarted", "watch"),
                 event("ResponseComplete", "watch"), event("ResponseComplete", "patch", sub="status", code=409),
                 event("ResponseStarted", "get", resource="pods", sub="log"),
                 event("ResponseComplete", "get", resource="pods", sub="log")])
    assert [(r.verb, r.resource, r.code) for r in log.records()] == [
        ("get", "secrets", 200), ("watch", "secrets", 200), ("patch", "secrets/status", 409),
        ("get", "pods/log", 200)]
    assert log.counts(user="opsmanager-operator")[("get", "secrets")] == 1
    assert log.records(user="someone-else") == []


def test_a_line_written_in_two_parts_is_read_once_whole(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = realaudit.KubeAuditLog(path)
    line = json.dumps(event("ResponseComplete", "create", pod="op-0")).encode()
    write(path, [], line[:40])
    assert log.records() == []
    write(path, [], line[40:] + b"\n")
    [record] = log.records()
    assert (record.verb, record.pod, record.namespace, record.name) == ("create", "op-0", "demo", "x")


def test_times_are_moved_to_the_monotonic_clock(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - 30)) + ".000000Z"
    write(path, [event("ResponseComplete", "list", stamp=stamp)])
    [record] = realaudit.KubeAuditLog(path).records()
    assert abs((time.monotonic() - record.at) - 30) < 2
    assert realaudit.KubeAuditLog(path).records(since=time.monotonic() - 10) == []


def test_a_replaced_log_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = realaudit.KubeAuditLog(path)
    write(path, [event("ResponseComplete", "get"), event("ResponseComplete", "get")])
    assert len(log) == 2
    path.unlink()
    write(path, [event("ResponseComplete", "delete")])
    log.records()  # notices the shorter file
    assert [r.verb for r in log.records()] == ["get", "get", "delete"]
