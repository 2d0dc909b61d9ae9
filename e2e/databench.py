"""The data rows of ``make bench`` (:mod:`e2e.bench`): ``RotateAuth``, ``Backup``, ``Restore`` and
``RecoverFromQuorumLoss`` on a 3-member Etcd holding ~100 MB, each beside a baseline measured in the same run, on the
same cluster, by the same writer.

Scenarios (``--scenario``): ``rotate-auth``, ``backup-restore``, ``quorum-recovery``, or ``data-ops`` for all three
(``all`` includes them). They run on the real control plane when it is one of the chosen (``--control-plane``: the
one the end-to-end tests prove these types on, ``tests/e2e/test_auth.py``, ``test_backup.py``, ``test_restore.py``,
``test_quorum_recovery.py``), else on the embedded one.

- **rotate-auth**: an Etcd with ``spec.authSecret`` (etcd's authentication on), filled with ``--data-mb`` × 1 MB
  random values by a client that logs in. Four windows on that one cluster, in this order, each with the live writer
  and the leader monitor of :func:`e2e.bench.measure` and the no-loss check after it, each the action plus
  :data:`SETTLE_S`: ``opsmanager`` (``RotateAuth``; the writer re-reads the Secret as
  :class:`e2e.writer.SecretLogin` does: ``password``, then ``password.next``), ``idle`` (the writer alone for as
  long as our window: the floor the machine gives), ``opsmanager-password-only-client`` (the same request; the
  writer re-reads only ``password``), ``naive-change-password`` (``UserChangePassword`` straight on etcd, then the
  Secret's ``password`` rewritten; the Etcd paused as every naive strategy is; the writer re-reads ``password``,
  all such a Secret has). A rotation restarts nothing, so one cluster serves the four (the pods' UIDs are tracked:
  ``pods_recreated``).
- **backup-restore**: an Etcd with ``spec.backup`` to a SeaweedFS S3 server on loopback
  (:class:`opsmanager_sandbox.objectstore.ObjectStoreServer`), filled the same way. Then ``Backup`` under the writer
  (``status.snapshot``: size, seconds, member; MB/s = size ÷ seconds, the figure of the ``SnapshotUploaded``
  message) beside ``bare-snapshot-from-leader`` (the stream ``etcdctl snapshot save`` takes, from the leader, then
  an upload with boto3; no check, no HashKV: the machine's floor for the same bytes); then
  ``all-members-restarted`` (every member pod deleted at once, until a put succeeds and every replacement is Ready:
  what any restore that replaces every member pays at least, with the data already on disk) and ``Restore`` of the
  engine's snapshot: seconds from the request to a *restored* cluster (a new cluster ID) that takes a put, to the
  Etcd ``Ready`` as well, and to ``Successful``; then HashKV at the snapshot's revision on every member against the
  one the backup recorded.
- **quorum-recovery**: in a sandbox of its own, whose operator runs with ``--quorum-loss-after`` :data:`LOSS_AFTER_S`;
  a plain Etcd filled the same way. First ``all-members-restarted`` on it (as for Restore: the floor any recovery
  that restarts members pays, and an outage with the quorum gone that needs no repair). Then the writer puts 100
  keys, one member is lost (data dir replaced by a file, etcd SIGKILLed: ``break_member`` of
  ``tests/e2e/test_quorum_recovery.py``), 100 more on the two left, the writer stops, HashKV at that revision; the
  second member is lost: seconds to ``QuorumLost=True``, then ``RecoverFromQuorumLoss`` confirming the survivor it
  names: seconds from the request to the first acknowledged put (the survivor alone), to three voters with their
  pods Ready, to ``Successful``; then every acknowledged write read back, HashKV agreeing on the three, and HashKV
  at the revision before the loss equal to what the members had then.

Each part records what went wrong and goes on (``outcome``); :func:`problems` holds our rows to the bar.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence, Set
from typing import Any

from e2e import bench, naive, scenario, writer
from opsmanager import kube
from opsmanager.api import auth, conditions, constants
from opsmanager.cluster import credentials, naming
from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors

Record = dict[str, Any]
Printer = bench.Printer

QUORUM = "quorum-recovery"
DATA_SCENARIOS = ("rotate-auth", "backup-restore", QUORUM)  # what ``--scenario`` names (``data-ops``: all three)
RECORD_SCENARIOS = ("rotate-auth", "backup", "restore", QUORUM)  # the ``scenario`` of the records they write
VALUE_BYTES = 1_000_000  # one value of the fill: under etcd's --max-request-bytes (1.5 MiB)
DATA_PREFIX = "/bench/data/"
BUCKET = "backups"
# RotateAuth: the writer keeps running this long after each action ends, so its reaction to the change (every
# token of root dropped, a login again, the Secret re-read every second) falls inside the window it is counted in.
SETTLE_S = 2.0
# RecoverFromQuorumLoss: the operator of that part runs with --quorum-loss-after this (the default is 60 s, so that a
# rolling restart or a node reboot never reads as a loss); the bench measures what comes on top of the bound.
LOSS_AFTER_S = 5.0

IDLE = "idle"
PASSWORD_ONLY = "opsmanager-password-only-client"
NAIVE_PASSWORD = "naive-change-password"
BARE_SNAPSHOT = "bare-snapshot-from-leader"
RESTART_ALL = "all-members-restarted"
STRATEGY_TEXT = {
    bench.ENGINE: "opsmanager EtcdOpsRequest",
    IDLE: "no operation: the same writer alone, as long as our request took",
    PASSWORD_ONLY: "opsmanager RotateAuth, a client that re-reads only `password`",
    NAIVE_PASSWORD: "naive: UserChangePassword on etcd, then the Secret's `password` rewritten",
    BARE_SNAPSHOT: "bare: snapshot streamed from the leader, uploaded with boto3, no check",
    RESTART_ALL: "floor: every member pod deleted at once, data kept on disk",
}
CLIENT_TEXT = {
    bench.ENGINE: "re-reads the Secret: `password`, then `password.next`",
    IDLE: "re-reads the Secret: `password`, then `password.next`",
    PASSWORD_ONLY: "re-reads only `password`",
    NAIVE_PASSWORD: "re-reads only `password`",
}


def select(name: str) -> list[str]:
    """``--scenario`` → the data scenarios it runs."""
    if name in ("all", "data-ops"):
        return list(DATA_SCENARIOS)
    return [name] if name in DATA_SCENARIOS else []


def _base(scenario_key: str, operation: str, strategy: str, **fields: Any) -> Record:
    return {"scenario": scenario_key, "operation": operation, "strategy": strategy,
            "method": STRATEGY_TEXT.get(strategy, strategy), "measured_at": bench.now_text(), **fields}


def _mb(size: int | None) -> float | None:
    return round(size / 1e6, 1) if size else None


def _writer_fields(m: bench.Measured) -> Record:
    return {"writes_failed": m.writes_failed, "writes_total": m.writes_ok + m.writes_failed,
            "max_write_stall_s": round(m.max_stall, 3), "elections": m.elections, "wall_s": round(m.wall, 2),
            "writer_notes": list(m.writer_notes), **m.record()}


class PasswordOnlyLogin:
    """An application that re-reads the auth Secret's ``password`` and nothing else (no ``password.next``)."""

    def __init__(self, k: kube.Kube, namespace: str, secret: str) -> None:
        self.k, self.namespace, self.secret = k, namespace, secret

    async def read(self) -> access.Credentials | None:
        password = auth.decode(await self.k.get("v1", "Secret", self.namespace, self.secret)).get(auth.KEY_PASSWORD)
        return access.Credentials(auth.USERNAME, password) if password else None


# --- the cluster and its data -------------------------------------------------------------------------------


async def client_for(sc: scenario.Scenario, db: str, creds: access.Credentials | None = None, *,
                     timeout: float = 30.0) -> etcd_client.EtcdClient:
    """An etcd client over plain http to every member of ``db`` as its pods are now (logged in with ``creds``)."""
    return etcd_client.EtcdClient([ep.with_schemes("http") for ep in await sc.endpoints(db)], tls=None,
                                  timeout=timeout, credentials=creds)


