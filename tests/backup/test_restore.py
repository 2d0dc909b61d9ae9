"""opsmanager.backup.restore and ``opsmanager restore-member``: a member's data dir replaced by a snapshot.

Fast (no process): the plan's JSON and its checks, where etcdutl is found, the etcdutl command line, and the
member-side flow with the download and etcdutl replaced — the swap, the marker, the no-op, and the old data dir left
as it was on every failure, including a run that died half-way through the swap.

Slow (real processes): a 3-member etcd 3.6 on loopback with a few thousand keys, snapshotted with etcdctl into the
SeaweedFS fixture; ``python -m opsmanager restore-member`` run once per member on the old cluster's data dirs; three
fresh etcd processes on them form a new cluster (a new cluster ID) holding exactly the snapshot's keys at the
snapshot's revision. Then: a second run is a no-op that keeps what etcd wrote since; a corrupted, a truncated, a
missing object and wrong credentials each fail with one clear line, the data dir untouched; and restore-member runs
as the init container of a pod of the sandbox's kubelet (the etcdutl the sandbox names and mounts for it).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from opsmanager.backup import restore, snapshot
from tests.backup.test_content_revision import etcd_db

SHA_A = "a" * 64


def plan_dict(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "r-1", "bucket": "backups", "key": "backups/demo/etcd/20261202T160455Z-rev42.db",
        "endpoint": "http://127.0.0.1:9000", "region": "us-east-1", "prefix": "backups", "sha256": SHA_A,
        "revision": 42, "initialCluster": "m0=http://127.0.0.1:1,m1=http://127.0.0.1:2",
        "token": "demo-etcd-r-1", "peerURLs": {"m0": "http://127.0.0.1:1", "m1": "http://127.0.0.1:2"},
        "dataDir": str(tmp_path / "vol" / "data"), "etcdVersion": "3.6.16"}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def make_plan(tmp_path: Path, **changes: Any) -> restore.RestorePlan:
    return restore.RestorePlan.from_json(json.dumps(plan_dict(tmp_path, **changes)))


# -- the plan ---------------------------------------------------------------------------------------------------------


def test_the_plan_round_trips_with_camel_case_keys(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, caFile="/etc/opsmanager/store-ca/ca.crt")
    text = plan.to_json()
    assert set(json.loads(text)) == {"id", "bucket", "key", "endpoint", "region", "prefix", "caFile", "sha256",
                                     "revision", "initialCluster", "token", "peerURLs", "dataDir", "etcdVersion"}
    assert restore.RestorePlan.from_json(text) == plan
    assert plan.etcd_minor == (3, 6) and plan.initial_cluster_map == {"m0": ["http://127.0.0.1:1"],
                                                                      "m1": ["http://127.0.0.1:2"]}
    built = restore.RestorePlan(id="r-1", bucket="b", key="k", endpoint="https://s3", sha256=SHA_A, revision=1,
                                initial_cluster="a=http://h:2380", token="t", peer_urls={"a": "http://h:2380"},
                                data_dir="/var/lib/etcd/data", etcd_version="v3.5.35")
    assert json.loads(built.to_json())["peerURLs"] == {"a": "http://h:2380"} and "caFile" not in built.to_json()
    assert built.etcd_minor == (3, 5) and built.prefix == "" and built.region == "us-east-1"


@pytest.mark.parametrize(("changes", "words"), [
    ({"sha256": "ABC"}, "sha256: Value error, 'ABC' is not 64 lower-case hex digits"),
    ({"revision": None}, "revision: Field required"),
    ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
    ({"dataDir": "data"}, "dataDir: Value error, 'data': an absolute path"),
    ({"dataDir": "/"}, "an absolute path below a directory"),
    ({"etcdVersion": "latest"}, "'latest' is not an etcd version"),
    ({"id": "../x"}, "id: Value error"),
    ({"endpoint": "s3.example.com"}, "endpoint: String should match pattern"),
    ({"peerURLs": {"m0": "http://127.0.0.1:1"}}, "initialCluster names ['m0', 'm1'], peerURLs ['m0']"),
    ({"peerURLs": {"m0": "http://127.0.0.1:1", "m1": "http://127.0.0.1:3"}},
     "peerURLs['m1'] is 'http://127.0.0.1:3', initialCluster lists 'm1' with ['http://127.0.0.1:2']"),
    ({"initialCluster": "m0=http://127.0.0.1:1,m1"}, "'m1' is not name=http(s)://host:port"),
    ({"key": "other/demo/etcd/x.db"}, "key 'other/demo/etcd/x.db' is not under prefix 'backups'"),
])
def test_a_bad_plan_names_the_field(tmp_path: Path, changes: dict[str, Any], words: str) -> None:
    with pytest.raises(restore.PlanError) as caught:
        make_plan(tmp_path, **changes)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_load_plan(tmp_path: Path) -> None:
    assert restore.load_plan(tmp_path / "absent.json") is None
    (tmp_path / "plan.json").write_text(make_plan(tmp_path).to_json())
    assert restore.load_plan(tmp_path / "plan.json") == make_plan(tmp_path)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(restore.PlanError, match="Invalid JSON"):
        restore.load_plan(tmp_path / "bad.json")


# -- etcdutl ----------------------------------------------------------------------------------------------------------


def test_find_etcdutl(tmp_path: Path) -> None:
    tool = tmp_path / "etcdutl"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert restore.find_etcdutl((3, 6), {"OPSMANAGER_ETCDUTL_3_6": str(tool)}) == str(tool)
    with pytest.raises(restore.RestoreFailed) as caught:
        restore.find_etcdutl((3, 7), {"OPSMANAGER_ETCDUTL_3_6": str(tool)})
    assert str(caught.value) == (
        "no etcdutl for etcd 3.7: $OPSMANAGER_ETCDUTL_3_7 is not set and /usr/local/lib/opsmanager/etcd-3.7/etcdutl "
        "does not exist; run the operator's image (it ships the etcdutl of every supported etcd minor) or set "
        "$OPSMANAGER_ETCDUTL_3_7")
    with pytest.raises(restore.RestoreFailed, match=r"\$OPSMANAGER_ETCDUTL_3_6=/nope is not an executable file and "):
        restore.find_etcdutl((3, 6), {"OPSMANAGER_ETCDUTL_3_6": "/nope"})


def test_the_etcdutl_command_keeps_revisions(tmp_path: Path) -> None:
    plan = make_plan(tmp_path)
    argv = restore.etcdutl_argv("/bin/etcdutl", "/w/s.db", plan, "m1", "/w/data")
    assert argv == ["/bin/etcdutl", "snapshot", "restore", "/w/s.db", "--name", "m1",
                    "--initial-cluster", "m0=http://127.0.0.1:1,m1=http://127.0.0.1:2",
                    "--initial-cluster-token", "demo-etcd-r-1", "--initial-advertise-peer-urls", "http://127.0.0.1:2",
                    "--data-dir", "/w/data"]
    assert not {"--bump-revision", "--mark-compacted", "--skip-hash-check"} & set(argv)


def test_credentials_never_show() -> None:
    creds = restore.Credentials.from_env({"AWS_ACCESS_KEY_ID": "AKIDSECRETISH", "AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    assert "AKIDSECRETISH" not in repr(creds) and "s3cr3t" not in repr(creds)
    with pytest.raises(restore.RestoreFailed, match="AWS_SECRET_ACCESS_KEY not set"):
        restore.Credentials.from_env({"AWS_ACCESS_KEY_ID": "x"})


# -- the member-side flow, with the download and etcdutl faked ---------------------------------------------------------


@dataclasses.dataclass
class Fakes:
    """A snapshot file (synthetic bbolt, etcd's trailer) the fake download copies, and a fake etcdutl."""

    source: Path
    revision: int
    sha256: str
    calls: list[list[str]] = dataclasses.field(default_factory=list)
    exit_code: int = 0

    def fetch(self, plan: restore.RestorePlan, dest: Path) -> None:
        shutil.copyfile(self.source, dest)

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if self.exit_code:
            return subprocess.CompletedProcess(argv, self.exit_code, "", '{"level":"fatal","msg":"boom"}\n'
                                               "Error: data-dir \"x\" not empty or could not be read\n")
        out = Path(argv[argv.index("--data-dir") + 1])
        (out / "member" / "snap").mkdir(parents=True)
        (out / "member" / "wal").mkdir()
        shutil.copyfile(argv[3], out / "member" / "snap" / "db")
        return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    data, revision, _, _ = etcd_db([("put", i % 30, 40) for i in range(100)])
    source = tmp_path / "source.db"
    source.write_bytes(data)
    return Fakes(source, revision, hashlib.sha256(data).hexdigest())


def tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` with a digest of its bytes (what "untouched" compares)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def old_data(plan: restore.RestorePlan) -> Path:
    data_dir = Path(plan.data_dir)
    (data_dir / "member" / "snap").mkdir(parents=True)
    (data_dir / "member" / "snap" / "db").write_bytes(b"old database")
    (data_dir / "member" / "wal").mkdir()
    (data_dir / "member" / "wal" / "0.wal").write_bytes(b"old wal")
    return data_dir


def leftovers(plan: restore.RestorePlan) -> list[str]:
    return sorted(p.name for p in Path(plan.data_dir).parent.iterdir() if p.name != Path(plan.data_dir).name)


def test_a_restore_replaces_the_data_dir_once(tmp_path: Path, fakes: Fakes) -> None:
    plan = make_plan(tmp_path, sha256=fakes.sha256, revision=fakes.revision)
    data_dir = old_data(plan)
    result = restore.restore_member(plan, "m1", fetch=fakes.fetch, etcdutl="/x/etcdutl", run=fakes.run)
    assert result.restored and result.revision == fakes.revision and result.data_dir == data_dir
    assert set(result.timings) == {"download", "verify", "etcdutl", "swap"}
    assert (data_dir / "member" / "snap" / "db").read_bytes() == fakes.source.read_bytes()
    assert not (data_dir / "member" / "wal" / "0.wal").exists()
    assert leftovers(plan) == [".restored"]  # the work directory, the download and the old data dir are gone
    marker = json.loads((data_dir.parent / ".restored").read_text())
    assert marker["id"] == "r-1" and marker["revision"] == fakes.revision and marker["sha256"] == fakes.sha256
    assert fakes.calls[0][:4] == ["/x/etcdutl", "snapshot", "restore", str(data_dir.parent / ".restore-r-1" /
                                                                          "snapshot.db")]
    assert restore.restored_id(plan) == "r-1"

    (data_dir / "written-since").write_text("etcd ran")
    again = restore.restore_member(plan, "m1", fetch=fakes.fetch, etcdutl="/x/etcdutl", run=fakes.run)
    assert not again.restored and len(fakes.calls) == 1 and (data_dir / "written-since").exists()

    newer = make_plan(tmp_path, id="r-2", sha256=fakes.sha256, revision=fakes.revision)
    assert restore.restore_member(newer, "m1", fetch=fakes.fetch, etcdutl="/x/etcdutl", run=fakes.run).restored
    assert not (data_dir / "written-since").exists() and restore.restored_id(newer) == "r-2"


def test_a_member_without_a_data_dir_yet(tmp_path: Path, fakes: Fakes) -> None:
    plan = make_plan(tmp_path, sha256=fakes.sha256, revision=fakes.revision)
    Path(plan.data_dir).parent.mkdir()
    assert restore.restore_member(plan, "m0", fetch=fakes.fetch, etcdutl="e", run=fakes.run).restored
    assert (Path(plan.data_dir) / "member" / "snap" / "db").is_file()
    no_volume = make_plan(tmp_path, dataDir=str(tmp_path / "none" / "data"), sha256=fakes.sha256)
    with pytest.raises(restore.RestoreFailed, match="does not exist; the data volume must be mounted there"):
        restore.restore_member(no_volume, "m0", fetch=fakes.fetch, etcdutl="e", run=fakes.run)


@pytest.mark.parametrize(("case", "words"), [
    ("sha", "is not the snapshot the backup recorded: its sha256 is"),
    ("revision", "holds revision {rev}, the plan says 7; the plan does not match the snapshot"),
    ("truncated", "is not a complete etcd snapshot: truncated: the bbolt meta page"),
    ("etcdutl", 'etcdutl snapshot restore failed: data-dir "x" not empty or could not be read; the data dir was not '
                "touched"),
    ("member", "member 'm9' is not in the restore plan (members: m0, m1)"),
    ("download", "downloading backups/backups/demo/etcd/20261202T160455Z-rev42.db: no"),
])
def test_every_failure_leaves_the_old_data_dir(tmp_path: Path, fakes: Fakes, case: str, words: str) -> None:
    changes: dict[str, Any] = {"sha256": fakes.sha256, "revision": fakes.revision}
    name, fetch = "m1", fakes.fetch
    if case == "sha":
        changes["sha256"] = SHA_A
    elif case == "revision":
        changes["revision"] = 7
    elif case == "truncated":
        cut = fakes.source.read_bytes()[:-5000]
        fakes.source.write_bytes(cut)
        changes["sha256"] = hashlib.sha256(cut).hexdigest()
    elif case == "etcdutl":
        fakes.exit_code = 1
    elif case == "member":
        name = "m9"
    else:
        def fetch(plan: restore.RestorePlan, dest: Path) -> None:
            dest.write_bytes(b"partial")
            raise restore.RestoreFailed(f"downloading {plan.bucket}/{plan.key}: no")
    plan = make_plan(tmp_path, **changes)
    before = tree(old_data(plan))
    with pytest.raises(restore.RestoreFailed) as caught:
        restore.restore_member(plan, name, fetch=fetch, etcdutl="e", run=fakes.run)
    assert words.format(rev=fakes.revision) in str(caught.value) and "\n" not in str(caught.value)
    assert tree(Path(plan.data_dir)) == before and leftovers(plan) == []


def test_a_marker_that_cannot_be_written_undoes_the_swap(tmp_path: Path, fakes: Fakes) -> None:
    plan = make_plan(tmp_path, sha256=fakes.sha256, revision=fakes.revision)
    before = tree(old_data(plan))
    (Path(plan.data_dir).parent / ".restored").mkdir()  # os.replace onto a directory fails
    (Path(plan.data_dir).parent / ".restored" / "x").write_text("")
    with pytest.raises(OSError):
        restore.restore_member(plan, "m0", fetch=fakes.fetch, etcdutl="e", run=fakes.run)
    assert tree(Path(plan.data_dir)) == before and leftovers(plan) == [".restored"]


def test_a_run_that_died_mid_swap_is_undone_first(tmp_path: Path, fakes: Fakes) -> None:
    plan = make_plan(tmp_path, sha256=fakes.sha256, revision=fakes.revision)
    data_dir = old_data(plan)
    before = tree(data_dir)
    work = data_dir.parent / ".restore-r-0"  # an earlier plan's run, killed between its two renames
    (work / "data" / "member").mkdir(parents=True)
    os.rename(data_dir, work / "old")
    messages: list[str] = []
    fakes.exit_code = 1  # this run fails too: the old data dir must be back in place all the same
    with pytest.raises(restore.RestoreFailed):
        restore.restore_member(plan, "m0", fetch=fakes.fetch, etcdutl="e", run=fakes.run, log=messages.append)
    assert tree(data_dir) == before and leftovers(plan) == []
    assert messages == [f"put the data dir back from {work / 'old'} (an earlier run stopped half-way through the "
                        "swap)"]


# -- the command, in-process ------------------------------------------------------------------------------------------


def test_the_command_without_a_plan_does_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert restore.main(["--plan", str(tmp_path / "absent.json")]) == 0
    assert capsys.readouterr().err == f"opsmanager restore-member: no restore plan at {tmp_path}/absent.json: nothing " \
                                      "to do\n"


def test_the_command_reports_one_line(tmp_path: Path, fakes: Fakes, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text('{"id": "x"}')
    assert restore.main(["--plan", str(plan_file), "--name", "m0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"opsmanager restore-member: the restore plan {plan_file} is invalid: bucket: Field "
                          "required; ") and err.count("\n") == 1

    plan = make_plan(tmp_path, sha256=fakes.sha256, revision=fakes.revision)
    plan_file.write_text(plan.to_json())
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "POD_NAME", "OPSMANAGER_ETCDUTL_3_6"):
        monkeypatch.delenv(variable, raising=False)
    assert restore.main(["--plan", str(plan_file)]) == 1
    assert "failed: no member name: $POD_NAME is not set" in capsys.readouterr().err
    monkeypatch.setenv("POD_NAME", "m0")
    assert restore.main(["--plan", str(plan_file)]) == 1
    assert "failed: no etcdutl for etcd 3.6: $OPSMANAGER_ETCDUTL_3_6 is not set" in capsys.readouterr().err
    monkeypatch.setenv("OPSMANAGER_ETCDUTL_3_6", sys.executable)
    assert restore.main(["--plan", str(plan_file)]) == 1
    assert "failed: no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY not set; the init container " \
           "takes them from spec.backup.destination.credentialsSecret" in capsys.readouterr().err

    Path(plan.data_dir).parent.mkdir()
    (Path(plan.data_dir).parent / ".restored").write_text('{"id": "r-1"}')
    monkeypatch.delenv("OPSMANAGER_ETCDUTL_3_6")  # a restored member needs neither etcdutl nor credentials
    assert restore.main(["--plan", str(plan_file)]) == 0
    assert capsys.readouterr().err == "opsmanager restore-member: member m0 was restored by plan r-1 already: " \
                                      "nothing to do\n"


def test_the_cli_knows_the_command() -> None:
    from opsmanager import cli

    assert cli.COMMANDS["restore-member"][0] == "opsmanager.backup.restore:main"


# -- real etcd, a real store (slow) -----------------------------------------------------------------------------------

ETCD = "etcd-3.6"


def tool(name: str) -> str:
    from opsmanager_sandbox import realcp

    return str(realcp.binary(ETCD, name))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Gateway:
    """etcd's JSON gateway on one member (one keep-alive connection)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            self.http.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = self.http.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            self.http.close()
            raise
        if response.status != 200:
            raise OSError(f"{path}: HTTP {response.status}: {payload[:200]!r}")
        result: dict[str, Any] = json.loads(payload)
        return result

    def put(self, key: bytes, value: bytes) -> int:
        return int(self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})["header"]["revision"])

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> int:
        ops = [{"request_put": {"key": b64(k), "value": b64(v)}} for k, v in items]
        return int(self.call("/v3/kv/txn", {"success": ops})["header"]["revision"])

    def everything(self) -> tuple[dict[bytes, bytes], dict[str, Any]]:
        """A linearizable read of the whole keyspace: key → value, and the response header."""
        got = self.call("/v3/kv/range", {"key": b64(b"\0"), "range_end": b64(b"\0")})
        kvs = {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", "")) for kv in got.get("kvs", [])}
        assert int(got.get("count", 0)) == len(kvs)
        return kvs, got["header"]

    def close(self) -> None:
        self.http.close()


@dataclasses.dataclass
class EtcdMember:
    name: str
    data_dir: Path
    client_port: int
    peer_url: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, initial_cluster: str, token: str) -> None:
        from opsmanager_sandbox import process

        peer_port = self.peer_url.rsplit(":", 1)[1]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [process.find_tool("setpriv"), "--pdeathsig", "KILL", tool("etcd"), "--name", self.name,
                 "--data-dir", str(self.data_dir), "--listen-client-urls", self.url, "--advertise-client-urls",
                 self.url, "--listen-peer-urls", f"http://127.0.0.1:{peer_port}", "--initial-advertise-peer-urls",
                 self.peer_url, "--initial-cluster", initial_cluster, "--initial-cluster-token", token,
                 "--initial-cluster-state", "new", "--listen-metrics-urls", "", "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def wait_ready(members: Sequence[EtcdMember], timeout: float = 30.0) -> None:
    """Each member answers a linearizable read (so the cluster has a leader and this member has caught up)."""
    deadline = time.monotonic() + timeout
    for m in members:
        gateway = Gateway(m.client_port)
        try:
            while True:
                assert m.proc is not None and m.proc.poll() is None, m.log.read_text()
                try:
                    gateway.call("/v3/kv/range", {"key": b64(b"/ready")})
                    break
                except (OSError, http.client.HTTPException, ValueError):
                    pass
                assert time.monotonic() < deadline, f"{m.name} not ready within {timeout} s:\n{m.log.read_text()}"
                time.sleep(0.1)
        finally:
            gateway.close()


def make_members(base: Path, prefix: str) -> list[EtcdMember]:
    from opsmanager_sandbox import children

    members = []
    for i in range(3):
        home = base / f"m{i}"
        home.mkdir(exist_ok=True)
        members.append(EtcdMember(f"m{i}", home / "data", children.free_port(),
                                  f"http://127.0.0.1:{children.free_port()}", base / f"{prefix}-m{i}.log"))
    return members


def initial_cluster(members: Sequence[EtcdMember]) -> str:
    return ",".join(f"{m.name}={m.peer_url}" for m in members)


@dataclasses.dataclass
class Original:
    """The cluster that was backed up: its members (stopped), its cluster ID, what the snapshot holds."""

    base: Path
    members: list[EtcdMember]
    cluster_id: str
    snapshot_file: Path
    keys: dict[bytes, bytes]
    revision: int
    after_snapshot: dict[bytes, bytes]
    spare: Path  # a copy of member 0's data dir (the original cluster's, stopped): a data dir to fail on


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Original]:
    base = tmp_path_factory.mktemp("restore")
    members = make_members(base, "original")
    cluster = initial_cluster(members)
    try:
        for m in members:
            m.start(cluster, "original-token")
        wait_ready(members)
        gateway = Gateway(members[0].client_port)
        for start in range(0, 3000, 20):  # 20 keys a transaction: revisions with sub-revisions 0..19
            gateway.put_many([(f"/registry/k{i:05d}".encode(), b"v" * (i * 13 % 700) + str(i).encode())
                              for i in range(start, start + 20)])
        for i in range(0, 3000, 7):  # overwritten: the snapshot keeps several revisions of these
            gateway.put(f"/registry/k{i:05d}".encode(), b"second " + str(i).encode())
        keys, header = gateway.everything()
        snapshot_file = base / "snapshot.db"
        subprocess.run([tool("etcdctl"), f"--endpoints={members[0].url}", "snapshot", "save", str(snapshot_file)],
                       capture_output=True, check=True, timeout=60)
        after = {b"/after-the-snapshot/1": b"gone after the restore", b"/registry/k00001": b"changed"}
        for key, value in after.items():
            gateway.put(key, value)
        gateway.close()
        for m in members:
            m.stop()
        spare = base / "spare"
        spare.mkdir()
        shutil.copytree(members[0].data_dir, spare / "data")
        yield Original(base, members, str(header["cluster_id"]), snapshot_file, keys, int(header["revision"]), after,
                       spare / "data")
    finally:
        for m in members:
            m.stop()


@dataclasses.dataclass
class Uploaded:
    server: Any
    key: str
    sha256: str
    revision: int


def upload(server: Any, path: Path, name: str, revision: int) -> str:
    from opsmanager.backup import store

    key = snapshot.object_key("restore-test", "demo", name, datetime.datetime.now(datetime.UTC), revision)
    with store.ObjectStore(server.endpoint, "backups", access_key_id=server.access_key,
                           secret_access_key=server.secret_key, prefix="restore-test") as s3:
        s3.upload(path, key, metadata={"sha256": snapshot.sha256_file(path), "revision": str(revision)})
    return key


@pytest.fixture(scope="module")
def uploaded(original: Original, object_store: Any) -> Uploaded:
    content = snapshot.content_revision(original.snapshot_file)
    key = upload(object_store, original.snapshot_file, "etcd", content.revision)
    return Uploaded(object_store, key, snapshot.sha256_file(original.snapshot_file), content.revision)


def member_plan(up: Uploaded, data_dir: Path, peers: Sequence[EtcdMember], plan_id: str, *,
                key: str | None = None, sha256: str | None = None) -> restore.RestorePlan:
    return restore.RestorePlan(
        id=plan_id, bucket="backups", key=key or up.key, endpoint=up.server.endpoint, prefix="restore-test",
        sha256=sha256 or up.sha256, revision=up.revision, initial_cluster=initial_cluster(peers),
        token=f"demo-etcd-{plan_id}", peer_urls={m.name: m.peer_url for m in peers}, data_dir=str(data_dir),
        etcd_version="3.6.16")


def run_command(plan: restore.RestorePlan, name: str, plan_file: Path, *, access_key: str | None = None,
                secret_key: str | None = None, server: Any = None) -> subprocess.CompletedProcess[str]:
    plan_file.write_text(plan.to_json())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPSMANAGER_ETCDUTL_"))}
    env.update({"POD_NAME": name, "OPSMANAGER_ETCDUTL_3_6": tool("etcdutl"),
                "AWS_ACCESS_KEY_ID": access_key or server.access_key,
                "AWS_SECRET_ACCESS_KEY": secret_key or server.secret_key})
    return subprocess.run([sys.executable, "-m", "opsmanager", "restore-member", "--plan", str(plan_file)],
                          capture_output=True, text=True, env=env, timeout=300)


@dataclasses.dataclass
class Restored:
    members: list[EtcdMember]
    plans: list[restore.RestorePlan]
    seconds: list[float]


@pytest.fixture(scope="module")
def restored(original: Original, uploaded: Uploaded) -> Iterator[Restored]:
    """restore-member on each of the original's data dirs (new peer URLs, a new token), then a new etcd on each."""
    members = make_members(original.base, "restored")
    plans, seconds = [], []
    for m, old in zip(members, original.members, strict=True):
        assert m.data_dir == old.data_dir and (old.data_dir / "member" / "snap" / "db").is_file()
        plan = member_plan(uploaded, m.data_dir, members, "restore-1")
        started = time.monotonic()
        result = run_command(plan, m.name, original.base / f"plan-{m.name}.json", server=uploaded.server)
        seconds.append(time.monotonic() - started)
        assert result.returncode == 0, result.stderr
        print(f"\n{result.stderr.strip()}", end="")
        assert result.stderr.startswith(f"opsmanager restore-member: restored member {m.name} from backups/"
                                        f"{uploaded.key} (revision {uploaded.revision}) into {m.data_dir}")
        plans.append(plan)
    try:
        for m in members:
            m.start(initial_cluster(members), "ignored-the-data-dir-has-a-wal")
        wait_ready(members)
        yield Restored(members, plans, seconds)
    finally:
        for m in members:
            m.stop()


@pytest.mark.slow
def test_the_restored_cluster_is_new_and_holds_exactly_the_snapshot(original: Original, uploaded: Uploaded,
                                                                     restored: Restored) -> None:
    content = snapshot.content_revision(original.snapshot_file, keys=True)
    assert content.revision == original.revision and content.revisions_count == 3000 + 429 + 0
    assert content.keys == len(original.keys) == 3000
    cluster_ids = set()
    for m in restored.members:
        gateway = Gateway(m.client_port)
        try:
            keys, header = gateway.everything()
            members = gateway.call("/v3/cluster/member/list", {})["members"]
        finally:
            gateway.close()
        assert keys == original.keys, m.name  # every key, every value; nothing written after the snapshot
        assert int(header["revision"]) == content.revision == content.served_revision, m.name
        assert sorted((x["name"], x["peerURLs"]) for x in members) == sorted(
            (p.name, [p.peer_url]) for p in restored.members)
        cluster_ids.add(header["cluster_id"])
    assert len(cluster_ids) == 1 and original.cluster_id not in cluster_ids
    for m in restored.members:
        assert json.loads((m.data_dir.parent / ".restored").read_text())["id"] == "restore-1"
        assert sorted(p.name for p in m.data_dir.parent.iterdir()) == [".restored", "data"]
    print(f"\nrestore-member per member: {', '.join(f'{s:.2f} s' for s in restored.seconds)}")


@pytest.mark.slow
def test_a_second_run_with_the_same_id_keeps_what_etcd_wrote_since(original: Original, restored: Restored) -> None:
    m = restored.members[0]
    gateway = Gateway(m.client_port)
    written = gateway.put(b"/written-after-the-restore", b"keep me")
    gateway.close()
    m.stop()
    db = m.data_dir / "member" / "snap" / "db"
    inode = db.stat().st_ino
    started = time.monotonic()
    result = run_command(restored.plans[0], m.name, original.base / "again.json", access_key="unused",
                         secret_key="unused")
    took = time.monotonic() - started
    assert result.returncode == 0 and result.stderr == (
        f"opsmanager restore-member: member {m.name} was restored by plan restore-1 already: nothing to do\n")
    assert db.stat().st_ino == inode
    m.start(initial_cluster(restored.members), "ignored")
    wait_ready([m])
    gateway = Gateway(m.client_port)
    try:
        keys, header = gateway.everything()
    finally:
        gateway.close()
    assert keys[b"/written-after-the-restore"] == b"keep me" and int(header["revision"]) >= written
    print(f"\nno-op run: {took:.2f} s")


def corrupt(path: Path, dest: Path) -> Path:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    dest.write_bytes(bytes(data))
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("case", ["flipped", "flipped-recorded", "truncated", "missing", "wrong-secret",
                                  "unknown-key"])
def test_a_failed_restore_says_why_in_one_line_and_leaves_the_data_dir(
        original: Original, uploaded: Uploaded, tmp_path: Path, case: str) -> None:
    server = uploaded.server
    key, sha, access, secret = uploaded.key, uploaded.sha256, server.access_key, server.secret_key
    if case.startswith("flipped"):
        bad = corrupt(original.snapshot_file, tmp_path / "flipped.db")
        key = upload(server, bad, f"flipped-{case}", uploaded.revision)
        if case == "flipped-recorded":  # the backup recorded the bad file's own digest: etcd's trailer catches it
            sha = snapshot.sha256_file(bad)
    elif case == "truncated":
        cut = tmp_path / "cut.db"
        cut.write_bytes(original.snapshot_file.read_bytes()[:200_000])
        key, sha = upload(server, cut, "truncated", uploaded.revision), snapshot.sha256_file(cut)
    elif case == "missing":
        key = key.replace("/etcd/", "/nothing-here/")
    elif case == "wrong-secret":
        secret = "not-the-secret-key-" + "q" * 20
    else:
        access, secret = "AKNOBODY00000000", "not-the-secret-key-" + "q" * 20
    data_dir = original.spare
    before = tree(data_dir)
    plan = member_plan(uploaded, data_dir, original.members, f"fail-{case}", key=key, sha256=sha)
    result = run_command(plan, "m0", tmp_path / "plan.json", access_key=access, secret_key=secret)
    assert result.returncode == 1 and result.stdout == ""
    err = result.stderr
    assert err.count("\n") == 1 and err.startswith("opsmanager restore-member: failed: "), err
    print(f"\n{case}: {err}", end="")
    expected = {
        "flipped": f"backups/{key} is not the snapshot the backup recorded: its sha256 is ",
        "flipped-recorded": f"backups/{key} is not a complete etcd snapshot: sha256 mismatch: the trailer says",
        "truncated": f"backups/{key} is not a complete etcd snapshot: truncated: the bbolt meta page",
        "missing": f"downloading backups/{key}: no such object at {server.endpoint}; restore a snapshot the store "
                   "holds",
        "wrong-secret": f"spec.backup.destination.credentials: {server.endpoint} refused them (SignatureDoesNotMatch",
        "unknown-key": f"spec.backup.destination.credentials: {server.endpoint} refused them (InvalidAccessKeyId",
    }[case]
    assert expected in err, err
    assert secret not in err and server.secret_key not in err and access not in err.replace(key, "")
    assert tree(data_dir) == before and sorted(p.name for p in data_dir.parent.iterdir()) == ["data"]


def restore_pod(name: str, *, uses_plan: bool = True) -> dict[str, Any]:
    """A member pod as the StatefulSet gives one: the init container ``restore`` of the operator's image (the plan
    from an optional ConfigMap, the credentials from a Secret), then the main container (here a sleeper of the same
    image)."""
    secret = {"name": "s3-credentials"}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "initContainers": [{
                "name": "restore", "image": "opsmanager:test", "args": ["restore-member"],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {**secret, "key": "accessKeyId"}}},
                        {"name": "AWS_SECRET_ACCESS_KEY",
                         "valueFrom": {"secretKeyRef": {**secret, "key": "secretAccessKey"}}}],
                "volumeMounts": [{"name": "restore-plan", "mountPath": restore.PLAN_MOUNT, "readOnly": True},
                                 {"name": "data", "mountPath": "/var/lib/etcd"}]}],
            "containers": [{"name": "main", "image": "opsmanager:test",
                            "command": [sys.executable, "-c", "import time; time.sleep(600)"]}],
            "volumes": [{"name": "restore-plan",
                         "configMap": {"name": "restore-plan" if uses_plan else "no-such-plan", "optional": True}},
                        {"name": "data", "hostPath": {"path": f"/data/{name}"}}]}}


@pytest.mark.slow
async def test_restore_member_runs_as_an_init_container_in_a_sandbox_pod(
        original: Original, uploaded: Uploaded, standalone_kubelet: Any) -> None:
    """The sandbox's kubelet runs the init container of the operator's image: the etcdutl it finds is the one the
    sandbox names in OPSMANAGER_ETCDUTL_3_6 and mounts; the plan and the data volume are at their pod paths. A pod
    whose optional plan ConfigMap does not exist starts at once."""
    from opsmanager_sandbox import runtime
    from tests.polling import aeventually

    host = standalone_kubelet
    tools_env, tools_mounts = runtime.product_etcdutls()
    assert set(tools_env) == {"OPSMANAGER_ETCDUTL_3_5", "OPSMANAGER_ETCDUTL_3_6", "OPSMANAGER_ETCDUTL_3_7",
                              "OPSMANAGER_ETCDAUTH", "OPSMANAGER_ETCDSTOP"}
    assert [m.container_path for m in tools_mounts] == sorted(str(Path(t).parent) for t in tools_env.values())
    server = uploaded.server
    host.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-credentials", "namespace": "default"},
              "data": {"accessKeyId": b64(server.access_key.encode()),
                       "secretAccessKey": b64(server.secret_key.encode())}})
    plan = member_plan(uploaded, Path("/var/lib/etcd/data"), original.members, "in-a-pod")
    host.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "restore-plan", "namespace": "default"},
              "data": {restore.PLAN_FILE: plan.to_json()}})
    volume = host.config.dir / "node" / "data" / "m1"
    volume.mkdir(parents=True)
    shutil.copytree(original.spare, volume / "data")
    logs = host.config.logs_dir / "default"

    restored_pod = host.run_pod(restore_pod("m1"))
    planless_pod = host.run_pod(restore_pod("m2", uses_plan=False))
    for worker in (restored_pod, planless_pod):
        await aeventually(lambda w=worker: "main" in w.pids(), timeout=60,
                          what=f"{worker.name}'s main container started after its init container")
    restore_log = (logs / "m1" / "restore.log").read_text()
    assert "opsmanager restore-member: restored member m1 from backups/" in restore_log, restore_log
    assert "into /var/lib/etcd/data for plan in-a-pod" in restore_log
    assert json.loads((volume / ".restored").read_text())["id"] == "in-a-pod"
    assert snapshot.content_revision(volume / "data" / "member" / "snap" / "db").revision == uploaded.revision
    assert (logs / "m2" / "restore.log").read_text() == (
        f"opsmanager restore-member: no restore plan at {restore.DEFAULT_PLAN_PATH}: nothing to do\n")
    assert server.secret_key not in restore_log
