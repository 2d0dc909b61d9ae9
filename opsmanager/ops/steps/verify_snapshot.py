"""``SnapshotVerified``: the snapshot a Restore names is found, downloaded and checked before anything changes.

``restore.source`` is an object key, or ``latest`` (the newest snapshot of this Etcd under its destination's
prefix). The download is checked as a restore would need it: the file's SHA-256 is the one the backup recorded in
the object's metadata, etcd's own SHA-256 trailer matches the database, the bbolt file is whole, and the highest
revision inside is the recorded one. What was found is recorded in the request's ``status.snapshot`` (the members'
init containers get the same key and checksum), with the cluster ID the members have now (the restored cluster must
have another).

Failures prevented: a restore from a truncated, corrupted or substituted object (refused, the cluster untouched:
the request fails here and the Etcd is resumed as it was); a ``latest`` that silently means an empty bucket; a
store that cannot be reached or a credentials Secret that is missing — each named with its field.
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Iterable

from opsmanager.api import backup as backup_api
from opsmanager.api import constants
from opsmanager.api import opsrequest as ops_api
from opsmanager.backup import snapshot, store
from opsmanager.cluster import members
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_SNAPSHOT_VERIFIED,)

LATEST = "latest"


def _snapshots(keys: Iterable[str]) -> list[snapshot.SnapshotKey]:
    """The keys that are snapshots this operator wrote, oldest first."""
    out = []
    for key in keys:
        try:
            parsed = snapshot.parse_key(key)
        except ValueError:
            continue
        if parsed.key == key:
            out.append(parsed)
    return sorted(out)


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.VerifySnapshot), step  # the engine runs a step with the module its kind names
    field = "spec.restore.source"
    objects = await ctx.backup_store()
    if isinstance(objects, context.Fail):
        return objects
    with objects:
        try:
            key = step.source
            if key == LATEST:
                found = _snapshots(o.key for o in await objects.aio.list(f"{ctx.namespace}/{ctx.db_name}"))
                if not found:
                    return context.Fail(f"{field} latest: no snapshot of Etcd {ctx.namespace}/{ctx.db_name} under "
                                        f"{objects.bucket}/{objects.prefix}; take one with a Backup request",
                                        reason="NoSnapshot")
                key = found[-1].key
            info = await objects.aio.head(key)
            meta = dict(info.metadata or {})
            if not meta.get("sha256") or not meta.get("revision", "").isdigit():
                return context.Fail(f"{field} {key}: the object has no sha256/revision metadata: not a snapshot this "
                                    "operator wrote, so it cannot be checked; restore one of the Etcd's backups",
                                    reason="SnapshotUnverifiable")
            with tempfile.TemporaryDirectory(prefix="opsmanager-restore-") as tmp:
                path = pathlib.Path(tmp) / "snapshot.db"
                await objects.aio.download(key, path)
                sha = snapshot.sha256_file(path)
                if sha != meta["sha256"]:
                    return context.Fail(f"{field} {key}: the SHA-256 of the object ({sha[:16]}…) is not the one its "
                                        f"backup recorded ({meta['sha256'][:16]}…): corrupted or replaced in the "
                                        "store; the cluster was not touched", reason="ChecksumMismatch")
                check = snapshot.verify(path)
                if not check.ok:
                    return context.Fail(f"{field} {key}: not a whole etcd snapshot: {check.reason}; the cluster was "
                                        "not touched", reason="SnapshotCorrupt")
                try:
                    revision = snapshot.content_revision(path).revision
                except snapshot.InvalidSnapshot as err:
                    return context.Fail(f"{field} {key}: {err}; the cluster was not touched", reason="SnapshotCorrupt")
                if revision != int(meta["revision"]):
                    return context.Fail(f"{field} {key}: holds revision {revision}, its backup recorded "
                                        f"{meta['revision']}; the cluster was not touched", reason="RevisionMismatch")
        except store.ObjectNotFound:
            return context.Fail(f"{field} {step.source}: no such object in bucket {objects.bucket}; use a key from "
                                "the Etcd's status.backup.lastSuccess or Backup requests, or latest",
                                reason="SnapshotNotFound")
        except store.StoreError as err:
            return context.Fail(str(err), reason=type(err).__name__)
    async with await ctx.etcd() as client:
        now = await members.answering(client, timeout=2.0)
    cluster_ids = sorted({format(v.cluster_id, "x") for v in now.values()})
    hashed = meta.get("hashkv")
    record = backup_api.SnapshotRecord(key=key, sha256=sha, revision=revision, size_bytes=info.size,
                                       hash_kv=int(hashed) if hashed and hashed.isdigit() else None,
                                       member=meta.get("member"), taken_at=info.last_modified.strftime(
                                           "%Y-%m-%dT%H:%M:%SZ"))
    ctx.record(snapshot=record, restore=ops_api.RestoreProgress(cluster_ids_before=cluster_ids))
    return context.Done(f"{key}: {info.size} bytes, SHA-256 {sha[:16]}… as recorded, revision {revision}, a whole "
                        "etcd snapshot")