async def fill(sc: scenario.Scenario, db: str, megabytes: int, creds: access.Credentials | None = None) -> float:
    """``megabytes`` keys under :data:`DATA_PREFIX`, each a 1 MB random value (incompressible, as a snapshot or an
    upload would see real data); returns the seconds it took."""
    started = time.monotonic()
    async with await client_for(sc, db, creds) as c:
        for i in range(megabytes):
            await c.kv.put(f"{DATA_PREFIX}{i:04d}", os.urandom(VALUE_BYTES))
    return time.monotonic() - started


async def db_size(sc: scenario.Scenario, db: str, creds: access.Credentials | None = None) -> tuple[int, int]:
    """The largest backend file of the members and the bytes in use in it (etcd's Status ``dbSize``/``dbSizeInUse``)."""
    async with await client_for(sc, db, creds, timeout=5.0) as c:
        views = [v for v in (await c.statuses(timeout=5.0)).values() if isinstance(v, etcd_client.MemberStatus)]
    return max((v.db_size for v in views), default=0), max((v.db_size_in_use for v in views), default=0)


async def _secret_credentials(sc: scenario.Scenario, secret: str) -> access.Credentials | None:
    return credentials.credentials([auth.decode(await sc.k.get("v1", "Secret", sc.namespace, secret))])


def _steps(timeline: Sequence[tuple[float, str, str]], submitted: float) -> list[list[Any]]:
    """The request's top-level steps, each with the seconds since the previous one turned True."""
    return list(bench.time_breakdown([(t - submitted, type_, st) for t, type_, st in timeline], 0.0)["steps"])


async def _request(sc: scenario.Scenario, name: str, db: str, type_: str, timeline: list[tuple[float, str, str]],
                   submitted: list[float], *, watch_timeout: float = 600.0, **spec: Any) -> dict[str, Any]:
    submitted[0] = time.monotonic()
    await sc.submit(name, db, type_, **spec)
    return await sc.watch_request(name, timeout=watch_timeout, timeline=timeline)


def _outcome(req: dict[str, Any] | None, error: str) -> tuple[str, str]:
    """(phase, the Failed condition's message) of a finished request."""
    status = (req or {}).get("status") or {}
    failure = next((c.get("message", "") for c in status.get("conditions") or []
                    if c["type"] == constants.COND_FAILED), "")
    return status.get("phase") or error or "unknown", failure


# --- RotateAuth -----------------------------------------------------------------------------------------------


async def rotate_auth(sc: scenario.Scenario, say: Printer, *, megabytes: int) -> list[Record]:
    db, secret = "auth-data", "auth-data-auth"
    await sc.create_etcd(db, extra={"authSecret": {"name": secret}})
    await sc.wait_ready(db, timeout=120)

    async def enabled() -> bool:
        obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
        return bool(((obj or {}).get("status") or {}).get("authEnabled"))
    await sc.wait_for("authentication on", enabled, timeout=90)
    filled = await fill(sc, db, megabytes, await _secret_credentials(sc, secret))
    size, in_use = await db_size(sc, db, await _secret_credentials(sc, secret))
    say(f"\n== RotateAuth on {db}: {megabytes} × 1 MB written in {filled:.1f}s; db size {size / 1e6:.1f} MB")
    records: list[Record] = []
    engine_wall = 5.0

    async def window(strategy: str, action: Any, login: Any, *, request: str = "",
                     paused: bool = False) -> Record:
        nonlocal engine_wall
        await sc.wait_ready(db, timeout=120)
        if paused:
            await naive.set_paused(sc.k, sc.namespace, db, True)
        took = [0.0]

        async def then_settle() -> Any:
            started = time.monotonic()
            try:
                return await action()
            finally:
                took[0] = time.monotonic() - started
                await asyncio.sleep(SETTLE_S)

        async with scenario.PodTracker(sc, db) as pods:
            m = await bench.measure(sc, db, then_settle, login=login)
        if paused:
            await naive.set_paused(sc.k, sc.namespace, db, False)
        creds = await _secret_credentials(sc, secret)
        size_now, _ = await db_size(sc, db, creds)
        value = m.value or {}
        phase, failure = _outcome(value.get("request"), m.error) if request else (m.error or value.get("outcome", ""),
                                                                                  "")
        ok = (phase == constants.PHASE_SUCCESSFUL) if request else not m.error
        new_password = creds is not None and creds.password != value.get("old_password")
        rec = _base("rotate-auth", "RotateAuth", strategy, client=CLIENT_TEXT[strategy], outcome=phase, ok=ok,
                    failure=failure, pods_recreated=sum(pods.restarts().values()),
                    credential_changes=m.credential_changes, password_changed=new_password if strategy != IDLE
                    else None, db_size_bytes=size_now, db_size_mb=_mb(size_now), steps=value.get("steps", []),
                    **_writer_fields(m))
        rec.update(wall_s=round(took[0], 2), window_s=round(m.wall, 2))  # the action; the writer's whole window
        if strategy == bench.ENGINE and ok:
            engine_wall = took[0]
        say(_line(rec))
        return rec

    async def old_password() -> str:
        return (await _secret_credentials(sc, secret) or access.Credentials(auth.USERNAME, "")).password

    def engine_action(name: str) -> Any:
        async def action() -> dict[str, Any]:
            old = await old_password()
            timeline: list[tuple[float, str, str]] = []
            submitted = [0.0]
            req = await _request(sc, name, db, constants.OPS_TYPE_ROTATE_AUTH, timeline, submitted,
                                 watch_timeout=300)
            return {"request": req, "steps": _steps(timeline, submitted[0]), "old_password": old}
        return action

    async def idle() -> dict[str, Any]:
        await asyncio.sleep(engine_wall)
        return {"outcome": f"{engine_wall + SETTLE_S:.1f}s with no operation"}

    async def naive_change() -> dict[str, Any]:
        old = await old_password()
        new = credentials.new_password()
        async with await client_for(sc, db, access.Credentials(auth.USERNAME, old), timeout=10.0) as c:
            await c.user_change_password(auth.USERNAME, new)
        await sc.k.patch("v1", "Secret", sc.namespace, secret, {"data": auth.encode({auth.KEY_PASSWORD: new})})
        return {"outcome": "completed", "old_password": old}

    records.append(await window(bench.ENGINE, engine_action(f"{db}-rotate"),
                                writer.SecretLogin(sc.k, sc.namespace, secret), request=f"{db}-rotate"))
    records.append(await window(IDLE, idle, writer.SecretLogin(sc.k, sc.namespace, secret)))
    records.append(await window(PASSWORD_ONLY, engine_action(f"{db}-rotate-2"),
                                PasswordOnlyLogin(sc.k, sc.namespace, secret), request=f"{db}-rotate-2"))
    records.append(await window(NAIVE_PASSWORD, naive_change, PasswordOnlyLogin(sc.k, sc.namespace, secret),
                                paused=True))
    for r in records:
        r.update(data_mb=megabytes, fill_s=round(filled, 1), db_size_before_bytes=size, db_size_in_use_bytes=in_use)
    await bench.delete_etcd(sc, db)
    return records


# --- Backup and Restore ---------------------------------------------------------------------------------------


