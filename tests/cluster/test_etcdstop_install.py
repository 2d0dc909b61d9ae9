"""``opsmanager install-etcdstop``, the members' first init container: it copies the image's etcdstop into the
pod's volume, executable and whole, and a missing tool fails with one line that names where it looked."""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from opsmanager import cli
from opsmanager.cluster import etcdstop


def test_the_tool_is_copied_executable_by_rename(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "built"
    source.write_bytes(b"\x7fELF stand-in")
    source.chmod(0o644)
    target_dir = tmp_path / "volume"
    target_dir.mkdir()
    (target_dir / "etcdstop").write_bytes(b"an older copy, from the container's last start")
    monkeypatch.setenv(etcdstop.ENV, str(source))
    assert cli.main(["install-etcdstop", f"--to={target_dir}"]) == 0
    target = target_dir / "etcdstop"
    assert target.read_bytes() == b"\x7fELF stand-in"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755 and os.access(target, os.X_OK)
    assert sorted(p.name for p in target_dir.iterdir()) == ["etcdstop"]  # no partial file left
    assert str(target) in capsys.readouterr().out


def test_no_tool_fails_naming_where_it_looked(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(etcdstop.ENV, str(tmp_path / "absent"))
    assert cli.main(["install-etcdstop", f"--to={tmp_path}"]) == 1
    err = capsys.readouterr().err
    assert "no etcdstop at" in err and str(tmp_path / "absent") in err and etcdstop.ENV in err
    monkeypatch.setenv(etcdstop.ENV, str(pathlib.Path(__file__)))
    assert cli.main(["install-etcdstop", f"--to={tmp_path / 'no-such-dir'}"]) == 1
    assert "cannot copy" in capsys.readouterr().err
