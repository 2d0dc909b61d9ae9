"""The pure parts of the scan triggers and of the auto-renew shell, without an API server.

We test these aspects: which Certificate changes request a scan of which Etcd (a re-issue of a ``server`` or
``peer`` certificate only, never the first listing's state or a metadata-only change); when an ops request ended;
how auto-renew learns that its request failed (``Failed``/``Skipped`` at its end; deleted before the expiry moved:
now; deleted after a renewal: not a failure).
"""

from __future__ import annotations

import datetime
from typing import Any

from opsmanager.lifecycle import autorenew, triggers, verdict

T0 = datetime.datetime(2026, 12, 1, 0, 0, tzinfo=datetime.UTC)
MIN = datetime.timedelta(minutes=1)


def certificate(component: str = "server", revision: int | None = 1, not_after: str | None = "x") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": f"db-{component}",
                         "labels": {"app.kubernetes.io/instance": "db", "app.kubernetes.io/component": component,
                                    "app.kubernetes.io/managed-by": "opsmanager"}},
            "status": {"revision": revision, "notAfter": not_after}}


def test_a_reissued_server_or_peer_certificate_requests_a_scan_of_its_etcd() -> None:
    assert triggers.certificate_target(certificate(revision=2), certificate(revision=1)) == ("ns", "db")
    assert triggers.certificate_target(certificate("peer", not_after="y"), certificate("peer")) == ("ns", "db")
    assert triggers.certificate_target(certificate(), None) == ("ns", "db")  # created after the listing
    assert triggers.certificate_target(certificate(), certificate()) is None  # metadata or condition change
    assert triggers.certificate_target(certificate("client", revision=2), certificate("client")) is None
    assert triggers.certificate_target(certificate(revision=None, not_after=None), None) is None  # not issued yet
    no_label = certificate(revision=2)
    del no_label["metadata"]["labels"]["app.kubernetes.io/instance"]
    assert triggers.certificate_target(no_label, certificate()) is None


def request(name: str, phase: str | None, ended: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if ended:
        status["conditions"] = [{"type": "Running", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"},
                                {"type": phase, "status": "True", "lastTransitionTime": ended}]
    return {"metadata": {"name": name}, "spec": {"databaseRef": {"name": "db"}}, "status": status}


def test_request_ended_at_is_the_terminal_condition_time() -> None:
    assert triggers.request_ended_at(request("r", "Progressing")) is None
    assert triggers.request_ended_at(request("r", None)) is None
    assert triggers.request_ended_at(request("r", "Failed", "2026-12-01T00:03:00Z")) == T0 + 3 * MIN
    assert triggers.request_ended_at(request("r", "Successful")) is not None  # no condition time: now


def test_a_request_target_is_its_end_seen_once() -> None:
    ended = request("r", "Successful", "2026-12-01T00:03:00Z")
    ended["metadata"]["namespace"] = "ns"
    second = datetime.timedelta(seconds=1)  # times are whole seconds: a scan in the second of the end came before
    assert triggers.request_target(ended, request("r", "Progressing")) == ("ns", "db", T0 + 3 * MIN + second)
    assert triggers.request_target(ended, None) == ("ns", "db", T0 + 3 * MIN + second)  # listed, or first seen
    assert triggers.request_target(ended, ended) is None  # a later change of an ended request
    assert triggers.request_target(request("r", "Progressing"), request("r", "Pending")) is None
    orphan = request("r", "Failed", "2026-12-01T00:03:00Z")
    orphan["spec"] = {}
    assert triggers.request_target(orphan, None) is None


def test_settle_learns_how_the_remembered_request_ended() -> None:
    mine = verdict.AutoRenewState("db-auto-renew-1", T0 + 6 * MIN)
    failed = autorenew.settle(mine, [request("db-auto-renew-1", "Failed", "2026-12-01T00:03:00Z")], T0 + 6 * MIN,
                              T0 + 4 * MIN)
    assert failed.failed_at == T0 + 3 * MIN and failed.request == mine.request
    skipped = autorenew.settle(mine, [request("db-auto-renew-1", "Skipped", "2026-12-01T00:02:00Z")],
                               T0 + 6 * MIN, T0 + 4 * MIN)
    assert skipped.failed_at == T0 + 2 * MIN
    for phase in ("Pending", "Progressing", "Successful"):
        assert autorenew.settle(mine, [request("db-auto-renew-1", phase)], T0 + 6 * MIN, T0 + 4 * MIN) == mine
    assert autorenew.settle(mine, [], T0 + 6 * MIN, T0 + 4 * MIN).failed_at == T0 + 4 * MIN  # deleted, not renewed
    assert autorenew.settle(mine, [], T0 + 20 * MIN, T0 + 4 * MIN) == mine  # gone after a renewal: fine
    once = verdict.AutoRenewState("db-auto-renew-1", T0 + 6 * MIN, T0 + 3 * MIN)
    assert autorenew.settle(once, [], T0 + 6 * MIN, T0 + 9 * MIN) == once  # a failure is recorded once
