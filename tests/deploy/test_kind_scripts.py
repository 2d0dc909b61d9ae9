"""e2e/kind/: the scripts for a real cluster (kind) cannot run on these machines (no Docker, no kind), so CI checks
what it can: every script parses (``bash -n``) and shellcheck finds nothing in it (sourced lib.sh followed).
Never skipped: ``make test`` and .ci/run install Debian's shellcheck when it is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIND = ROOT / "e2e" / "kind"
SCRIPTS = sorted(KIND.glob("*.sh"))
ENTRY_POINTS = ("up.sh", "install.sh", "ops.sh", "down.sh")


def _shellcheck(path: Path) -> subprocess.CompletedProcess[str]:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: `make test` installs Debian's shellcheck package"
    return subprocess.run([shellcheck, "--external-sources", "--source-path=SCRIPTDIR", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_the_four_scripts_are_there_and_executable() -> None:
    names = {p.name for p in SCRIPTS}
    assert set(ENTRY_POINTS) <= names
    for name in ENTRY_POINTS:
        path = KIND / name
        assert path.stat().st_mode & 0o111, f"{path} is not executable"
        text = path.read_text()
        assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text, name
        assert "Not exercised on the project's CI machines" in text, name


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_parses_it(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_finds_nothing(script: Path) -> None:
    done = _shellcheck(script)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_checks_bite(tmp_path: Path) -> None:
    broken = tmp_path / "broken.sh"
    broken.write_text("#!/usr/bin/env bash\nif true; then echo x\n")
    assert subprocess.run(["bash", "-n", str(broken)], capture_output=True, timeout=60).returncode != 0
    sloppy = tmp_path / "sloppy.sh"
    sloppy.write_text("#!/usr/bin/env bash\nrm -rf $1/*\n")  # unquoted: SC2086
    done = _shellcheck(sloppy)
    assert done.returncode != 0 and "SC2086" in done.stdout


def test_the_readme_says_they_are_not_run_here() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "e2e/kind/" in readme
    assert "not exercised" in readme.lower()
