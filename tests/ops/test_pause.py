"""Who holds a pause: only a pause written by a request (its message says so) is the engine's to heal."""

from __future__ import annotations

from opsmanager.api import conditions, constants
from opsmanager.ops.steps import pause


def etcd_with_pause(reason: str, message: str) -> dict[str, object]:
    conds = conditions.set_condition([], constants.COND_PAUSED, constants.TRUE, reason=reason, message=message)
    return {"status": {"conditions": conds}}


def test_a_request_pause_names_its_request() -> None:
    assert pause.paused_by(etcd_with_pause("add-tls", "EtcdOpsRequest add-tls is in process")) == "add-tls"


def test_a_manual_pause_is_not_the_engines() -> None:
    assert pause.paused_by(etcd_with_pause("maintenance", "paused by hand for a backup")) is None
    assert pause.paused_by(etcd_with_pause("add-tls", "EtcdOpsRequest other is in process")) is None


def test_no_pause() -> None:
    assert pause.paused_by({"status": {}}) is None
    assert pause.paused_by({}) is None
