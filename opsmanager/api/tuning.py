"""The etcd flags an operator owns (``spec.configuration.tuning``): the model, the flags it renders, etcd's own rules.

One home for the rules the admission webhook, the renderer and the Reconfigure plan all apply, so a value the
webhook lets through is one etcd starts with. The rules are etcd's (``embed.Config.Validate`` and its quota
check): election timeout at least 5 × the heartbeat interval and at most 50 s; the backend quota within etcd's
suggested maximum of 8 GiB; an auto-compaction mode of ``periodic`` or ``revision`` with a retention etcd parses
for that mode. Each error names the field and what to give instead.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import pydantic

from opsmanager.api import common

# etcd's defaults (embed.NewConfig), for the rules that relate two flags when only one is set.
DEFAULT_HEARTBEAT_MS: Final = 100
DEFAULT_ELECTION_MS: Final = 1000
MAX_ELECTION_MS: Final = 50000
MAX_QUOTA_BYTES: Final = 8 * 1024 * 1024 * 1024
QUOTA_HEADROOM: Final = 1.2  # a new quota at least this many times the largest database file
_PERIOD = re.compile(r"^(\d+|(\d+(\.\d+)?(h|m|s|ms))+)$")


class TuningConfig(common.Model):
    """etcd flags set on every member. Absent fields keep etcd's defaults."""

    quota_backend_bytes: int | None = pydantic.Field(
        default=None, description="`--quota-backend-bytes`: the database size that raises the NOSPACE alarm "
                                  "(0: etcd's default, 2 GiB); at most 8 GiB.")
    auto_compaction_mode: Literal["periodic", "revision"] | None = pydantic.Field(
        default=None, description="`--auto-compaction-mode`: `periodic` (by time) or `revision` (by count).")
    auto_compaction_retention: str | None = pydantic.Field(
        default=None, description="`--auto-compaction-retention`: for `periodic` a duration (`1h`, `30m`) or hours "
                                  "(`1`); for `revision` how many revisions to keep (`1000`). `0` turns it off.")
    snapshot_count: int | None = pydantic.Field(
        default=None, description="`--snapshot-count`: committed entries between two snapshots to disk.")
    heartbeat_interval: int | None = pydantic.Field(
        default=None, description="`--heartbeat-interval` in milliseconds (etcd's default 100).")
    election_timeout: int | None = pydantic.Field(
        default=None, description="`--election-timeout` in milliseconds (etcd's default 1000): at least 5 × the "
                                  "heartbeat interval, at most 50000.")
    max_request_bytes: int | None = pydantic.Field(
        default=None, description="`--max-request-bytes`: the largest request a member accepts (default 1.5 MiB).")
    max_txn_ops: int | None = pydantic.Field(
        default=None, description="`--max-txn-ops`: the most operations in one transaction (default 128).")


FLAGS: Final = {  # field → etcd flag, in the order they are rendered
    "quota_backend_bytes": "--quota-backend-bytes",
    "auto_compaction_mode": "--auto-compaction-mode",
    "auto_compaction_retention": "--auto-compaction-retention",
    "snapshot_count": "--snapshot-count",
    "heartbeat_interval": "--heartbeat-interval",
    "election_timeout": "--election-timeout",
    "max_request_bytes": "--max-request-bytes",
    "max_txn_ops": "--max-txn-ops",
}


def flags(tuning: TuningConfig | None) -> list[str]:
    """The etcd command-line flags of ``tuning`` (``--name=value``), only the fields that are set."""
    if tuning is None:
        return []
    return [f"{flag}={getattr(tuning, field)}" for field, flag in FLAGS.items() if getattr(tuning, field) is not None]


def merge(current: TuningConfig | None, change: TuningConfig | None) -> TuningConfig:
    """``change`` over ``current``: a field the change sets wins, the others stay."""
    base = current.model_dump(exclude_none=True) if current is not None else {}
    base.update(change.model_dump(exclude_none=True) if change is not None else {})
    return TuningConfig.model_validate(base)


def problems(tuning: TuningConfig, path: str, *, largest_db_bytes: int | None = None) -> list[tuple[str, object, str]]:
    """etcd's rules on ``tuning`` (the values the members will run with): ``(field path, value, message)`` each.
    ``largest_db_bytes``: the largest member database now (the Etcd's last storage scan), which a new quota must
    leave room above — a member restarted onto a quota below its file raises NOSPACE, and that alarm stops every
    write of the cluster, mid-roll."""
    out: list[tuple[str, object, str]] = []
    heartbeat = tuning.heartbeat_interval if tuning.heartbeat_interval is not None else DEFAULT_HEARTBEAT_MS
    election = tuning.election_timeout if tuning.election_timeout is not None else DEFAULT_ELECTION_MS
    for field in ("snapshot_count", "heartbeat_interval", "election_timeout", "max_request_bytes", "max_txn_ops"):
        value = getattr(tuning, field)
        if value is not None and value < 1:
            out.append((f"{path}.{_camel(field)}", value, "must be at least 1"))
    if heartbeat >= 1 and election >= 1 and 5 * heartbeat > election:
        out.append((f"{path}.electionTimeout", election,
                    f"the election timeout ({election}ms) must be at least 5 times the heartbeat interval "
                    f"({heartbeat}ms), as etcd requires: raise electionTimeout to {5 * heartbeat} or more, or lower "
                    "heartbeatInterval"))
    if election > MAX_ELECTION_MS:
        out.append((f"{path}.electionTimeout", election, f"etcd refuses an election timeout above {MAX_ELECTION_MS}ms"))
    quota = tuning.quota_backend_bytes
    if quota is not None and (quota < 0 or quota > MAX_QUOTA_BYTES):
        out.append((f"{path}.quotaBackendBytes", quota,
                    f"must be between 0 (etcd's default, 2 GiB) and etcd's maximum of {MAX_QUOTA_BYTES} (8 GiB)"))
    if quota and largest_db_bytes and quota < largest_db_bytes * QUOTA_HEADROOM:
        out.append((f"{path}.quotaBackendBytes", quota,
                    f"is below {QUOTA_HEADROOM:.1f} × the largest member database now ({largest_db_bytes} bytes): the "
                    "members would raise NOSPACE and refuse every write; compact and defragment first, or raise it"))
    retention = tuning.auto_compaction_retention
    if retention is not None:
        mode = tuning.auto_compaction_mode or "periodic"
        if mode == "revision" and not retention.isdigit():
            out.append((f"{path}.autoCompactionRetention", retention,
                        "with autoCompactionMode revision it is the number of revisions to keep, e.g. 1000"))
        elif mode == "periodic" and not _PERIOD.match(retention):
            out.append((f"{path}.autoCompactionRetention", retention,
                        "with autoCompactionMode periodic it is a duration (1h, 30m) or a number of hours (1)"))
    return out


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)
