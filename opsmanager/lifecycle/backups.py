"""The backup schedule of one Etcd (``spec.backup``): a ``Backup`` request filed at every slot of the cron
schedule, and the ``BackupUpToDate`` condition, Event and metrics that say when the last good backup is too old.

Why requests: a scheduled backup is an ``EtcdOpsRequest`` like any other (``ops.opsmanager.dev/trigger:
scheduled-backup``, owned by the Etcd), so it queues behind a running operation, shows its steps and its failure,
and is what a person files by hand for an on-demand backup.

- **One request per slot**: the newest slot at or before now (:func:`opsmanager.api.backup.last_slot`), named
  ``<etcd>-backup-<yyyymmddhhmm>``, filed by :mod:`opsmanager.cluster.filer` (the slot is the episode, recorded in
  ``status.lifecycle.filed``) — a second tick, or a second operator replica, creates the same name and gets
  "already exists" — and remembered in ``status.backup.lastScheduled``. A slot missed while the operator was down is
  filed late, once; the slots before it are not replayed. No slot before the Etcd existed; none while
  ``spec.backup.paused``.
- **Too old**: the last good backup (``status.backup.lastSuccess.takenAt``; the Etcd's creation before the first)
  older than twice the schedule's interval → ``BackupUpToDate=False`` (reason ``BackupTooOld``), a Warning Event
  when it turns so, and ``opsmanager_etcd_backup_last_success_timestamp_seconds`` /
  ``opsmanager_etcd_backup_interval_seconds`` for the ``EtcdBackupTooOld`` alert. The message names the last good
  backup and the last failure (``status.backup.lastFailure``, from the newest failed Backup request since).

The schedule stands aside while the Etcd is halted and before it was ever Ready (nothing to back up); a request
holding it paused only delays the Backup, which the queue runs after it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opsmanager import kube
from opsmanager.api import backup as backup_api
from opsmanager.api import conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import etcdstatus, filer
from opsmanager.lifecycle import metrics

EVENT_BACKUP_REQUESTED: Final = "BackupRequested"
EVENT_BACKUP_TOO_OLD: Final = "BackupTooOld"
REASON_UP_TO_DATE: Final = "BackupUpToDate"
REASON_TOO_OLD: Final = "BackupTooOld"


@dataclasses.dataclass(frozen=True)
class Freshness:
    up_to_date: bool
    reason: str
    message: str


def slot_to_file(policy: backup_api.BackupPolicy, last_scheduled: str | None, created: datetime.datetime,
                 now: datetime.datetime) -> datetime.datetime | None:
    """The schedule slot a Backup request is due for now, or None (pure)."""
    if policy.paused:
        return None
    slot = backup_api.last_slot(policy.schedule, now)
    if slot < created:
        return None
    if last_scheduled and conditions.parse_rfc3339(last_scheduled) >= slot:
        return None
    return slot


def freshness(policy: backup_api.BackupPolicy, status: backup_api.BackupStatus | None, created: datetime.datetime,
              now: datetime.datetime) -> Freshness:
    """Whether the last good backup is recent enough: at most twice the schedule's interval old (pure)."""
    bound = 2 * backup_api.interval(policy.schedule, now)
    last = status.last_success if status is not None else None
    since = conditions.parse_rfc3339(last.taken_at) if last is not None else created
    age = now - since
    failure = (f"; the last failure ({status.last_failure_time}): {status.last_failure}"
               if status is not None and status.last_failure else "")
    if age <= bound:
        what = f"the last good backup is {last.key} ({int(age.total_seconds())}s old)" if last is not None \
            else "no backup yet; the first is due within the schedule"
        return Freshness(True, REASON_UP_TO_DATE, f"{what}; bound {int(bound.total_seconds())}s (twice the "
                                                  f"schedule){failure}")
    what = f"the last good backup, {last.key}, is {int(age.total_seconds())}s old" if last is not None \
        else f"no good backup in {int(age.total_seconds())}s"
    return Freshness(False, REASON_TOO_OLD, f"{what}: more than twice the schedule ({int(bound.total_seconds())}s)"
                                            f"{failure}; see the Backup requests of this Etcd")