async def backup_restore(sc: scenario.Scenario, store: Any, workdir: pathlib.Path, say: Printer, *,
                         megabytes: int) -> list[Record]:
    db = "backup-data"
    await sc.k.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": sc.namespace},
                      "data": auth.encode({"accessKeyId": store.access_key, "secretAccessKey": store.secret_key})})
    await sc.create_etcd(db, extra={"backup": {
        "schedule": "0 0 1 1 *", "retention": 3,
        "destination": {"endpoint": store.endpoint, "bucket": BUCKET, "prefix": "bench",
                        "credentialsSecret": {"name": "s3"}}}})
    await sc.wait_ready(db, timeout=120)
    filled = await fill(sc, db, megabytes)
    size, in_use = await db_size(sc, db)
    say(f"\n== Backup and Restore on {db}: {megabytes} × 1 MB written in {filled:.1f}s; db size {size / 1e6:.1f} MB")
    common = {"data_mb": megabytes, "fill_s": round(filled, 1), "db_size_bytes": size, "db_size_mb": _mb(size),
              "db_size_in_use_bytes": in_use}
    records = [await _engine_backup(sc, db, say, common)]
    records.append(await _bare_backup(sc, db, store, workdir, say, common))
    snap = records[0].get("snapshot") or {}
    records.append(await _restart_all(sc, db, say, common))
    if snap.get("key"):
        records.append(await _engine_restore(sc, db, snap, say, common))
    else:
        records.append(_base("restore", "Restore", bench.ENGINE, outcome="not run: the backup has no snapshot",
                             ok=False, **common))
    await bench.delete_etcd(sc, db)
    return records


async def _engine_backup(sc: scenario.Scenario, db: str, say: Printer, common: Record) -> Record:
    name = f"{db}-b"
    timeline: list[tuple[float, str, str]] = []
    submitted = [0.0]

    async def action() -> dict[str, Any]:
        return await _request(sc, name, db, constants.OPS_TYPE_BACKUP, timeline, submitted, backup={})

    m = await bench.measure(sc, db, action)
    phase, failure = _outcome(m.value, m.error)
    status = (m.value or {}).get("status") or {}
    snap = dict(status.get("snapshot") or {})
    uploaded = next((c.get("message", "") for c in status.get("conditions") or []
                     if c["type"] == constants.COND_SNAPSHOT_UPLOADED), "")
    leader = await _leader(sc, db)
    size, seconds = int(snap.get("sizeBytes") or 0), float(snap.get("seconds") or 0.0)
    rec = _base("backup", "Backup", bench.ENGINE, outcome=phase, ok=phase == constants.PHASE_SUCCESSFUL,
                failure=failure, snapshot=snap, snapshot_bytes=size, snapshot_mb=_mb(size), seconds=round(seconds, 2),
                throughput_mb_s=round(size / 1e6 / seconds, 1) if seconds > 0 else None,
                member=snap.get("member"), from_leader=bool(leader) and snap.get("member") == leader,
                uploaded_message=uploaded, steps=_steps(timeline, submitted[0]), **common, **_writer_fields(m))
    say(_line(rec))
    return rec


async def _leader(sc: scenario.Scenario, db: str) -> str:
    with contextlib.suppress(etcd_errors.EtcdError, ValueError):
        async with await client_for(sc, db, timeout=5.0) as c:
            views = await c.statuses(timeout=5.0)
        return next((n for n, v in views.items() if isinstance(v, etcd_client.MemberStatus) and v.is_leader), "")
    return ""


async def _bare_backup(sc: scenario.Scenario, db: str, store: Any, workdir: pathlib.Path, say: Printer,
                       common: Record) -> Record:
    found: dict[str, Any] = {}

    async def action() -> dict[str, Any]:
        leader = await _leader(sc, db)
        if not leader:
            raise RuntimeError("no member answers as the leader")
        with tempfile.TemporaryDirectory(prefix="bench-snapshot-", dir=workdir) as tmp:
            path = pathlib.Path(tmp) / "snapshot.db"
            started = time.monotonic()
            async with await client_for(sc, db) as c:
                taken = await c.snapshot(leader, path, timeout=600.0)
            streamed = time.monotonic()
            await asyncio.to_thread(store.client().upload_file, str(path), BUCKET, f"bare/{db}/snapshot.db")
            done = time.monotonic()
        found.update(member=leader, size=taken.size, snapshot_s=streamed - started, upload_s=done - streamed,
                     seconds=done - started)
        return found

    m = await bench.measure(sc, db, action)
    size, seconds = int(found.get("size") or 0), float(found.get("seconds") or 0.0)
    rec = _base("backup", "Backup", BARE_SNAPSHOT, outcome=m.error or "completed", ok=not m.error,
                snapshot_bytes=size, snapshot_mb=_mb(size), seconds=round(seconds, 2),
                throughput_mb_s=round(size / 1e6 / seconds, 1) if seconds > 0 else None,
                stream_s=round(found.get("snapshot_s", 0.0), 2), upload_s=round(found.get("upload_s", 0.0), 2),
                member=found.get("member"), from_leader=bool(found), **common, **_writer_fields(m))
    say(_line(rec))
    return rec


class _Probe:
    """Polls every 0.2 s, from ``started[0]`` (set when the action starts), a cluster whose member pods (``old_uids``: name → UID before) are being
    replaced: ``writable`` — the first time every pod has a new UID and a fresh client's put is acknowledged by
    members that all report one cluster ID, not one in ``before``; ``ready`` — the first time, once writable, that
    every new pod is Ready too (and with ``need_phase`` the Etcd's phase is ``Ready``). The same for the floor and
    for our Restore, so the two rows compare."""

    def __init__(self, sc: scenario.Scenario, db: str, started: list[float], old_uids: dict[str, str], *,
                 before: Set[int] = frozenset(), need_phase: bool = True) -> None:
        self.sc, self.db, self.started, self.old_uids = sc, db, started, old_uids
        self.before, self.need_phase = before, need_phase
        self.writable: float | None = None
        self.ready: float | None = None
        self.phases: list[str] = []

    async def _pods(self) -> tuple[bool, bool]:
        """(every pod replaced, every pod replaced and Ready)."""
        replaced = ready = True
        for pod, uid in self.old_uids.items():
            obj = await self.sc.k.get("v1", "Pod", self.sc.namespace, pod)
            if obj is None or obj["metadata"].get("uid") == uid:
                return False, False
            ready = ready and naive.pod_ready(obj)
        return replaced, ready

    async def _writable(self) -> bool:
        try:
            async with await client_for(self.sc, self.db, timeout=1.0) as c:
                views = await c.statuses(timeout=1.0)
                ids = {v.cluster_id for v in views.values() if isinstance(v, etcd_client.MemberStatus)}
                if len(ids) != 1 or ids & self.before:
                    return False
                await c.kv.put("/bench/probe", "x", timeout=1.0)
                return True
        except (etcd_errors.EtcdError, ValueError, OSError):
            return False

    async def run(self) -> None:
        while self.ready is None:
            phase = await self.sc.etcd_phase(self.db) or ""
            if not self.phases or self.phases[-1] != phase:
                self.phases.append(phase)
            replaced, ready = await self._pods()
            if self.writable is None and replaced and await self._writable():
                self.writable = time.monotonic() - self.started[0]
            if (self.writable is not None and ready
                    and (not self.need_phase or phase == constants.DB_PHASE_READY)):
                self.ready = time.monotonic() - self.started[0]
            await asyncio.sleep(0.2)


async def _cluster_ids(sc: scenario.Scenario, db: str) -> set[int]:
    async with await client_for(sc, db, timeout=5.0) as c:
        return {v.cluster_id for v in (await c.statuses(timeout=5.0)).values()
                if isinstance(v, etcd_client.MemberStatus)}


async def _uids(sc: scenario.Scenario, db: str) -> dict[str, str]:
    return {pod: str((await sc.k.get("v1", "Pod", sc.namespace, pod) or {}).get("metadata", {}).get("uid", ""))
            for pod in naming.pods(db, 3)}


async def _restart_all(sc: scenario.Scenario, db: str, say: Printer, common: Record, *, key: str = "restore",
                       operation: str = "Restore") -> Record:
    await sc.wait_ready(db, timeout=120)
    await naive.set_paused(sc.k, sc.namespace, db, True)
    old = await _uids(sc, db)
    probe = _Probe(sc, db, [time.monotonic()], old, need_phase=False)  # paused: the provisioner does not write the phase
    await asyncio.gather(*(sc.k.delete("v1", "Pod", sc.namespace, pod) for pod in old))
    error = ""
    try:
        await asyncio.wait_for(probe.run(), timeout=300)
    except TimeoutError:
        error = "not writable and Ready within 300s"
    await naive.set_paused(sc.k, sc.namespace, db, False)
    await sc.wait_ready(db, timeout=120)
    rec = _base(key, operation, RESTART_ALL, outcome=error or "completed", ok=not error,
                writable_s=_round(probe.writable), ready_s=_round(probe.ready), wall_s=_round(probe.ready), **common)
    say(_restore_line(rec))
    return rec


