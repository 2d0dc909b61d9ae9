"""Restore end to end on the real control plane, from a real S3 server (SeaweedFS built from its Go module).

What is claimed, measured from outside: a backup taken under the writer, more writes after it, then a ``Restore``
of that snapshot makes the store equal to the snapshot exactly — a full read of every key equals the full read
taken at the snapshot's revision, HashKV at that revision agrees on every member and with what the backup
recorded, the writes after the backup are gone — with a new cluster ID; the cluster takes writes afterwards; and a
snapshot whose bytes were changed in the store, or one truncated, is refused at ``SnapshotVerified`` with a clear
message while the cluster is untouched (same cluster ID, the data written after the backup still there). On an
Etcd with authentication, a snapshot taken before a RotateAuth restores with the password the auth Secret holds now:
the rotated-away one stays refused, the operator and every client that follows the Secret log in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e import databench, scenario, writer
from opsmanager.api import auth, constants
from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client
from opsmanager_sandbox.objectstore import ObjectStoreServer

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("restore")) as s:
        yield s


async def prepare(sc: scenario.Scenario, store: ObjectStoreServer, db: str, **extra: Any) -> None:
    await sc.k.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": sc.namespace},
                      "data": auth.encode({"accessKeyId": store.access_key, "secretAccessKey": store.secret_key})})
    await sc.fresh_etcd(db, extra={"backup": {
        "schedule": "0 0 1 1 *", "retention": 5,
        "destination": {"endpoint": store.endpoint, "bucket": "backups", "prefix": "restore",
                        "credentialsSecret": {"name": "s3"}}}, **extra})


async def everything(sc: scenario.Scenario, db: str, revision: int = 0,
                     creds: access.Credentials | None = None) -> dict[bytes, bytes]:
    """Every key and value (at ``revision``, else now)."""
    async with await databench.client_for(sc, db, creds, timeout=10.0) as c:
        pairs, _ = await c.kv.range_prefix(b"/", timeout=10.0, revision=revision)
    return dict(pairs)


async def cluster_id(sc: scenario.Scenario, db: str) -> set[int]:
    async with await sc.plain_client(db) as c:
        return {v.cluster_id for v in (await c.statuses(timeout=2.0)).values()
                if isinstance(v, etcd_client.MemberStatus)}


async def backup(sc: scenario.Scenario, db: str, name: str, login: writer.SecretLogin | None = None) -> dict[str, Any]:
    result = await sc.operate(name, db, constants.OPS_TYPE_BACKUP, timeout=120, backup={}, login=login)
    assert result.phase == constants.PHASE_SUCCESSFUL, result.failure
    await sc.assert_no_loss(result)
    req = await sc.request(name)
    assert req is not None
    return dict(req["status"]["snapshot"])


async def test_restore_makes_the_store_the_snapshot_exactly(sc: scenario.Scenario,
                                                            object_store: ObjectStoreServer) -> None:
    db = "phoenix"
    await prepare(sc, object_store, db)
    async with await sc.plain_client(db) as c:
        for i in range(300):
            await c.kv.put(f"/data/{i:04d}", f"v{i}")
    snap = await backup(sc, db, f"{db}-b")
    at_snapshot = await everything(sc, db, snap["revision"])
    assert len(at_snapshot) >= 300
    async with await sc.plain_client(db) as c:
        for i in range(50):
            await c.kv.put(f"/after/{i:03d}", "later")
    before = await cluster_id(sc, db)

    await sc.submit(f"{db}-r", db, constants.OPS_TYPE_RESTORE, restore={"source": "latest"}, timeout="10m")
    req = await sc.watch_request(f"{db}-r", timeout=300)
    status = req["status"]
    assert status["phase"] == constants.PHASE_SUCCESSFUL, status
    assert [c["type"] for c in status["conditions"] if "--" not in c["type"] and c["type"] != "Pending"] == [
        "Running", "SnapshotVerified", "MembersRestored", "RestoreVerified", "UpdateDatabase", "Successful"]
    assert status["snapshot"]["key"] == snap["key"]
    await sc.wait_ready(db, timeout=120)
    assert await everything(sc, db) == at_snapshot  # every key, every value, nothing written after the backup
    after = await cluster_id(sc, db)
    assert len(after) == 1 and not after & before  # a new cluster
    async with await sc.plain_client(db) as c:
        hashes = {(await c.hash_kv(ep.name, revision=snap["revision"], timeout=10.0)).hash for ep in c.endpoints}
        assert hashes == {snap["hashKv"]}  # every member, at the snapshot's revision, as the backup recorded
        await c.kv.put("/after-restore", "yes")  # it takes writes
        assert await c.kv.get("/after-restore") == b"yes"
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and obj["status"]["backup"]["lastRestore"]["key"] == snap["key"]
    assert await sc.k.get("v1", "ConfigMap", sc.namespace, f"{db}-restore") is None


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
async def test_a_damaged_snapshot_is_refused_and_the_cluster_untouched(
        sc: scenario.Scenario, object_store: ObjectStoreServer, tmp_path: Path, damage: str) -> None:
    db = f"intact-{damage}"
    await prepare(sc, object_store, db)
    async with await sc.plain_client(db) as c:
        for i in range(100):
            await c.kv.put(f"/data/{i:04d}", f"v{i}")
    snap = await backup(sc, db, f"{db}-b")
    path = tmp_path / "snap.db"
    s3 = object_store.client()
    s3.download_file("backups", snap["key"], str(path))
    data = bytearray(path.read_bytes())
    if damage == "flipped":
        data[len(data) // 2] ^= 0xFF
    else:
        del data[len(data) // 2:]
    head = s3.head_object(Bucket="backups", Key=snap["key"])
    s3.put_object(Bucket="backups", Key=snap["key"], Body=bytes(data), Metadata=head["Metadata"])
    async with await sc.plain_client(db) as c:
        await c.kv.put("/after", "kept")
    before = await cluster_id(sc, db)

    await sc.submit(f"{db}-r", db, constants.OPS_TYPE_RESTORE, restore={"source": snap["key"]}, timeout="5m")
    req = await sc.watch_request(f"{db}-r", timeout=120)
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = next(c for c in req["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    assert "SnapshotVerified" in failed["message"] and snap["key"] in failed["message"], failed["message"]
    assert "not the one its backup recorded" in failed["message"] and "the cluster was not touched" in failed["message"]
    assert await cluster_id(sc, db) == before
    async with await sc.plain_client(db) as c:
        assert await c.kv.get("/after") == b"kept"
    await sc.wait_ready(db, timeout=60)
    await sc.drop_etcd(db)


async def test_a_restore_keeps_the_password_a_rotation_gave_after_the_backup(
        sc: scenario.Scenario, object_store: ObjectStoreServer) -> None:
    db, secret = "guarded", "guarded-auth"
    await prepare(sc, object_store, db, authSecret={"name": secret})

    async def enabled() -> bool:
        obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
        return bool(((obj or {}).get("status") or {}).get("authEnabled"))
    await sc.wait_for("authentication on", enabled, timeout=60)
    old = auth.decode(await sc.k.get("v1", "Secret", sc.namespace, secret))[auth.KEY_PASSWORD]
    as_old = access.Credentials(auth.USERNAME, old)
    async with await databench.client_for(sc, db, as_old) as c:
        for i in range(100):
            await c.kv.put(f"/data/{i:04d}", f"v{i}")
    login = writer.SecretLogin(sc.k, sc.namespace, secret)
    snap = await backup(sc, db, f"{db}-b", login)
    at_snapshot = await everything(sc, db, snap["revision"], as_old)

    rotated = await sc.operate(f"{db}-rotate", db, constants.OPS_TYPE_ROTATE_AUTH, timeout=120, login=login)
    assert rotated.phase == constants.PHASE_SUCCESSFUL, rotated.failure
    new = auth.decode(await sc.k.get("v1", "Secret", sc.namespace, secret))[auth.KEY_PASSWORD]
    assert new != old

    await sc.submit(f"{db}-r", db, constants.OPS_TYPE_RESTORE, restore={"source": "latest"}, timeout="10m")
    req = await sc.watch_request(f"{db}-r", timeout=300)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]  # RestoreVerified logged in: HashKV
    await sc.wait_ready(db, timeout=120)  # the operator's status pass logs in with the Secret's password
    as_new = access.Credentials(auth.USERNAME, new)
    assert await everything(sc, db, creds=as_new) == at_snapshot
    async with await sc.plain_client(db, timeout=5.0) as c:
        assert await c.auth_status()
        assert await c.check_login(None, auth.USERNAME, new)
        assert not await c.check_login(None, auth.USERNAME, old)  # the rotated-away password stays refused
    async with await databench.client_for(sc, db, as_new) as c:
        hashes = {(await c.hash_kv(ep.name, revision=snap["revision"], timeout=10.0)).hash for ep in c.endpoints}
        assert hashes == {snap["hashKv"]}
        await c.kv.put("/after-restore", "yes")
    for pod in ("guarded-0", "guarded-1", "guarded-2"):  # each init container said what it did, with no password
        log = sc.sandbox.logs(sc.namespace, pod, "restore")
        assert "root password set in the restored data" in log and f"restored member {pod}" in log, log
        assert old not in log and new not in log
