"""Backups end to end on the real control plane, to a real S3 server (SeaweedFS built from its Go module).

What is claimed, measured from outside:

- a ``Backup`` request under the writer uploads a snapshot taken from a follower (0 failed writes, every write read
  back, HashKV agreeing): the object's SHA-256 (recomputed from a download) and revision are the ones recorded in its
  metadata, in the request's ``status.snapshot`` and in the Etcd's ``status.backup.lastSuccess``, and etcd's own
  tools accept the file (``etcdutl snapshot status``: the same revision);
- the store keeps ``retention`` snapshots: a third backup with retention 2 deletes the oldest;
- the schedule files ``Backup`` requests by itself (label ``ops.opsmanager.dev/trigger: scheduled-backup``) and
  ``BackupUpToDate`` is True after the first;
- an unreachable store and a missing credentials Secret fail the request with a message naming the field, and write
  nothing to the store.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import auth, conditions, constants
from opsmanager_sandbox import realcp
from opsmanager_sandbox.objectstore import ObjectStoreServer

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("backup")) as s:
        yield s


def policy(store: ObjectStoreServer, *, schedule: str = "0 0 1 1 *", retention: int = 2,
           credentials: str = "s3", endpoint: str | None = None) -> dict[str, Any]:
    return {"schedule": schedule, "retention": retention,
            "destination": {"endpoint": endpoint or store.endpoint, "bucket": "backups", "prefix": "e2e",
                            "credentialsSecret": {"name": credentials}}}


async def s3_secret(sc: scenario.Scenario, store: ObjectStoreServer) -> None:
    await sc.k.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": sc.namespace},
                      "data": auth.encode({"accessKeyId": store.access_key, "secretAccessKey": store.secret_key})})


def keys(store: ObjectStoreServer, db: str) -> list[str]:
    found = store.client().list_objects_v2(Bucket="backups", Prefix=f"e2e/demo/{db}/").get("Contents", [])
    return sorted(o["Key"] for o in found)


async def test_a_backup_under_the_writer_then_retention(sc: scenario.Scenario, object_store: ObjectStoreServer,
                                                        tmp_path: Path) -> None:
    db = "saved"
    await s3_secret(sc, object_store)
    await sc.fresh_etcd(db, extra={"backup": policy(object_store)})
    async with await sc.plain_client(db) as c:
        for i in range(500):
            await c.kv.put(f"/data/{i:04d}", "x" * 200)
    result = await sc.operate(f"{db}-b1", db, constants.OPS_TYPE_BACKUP, timeout=120, backup={})
    assert result.phase == constants.PHASE_SUCCESSFUL, result.failure
    assert [c for c in result.conditions if c != "Pending"] == ["SnapshotUploaded", "SnapshotsPruned", "Successful"]
    await sc.assert_no_loss(result)
    req = await sc.request(f"{db}-b1")
    assert req is not None
    record = req["status"]["snapshot"]
    async with await sc.plain_client(db) as c:
        statuses = await c.statuses(timeout=2.0)
    leader = next(name for name, v in statuses.items() if not isinstance(v, Exception) and v.is_leader)
    assert record["member"] != leader  # taken from a follower

    head = object_store.client().head_object(Bucket="backups", Key=record["key"])
    path = tmp_path / "snapshot.db"
    object_store.client().download_file("backups", record["key"], str(path))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha == record["sha256"] == head["Metadata"]["sha256"]
    assert int(head["Metadata"]["revision"]) == record["revision"]
    etcdutl = realcp.binary("etcd-3.5" if sc.etcd_version.startswith("3.5") else "etcd-3.6", "etcdutl")
    status = json.loads(subprocess.run([str(etcdutl), "snapshot", "status", str(path), "-w", "json"], check=True,
                                       capture_output=True, text=True).stdout)
    assert status["revision"] == record["revision"]
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and obj["status"]["backup"]["lastSuccess"]["key"] == record["key"]

    for name in (f"{db}-b2", f"{db}-b3"):
        await sc.submit(name, db, constants.OPS_TYPE_BACKUP, backup={})
        assert (await sc.watch_request(name, timeout=120))["status"]["phase"] == constants.PHASE_SUCCESSFUL
    stored = keys(object_store, db)
    assert len(stored) == 2 and record["key"] not in stored  # retention 2: the oldest went


async def test_the_schedule_files_backups_by_itself(sc: scenario.Scenario, object_store: ObjectStoreServer) -> None:
    db = "timed"
    await s3_secret(sc, object_store)
    await sc.fresh_etcd(db, extra={"backup": policy(object_store, schedule="* * * * *", retention=3)})

    async def scheduled() -> list[dict[str, Any]]:
        reqs = await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace,
                               label_selector=f"{constants.LABEL_OPS_TRIGGER}={constants.TRIGGER_SCHEDULED_BACKUP}")
        return [r for r in reqs if r["spec"]["databaseRef"]["name"] == db
                and (r.get("status") or {}).get("phase") == constants.PHASE_SUCCESSFUL]
    done = await sc.wait_for("a scheduled backup", scheduled, timeout=150, interval=1.0)
    assert done[0]["metadata"]["name"].startswith(f"{db}-backup-")

    async def fresh() -> bool:
        obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db) or {}
        return conditions.is_true((obj.get("status") or {}).get("conditions"), constants.COND_BACKUP_UP_TO_DATE)
    await sc.wait_for("BackupUpToDate", fresh, timeout=30)
    assert keys(object_store, db)


@pytest.mark.parametrize(("credentials", "endpoint", "fragment"), [
    ("absent", None, "spec.backup.destination.credentialsSecret: Secret demo/absent not found"),
    ("s3", "http://127.0.0.1:9", "spec.backup.destination.endpoint"),
])
async def test_a_destination_that_cannot_be_used_fails_naming_the_field(
        sc: scenario.Scenario, object_store: ObjectStoreServer, credentials: str, endpoint: str | None,
        fragment: str) -> None:
    db = f"nowhere-{credentials}"
    await s3_secret(sc, object_store)
    await sc.fresh_etcd(db, extra={"backup": policy(object_store, credentials=credentials, endpoint=endpoint)})
    await sc.submit(f"{db}-b", db, constants.OPS_TYPE_BACKUP, backup={})
    req = await sc.watch_request(f"{db}-b", timeout=120)
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = next(c for c in req["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    assert fragment in failed["message"], failed["message"]
    assert keys(object_store, db) == []
    await sc.drop_etcd(db)