def _round(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


async def _engine_restore(sc: scenario.Scenario, db: str, snap: dict[str, Any], say: Printer,
                          common: Record) -> Record:
    name = f"{db}-r"
    before = await _cluster_ids(sc, db)
    timeline: list[tuple[float, str, str]] = []
    submitted = [time.monotonic()]
    probe = _Probe(sc, db, submitted, await _uids(sc, db), before=before)  # _request sets submitted[0]
    watcher = asyncio.create_task(probe.run())
    error, req = "", None
    try:
        req = await _request(sc, name, db, constants.OPS_TYPE_RESTORE, timeline, submitted, watch_timeout=600,
                             restore={"source": snap["key"]}, timeout="10m")
    except (TimeoutError, kube.KubeError) as err:
        error = f"{type(err).__name__}: {err}"
    successful = time.monotonic() - submitted[0]
    phase, failure = _outcome(req, error)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(watcher), timeout=60)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    hashes: dict[str, int] = {}
    with contextlib.suppress(etcd_errors.EtcdError, ValueError):
        async with await client_for(sc, db, timeout=30.0) as c:
            for ep in c.endpoints:
                hashes[ep.name] = (await c.hash_kv(ep.name, revision=int(snap["revision"]), timeout=30.0)).hash
    after = set()
    with contextlib.suppress(etcd_errors.EtcdError, ValueError):
        after = await _cluster_ids(sc, db)
    size_after = 0
    with contextlib.suppress(etcd_errors.EtcdError, ValueError):
        size_after, _ = await db_size(sc, db)
    matches = len(hashes) == 3 and set(hashes.values()) == {int(snap["hashKv"])} if snap.get("hashKv") else None
    rec = _base("restore", "Restore", bench.ENGINE, outcome=phase, ok=phase == constants.PHASE_SUCCESSFUL,
                failure=failure, snapshot_key=snap["key"], snapshot_bytes=snap.get("sizeBytes"),
                snapshot_mb=_mb(snap.get("sizeBytes")), writable_s=_round(probe.writable), ready_s=_round(probe.ready),
                successful_s=round(successful, 2), wall_s=round(successful, 2), etcd_phases=probe.phases,
                steps=_steps(timeline, submitted[0]), hashkv_matches_backup=matches,
                new_cluster_id=bool(after) and len(after) == 1 and not after & before,
                restored_db_size_bytes=size_after, **common)
    say(_restore_line(rec))
    return rec


# --- RecoverFromQuorumLoss ------------------------------------------------------------------------------------


async def _break_member(sc: scenario.Scenario, pod: str) -> None:
    """Stop ``pod``'s etcd for good, as ``tests/e2e/test_quorum_recovery.py`` does: its data dir replaced by a file
    (etcd exits at start), then the process SIGKILLed; the kubelet restarts it into a crash loop."""
    pvc = await sc.k.get("v1", "PersistentVolumeClaim", sc.namespace, f"{naming.DATA_VOLUME}-{pod}")
    if pvc is None:
        raise RuntimeError(f"{pod}: no data volume claim")
    data = sc.sandbox.kubelet.pvc_dir(pvc) / "data"
    await asyncio.to_thread(shutil.rmtree, data, True)
    data.write_text("this member's data is gone\n")
    pid = sc.sandbox.kubelet.pids().get((sc.namespace, pod, naming.CONTAINER_NAME))
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def _etcd_status(sc: scenario.Scenario, db: str) -> dict[str, Any]:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    return dict(((obj or {}).get("status")) or {})


async def _hashes(sc: scenario.Scenario, db: str, revision: int) -> dict[str, int]:
    """HashKV at ``revision`` on every member that answers."""
    out: dict[str, int] = {}
    async with await client_for(sc, db, timeout=30.0) as c:
        for ep in c.endpoints:
            with contextlib.suppress(etcd_errors.EtcdError):
                out[ep.name] = (await c.hash_kv(ep.name, revision=revision, timeout=30.0)).hash
    return out


class _RecoveryProbe:
    """Polls every 0.2 s from ``started[0]`` (the request's submission) a cluster recovering from quorum loss:
    ``writable`` — the first put acknowledged, tried once a member answers Status naming a leader (a member
    without a quorum answers Status but has no leader); ``voters`` — once writable, the first time MemberList
    (linearizable) has the three members, each started (named) and none a learner; ``voters_ready`` — the first
    time, once ``voters``, that the three pods are Ready as well. Once writable every pass puts again, so a later
    outage (the survivor's second restart, without ``--force-new-cluster``) shows as ``max_gap``."""

    def __init__(self, sc: scenario.Scenario, db: str, started: list[float]) -> None:
        self.sc, self.db, self.started = sc, db, started
        self.writable: float | None = None
        self.voters: float | None = None
        self.voters_ready: float | None = None
        self.phases: list[str] = []
        self.last_ok = 0.0
        self.max_gap = 0.0  # once writable: the longest time between two acknowledged puts, until voters_ready
        self.failed_after = 0  # once writable: the passes whose put failed

    async def _writable(self) -> bool:
        try:
            async with await client_for(self.sc, self.db, timeout=1.0) as c:
                views = await c.statuses(timeout=0.5)
                if not any(isinstance(v, etcd_client.MemberStatus) and v.leader_id for v in views.values()):
                    return False
                await c.kv.put("/bench/quorum-probe", "x", timeout=1.0)
                return True
        except (etcd_errors.EtcdError, ValueError, OSError):
            return False

    async def _ready(self) -> bool:
        for pod in naming.pods(self.db, 3):
            if not naive.pod_ready(await self.sc.k.get("v1", "Pod", self.sc.namespace, pod)):
                return False
        return True

    async def _voters(self) -> bool:
        try:
            async with await client_for(self.sc, self.db, timeout=1.0) as c:
                listed = await c.members(timeout=1.0)
        except (etcd_errors.EtcdError, ValueError, OSError):
            return False
        return sorted(m.name for m in listed) == naming.pods(self.db, 3) and not any(m.is_learner for m in listed)

    async def run(self) -> None:
        while self.voters_ready is None:
            phase = await self.sc.etcd_phase(self.db) or ""
            if not self.phases or self.phases[-1] != phase:
                self.phases.append(phase)
            ok = await self._writable()  # once writable, a put every pass: does it stay writable?
            now = time.monotonic()
            if ok:
                if self.writable is None:
                    self.writable = now - self.started[0]
                else:
                    self.max_gap = max(self.max_gap, now - self.last_ok)
                self.last_ok = now
            elif self.writable is not None:
                self.failed_after += 1
            if self.writable is not None and self.voters is None and await self._voters():
                self.voters = time.monotonic() - self.started[0]
            if self.voters is not None and await self._ready():
                self.voters_ready = time.monotonic() - self.started[0]
                self.max_gap = max(self.max_gap, time.monotonic() - self.last_ok)
            await asyncio.sleep(0.2)


def _rejoins(timeline: Sequence[tuple[float, str, str]]) -> dict[str, float]:
    """Per member brought back: seconds from ``EtcdMemberAdded--<pod>`` to ``EtcdLearnerPromoted--<pod>`` True (its
    pod started empty, caught up from the survivor as a learner, promoted)."""
    added: dict[str, float] = {}
    out: dict[str, float] = {}
    for at, type_, status in sorted(timeline):
        step, _, pod = type_.partition(constants.PER_POD_SEPARATOR)
        if status != constants.TRUE or not pod:
            continue
        if step == constants.STEP_ETCD_MEMBER_ADDED:
            added.setdefault(pod, at)
        elif step == constants.STEP_ETCD_LEARNER_PROMOTED and pod in added:
            out[pod] = round(at - added[pod], 2)
    return out


