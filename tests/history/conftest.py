"""The checker binary for this directory's tests: built on first use (``build.py build lincheck``, seconds with a
warm Go cache; ``make controlplane`` builds it too), found like every built tool (``realcp.binary``)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from e2e import lincheck
from opsmanager_sandbox import realcp

BUILD = pathlib.Path(__file__).resolve().parents[2] / "sandbox" / "controlplane" / "build.py"


@pytest.fixture(scope="session")
def lincheck_binary() -> pathlib.Path:
    try:
        return lincheck.binary()
    except realcp.NotBuilt:
        subprocess.run([sys.executable, str(BUILD), "build", lincheck.COMPONENT], check=True, capture_output=True,
                       timeout=600)
    return lincheck.binary()
