"""``SnapshotUploaded``: a full snapshot of the cluster, from a follower, checked and put in the object store with
its SHA-256, revision and HashKV.

The member: a voting follower that answers, the one that has applied the most (the leader only when no follower
can serve: a snapshot streams the whole database and would take the leader's disk and network from the writes). The
file goes to a temporary directory of the operator and is checked before it leaves: etcd's own SHA-256 trailer and
the bbolt layout (:func:`opsmanager.backup.snapshot.verify`), and the highest revision in it, read from the file
itself (the Status revision of the moment could be later than what the snapshot holds). HashKV at that revision,
on the member that served it, is recorded too: a Restore compares the restored members against it. The object's
metadata carries all of it, so a snapshot can be checked without this cluster.

Failures prevented: a backup that cannot be restored (a truncated stream or a damaged file is never uploaded); a
backup taken off the leader while it serves the writes; a destination that is not usable (a missing credentials
Secret, a bucket that does not exist, a store that does not answer, a wrong CA): the request fails naming the field
and the fix, and nothing is written.
"""

from __future__ import annotations

import asyncio
import pathlib
import tempfile

from opsmanager.api import backup as backup_api
from opsmanager.api import conditions, constants
from opsmanager.backup import snapshot, store
from opsmanager.cluster import members
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_SNAPSHOT_UPLOADED,)

SNAPSHOT_TIMEOUT = 600.0  # the stream of one snapshot: 100 MB take about a second; a slow disk, minutes


def choose(up: dict[str, etcd_client.MemberStatus]) -> str | None:
    """The member to take the snapshot from: the most caught-up voting follower, else the leader."""
    followers = sorted((v for v in up.values() if not v.is_leader and not v.is_learner and v.leader_id),
                       key=lambda v: -v.raft_applied_index)
    if followers:
        return followers[0].endpoint.name
    leader = next((v for v in up.values() if v.is_leader), None)
    return leader.endpoint.name if leader is not None else None


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    assert isinstance(step, plan.UploadSnapshot), step  # the engine runs a step with the module its kind names
    objects = await ctx.backup_store()
    if isinstance(objects, context.Fail):
        return objects
    with objects:
        async with await ctx.etcd() as client:
            views = await members.answering(client, timeout=2.0)
            member = choose(views)
            if member is None:
                return context.Progress("no member answers with a leader known: waiting to take the snapshot",
                                        delay=1.0)
            started = asyncio.get_running_loop().time()
            with tempfile.TemporaryDirectory(prefix="opsmanager-backup-") as tmp:
                path = pathlib.Path(tmp) / "snapshot.db"
                taken = await client.snapshot(member, path, timeout=SNAPSHOT_TIMEOUT)
                check = snapshot.verify(path)
                if not check.ok:
                    return context.Progress(f"the snapshot from {member} did not verify ({check.reason}); taking "
                                            "another", delay=1.0)
                revision = taken.revision  # read from the file itself: what it holds, not what Status says now
                try:
                    hashed: int | None = (await client.hash_kv(member, revision=revision, timeout=30.0)).hash
                except etcd_errors.Compacted:
                    hashed = None  # compacted past it meanwhile: the restore checks the revision and the keys
                key = snapshot.object_key(objects.prefix, ctx.namespace, ctx.db_name, ctx.now, revision)
                try:
                    await objects.aio.head(key)
                except store.ObjectNotFound:
                    pass
                except store.StoreError as err:
                    return context.Fail(str(err), reason=type(err).__name__)
                else:  # another backup in this second at this revision: never overwrite it (its record names it)
                    return context.Progress(f"{key} exists already (a backup in the same second at the same "
                                            "revision); taking the snapshot again in a second", delay=1.0)
                metadata = {"sha256": taken.sha256_hex, "revision": str(revision), "member": member,
                            "etcd-version": taken.version or "", "cluster-id": format(views[member].cluster_id, "x")}
                if hashed is not None:
                    metadata["hashkv"] = str(hashed)
                try:
                    await objects.aio.upload(path, key, metadata={k: v for k, v in metadata.items() if v})
                except store.StoreError as err:
                    return context.Fail(str(err), reason=type(err).__name__)
            seconds = asyncio.get_running_loop().time() - started
    record = backup_api.SnapshotRecord(key=key, sha256=taken.sha256_hex, revision=revision, size_bytes=taken.size,
                                       hash_kv=hashed, member=member, taken_at=conditions.rfc3339(ctx.now),
                                       seconds=round(seconds, 3))
    ctx.record(snapshot=record)
    rate = taken.size / 1e6 / seconds if seconds > 0 else 0.0
    return context.Done(f"Uploaded {key}: {taken.size} bytes at revision {revision} from {member}, sha256 "
                        f"{taken.sha256_hex[:16]}…, in {seconds:.1f}s ({rate:.1f} MB/s)")