async def quorum_recovery(sc: scenario.Scenario, say: Printer, *, megabytes: int,
                          printed: Sequence[tuple[float, str]] = ()) -> list[Record]:
    """The floor (every member pod deleted at once, data kept) on the filled cluster, then two of three members
    lost and ``RecoverFromQuorumLoss`` of the survivor; the operator of ``sc`` runs with ``--quorum-loss-after``
    :data:`LOSS_AFTER_S`; ``printed``: what ``sc`` prints, timed (the request's conditions as they change)."""
    db = "quorum-data"
    await sc.create_etcd(db)
    await sc.wait_ready(db, timeout=120)
    filled = await fill(sc, db, megabytes)
    size, in_use = await db_size(sc, db)
    say(f"\n== RecoverFromQuorumLoss on {db}: {megabytes} × 1 MB written in {filled:.1f}s; db size "
        f"{size / 1e6:.1f} MB; QuorumLost after {LOSS_AFTER_S:g} s without a quorum")
    common = {"data_mb": megabytes, "fill_s": round(filled, 1), "db_size_bytes": size, "db_size_mb": _mb(size),
              "db_size_in_use_bytes": in_use, "quorum_loss_after_s": LOSS_AFTER_S}
    floor = await _restart_all(sc, db, say, common, key=QUORUM, operation="RecoverFromQuorumLoss")
    floor["outage_s"] = floor.get("writable_s")  # from the deletion, when the quorum went

    async def settled() -> bool:  # the floor's short loss of quorum is forgotten (status.quorumLoss.since with it)
        status = await _etcd_status(sc, db)
        return status.get("phase") == constants.DB_PHASE_READY and not status.get("quorumLoss")

    await sc.wait_for("the Etcd Ready with no quorumLoss", settled, timeout=120)
    return [await _engine_recovery(sc, db, say, common, printed), floor]


async def _engine_recovery(sc: scenario.Scenario, db: str, say: Printer, common: Record,
                           printed: Sequence[tuple[float, str]]) -> Record:
    name, first, second = f"{db}-recover", f"{db}-1", f"{db}-2"
    # The writer before the loss: 100 acknowledged puts on three members, then one member lost and 100 more on
    # the two left; it stops before the second loss, so every write it was told about is committed on both
    # remaining members (an entry past the survivor's commit index is dropped by --force-new-cluster).
    async with sc.live(db) as (w, _mon):
        await w.wait_ok(100, timeout=60)
        await _break_member(sc, first)
        await w.wait_ok(100, timeout=60)
    written = w.result
    await asyncio.sleep(1.0)  # heartbeats carry the last commit index to the follower
    async with await client_for(sc, db, timeout=5.0) as c:
        views = {n: v for n, v in (await c.statuses(timeout=5.0)).items() if isinstance(v, etcd_client.MemberStatus)}
    revision = max((v.revision for v in views.values()), default=0)
    before = await _hashes(sc, db, revision)
    await _break_member(sc, second)
    lost_at = time.monotonic()
    seen: float | None = None
    status: dict[str, Any] = {}
    while True:
        status = await _etcd_status(sc, db)
        now = time.monotonic() - lost_at
        if seen is None and status.get("quorumLoss"):
            seen = now
        if conditions.is_true(status.get("conditions"), constants.COND_QUORUM_LOST):
            break
        if now > 120:
            raise TimeoutError("QuorumLost not True within 120 s of the second member's loss")
        await asyncio.sleep(0.2)
    quorum_lost = time.monotonic() - lost_at
    survivor = str((status.get("quorumLoss") or {}).get("survivor") or "")
    message = (conditions.get_condition(status.get("conditions"), constants.COND_QUORUM_LOST) or {}).get("message", "")
    if not survivor:
        raise RuntimeError(f"QuorumLost names no survivor: {message}")
    timeline: list[tuple[float, str, str]] = []
    submitted = [time.monotonic()]
    probe = _RecoveryProbe(sc, db, submitted)
    watcher = asyncio.create_task(probe.run())
    error, req = "", None
    try:
        req = await _request(sc, name, db, constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS, timeline, submitted,
                             watch_timeout=420, recoverFromQuorumLoss={"confirmMember": survivor}, timeout="5m")
    except (TimeoutError, kube.KubeError) as err:
        error = f"{type(err).__name__}: {err}"
    successful = time.monotonic() - submitted[0]
    phase, failure = _outcome(req, error)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(watcher), timeout=60)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    with contextlib.suppress(TimeoutError):
        await sc.wait_ready(db, timeout=120)
    checked = await sc.consistency(db, w, timeout=60.0)  # every acknowledged write; HashKV now, on every member
    after = await _hashes(sc, db, revision)
    listed: list[etcd_client.Member] = []
    with contextlib.suppress(etcd_errors.EtcdError, ValueError):
        async with await client_for(sc, db, timeout=5.0) as c:
            listed = await c.members(timeout=5.0)
    size_after = 0
    with contextlib.suppress(etcd_errors.EtcdError, ValueError):
        size_after, _ = await db_size(sc, db)
    agreed_before = len(set(before.values())) == 1
    rec = _base(QUORUM, "RecoverFromQuorumLoss", bench.ENGINE, outcome=phase, ok=phase == constants.PHASE_SUCCESSFUL,
                failure=failure, survivor=survivor, quorum_lost_message=message,
                loss_seen_s=_round(seen), quorum_lost_s=round(quorum_lost, 2),
                writable_s=_round(probe.writable), voters_s=_round(probe.voters), ready_s=_round(probe.voters_ready),
                successful_s=round(successful, 2), wall_s=round(successful, 2),
                max_put_gap_after_writable_s=round(probe.max_gap, 2) if probe.writable is not None else None,
                puts_failed_after_writable=probe.failed_after,
                outage_s=_round(submitted[0] - lost_at + probe.writable) if probe.writable is not None else None,
                etcd_phases=probe.phases, steps=_steps(timeline, submitted[0]), rejoin_s=_rejoins(timeline),
                leader_moves=await sc.leader_moves(name),
                members_after=sorted(f"{m.name}{' (learner)' if m.is_learner else ''}" for m in listed),
                writes_before_loss=written.ok if written else None,
                writes_failed_before_loss=written.failed if written else None,
                hashkv_loss_revision=revision, hashkv_before_loss=before, hashkv_after_at_loss_revision=after,
                hashkv_matches_before_loss=(agreed_before and len(after) == 3
                                            and set(after.values()) == set(before.values())),
                restored_db_size_bytes=size_after, **common, **checked.record())
    # the request's conditions as the 0.2 s poll saw them change (s from the submission), for reading the steps
    rec["condition_log"] = [f"{at - submitted[0]:.1f} {' '.join(line.split())}"[:240] for at, line in printed
                            if at >= submitted[0]][:80]
    say(_quorum_line(rec))
    return rec


# --- the command's part ---------------------------------------------------------------------------------------


