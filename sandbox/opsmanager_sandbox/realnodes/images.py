"""Container images with no registry outside: OCI archives made here from what ``make controlplane`` built, loaded
into every node's containerd under the names a user's cluster would pull.

- ``registry.k8s.io/pause``: compiled from the kubernetes module's own ``build/pause/linux/pause.c`` (``gcc -static``);
- ``quay.io/coreos/etcd:v<version>``: etcd, etcdctl and etcdutl of each built release in ``/usr/local/bin``;
- ``registry.k8s.io/coredns/coredns``: the CoreDNS build of ``sandbox/controlplane/coredns``;
- the operator's image (:mod:`.operator_image`), a Debian root filesystem with the product installed.

Each archive is an OCI image layout made with umoci (Debian's package) and tarred, cached under
``<controlplane cache>/images/`` by a key of its content, so nothing present is made again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from opsmanager_sandbox import realcp

PAUSE: Final = ("registry.k8s.io/pause", "3.10.2")
COREDNS_REPO: Final = "registry.k8s.io/coredns/coredns"
ETCD_REPO: Final = "quay.io/coreos/etcd"
PATH_ENV: Final = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Image:
    """An image to make: ``layers`` are (host directory, path in the image) pairs, one layer each."""

    repository: str
    tag: str
    layers: tuple[tuple[Path, str], ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = (PATH_ENV,)
    workdir: str = ""
    fixed_key: str = ""
    """The content's key when the caller knows it (a whole root filesystem is too large to hash each time)."""

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.tag}"

    def key(self) -> str:
        """A hash of everything the archive is made of (file names, modes and contents; the configuration)."""
        digest = hashlib.sha256(json.dumps([self.ref, self.entrypoint, self.cmd, self.user, self.env,
                                            self.workdir, [t for _, t in self.layers]]).encode())
        if self.fixed_key:
            digest.update(self.fixed_key.encode())
            return digest.hexdigest()[:16]
        for source, _ in self.layers:
            for path in sorted(source.rglob("*")) if source.is_dir() else [source]:
                rel = path.relative_to(source) if source.is_dir() else Path(path.name)
                digest.update(f"{rel}\0{path.lstat().st_mode}\0".encode())
                if path.is_symlink():
                    digest.update(os.readlink(path).encode())
                elif path.is_file():
                    digest.update(_file_digest(path))
        return digest.hexdigest()[:16]


_DIGESTS: dict[tuple[str, int, int], bytes] = {}


def _file_digest(path: Path) -> bytes:
    st = path.stat()
    cache_key = (str(path), st.st_size, st.st_mtime_ns)
    if cache_key not in _DIGESTS:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[cache_key] = h.digest()
    return _DIGESTS[cache_key]


def cache_dir() -> Path:
    return Path(realcp.build_module().cache_root()) / "images"


