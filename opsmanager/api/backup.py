"""Backups of an Etcd to S3-compatible object storage (``spec.backup``) — beyond KubeDB's own scope, whose backups
come from KubeStash: a full snapshot on a schedule, its SHA-256 and revision recorded, old ones pruned to a count.

Pure: the models and the schedule arithmetic (cron through ``croniter``). The I/O lives in
:mod:`opsmanager.backup` (the store, the snapshot file) and in the engine's Backup and Restore steps.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Final

import croniter
import pydantic

from opsmanager.api import common

DEFAULT_PREFIX: Final = "etcd"
DEFAULT_REGION: Final = "us-east-1"
DEFAULT_RETENTION: Final = 7
KEY_ACCESS_KEY_ID: Final = "accessKeyId"
KEY_SECRET_ACCESS_KEY: Final = "secretAccessKey"


def schedule_problem(schedule: str) -> str | None:
    """Why ``schedule`` is not a cron expression this operator runs (five fields, UTC), or None."""
    if len(schedule.split()) != 5:
        return (f"{schedule!r} is not a five-field cron expression (minute hour day-of-month month day-of-week, "
                'UTC), e.g. "0 */6 * * *"')
    if not croniter.croniter.is_valid(schedule):
        return f'{schedule!r} is not a valid cron expression; e.g. "0 */6 * * *" (every six hours, UTC)'
    return None


def last_slot(schedule: str, now: datetime.datetime) -> datetime.datetime:
    """The latest time the schedule fired at or before ``now`` (UTC)."""
    it = croniter.croniter(schedule, now + datetime.timedelta(seconds=1))
    return it.get_prev(datetime.datetime).astimezone(datetime.UTC)


def interval(schedule: str, now: datetime.datetime) -> datetime.timedelta:
    """The time between the last slot and the next one: what "twice the schedule" is measured in."""
    last = last_slot(schedule, now)
    following = croniter.croniter(schedule, last).get_next(datetime.datetime).astimezone(datetime.UTC)
    return following - last


class SecretKeyRef(common.Model):
    """One key of a Secret in the Etcd's namespace."""

    name: str = pydantic.Field(min_length=1, description="The Secret's name.")
    key: str = pydantic.Field(default="ca.crt", min_length=1, description="The key holding the PEM bundle.")


class BackupDestination(common.Model):
    """Where snapshots go: an S3-compatible bucket."""

    endpoint: str = pydantic.Field(
        min_length=1, pattern=r"^https?://",
        description="The S3 endpoint URL (`https://s3.example.com`, `http://minio.backup:9000`); path-style.")
    bucket: str = pydantic.Field(min_length=3, description="The bucket; it must exist.")
    prefix: str = pydantic.Field(default=DEFAULT_PREFIX,
                                 description="Key prefix; snapshots are `<prefix>/<namespace>/<etcd>/<time>-rev<rev>.db`.")
    region: str = pydantic.Field(default=DEFAULT_REGION, description="The region the request is signed for.")
    credentials_secret: common.LocalObjectReference = pydantic.Field(
        description=f"Secret with `{KEY_ACCESS_KEY_ID}` and `{KEY_SECRET_ACCESS_KEY}` (never logged).")
    ca: SecretKeyRef | None = pydantic.Field(
        default=None, description="The CA bundle to trust for an https endpoint (absent: the system's).")


class BackupPolicy(common.Model):
    """Scheduled full snapshots of the Etcd (taken from a follower), kept ``retention`` deep."""

    schedule: str = pydantic.Field(
        min_length=1, description='When, as a five-field cron expression in UTC (`"0 */6 * * *"`).')
    retention: int = pydantic.Field(
        default=DEFAULT_RETENTION, ge=1, description="How many snapshots to keep; older ones are deleted.")
    destination: BackupDestination = pydantic.Field(description="The bucket the snapshots go to.")
    paused: bool = pydantic.Field(default=False, description="Stop taking scheduled backups (on-demand ones run).")

    @pydantic.field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        problem = schedule_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class SnapshotRecord(common.OpenModel):
    """One snapshot in the store, as the backup that wrote it recorded it."""

    key: str = pydantic.Field(description="The object key.")
    sha256: str = pydantic.Field(description="SHA-256 of the whole file (hex), also in the object's metadata.")
    revision: int = pydantic.Field(description="The highest etcd revision in it.")
    size_bytes: int = pydantic.Field(description="The file's size.")
    hash_kv: int | None = pydantic.Field(default=None, description="HashKV at `revision` on the member it came from.")
    member: str | None = pydantic.Field(default=None, description="The member that served it.")
    taken_at: str = pydantic.Field(description="When it was taken (RFC 3339).")
    seconds: float | None = pydantic.Field(default=None, description="Snapshot and upload time.")


class RestoreRecord(common.OpenModel):
    """The last Restore of an Etcd."""

    key: str = pydantic.Field(description="The snapshot's object key.")
    revision: int = pydantic.Field(description="Its revision: the restored store's.")
    request: str = pydantic.Field(description="The Restore request.")
    at: str = pydantic.Field(description="When it ended (RFC 3339).")


class BackupStatus(common.OpenModel):
    """The backups of an Etcd."""

    last_success: SnapshotRecord | None = pydantic.Field(default=None, description="The newest good backup.")
    last_failure: str | None = pydantic.Field(default=None, description="Why the last failed backup failed.")
    last_failure_time: str | None = pydantic.Field(default=None, description="When (RFC 3339).")
    last_scheduled: str | None = pydantic.Field(
        default=None, description="The schedule slot (RFC 3339) of the last scheduled Backup request filed.")
    snapshots: int | None = pydantic.Field(default=None, description="Snapshots in the store after the last prune.")
    last_restore: RestoreRecord | None = pydantic.Field(
        default=None, description="The last Restore: the snapshot's key and revision, the request, when.")


# Changes of an Etcd's ``status.backup``, for :func:`opsmanager.cluster.etcdstatus.write`: pure, each returns a new
# status and leaves its argument alone.


@dataclasses.dataclass(frozen=True)
class BackupSucceeded:
    """A Backup request's snapshot is in the store and the store is pruned: it is ``lastSuccess``, ``snapshots``
    counts what the prune kept, and an earlier failure is cleared."""

    snapshot: SnapshotRecord
    snapshots: int

    def apply(self, status: Mapping[str, Any]) -> dict[str, Any]:
        backup = {**(status.get("backup") or {}), "lastSuccess": common.to_dict(self.snapshot),
                  "snapshots": self.snapshots}
        backup.pop("lastFailure", None)
        backup.pop("lastFailureTime", None)
        return {**status, "backup": backup}


@dataclasses.dataclass(frozen=True)
class Restored:
    """A Restore request replaced the members from a snapshot: ``lastRestore``."""

    restore: RestoreRecord

    def apply(self, status: Mapping[str, Any]) -> dict[str, Any]:
        return {**status, "backup": {**(status.get("backup") or {}), "lastRestore": common.to_dict(self.restore)}}