async def bench_data(workdir: pathlib.Path, keys: Sequence[str], say: Printer, *, control_plane: str,
                     megabytes: int = 100) -> list[Record]:
    """The data scenarios in ``keys``: rotate-auth and backup-restore in one sandbox (the S3 server only when
    backup-restore runs), quorum-recovery in a sandbox of its own, whose operator runs with ``--quorum-loss-after``
    :data:`LOSS_AFTER_S`. ``scenario_elapsed_s``: the time of the sandbox a record was measured in."""
    from opsmanager_sandbox.objectstore import ObjectStoreServer

    records: list[Record] = []
    started = time.monotonic()
    if {"rotate-auth", "backup-restore"} & set(keys):
        part: list[Record] = []
        sandbox_dir = workdir / f"data-{control_plane}"
        async with scenario.Scenario(sandbox_dir, printer=lambda _line: None, namespace="bench",
                                     control_plane=control_plane, etcd_version=scenario.BUILT_ETCD_VERSION) as sc:
            if "rotate-auth" in keys:
                part += await _guarded("rotate-auth", "RotateAuth", say, rotate_auth(sc, say, megabytes=megabytes))
            if "backup-restore" in keys:
                async with ObjectStoreServer(sandbox_dir / "s3", buckets=(BUCKET,)) as store:
                    part += await _guarded("backup", "Backup", say,
                                           backup_restore(sc, store, sandbox_dir, say, megabytes=megabytes))
        bench.drop_volumes(sandbox_dir)
        shutil.rmtree(sandbox_dir / "s3", ignore_errors=True)  # the store's data (~120 MB per snapshot) and log
        for record in part:
            record.update(scenario_elapsed_s=round(time.monotonic() - started, 1))
        records += part
    if QUORUM in keys:
        part_started = time.monotonic()
        sandbox_dir = workdir / f"quorum-{control_plane}"
        printed: list[tuple[float, str]] = []
        async with scenario.Scenario(sandbox_dir, printer=lambda line: printed.append((time.monotonic(), line)),
                                     namespace="bench", control_plane=control_plane,
                                     etcd_version=scenario.BUILT_ETCD_VERSION,
                                     operator_args=["--quorum-loss-after", f"{LOSS_AFTER_S:g}"]) as sc:
            part = await _guarded(QUORUM, "RecoverFromQuorumLoss", say,
                                  quorum_recovery(sc, say, megabytes=megabytes, printed=printed))
        bench.drop_volumes(sandbox_dir)
        for record in part:
            record.update(scenario_elapsed_s=round(time.monotonic() - part_started, 1))
        records += part
    elapsed = time.monotonic() - started
    say(f"\ndata rows ({', '.join(keys)}) took {elapsed:.0f} s")
    for record in records:
        record.update(control_plane=control_plane, etcd_version=scenario.BUILT_ETCD_VERSION)
    return records


async def _guarded(key: str, operation: str, say: Printer, run: Any) -> list[Record]:
    """A part that failed is a record saying so (the other part still runs)."""
    try:
        return list(await run)
    except (RuntimeError, TimeoutError, kube.KubeError, etcd_errors.EtcdError, OSError, ValueError) as err:
        say(f"   -> {operation}: {type(err).__name__}: {err}")
        return [_base(key, operation, bench.ENGINE, outcome=f"{type(err).__name__}: {err}"[:500], ok=False)]


def problems(records: Sequence[Record]) -> list[str]:
    """Our rows held to the bar: RotateAuth under the writer that follows the Secret and Backup lose no write (0
    failed, every acknowledged write read back, HashKV agreeing), RotateAuth restarts no pod and changes the
    password; Restore is Successful with HashKV equal to what the backup recorded and a new cluster ID;
    RecoverFromQuorumLoss is Successful, writable, with three voters Ready, every write acknowledged before the loss
    read back, HashKV agreeing and, at the loss's revision, equal to what the members had before it."""
    out = []
    for r in records:
        if r.get("strategy") != bench.ENGINE or r.get("scenario") not in RECORD_SCENARIOS:
            continue
        if r["scenario"] in ("rotate-auth", "backup"):
            if (not r.get("ok") or r.get("writes_failed") or r.get("read_back_ok") is not True
                    or r.get("hashkv_agree") is not True or r.get("pods_recreated")
                    or r.get("password_changed") is False):
                out.append(f"{r['operation']}: {r['outcome']}, {r.get('writes_failed')} failed writes, all writes "
                           f"read back: {r.get('read_back_ok')}, HashKV agrees: {r.get('hashkv_agree')}, pods "
                           f"recreated: {r.get('pods_recreated')}, password changed: {r.get('password_changed')}")
        elif r["scenario"] == QUORUM:
            if (not r.get("ok") or r.get("writable_s") is None or r.get("ready_s") is None
                    or r.get("read_back_ok") is not True or r.get("hashkv_agree") is not True
                    or r.get("hashkv_matches_before_loss") is not True):
                out.append(f"RecoverFromQuorumLoss: {r['outcome']}, writable after {r.get('writable_s')}s, three "
                           f"voters Ready after {r.get('ready_s')}s, all writes read back: {r.get('read_back_ok')} "
                           f"(missing {r.get('missing_writes')}), HashKV agrees: {r.get('hashkv_agree')}, HashKV at "
                           f"the loss = before it: {r.get('hashkv_matches_before_loss')}")
        elif not r.get("ok") or r.get("hashkv_matches_backup") is False or r.get("new_cluster_id") is False:
            out.append(f"Restore: {r['outcome']}, HashKV equal to the backup's: {r.get('hashkv_matches_backup')}, "
                       f"new cluster ID: {r.get('new_cluster_id')}")
    return out


# --- the markdown page ----------------------------------------------------------------------------------------


def _line(r: Record) -> str:
    return (f"   -> {r['method']}: {r['outcome']}; writes failed {r.get('writes_failed')}/{r.get('writes_total')}; "
            f"max stall {r.get('max_write_stall_s')}s; elections {r.get('elections')}; wall {r.get('wall_s')}s; "
            f"db {r.get('db_size_mb')} MB" + (f"; snapshot {r['snapshot_mb']} MB in {r['seconds']}s "
                                            f"({r['throughput_mb_s']} MB/s) from {r.get('member')}"
                                            if r.get("snapshot_mb") else "")
            + f"; read back {r.get('read_back_ok')}; HashKV {r.get('hashkv_agree')}")


def _restore_line(r: Record) -> str:
    return (f"   -> {r['method']}: {r['outcome']}; writable after {r.get('writable_s')}s, Ready and writable after "
            f"{r.get('ready_s')}s, Successful after {r.get('successful_s', '–')}s; db {r.get('db_size_mb')} MB; "
            f"HashKV = the backup's: {r.get('hashkv_matches_backup', '–')}; new cluster ID: "
            f"{r.get('new_cluster_id', '–')}")


def _quorum_line(r: Record) -> str:
    return (f"   -> {r['method']}: {r['outcome']}; QuorumLost {r.get('quorum_lost_s')}s after the loss (bound "
            f"{r.get('quorum_loss_after_s')}s), survivor {r.get('survivor')}; writable after {r.get('writable_s')}s, "
            f"three voters after {r.get('voters_s')}s, their pods Ready after {r.get('ready_s')}s, Successful after {r.get('successful_s')}s; outage "
            f"{r.get('outage_s')}s; db {r.get('db_size_mb')} MB; read back {r.get('read_back_ok')}; HashKV "
            f"{r.get('hashkv_agree')}, at the loss = before: {r.get('hashkv_matches_before_loss')}")


ORDER = {"rotate-auth": (bench.ENGINE, IDLE, PASSWORD_ONLY, NAIVE_PASSWORD), "backup": (bench.ENGINE, BARE_SNAPSHOT),
         "restore": (bench.ENGINE, RESTART_ALL), QUORUM: (bench.ENGINE, RESTART_ALL)}


def _rows(records: Sequence[Record], key: str) -> list[Record]:
    order = ORDER[key]
    return sorted((r for r in records if r.get("scenario") == key),
                  key=lambda r: (order.index(r["strategy"]) if r.get("strategy") in order else len(order),
                                 bench.control_plane_of(r)))


def _c(value: Any) -> Any:
    return "–" if value is None else value


def _stall(r: Record) -> str:
    value = r.get("max_write_stall_s")
    return "–" if value is None else f"{value:.3f}"


TEXT = """
`e2e/databench.py` (`--scenario data-ops`, or `rotate-auth` / `backup-restore` / `quorum-recovery`), on the {plane}
control plane (the one the end-to-end tests prove these types on), etcd {etcd}, one run. Each part starts from a fresh 3-member Etcd
filled with {mb} values of 1 MB of random bytes by one client, one put after the other ({fill}), so the data size
beside each row is measured, not assumed: *db size* is the largest member's backend file (etcd's Status `dbSize`).
The live writer, the leader monitor and the no-loss check after each row are the ones of the table above
(`e2e/bench.py` `measure`); on a cluster with authentication the writer logs in as `root` with what it reads from
the auth Secret.
"""