def request_body(db: etcd_api.Etcd, slot: datetime.datetime) -> dict[str, Any]:
    name = db.metadata.name or ""
    return ops_api.filed_request(etcd=name, namespace=db.metadata.namespace, etcd_uid=db.metadata.uid,
                                 name=f"{name}-backup-{slot:%Y%m%d%H%M}", trigger=constants.TRIGGER_SCHEDULED_BACKUP,
                                 spec={"type": constants.OPS_TYPE_BACKUP, "backup": {}})


def last_failure(requests: Sequence[Mapping[str, Any]], db: str,
                 after: str | None) -> tuple[str, str] | None:
    """(time, message) of the newest failed Backup request of ``db`` that ended after ``after`` (pure)."""
    found: tuple[str, str] | None = None
    for req in requests:
        spec = req.get("spec") or {}
        status = req.get("status") or {}
        if spec.get("type") != constants.OPS_TYPE_BACKUP or (spec.get("databaseRef") or {}).get("name") != db:
            continue
        failed = conditions.get_condition(status.get("conditions"), constants.COND_FAILED)
        if status.get("phase") != constants.PHASE_FAILED or failed is None:
            continue
        at = str(failed.get("lastTransitionTime") or "")
        if (after is None or at > after) and (found is None or at > found[0]):
            found = (at, str(failed.get("message") or ""))
    return found


@dataclasses.dataclass(frozen=True)
class ScheduleRecorded:
    """One look at the schedule: ``status.backup``'s ``lastScheduled``, ``lastFailure`` and ``lastFailureTime`` (the
    rest of it is the Backup request's), and ``BackupUpToDate``."""

    record: backup_api.BackupStatus
    fresh: Freshness

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        mine = self.record.model_dump(by_alias=True, exclude_none=True, mode="json",
                                      include={"last_scheduled", "last_failure", "last_failure_time"})
        return etcdstatus.SetCondition(
            constants.COND_BACKUP_UP_TO_DATE, constants.TRUE if self.fresh.up_to_date else constants.FALSE,
            self.fresh.reason, self.fresh.message).apply({**status, "backup": {**(status.get("backup") or {}), **mine}})


async def tick(k: kube.Kube, obj: Mapping[str, Any], *, now: datetime.datetime) -> str | None:
    """One look at one Etcd: file the due Backup, record the last failure, set ``BackupUpToDate``. Returns the
    request filed, if any."""
    status = obj.get("status") or {}
    db = etcd_api.Etcd.model_validate(obj)
    policy = db.spec.backup
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    if policy is None:
        metrics.forget_backup(ns, name)
        return None
    if db.spec.halted or not conditions.is_true(status.get("conditions"), constants.COND_PROVISIONED):
        return None
    created = conditions.parse_rfc3339(db.metadata.creation_timestamp) if db.metadata.creation_timestamp else now
    backup = db.status.backup if db.status is not None else None
    filed = None
    slot = slot_to_file(policy, backup.last_scheduled if backup is not None else None, created, now)
    if slot is not None:
        filing = filer.Filing(constants.TRIGGER_SCHEDULED_BACKUP, conditions.rfc3339(slot), request_body(db, slot))
        if await filer.file(k, obj, filing, now=now):
            filed = filing.name
            await k.event(dict(obj), reason=EVENT_BACKUP_REQUESTED,
                          message=f"Filed EtcdOpsRequest {filed} (Backup) for the schedule slot "
                                  f"{conditions.rfc3339(slot)}")
    success_at = backup.last_success.taken_at if backup is not None and backup.last_success is not None else None
    failure = last_failure(await k.list(constants.OPS_API_VERSION, constants.OPS_KIND, ns), name, success_at)
    record = backup.model_copy() if backup is not None else backup_api.BackupStatus()
    if slot is not None:
        record.last_scheduled = conditions.rfc3339(slot)
    if failure is not None:
        record.last_failure_time, record.last_failure = failure
    fresh = freshness(policy, record, created, now)
    was = conditions.get_condition(status.get("conditions"), constants.COND_BACKUP_UP_TO_DATE)
    await etcdstatus.write(k, ns, name, ScheduleRecorded(record, fresh))
    if not fresh.up_to_date and (was is None or was.get("status") != constants.FALSE):
        await k.event(dict(obj), reason=EVENT_BACKUP_TOO_OLD, message=fresh.message, type_="Warning")
    last = conditions.parse_rfc3339(success_at).timestamp() if success_at else None
    metrics.publish_backup(ns, name, last_success=last,
                           interval=backup_api.interval(policy.schedule, now).total_seconds())
    return filed
