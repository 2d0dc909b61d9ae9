"""opsmanager.backup.snapshot on real snapshots: etcd 3.6 (built by ``make controlplane``) on loopback, ``etcdctl
snapshot save`` against it; :func:`snapshot.verify` must agree with ``etcdutl`` — on the good file and on a truncated
and a byte-flipped copy, which etcdutl refuses to restore too.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsmanager.backup import snapshot
from opsmanager_sandbox import children, process, realcp

pytestmark = pytest.mark.slow

ETCD = "etcd-3.6"


def tool(name: str) -> str:
    return str(realcp.binary(ETCD, name))


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def etcd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One etcd 3.6 member on loopback with some keys (a throwaway cluster: killed by PID at the end)."""
    base = tmp_path_factory.mktemp("etcd36")
    client, peer = children.free_port(), children.free_port()
    url = f"http://127.0.0.1:{client}"
    log = (base / "etcd.log").open("wb")
    proc = subprocess.Popen(
        [process.find_tool("setpriv"), "--pdeathsig", "KILL", tool("etcd"), "--name", "s0",
         "--data-dir", str(base / "data"), "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"s0=http://127.0.0.1:{peer}", "--listen-metrics-urls", "", "--log-level", "warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (base / "etcd.log").read_text()
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                    if json.loads(r.read()).get("health") == "true":
                        break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            assert time.monotonic() < deadline, "etcd was not healthy within 30 s:\n" + (base / "etcd.log").read_text()
            try:
                proc.wait(timeout=0.1)  # the poll interval; returns at once if etcd exits
            except subprocess.TimeoutExpired:
                pass
        for i in range(200):  # a few pages of data, some overwritten
            run(tool("etcdctl"), f"--endpoints={url}", "put", f"/registry/k{i % 150}", "v" * (i * 7 % 900))
        yield url
    finally:
        proc.kill()
        proc.wait()
        log.close()


@pytest.fixture(scope="module")
def saved(etcd_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("snap") / "snap.db"
    run(tool("etcdctl"), f"--endpoints={etcd_url}", "snapshot", "save", str(path))
    return path


def status(path: Path) -> dict[str, int]:
    result: dict[str, int] = json.loads(run(tool("etcdutl"), "snapshot", "status", str(path), "-w", "json").stdout)
    return result


def test_a_real_snapshot_passes_and_etcdutl_agrees(saved: Path) -> None:
    check = snapshot.verify(saved)
    assert check.ok, check.reason
    assert check.size == saved.stat().st_size and check.size % 512 == 32
    assert check.embedded_sha256 == saved.read_bytes()[-32:].hex()
    got = status(saved)
    assert got["totalSize"] == check.database_size  # etcdutl's size is the database's, the trailer left out
    assert got["revision"] >= 201 and got["totalKey"] == 150
    key = snapshot.object_key("backups", "demo", "etcd", datetime.datetime.now(datetime.UTC), got["revision"])
    assert snapshot.parse_key(key, "backups").revision == got["revision"]
    assert snapshot.sha256_file(saved) != check.embedded_sha256  # the file's digest covers the trailer too


def test_a_truncated_copy_fails_clearly_and_etcdutl_refuses_it(saved: Path, tmp_path: Path) -> None:
    data = saved.read_bytes()
    cut = tmp_path / "cut.db"
    cut.write_bytes(data[:len(data) // 2])
    check = snapshot.verify(cut)
    assert not check.ok and check.reason.startswith("truncated: the bbolt meta page"), check.reason
    restore = run(tool("etcdutl"), "snapshot", "restore", str(cut), "--data-dir", str(tmp_path / "r1"), check=False)
    assert restore.returncode != 0


def test_a_byte_flipped_copy_fails_clearly_and_etcdutl_refuses_it(saved: Path, tmp_path: Path) -> None:
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0x40
    flipped = tmp_path / "flipped.db"
    flipped.write_bytes(bytes(data))
    check = snapshot.verify(flipped)
    assert not check.ok and check.reason.startswith("sha256 mismatch"), check.reason
    restore = run(tool("etcdutl"), "snapshot", "restore", str(flipped), "--data-dir", str(tmp_path / "r2"),
                  check=False)
    assert restore.returncode != 0 and "expected sha256" in restore.stdout + restore.stderr


def test_etcdutl_restores_what_verify_passes(saved: Path, tmp_path: Path) -> None:
    assert snapshot.verify(saved).ok
    run(tool("etcdutl"), "snapshot", "restore", str(saved), "--data-dir", str(tmp_path / "restored"))
    assert (tmp_path / "restored" / "member" / "snap" / "db").is_file()