ROTATE_TEXT = """
*RotateAuth* restarts nothing: `UpdateCredential` stages the new password in the auth Secret as `password.next`,
`EtcdCredentialApplied` changes it on etcd and proves it by fresh logins, `UpdateDatabase` moves it to `password`
(the old one to `password.prev`). On a password change etcd drops every token of `root`, so every client must log
in again. The four windows run on one cluster, in the order of the table: a rotation restarts no pod, so nothing of
one window carries into the next (*pods recreated* checks it). Each window is the action plus 2 s, so the writer's
reaction to the change is counted inside it; *wall s* is the action alone (ours: submission → `Successful`,
observed every 0.2 s). The writer re-reads the Secret every second and at once after a write failed on every
member; *credential changes* counts the new passwords it took up.

The baselines, and why these: *no operation* is the same writer alone on the same cluster for as long as our
window, which gives the stall this loaded 2-core machine shows with no change at all, to read ours against.
*A client that re-reads only `password`* runs our very request, and shows what the staged `password.next` asks of
clients. *naive* is the change without the protocol: `etcdctl user passwd root`, then the Secret edited, with a
client that has only `password` to follow. They cost seconds on a cluster that exists anyway. A Restart-based
rotation would not be a baseline: etcd keeps its users in its data, and a restart changes no password.

What the numbers say: in each of the three rotations the writer has one op whose logins with the old password fail
on every member. It re-reads the Secret and logs in again with the new password (its `writer_notes` in the JSON
show the `AuthFailed` tries). That costs about 0.3 s of stall, against a few hundredths with no operation. No
write failed in any of the three. The staged `password.next` makes no difference in this run: our request
rewrites `password` in the same pass in which etcd takes the new one, and the naive script edits the Secret one
API call after etcd, so both windows are shorter than the writer's immediate re-read after a failed op. The staged
password protects a client that re-reads the Secret inside that window, or a rotation interrupted between the two
steps (an operator restart), and this run includes neither.
"""

BACKUP_TEXT = """
*Backup*: `SnapshotUploaded` streams a snapshot from the most caught-up follower to the operator's disk and checks
it (etcd's SHA-256 trailer, the bbolt layout, its revision). It records HashKV at that revision and uploads the file
with its metadata to SeaweedFS (`weed mini` on loopback, the store of the end-to-end tests). `SnapshotsPruned`
applies the retention. *Duration* is `status.snapshot.seconds` (stream, checks, HashKV and upload) and *MB/s* is
the snapshot's size ÷ that duration, as in the `SnapshotUploaded` message. *Request wall* runs from submission to
`Successful`. The baseline moves the same bytes with no safeguard: the stream `etcdctl snapshot save` takes, from
the leader (what it gets when pointed at the cluster's first endpoint, or a Service that lands there), then one
boto3 upload. It gives the machine's floor for the duration, and the stall the writer sees while the leader streams
its whole database. What ours adds on top of it is the checks and the HashKV of the whole store at the snapshot's
revision.
"""

RESTORE_TEXT = """
*Restore* of our backup above (`restore.source` = its key): `SnapshotVerified` downloads and checks the snapshot.
`MembersRestored` writes the plan for the members' `restore` init container and replaces every member pod at once;
each pod downloads the snapshot, checks it and runs `etcdutl snapshot restore` with a new cluster token.
`RestoreVerified` compares HashKV at the snapshot's revision on every member with the backup's, and
`UpdateDatabase` clears the plan. Times run from the submission (polled every 0.2 s). *Writable*: every member pod
is a new one, and a fresh client's put is acknowledged by members that all report one cluster ID, a new one for
the restore. *Ready and writable*: every new pod is Ready as well, and, for ours, the Etcd's phase is `Ready`.
*Successful*: the request's phase. A restore is an outage by design, since every member is replaced and a writer
has nothing to write to, so the writer does not run; the outage is the *writable* time.

The floor beside it is the same cluster with every member pod deleted at once and its data kept on disk, measured
the same way (the Etcd is paused, as for every naive strategy, so its phase is not waited for). Any restore that
replaces every member pays at least this before it moves a byte. The difference between the two rows is the
download, the checks and `etcdutl`.
"""

QUORUM_TEXT = """
*RecoverFromQuorumLoss*, in a sandbox of its own: its operator runs with `--quorum-loss-after {after:g}` (the
default is 60 s, so that a rolling restart or a node reboot is never taken for a loss; the bench shortens the bound
and measures what comes on top of it). On the filled cluster the writer puts 100 keys on three members; one member
is lost (its data directory replaced by a file, its etcd SIGKILLed, so that it crash-loops, as in
`tests/e2e/test_quorum_recovery.py`); the writer puts 100 more on the two left and stops, and HashKV is taken at
that revision on both. The writer stops before the second loss on purpose: `--force-new-cluster` keeps what the
survivor knows to be committed, and a write the leader acknowledged in the last heartbeat before it died may not be
known as committed there yet; this row does not measure that window. Then the second member is lost the same way.
*Loss → QuorumLost* runs from there to the Etcd's `QuorumLost=True` (polled every 0.2 s): the provisioner's status
pass (every second) starts the count at the first pass that sees no quorum and turns the condition True at the
first pass after the bound. The request confirming the survivor the condition names goes in at once; the times
after it run from its submission, polled every 0.2 s. *Writable*: the first put a fresh client gets acknowledged
(tried once a member answers Status naming a leader): the survivor alone, restarted with `--force-new-cluster`.
From then on every poll puts again; *longest gap between puts after* is the longest time between two acknowledged
puts until the pods are Ready. *Three voters*: MemberList has the three members, each started and none a learner:
the two lost members came back empty, each caught up from the survivor as a learner (the whole store, {db} MB)
and was promoted. *Pods Ready*: the three pods Ready as well. *Successful*: the request's phase. *Outage*: from the second
loss to writable, with no time for a person to read the condition. After the request every write the writer was
told about is read back, HashKV is compared on the three members, and HashKV at the revision taken before the loss
must equal what the members had then: the store up to the loss is what it was, bit for bit.

The floor beside it is the same cluster, before the loss, with every member pod deleted at once and the data kept
on disk (the Etcd paused), measured as the Restore floor above: from the deletion to a put acknowledged by the new
pods, and to the three pods Ready. It is what any recovery that restarts members pays at least, and here the
quorum is gone from the deletion on, so its *writable* is the outage of a loss nobody has to repair. The manual
etcd procedure (stop the survivor, restart it by hand with `--force-new-cluster`, `member add` the others and start
them empty with `--initial-cluster-state existing`) is not scripted beside it: in this sandbox that means rewriting
the StatefulSet's command and volumes by hand, which is writing the operator's step a second time, and its time
would be the typing speed of whoever runs it. The floor is the part of our time that no procedure avoids.

What the numbers say: most of the outage is the detection. The first status pass to see no quorum comes about 3 s
after the loss (a member counts as without a quorum once it names no leader or its linearizable read times out),
and `QuorumLost` turns True at the first pass after the bound: with the default 60 s a loss would be declared about
63 s after it happens. After the request the survivor takes writes within 2 s, the floor's ~1 s plus the update of
the StatefulSet and one pod restart; its second restart, without the flag, stops writes once more for about 2 s
(the longest gap). `MembersRejoined` is most of the time to `Successful`, and most of it is etcd's own gate, not the
copy: each learner catches up the whole store in about a second, but etcd refuses the second `MemberAdd` (`unhealthy
cluster`: the leader must have been connected to every voting member for the last 5 s) until the member promoted
just before has been connected that long. Any procedure that adds the members back one at a time waits for it. The
last pod turns Ready after `Successful`: a learner's `/readyz` fails (`non_learner`), and it is the kubelet's next
readiness probe after the promotion that passes. One run is not a distribution: an earlier run of the same steps
(before the per-condition log was recorded) took 31 s to `Successful`, 14 s of the difference in the second learner,
which was promoted 15 s after it was added although its etcd log shows it had applied the whole log within 1.2 s of
its start; the leader's peer stream to it was down for 5 s of that, and the rest this row does not explain.
"""


