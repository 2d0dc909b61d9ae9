"""A real S3 server on loopback for the backup tests: SeaweedFS's ``weed mini`` (master, volume server, filer, S3
gateway and its admin server in one process), built from its Go module by ``sandbox/controlplane/build.py`` (``make
controlplane``, component ``seaweedfs``), started with its data in a given directory, stopped by PID.

    with ObjectStoreServer(tmp_path / "s3", buckets=("backups",), tls=True) as s3:
        s3.endpoint, s3.access_key, s3.secret_key, s3.ca_pem      # https://127.0.0.1:<port>, …, the CA's PEM
        s3.client()                                               # a boto3 S3 client for it (path-style)

    async with ObjectStoreServer(dir) as s3: ...                  # the same from an event loop

What is set, and why (D27.1):

- **``weed mini``, not ``weed server``.** Both run every part in one process; ``mini`` is SeaweedFS's mode for a
  single-node development store: its master does not hold back volume allocation for other volume servers to
  report (``weed server`` defers the first write ~5 s after a fresh start). Measured here: ready (a signed write
  works) in ~5 s against ~11 s.
- **Loopback only, free ports.** ``-ip``/``-ip.bind`` 127.0.0.1 and every listener's port chosen here (HTTP and
  gRPC of the master, volume server, filer, S3 gateway and admin server: mini refuses an explicit port that is
  taken rather than moving it); the WebDAV server, the admin UI, the Iceberg and Lance catalogs off; no telemetry. A
  port is free when asked, not when weed binds it a moment later (parallel test workers): a start that lost that
  race is retried on new ports with a fresh data directory, as :mod:`.realcp` does for its etcd.
- **A static identity** from an S3 config file (``-s3.config``): one access key and secret with every action on
  every bucket; anonymous requests are refused. The buckets asked for are created once the gateway answers, and
  only those: an upload to another bucket fails with ``NoSuchBucket`` as on S3 (``-s3.autoCreateBucket=false``;
  SeaweedFS would create it for an admin identity).
- **TLS on the S3 port** when ``tls=True``: a CA and a serving certificate for ``127.0.0.1`` and ``localhost`` from
  :mod:`opsmanager.pki`; the port then speaks HTTPS only.
- **Ready** means a signed write works: the buckets are created and a probe object is written and deleted, polled
  until a deadline (a gateway that answers before its filer or volume server can store anything is not ready).
  An early exit fails at once with the tail of the log.
- **Stop:** SIGTERM to the PID (``-volume.preStopSeconds=0``), a grace of 3 s, then SIGKILL. The gateway, filer
  and admin server stop within a second; once data went through it, the volume server's HTTP listener waits up to
  30 s for connections to go idle (its ``StopTimeout``), and a test store's data is thrown away anyway. The
  process runs under ``setpriv --pdeathsig KILL``, so a killed test run leaves no weed behind. weed's gRPC
  listeners also open ``/tmp/seaweedfs-<service>-grpc-<port>.sock`` (a fixed pattern, not a flag); a clean stop
  removes them, and those of our ports are removed after a SIGKILL too.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from opsmanager import pki
from opsmanager_sandbox import children, process, realcp

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

COMPONENT: Final = "seaweedfs"
TOOL: Final = "weed"
REGION: Final = "us-east-1"
SERVICES: Final = ("master", "volume", "filer", "s3", "admin")
_PROBE_KEY: Final = ".opsmanager-ready"


def weed_binary() -> Path:
    """The built ``weed``, or :class:`realcp.NotBuilt` saying how to build it."""
    return realcp.binary(COMPONENT, TOOL)


class ObjectStoreServer:
    """One ``weed mini`` with its S3 gateway on loopback (see the module docstring)."""

    def __init__(self, dir: str | Path, *, buckets: Sequence[str] = ("backups",), tls: bool = False,
                 host: str = "127.0.0.1", access_key: str | None = None, secret_key: str | None = None,
                 ready_timeout: float = 60.0) -> None:
        self.dir = Path(dir).resolve()
        self.buckets = tuple(buckets)
        self.tls = tls
        self.host = host
        self.access_key = access_key or "AKOPS" + secrets.token_hex(8).upper()
        self.secret_key = secret_key or secrets.token_urlsafe(30)
        self.ready_timeout = ready_timeout
        self.ca: pki.KeyPair | None = None
        self.ports: dict[str, int] = {}
        self.process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._socket_dir: str | None = None

    def __repr__(self) -> str:  # never the secret
        state = f"pid {self.process.pid}" if self.running and self.process else "stopped"
        return f"ObjectStoreServer({self.endpoint if self.ports else str(self.dir)!r}, {state})"

    # -- what a test needs ---------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        assert self.ca is not None, "not started with tls=True"
        return self.ca.cert_pem

    @property
    def ca_file(self) -> Path:
        return self.dir / "tls" / "ca.crt"

    @property
    def log_path(self) -> Path:
        return self.dir / "weed.log"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def client(self, *, access_key: str | None = None, secret_key: str | None = None,
               verify: bool | str | None = None, timeout: float = 10.0, attempts: int = 2) -> S3Client:
        """A boto3 S3 client for this server: path-style, its credentials (or the ones given), its CA."""
        import boto3
        import botocore.config

        config = botocore.config.Config(
            region_name=REGION, signature_version="s3v4", connect_timeout=timeout, read_timeout=timeout,
            retries={"max_attempts": attempts, "mode": "standard"}, s3={"addressing_style": "path"},
            request_checksum_calculation="when_required", response_checksum_validation="when_required")
        if verify is None:
            verify = str(self.ca_file) if self.tls else True
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key, verify=verify, config=config)

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def __enter__(self) -> ObjectStoreServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> ObjectStoreServer:
        await self.astart()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def start(self, *, attempts: int = 3) -> ObjectStoreServer:
        """Start weed and wait until a signed write works; on failure nothing is left running."""
        prepared = self._prepare()
        for attempt in range(1, attempts + 1):
            try:
                self._launch(*prepared)
                self._wait_ready()
                return self._ready()
            except BaseException as err:
                if not self._retry(err, attempt, attempts):
                    raise
        raise AssertionError("unreachable")  # the last attempt's failure is raised above

    async def astart(self, *, attempts: int = 3) -> ObjectStoreServer:
        """:meth:`start` for an event loop: weed is started from the loop's thread (``--pdeathsig`` fires when the
        *thread* that started it ends, so never from a worker thread); the readiness polls run in a worker."""
        prepared = self._prepare()
        for attempt in range(1, attempts + 1):
            try:
                self._launch(*prepared)
                await asyncio.to_thread(self._wait_ready)
                return self._ready()
            except BaseException as err:
                if not self._retry(err, attempt, attempts):
                    raise
        raise AssertionError("unreachable")

    def _prepare(self) -> tuple[Path, Path, list[str]]:
        binary = weed_binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        return binary, self._write_config(), self._write_tls() if self.tls else []

    def _ready(self) -> ObjectStoreServer:
        log.info("S3 server ready at %s (pid %d, data %s)", self.endpoint, self.pid, self.data_dir)
        return self

    def _retry(self, err: BaseException, attempt: int, attempts: int) -> bool:
        """Stop what was started; True if ``err`` was a lost port race and another attempt is left."""
        self.stop()
        lost_port = any(s in str(err) for s in ("address already in use", "is not available on"))
        retry = isinstance(err, RuntimeError) and lost_port and attempt < attempts
        if retry:
            log.info("weed lost a port to another process; new ports (%s)", str(err).splitlines()[0])
        return retry

    def stop(self, grace: float = 3.0) -> int | None:
        """SIGTERM to the PID, up to ``grace`` seconds, then SIGKILL; returns the exit code (None if never
        started). Idempotent."""
        code = self._halt(grace)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        return code

    # -- parts ---------------------------------------------------------------------------------------------------

    def _write_config(self) -> Path:
        identity = {"name": "opsmanager-backup",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
        path = self.dir / "s3.json"
        path.write_text(json.dumps({"identities": [identity]}, indent=2))
        path.chmod(0o600)
        return path

    def _write_tls(self) -> list[str]:
        d = self.dir / "tls"
        d.mkdir(exist_ok=True)
        self.ca = pki.make_ca("opsmanager-sandbox-s3-ca", duration=datetime.timedelta(days=30))
        leaf = pki.make_leaf(self.ca, "opsmanager-sandbox-s3", dns_names=["localhost"],
                             ip_addresses=[self.host], usages=("server",), duration=datetime.timedelta(days=30))
        self.ca_file.write_bytes(self.ca.cert_pem)
        (d / "tls.crt").write_bytes(leaf.cert_pem)
        (d / "tls.key").write_bytes(leaf.key_pem)
        (d / "tls.key").chmod(0o600)
        return [f"-s3.cert.file={d / 'tls.crt'}", f"-s3.key.file={d / 'tls.key'}"]

    def _launch(self, binary: Path, config: Path, tls_args: list[str]) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)  # a fresh store each start
        self.data_dir.mkdir(parents=True)
        self.ports = {}
        for service in SERVICES:
            self.ports[service] = children.free_port(self.host)
            self.ports[f"{service}.grpc"] = children.free_port(self.host)
        if self._socket_dir is None:  # unix socket paths are short (108 bytes): not under a pytest tmp dir
            self._socket_dir = tempfile.mkdtemp(prefix="weed-")
        p = self.ports
        argv = [str(binary), "mini", f"-dir={self.data_dir}", f"-ip={self.host}", f"-ip.bind={self.host}",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}", "-master.telemetry=false",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}", "-volume.preStopSeconds=0",
                f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
                f"-filer.localSocket={self._socket_dir}/filer.sock",
                f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3.grpc']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-s3.config={config}", f"-s3.localSocket={self._socket_dir}/s3.sock", "-s3.autoCreateBucket=false",
                f"-admin.port={p['admin']}", f"-admin.port.grpc={p['admin.grpc']}", "-admin.port.legacy=0",
                "-admin.ui=false", "-webdav=false", *tls_args]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log_path.open("ab")
        self._log_file.write(f"--- {' '.join(argv)}\n".encode())
        self._log_file.flush()
        self.process = subprocess.Popen(
            [process.find_tool("setpriv"), "--pdeathsig", "KILL", *argv], cwd=self.dir, stdin=subprocess.DEVNULL,
            stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_ready(self) -> None:
        """Poll until the buckets exist and a probe object can be written and deleted; RuntimeError if weed exits
        first, TimeoutError at the deadline."""
        import botocore.exceptions

        assert self.process is not None
        deadline = time.monotonic() + self.ready_timeout
        client = self.client(timeout=2.0, attempts=1)
        last = "no answer yet"
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"weed exited with code {self.process.returncode} before it was ready:\n"
                                       f"{self.log()[-3000:]}")
                try:
                    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
                    for bucket in self.buckets:
                        if bucket not in existing:
                            client.create_bucket(Bucket=bucket)
                    if self.buckets:
                        client.put_object(Bucket=self.buckets[0], Key=_PROBE_KEY, Body=b"ready")
                        client.delete_object(Bucket=self.buckets[0], Key=_PROBE_KEY)
                    return
                except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
                    last = f"{type(err).__name__}: {err}"
                if time.monotonic() > deadline:
                    raise TimeoutError(f"weed's S3 gateway at {self.endpoint} was not ready within "
                                       f"{self.ready_timeout}s (last: {last}):\n{self.log()[-3000:]}")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=0.2)  # the poll interval; returns at once if weed exits
        finally:
            client.close()

    def _halt(self, grace: float = 3.0) -> int | None:
        proc, self.process = self.process, None
        code: int | None = None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    proc.wait()
            code = proc.returncode
            for service in SERVICES:  # weed's own per-port gRPC sockets (not configurable), ours once it is gone
                port = self.ports.get(f"{service}.grpc")
                if port:
                    with contextlib.suppress(OSError):
                        os.unlink(f"/tmp/seaweedfs-{service}-grpc-{port}.sock")
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