@contextlib.contextmanager
def building(name: str) -> Iterator[None]:
    """An exclusive lock on making ``name`` in the image cache: test workers starting sandboxes at once make each
    thing once (the second finds it made) instead of racing to rename two copies into one place."""
    _mkdir(cache_dir())
    with open(cache_dir() / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run(argv: Sequence[str], *, cwd: Path | None = None) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd, timeout=1800)
    if done.returncode != 0:
        raise ImageError(f"`{' '.join(argv)}` failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done.stdout


def umoci() -> str:
    found = shutil.which("umoci")
    if found is None:
        raise ImageError("umoci is not installed: `make tools` installs it (Debian's umoci package)")
    return found


def archive(image: Image) -> Path:
    """The OCI archive of ``image`` (made now unless cached)."""
    safe = image.ref.replace("/", "_").replace(":", "_")
    target = cache_dir() / f"{safe}-{image.key()}.tar"
    if target.is_file():
        return target
    with building(safe):
        if not target.is_file():
            _make(image, target)
    return target


def _make(image: Image, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tool = umoci()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        layout = Path(tmp) / "layout"
        ref = f"{layout}:{image.tag}"
        run([tool, "init", "--layout", str(layout)])
        run([tool, "new", "--image", ref])
        for source, into in image.layers:
            run([tool, "insert", "--image", ref, str(source), into])
        config = [tool, "config", "--image", ref, "--clear=config.env", "--clear=config.cmd",
                  "--clear=config.entrypoint"]
        config += [f"--config.env={e}" for e in image.env]
        config += [f"--config.entrypoint={e}" for e in image.entrypoint]
        config += [f"--config.cmd={c}" for c in image.cmd]
        if image.user:
            config.append(f"--config.user={image.user}")
        if image.workdir:
            config.append(f"--config.workingdir={image.workdir}")
        run(config)
        run([tool, "gc", "--layout", str(layout)])
        partial = Path(tmp) / "image.tar"
        with tarfile.open(partial, "w") as tar:
            for entry in sorted(layout.iterdir()):
                tar.add(entry, arcname=entry.name)
        os.replace(partial, target)


# -- the images of a sandbox -----------------------------------------------------------------------------------------

def _staged(name: str, files: Mapping[str, Path], mode: int = 0o755) -> Path:
    """A directory under the image cache holding copies of ``files`` (name in the image → host file), made once per
    content: what ``umoci insert`` takes as one layer."""
    digest = hashlib.sha256()
    for dest, src in sorted(files.items()):
        digest.update(dest.encode() + b"\0" + _file_digest(src))
    where = cache_dir() / "staging" / f"{name}-{digest.hexdigest()[:16]}"
    with building(f"staging-{name}"):
        if not where.is_dir():
            _stage(where, files, mode)
    return where


def _stage(where: Path, files: Mapping[str, Path], mode: int) -> None:
    partial = Path(tempfile.mkdtemp(dir=_mkdir(where.parent), prefix=".stage-"))
    for dest, src in files.items():
        shutil.copyfile(src, partial / dest)
        (partial / dest).chmod(mode)
    os.replace(partial, where)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def pause_binary() -> Path:
    """``pause`` compiled from the pinned kubernetes module's source (kept beside the module's other builds)."""
    build = realcp.build_module()
    target = Path(build.binary("kubernetes")) / "pause"
    if target.is_file():
        return target
    with building("pause"):
        if not target.is_file():
            _compile_pause(build, target)
    return target


def _compile_pause(build: Any, target: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ImageError("gcc is not installed: the pause image is compiled from the kubernetes module's pause.c")
    go = build._go()
    component = build.COMPONENTS["kubernetes"]
    info = json.loads(run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{component.version()}"],
                           cwd=component.directory))
    source = Path(info["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".pause.{os.getpid()}")
    run([gcc, "-Os", "-static", "-Wall", "-Werror", f"-DVERSION=v{PAUSE[1]}", "-o", str(partial), str(source)])
    run(["strip", str(partial)])
    os.replace(partial, target)


def pause_image() -> Image:
    return Image(PAUSE[0], PAUSE[1], ((_staged("pause", {"pause": pause_binary()}), "/"),),
                 entrypoint=("/pause",), user="65535:65535")


def etcd_images() -> list[Image]:
    """One image per etcd release ``make controlplane`` built (``quay.io/coreos/etcd:v3.5.35`` …)."""
    build = realcp.build_module()
    out = []
    for name, component in build.COMPONENTS.items():
        if not name.startswith("etcd-"):
            continue
        tools = {t: realcp.binary(name, t) for t in ("etcd", "etcdctl", "etcdutl")}
        out.append(Image(ETCD_REPO, component.version(), ((_staged(f"etcd-{component.version()}", tools),
                                                           "/usr/local/bin"),),
                         cmd=("/usr/local/bin/etcd",)))
    return out


def coredns_image() -> Image:
    binary = realcp.binary("coredns", "coredns")
    version = coredns_version()
    return Image(COREDNS_REPO, version, ((_staged(f"coredns-{version}", {"coredns": binary}), "/"),),
                 entrypoint=("/coredns",))


def coredns_version() -> str:
    """The CoreDNS release the component's go.mod pins (the image's tag)."""
    build = realcp.build_module()
    gomod = (build.COMPONENTS["coredns"].directory / "go.mod").read_text()
    found = build.required_version(gomod, "github.com/coredns/coredns")
    if found is None:
        raise ImageError("sandbox/controlplane/coredns/go.mod does not require github.com/coredns/coredns")
    return str(found)