def markdown_lines(records: Sequence[Record]) -> list[str]:
    """The section of ``docs/benchmarks.md`` for the data rows."""
    rows = [r for r in records if r.get("scenario") in RECORD_SCENARIOS]
    out = ["## Data operations: RotateAuth, Backup, Restore, RecoverFromQuorumLoss on a ~100 MB cluster", ""]
    if not rows:
        return [*out, "Not measured yet (`python -m e2e.bench --scenario data-ops --json docs/benchmarks.json`).", ""]
    first = rows[0]
    fills = ", ".join(f"{r['operation']} {r['fill_s']} s" for r in rows
                      if r.get("strategy") == bench.ENGINE and r.get("fill_s") and r["scenario"] != "restore")
    took = next((r.get("scenario_elapsed_s") for r in rows if r["scenario"] != QUORUM), None)
    out += TEXT.strip("\n").format(plane=bench.control_plane_of(first), etcd=first.get("etcd_version", "–"),
                                   mb=first.get("data_mb", "–"), fill=fills or "–").splitlines()
    if took:
        out += [f"These rows took **{took:.0f} s** of the bench (sandbox and S3 server start, two clusters and fills, "
                "every row and check)."]
    out += [""]
    auth_rows = _rows(records, "rotate-auth")
    if auth_rows:
        out += ["### RotateAuth: the root password changed live", "",
                *bench._table(("strategy", "client", "control plane", "outcome", "db size MB", "writes failed/total",
                               "max write stall s", "unplanned elections", "wall s", "pods recreated",
                               "credential changes", "all writes read back", "HashKV agrees"),
                              [(r["method"], r.get("client", "–"), bench.control_plane_of(r), r["outcome"],
                                _c(r.get("db_size_mb")), f"{_c(r.get('writes_failed'))}/{_c(r.get('writes_total'))}",
                                _stall(r), _c(r.get("elections")), _c(r.get("wall_s")),
                                _c(r.get("pods_recreated")), _c(r.get("credential_changes")), r.get("read_back_ok"),
                                r.get("hashkv_agree")) for r in auth_rows]),
                "", *ROTATE_TEXT.strip("\n").splitlines(), ""]
    backups = _rows(records, "backup")
    if backups:
        out += ["### Backup of the ~100 MB database, under the writer", "",
                *bench._table(("strategy", "control plane", "outcome", "db size MB", "snapshot MB", "taken from",
                               "duration s", "MB/s", "request wall s", "writes failed/total", "max write stall s",
                               "unplanned elections", "all writes read back", "HashKV agrees"),
                              [(r["method"], bench.control_plane_of(r), r["outcome"], _c(r.get("db_size_mb")),
                                _c(r.get("snapshot_mb")),
                                f"{_c(r.get('member'))} ({'leader' if r.get('from_leader') else 'follower'})",
                                _c(r.get("seconds")), _c(r.get("throughput_mb_s")),
                                _c(r.get("wall_s")) if r.get("strategy") == bench.ENGINE else "–",
                                f"{_c(r.get('writes_failed'))}/{_c(r.get('writes_total'))}",
                                _stall(r), _c(r.get("elections")), r.get("read_back_ok"),
                                r.get("hashkv_agree")) for r in backups]),
                "", *BACKUP_TEXT.strip("\n").splitlines(), ""]
        out += [f"- {r['method']}: `SnapshotUploaded`: {r['uploaded_message']}" for r in backups
                if r.get("uploaded_message")]
        out += [f"- {r['method']}: stream {r['stream_s']} s + upload {r['upload_s']} s" for r in backups
                if r.get("stream_s") is not None]
        out += [""]
    restores = _rows(records, "restore")
    if restores:
        out += ["### Restore of that snapshot", "",
                *bench._table(("strategy", "control plane", "outcome", "db size MB (snapshot MB)", "writable s",
                               "Ready and writable s", "Successful s", "HashKV = the backup's", "new cluster ID"),
                              [(r["method"], bench.control_plane_of(r), r["outcome"],
                                f"{_c(r.get('db_size_mb'))} ({_c(r.get('snapshot_mb'))})", _c(r.get("writable_s")),
                                _c(r.get("ready_s")), _c(r.get("successful_s")), _c(r.get("hashkv_matches_backup")),
                                _c(r.get("new_cluster_id"))) for r in restores]),
                "", *RESTORE_TEXT.strip("\n").splitlines(), ""]
        out += [f"- {r['method']}: steps (s from the previous one turning True; 0.0: seen in the same 0.2 s poll): "
                + ", ".join(f"{n} {s:.1f}" for n, s in r["steps"])
                + (f"; the Etcd's phases seen while polling: {' → '.join(p for p in r.get('etcd_phases', []) if p)}"
                   if r.get("etcd_phases") else "") for r in restores if r.get("steps")]
        out += [""]
    quorum = _rows(records, QUORUM)
    if quorum:
        engine = next((r for r in quorum if r.get("strategy") == bench.ENGINE), quorum[0])
        out += ["### RecoverFromQuorumLoss: two of three members lost, recovered from the survivor", ""]
        if engine.get("scenario_elapsed_s"):
            out += [f"This part took **{engine['scenario_elapsed_s']:.0f} s** of the bench (its sandbox's start, the "
                    "cluster and its fill, the floor, the loss, the recovery and the checks).", ""]
        out += [*bench._table(("strategy", "control plane", "outcome", "db size MB", "loss → QuorumLost s (bound)",
                               "writable s", "longest gap between puts after s", "three voters s",
                               "three voters, pods Ready s", "Successful s", "outage s",
                               "writes before the loss (failed)", "all writes read back", "HashKV agrees",
                               "HashKV at the loss = before"),
                              [(r["method"], bench.control_plane_of(r), r["outcome"], _c(r.get("db_size_mb")),
                                f"{r['quorum_lost_s']} ({_c(r.get('quorum_loss_after_s'))})"
                                if r.get("quorum_lost_s") is not None else "–",
                                _c(r.get("writable_s")), _c(r.get("max_put_gap_after_writable_s")),
                                _c(r.get("voters_s")), _c(r.get("ready_s")), _c(r.get("successful_s")),
                                _c(r.get("outage_s")),
                                f"{r['writes_before_loss']} ({_c(r.get('writes_failed_before_loss'))})"
                                if r.get("writes_before_loss") is not None else "–",
                                _c(r.get("read_back_ok")), _c(r.get("hashkv_agree")),
                                _c(r.get("hashkv_matches_before_loss"))) for r in quorum]),
                "", *QUORUM_TEXT.strip("\n").format(after=engine.get("quorum_loss_after_s") or LOSS_AFTER_S,
                                                     db=_c(engine.get("db_size_mb"))).splitlines(), ""]
        for r in quorum:
            if r.get("quorum_lost_message"):
                out += [f"- {r['method']}: `QuorumLost` (the status pass saw no quorum {r.get('loss_seen_s')} s "
                        f"after the loss): {r['quorum_lost_message']}"]
            if r.get("steps"):
                out += [f"- {r['method']}: steps (s from the previous one turning True; 0.0: seen in the same 0.2 s "
                        "poll): " + ", ".join(f"{n} {s:.1f}" for n, s in r["steps"])
                        + ("; each member back, from added as a learner to promoted: "
                           + ", ".join(f"{pod} {sec} s" for pod, sec in sorted(r["rejoin_s"].items()))
                           if r.get("rejoin_s") else "")
                        + f"; MoveLeader calls: {_c(r.get('leader_moves'))}; members after: "
                        + ", ".join(r.get("members_after") or ["–"])
                        + ("; every condition as it changed: `condition_log` in the JSON" if r.get("condition_log")
                           else "")]
            if r.get("failure"):
                out += [f"- {r['method']}: failed: {r['failure']}"]
        out += [""]
    return out


__all__ = ["DATA_SCENARIOS", "RECORD_SCENARIOS", "PasswordOnlyLogin", "bench_data", "fill", "markdown_lines",
           "problems", "select"]
