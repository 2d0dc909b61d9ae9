"""The backup schedule, pure: which slot a Backup is filed for, when the last good backup is too old, and which
failure the status names.

We test these aspects: a request per slot and never one twice (a second tick, a slot already filed); no slot before
the Etcd existed and none while paused; a slot missed while the operator was down is filed once, late; the backup is
too old past twice the schedule's interval (measured from the Etcd's creation before the first backup), and the
message names the last good backup and the last failure; the newest failed Backup request of this Etcd after the
last success is the failure reported, others are not.
"""

from __future__ import annotations

import datetime
from typing import Any

import hypothesis
import hypothesis.strategies as st

from opsmanager.api import backup as backup_api
from opsmanager.api import constants
from opsmanager.lifecycle import backups

UTC = datetime.UTC
T0 = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def policy(schedule: str = "*/10 * * * *", **kw: Any) -> backup_api.BackupPolicy:
    return backup_api.BackupPolicy.model_validate({"schedule": schedule, "destination": {
        "endpoint": "http://s3", "bucket": "bkt", "credentialsSecret": {"name": "s3"}}, **kw})


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def test_one_request_per_slot_never_twice() -> None:
    p = policy()
    assert backups.slot_to_file(p, None, at(-60), at(3)) == at(0)
    assert backups.slot_to_file(p, "2026-12-02T10:00:00Z", at(-60), at(9)) is None  # filed already
    assert backups.slot_to_file(p, "2026-12-02T10:00:00Z", at(-60), at(10)) == at(10)


def test_no_slot_before_the_etcd_existed_nor_while_paused() -> None:
    assert backups.slot_to_file(policy(), None, at(1), at(5)) is None
    assert backups.slot_to_file(policy(paused=True), None, at(-60), at(5)) is None


def test_slots_missed_while_down_are_filed_once_late() -> None:
    # the operator was down from 10:00 to 10:47: only the 10:40 slot is filed, then nothing until 10:50
    assert backups.slot_to_file(policy(), "2026-12-02T09:50:00Z", at(-60), at(47)) == at(40)
    assert backups.slot_to_file(policy(), "2026-12-02T10:40:00Z", at(-60), at(48)) is None


@hypothesis.given(st.integers(min_value=0, max_value=24 * 60 * 3))
def test_the_slot_is_never_in_the_future_and_within_one_interval(minutes: int) -> None:
    now = at(minutes) + datetime.timedelta(seconds=13)
    slot = backups.slot_to_file(policy("0 */6 * * *"), None, at(-10_000), now)
    assert slot is not None and slot <= now < slot + datetime.timedelta(hours=6)


def status(taken: datetime.datetime | None, failure: str | None = None) -> backup_api.BackupStatus:
    last = None if taken is None else backup_api.SnapshotRecord(
        key="e/ns/db/x.db", sha256="0" * 64, revision=7, size_bytes=1, taken_at=taken.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return backup_api.BackupStatus(last_success=last, last_failure=failure,
                                   last_failure_time="2026-12-02T10:35:00Z" if failure else None)


def test_too_old_past_twice_the_interval_naming_the_backup_and_the_failure() -> None:
    p = policy()  # every 10 min: the bound is 20 min
    fresh = backups.freshness(p, status(at(0)), at(-60), at(20))
    assert fresh.up_to_date and "e/ns/db/x.db" in fresh.message
    old = backups.freshness(p, status(at(0), failure="spec.backup.destination.endpoint: refused"), at(-60), at(21))
    assert not old.up_to_date and old.reason == backups.REASON_TOO_OLD
    assert "e/ns/db/x.db, is 1260s old" in old.message and "spec.backup.destination.endpoint: refused" in old.message


def test_before_the_first_backup_the_age_counts_from_the_etcds_creation() -> None:
    assert backups.freshness(policy(), status(None), at(0), at(19)).up_to_date
    late = backups.freshness(policy(), status(None), at(0), at(25))
    assert not late.up_to_date and "no good backup in 1500s" in late.message


def request(name: str, db: str, phase: str, at_: str, type_: str = constants.OPS_TYPE_BACKUP) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"type": type_, "databaseRef": {"name": db}},
            "status": {"phase": phase, "conditions": [
                {"type": constants.COND_FAILED, "status": "True", "message": f"{name} failed",
                 "lastTransitionTime": at_}] if phase == constants.PHASE_FAILED else []}}


def test_the_failure_reported_is_the_newest_after_the_last_success() -> None:
    reqs = [request("a", "db", constants.PHASE_FAILED, "2026-12-02T10:01:00Z"),
            request("b", "db", constants.PHASE_FAILED, "2026-12-02T10:21:00Z"),
            request("c", "db", constants.PHASE_SUCCESSFUL, "2026-12-02T10:30:00Z"),
            request("d", "other", constants.PHASE_FAILED, "2026-12-02T10:40:00Z"),
            request("e", "db", constants.PHASE_FAILED, "2026-12-02T10:41:00Z", type_="Restart")]
    assert backups.last_failure(reqs, "db", None) == ("2026-12-02T10:21:00Z", "b failed")
    assert backups.last_failure(reqs, "db", "2026-12-02T10:10:00Z") == ("2026-12-02T10:21:00Z", "b failed")
    assert backups.last_failure(reqs, "db", "2026-12-02T10:30:00Z") is None
