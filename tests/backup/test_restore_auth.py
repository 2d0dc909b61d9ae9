"""A restore of an Etcd with authentication: the restored members take the root password the auth Secret holds now.

A snapshot carries etcd's users as they were the day it was taken. Restored as it is, a snapshot taken before a
RotateAuth brings back the root password that was rotated away — maybe because it leaked — and locks out every
client that follows the Secret, the operator first. ``restore-member`` therefore runs ``etcdauth set-root`` on the
restored database before etcd starts on it.

Fast: where etcdauth is found; a plan that names a root password file that is missing or empty fails before
anything is downloaded, the data dir untouched; the setter gets the password and the restored database.

Slow (real etcd 3.6, real etcdutl, the built etcdauth, etcdctl as the client; the end-to-end test of a Restore
with authentication runs the members' 3.5): a member with authentication
on and password OLD is snapshotted, restored with NEW in the password file, and started: NEW logs in, OLD and an
anonymous client are refused, every key reads back and HashKV at the snapshot's revision is the original's. A
snapshot of a member that never had authentication comes back with it on. Nothing printed holds a password.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from opsmanager.backup import restore, snapshot
from tests.backup import test_restore as base

fakes = base.fakes  # the synthetic snapshot and the fake etcdutl of the restore tests

OLD = "old-leaked-password-0123456789"
NEW = "new-password-from-the-secret-42"


def plan_with(tmp_path: Path, fakes: base.Fakes, password_file: Path | None) -> restore.RestorePlan:
    changes: dict[str, Any] = {"sha256": fakes.sha256, "revision": fakes.revision}
    if password_file is not None:
        changes["rootPasswordFile"] = str(password_file)
    return base.make_plan(tmp_path, **changes)


def test_find_etcdauth(tmp_path: Path) -> None:
    made = tmp_path / "etcdauth"
    made.write_text("#!/bin/sh\n")
    made.chmod(0o755)
    assert restore.find_etcdauth({"OPSMANAGER_ETCDAUTH": str(made)}) == str(made)
    with pytest.raises(restore.RestoreFailed, match=r"no etcdauth .*: \$OPSMANAGER_ETCDAUTH is not set and "
                                                    r"/usr/local/lib/opsmanager/etcdauth does not exist"):
        restore.find_etcdauth({})
    with pytest.raises(restore.RestoreFailed, match=r"\$OPSMANAGER_ETCDAUTH=/nope is not an executable file"):
        restore.find_etcdauth({"OPSMANAGER_ETCDAUTH": "/nope"})


def test_the_plan_carries_the_password_file_never_the_password(tmp_path: Path, fakes: base.Fakes) -> None:
    plan = plan_with(tmp_path, fakes, Path("/etc/opsmanager/restore-auth/password"))
    assert json.loads(plan.to_json())["rootPasswordFile"] == "/etc/opsmanager/restore-auth/password"
    assert restore.RestorePlan.from_json(plan.to_json()) == plan
    assert "rootPasswordFile" not in json.loads(plan_with(tmp_path, fakes, None).to_json())


@pytest.mark.parametrize(("content", "words"), [
    (None, "cannot be read (No such file or directory): the Etcd's spec.authSecret Secret must exist"),
    ("", "is empty: the Etcd's spec.authSecret Secret must hold a non-empty 'password'"),
    ("\udcff", "is not UTF-8 text"),
])
def test_a_missing_or_empty_password_fails_before_the_download(tmp_path: Path, fakes: base.Fakes,
                                                                 content: str | None, words: str) -> None:
    password_file = tmp_path / "auth" / "password"
    if content is not None:
        password_file.parent.mkdir()
        password_file.write_bytes(content.encode(errors="surrogateescape"))
    plan = plan_with(tmp_path, fakes, password_file)
    before = base.tree(base.old_data(plan))
    downloads: list[Path] = []

    def fetch(p: restore.RestorePlan, dest: Path) -> None:
        downloads.append(dest)

    with pytest.raises(restore.RestoreFailed, match=words.replace("(", r"\(").replace(")", r"\)")):
        restore.restore_member(plan, "m1", fetch=fetch, etcdutl="e", run=fakes.run,
                               set_root=lambda db, password: "")
    assert downloads == [] and base.tree(Path(plan.data_dir)) == before and base.leftovers(plan) == []


def test_the_setter_gets_the_restored_database_and_the_password(tmp_path: Path, fakes: base.Fakes) -> None:
    password_file = tmp_path / "password"
    password_file.write_bytes(NEW.encode() + b"\r\n")  # a value with a newline (kubectl --from-file) is kept as is
    plan = plan_with(tmp_path, fakes, password_file)
    base.old_data(plan)
    calls: list[tuple[Path, str, bool]] = []

    def set_root(db: Path, password: str) -> str:
        calls.append((db, password, db.is_file()))
        return '{"userCreated":false}'

    messages: list[str] = []
    result = restore.restore_member(plan, "m1", fetch=fakes.fetch, etcdutl="e", run=fakes.run, set_root=set_root,
                                    log=messages.append)
    assert result.restored and set(result.timings) == {"download", "verify", "etcdutl", "auth", "swap"}
    work = Path(plan.data_dir).parent / ".restore-r-1"
    # before the swap, on the restored copy, the password exactly as the operator logs in with it
    assert calls == [(work / "data" / "member" / "snap" / "db", NEW + "\r\n", True)]
    assert messages == ['root password set in the restored data: {"userCreated":false}']
    with pytest.raises(restore.RestoreFailed, match="no etcdauth was given"):
        restore.restore_member(base.make_plan(tmp_path, id="r-2", sha256=fakes.sha256, revision=fakes.revision,
                                              rootPasswordFile=str(password_file)),
                               "m1", fetch=fakes.fetch, etcdutl="e", run=fakes.run)


def test_a_failing_etcdauth_leaves_the_data_dir(tmp_path: Path, fakes: base.Fakes) -> None:
    password_file = tmp_path / "password"
    password_file.write_text(NEW)
    failing = tmp_path / "etcdauth"
    failing.write_text("#!/bin/sh\necho 'etcdauth set-root: opening db: timeout' >&2\nexit 1\n")
    failing.chmod(0o755)
    plan = plan_with(tmp_path, fakes, password_file)
    before = base.tree(base.old_data(plan))
    with pytest.raises(restore.RestoreFailed, match="setting the root password in the restored data failed: "
                                                    "etcdauth set-root: opening db: timeout; the data dir was not"):
        restore.restore_member(plan, "m1", fetch=fakes.fetch, etcdutl="e", run=fakes.run,
                               set_root=restore.set_root_password(str(failing)))
    assert base.tree(Path(plan.data_dir)) == before and base.leftovers(plan) == []


# -- real etcd, real etcdutl, the built etcdauth (slow) --------------------------------------------------------------


def built(component: str, name: str) -> str:
    from opsmanager_sandbox import realcp

    path = realcp.binary(component, name)
    assert path.is_file(), f"{path} is not built: run `make controlplane`"
    return str(path)


class Member:
    """One etcd member on loopback, driven with etcdctl (the real client)."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.home = tmp / name
        self.home.mkdir()
        self.member = base.EtcdMember("m0", self.home / "data", _port(), f"http://127.0.0.1:{_port()}",
                                      self.home / "etcd.log")

    def ctl(self, *args: str, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [built(base.ETCD, "etcdctl"), f"--endpoints={self.member.url}", "--command-timeout=10s"]
        argv += [f"--user={user}"] if user else []
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60, check=check)

    def start(self) -> None:
        """Start it and wait until it serves a read (refused for want of a user name counts: the restored member
        has authentication on)."""
        self.member.start(base.initial_cluster([self.member]), "t")
        deadline = time.monotonic() + 30

        def serves(got: subprocess.CompletedProcess[str]) -> bool:
            return got.returncode == 0 or "user name is empty" in got.stdout + got.stderr

        while not serves(health := self.ctl("get", "/ready", check=False)):
            assert self.member.proc is not None and self.member.proc.poll() is None, self.member.log.read_text()
            assert time.monotonic() < deadline, (f"not serving within 30 s: {health.stdout}{health.stderr}\n"
                                                 f"{self.member.log.read_text()}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.member.stop()


def _port() -> int:
    from opsmanager_sandbox import children

    return children.free_port()


def logs_in(m: Member, password: str) -> bool:
    got = m.ctl("get", "/k0001", "--print-value-only", user=f"root:{password}", check=False)
    return got.returncode == 0


def anonymous_refused(m: Member) -> bool:
    got = m.ctl("put", "/anonymous", "x", check=False)
    return got.returncode != 0 and "user name is empty" in (got.stderr + got.stdout)


def hash_at(m: Member, revision: int, password: str) -> int:
    got = m.ctl("endpoint", "hashkv", f"--rev={revision}", "-w", "json", user=f"root:{password}")
    return int(json.loads(got.stdout)[0]["HashKV"]["hash"])


@pytest.mark.slow
@pytest.mark.parametrize("had_auth", [True, False], ids=["rotated-since", "auth-turned-on-since"])
def test_a_restored_member_takes_the_secrets_password(tmp_path: Path, had_auth: bool) -> None:
    original = Member(tmp_path, "original")
    original.start()
    try:
        for i in range(50):
            original.ctl("put", f"/k{i:04d}", f"value {i}")
        if had_auth:
            original.ctl("user", "add", f"root:{OLD}")
            original.ctl("auth", "enable")
        user = f"root:{OLD}" if had_auth else None
        saved = tmp_path / "snapshot.db"
        original.ctl("snapshot", "save", str(saved), user=user)
        revision = snapshot.content_revision(saved).revision
        before = hash_at(original, revision, OLD) if had_auth else None
        original.ctl("put", "/after-the-snapshot", "gone after the restore", user=user)
    finally:
        original.stop()

    restored = Member(tmp_path, "restored")
    shutil.copytree(original.member.data_dir, restored.member.data_dir)
    password_file = tmp_path / "auth" / "password"
    password_file.parent.mkdir()
    password_file.write_text(NEW)
    plan = restore.RestorePlan(
        id="with-auth", bucket="b", key="k", endpoint="http://127.0.0.1:1", sha256=snapshot.sha256_file(saved),
        revision=revision, initial_cluster=base.initial_cluster([restored.member]), token="restored",
        peer_urls={"m0": restored.member.peer_url}, data_dir=str(restored.member.data_dir), etcd_version="3.6.16",
        root_password_file=str(password_file))
    said: list[str] = []
    result = restore.restore_member(
        plan, "m0", fetch=lambda p, dest: shutil.copyfile(saved, dest), etcdutl=built(base.ETCD, "etcdutl"),
        set_root=restore.set_root_password(built("etcdauth", "etcdauth")), log=said.append)
    assert result.restored and result.revision == revision
    assert len(said) == 1 and OLD not in said[0] and NEW not in said[0], said
    outcome = json.loads(said[0].split(": ", 1)[1])
    assert outcome["userCreated"] is (not had_auth) and outcome["authWasOn"] is had_auth, outcome

    restored.start()
    try:
        assert logs_in(restored, NEW)
        assert not logs_in(restored, OLD)  # the password rotated away stays away
        assert anonymous_refused(restored)  # authentication is on, whatever the snapshot had
        got = restored.ctl("get", "/k", "--prefix", "-w", "json", user=f"root:{NEW}")
        kvs = json.loads(got.stdout).get("kvs", [])
        assert len(kvs) == 50 and int(json.loads(got.stdout)["header"]["revision"]) == revision
        assert restored.ctl("get", "/after-the-snapshot", "--print-value-only", user=f"root:{NEW}").stdout == ""
        if before is not None:
            assert hash_at(restored, revision, NEW) == before  # the keyspace is the snapshot's, bit for bit
        restored.ctl("put", "/after-the-restore", "written", user=f"root:{NEW}")
    finally:
        restored.stop()
