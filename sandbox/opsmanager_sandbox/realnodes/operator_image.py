"""The operator's image without Docker and without a registry: the image the ``Dockerfile`` describes, made from
Debian's packages (mmdebstrap) and the product's wheel, for the real nodes to run.

The ``Dockerfile`` is read, not repeated: its last stage gives the Debian release (``FROM debian:<suite>-slim``), the
packages (``apt-get install``), the user (``useradd --uid``, ``USER``), ``ENV``, ``ENTRYPOINT`` and ``CMD``; its
``etcdutl`` stage names the files it puts under ``/usr/local/lib/opsmanager`` (``-o /out/<path>``), which come from
``make controlplane``'s builds of the same pinned modules. The wheel is built from the checkout's ``pyproject.toml``,
``README.md`` and ``opsmanager/`` only, as the Dockerfile's ``wheel`` stage does, and installed with Debian's pip into
``/usr/local`` with its dependencies from PyPI. ``tests/sandbox/test_operator_image.py`` checks the two agree.

The root filesystem is cached by a key of the Dockerfile, the product's sources and the bundled tools (a cold make
takes about two minutes: mmdebstrap about one, pip the other).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Final

from opsmanager_sandbox import realcp
from opsmanager_sandbox.realnodes import images

REPO: Final = Path(__file__).resolve().parents[3]
DOCKERFILE: Final = REPO / "Dockerfile"
LIB_DIR: Final = "/usr/local/lib/opsmanager"
REPOSITORY: Final = "docker.io/library/opsmanager"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What the Dockerfile's final stage makes."""

    suite: str
    packages: tuple[str, ...]
    uid: int
    user: str
    env: tuple[str, ...]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    lib_files: tuple[str, ...]  # paths under LIB_DIR


def _json_list(line: str) -> tuple[str, ...]:
    return tuple(json.loads(line.split(None, 1)[1]))


def recipe(text: str) -> Recipe:
    """Parse the Dockerfile (its last stage, and the outputs of its ``etcdutl`` stage)."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    stages: list[list[str]] = []
    for ln in lines:
        if ln.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(ln)
    final = stages[-1]
    base = final[0].split()[1]
    found = re.fullmatch(r"debian:(\w+)(?:-slim)?", base)
    if found is None:
        raise ValueError(f"Dockerfile: the image's base must be debian:<suite>[-slim], not {base}")
    packages: list[str] = []
    uid, user, env = -1, "", []
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    for ln in final[1:]:
        word = ln.split()[0].upper()
        if word == "RUN" and "apt-get install" in ln:
            words = shlex.split(ln.split("apt-get install", 1)[1].split("&&")[0])
            packages += [w for w in words if not w.startswith("-")]
        elif word == "RUN" and "useradd" in ln:
            uid = int(re.search(r"--uid\s+(\d+)", ln).group(1))  # type: ignore[union-attr]
        elif word == "USER":
            user = ln.split()[1]
        elif word == "ENV":
            env += [f"{k}={v}" for k, v in re.findall(r"(\w+)=(\S+)", ln)]
        elif word == "ENTRYPOINT":
            entrypoint = _json_list(ln)
        elif word == "CMD":
            cmd = _json_list(ln)
    tools = next((s for s in stages if " AS etcdutl" in s[0]), [])
    outputs = tuple(sorted(o.removeprefix("/out/") for ln in tools for o in re.findall(r"-o\s+(/out/\S+)", ln)))
    return Recipe(found.group(1), tuple(packages), uid, user, tuple(env), entrypoint, cmd, outputs)


def lib_sources(rec: Recipe) -> dict[str, Path]:
    """Each file the image bundles under LIB_DIR, from ``make controlplane``'s cache (the same pinned modules)."""
    out = {}
    for rel in rec.lib_files:
        if rel in ("etcdauth", "etcdstop"):
            out[rel] = realcp.binary(rel, rel)
        else:
            minor = re.fullmatch(r"etcd-(\d+\.\d+)/etcdutl", rel)
            if minor is None:
                raise ValueError(f"Dockerfile: no build of this project makes /out/{rel}")
            out[rel] = realcp.binary(f"etcd-{minor.group(1)}", "etcdutl")
    return out


def _sources_digest() -> str:
    h = hashlib.sha256(DOCKERFILE.read_bytes())
    for path in [REPO / "pyproject.toml", REPO / "README.md", *sorted((REPO / "opsmanager").rglob("*"))]:
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def version() -> str:
    text = (REPO / "pyproject.toml").read_text()
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return found.group(1) if found else "0.0.0"



def _wheels(into: Path) -> Path:
    """The product's wheel and a wheel of each runtime dependency, in ``into/wheels``. Made here, not by pip in the
    image's chroot: this machine's pip trusts what its package index needs (``$PIP_CERT``), Debian's bare CA
    bundle in the chroot may not. The interpreter is the same minor (checked by the image's test)."""
    src = into / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src)
    shutil.copytree(REPO / "opsmanager", src / "opsmanager", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = into / "wheels"
    images.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
          str(src)])
    (product,) = wheels.glob("opsmanager-*.whl")
    images.run([sys.executable, "-m", "pip", "wheel", "-q", "--only-binary=:all:", "-w", str(wheels), str(product)])
    return wheels


def rootfs() -> tuple[Path, str]:
    """The image's root filesystem (made now unless cached) and its key."""
    rec = recipe(DOCKERFILE.read_text())
    libs = lib_sources(rec)
    h = hashlib.sha256(_sources_digest().encode())
    for rel, path in sorted(libs.items()):
        h.update(rel.encode() + b"\0" + path.read_bytes())
    key = h.hexdigest()[:16]
    target = images.cache_dir() / f"operator-rootfs-{key}"
    if target.is_dir():
        return target, key
    with images.building("operator-rootfs"):
        if not target.is_dir():
            _make_rootfs(rec, libs, target)
    return target, key


def _make_rootfs(rec: Recipe, libs: dict[str, Path], target: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        raise images.ImageError("mmdebstrap is not installed: `make tools` installs it (Debian's package)")
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob("operator-rootfs-*"):
        shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".operator-") as tmp:
        wheels = _wheels(Path(tmp))
        partial = Path(tmp) / "rootfs"
        images.run(["mmdebstrap", "--variant=minbase", "--mode=root", "--format=directory",
              "--aptopt=APT::Install-Recommends \"false\"", f"--include={','.join(rec.packages)}",
              f"--customize-hook=copy-in {wheels} /tmp",
              "--customize-hook=chroot \"$1\" pip install --no-cache-dir --no-compile --break-system-packages "
              "--no-index --find-links /tmp/wheels opsmanager",
              "--customize-hook=rm -rf \"$1\"/tmp/wheels",
              f"--customize-hook=chroot \"$1\" useradd --system --uid {rec.uid} --no-create-home "
              "--shell /usr/sbin/nologin opsmanager",
              rec.suite, str(partial)])
        for rel, path in libs.items():
            dest = partial / LIB_DIR.lstrip("/") / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            dest.chmod(0o755)
        os.replace(partial, target)


def image() -> images.Image:
    rec = recipe(DOCKERFILE.read_text())
    root, key = rootfs()
    return images.Image(REPOSITORY, version(), ((root, "/"),), entrypoint=rec.entrypoint, cmd=rec.cmd,
                        user=rec.user, env=(images.PATH_ENV, *rec.env), fixed_key=key)
