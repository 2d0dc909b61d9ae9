"""Child processes of the harness: ``opsmanager run`` against a kubeconfig, and the one way to stop a child.

The product's own sandbox starts the operator asynchronously (``opsmanager_sandbox.children``); the harness needs
a synchronous handle it can SIGKILL at a step boundary and restart, and that outlives any one event loop — hence
this small class here, in the checkout, not in the installed package.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from opsmanager_sandbox import children


def stop(process: subprocess.Popen[bytes], timeout: float) -> int | None:
    """SIGTERM to the PID, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    return process.returncode


def etcd_under(pid: int) -> int | None:
    """The etcd process of a member container whose first process is ``pid``: ``pid`` itself, or its child when that
    is etcdstop (the members' etcd runs under it). What a test freezes or kills to act on etcd alone. None when
    there is none: ``pid`` is gone, or it is an etcdstop whose etcd has ended (the container is ending)."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "etcdstop":
            return pid
        tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
        children = [int(c) for t in tasks for c in t.read_text().split()]
    except (OSError, ValueError):
        return None
    return children[0] if children else None


# What the operator logs as it SIGKILLs itself at an OPSMANAGER_FAILPOINTS boundary.
FAILPOINT_CRASH = "failpoint: crashing after a step boundary"


@dataclasses.dataclass
class OperatorProcess:
    """``opsmanager run`` in a child process. Start with :meth:`start`, stop with :meth:`stop` (by PID, SIGTERM
    then SIGKILL); :meth:`log` returns what it printed (kept in ``log_path``)."""

    process: subprocess.Popen[bytes]
    log_path: Path
    liveness_url: str
    metrics_url: str
    _log_file: IO[bytes] | None = None
    log_start: int = 0  # where this process's output begins in log_path (earlier runs append to the same file)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, kubeconfig: str | os.PathLike[str], *, log_path: str | os.PathLike[str],
              namespaces: Sequence[str] = (), interval: float | None = None, standalone: bool = True,
              with_ops: bool = True, verbose: bool = False, extra_args: Sequence[str] = (),
              env: dict[str, str] | None = None, ready_timeout: float = 30.0,
              delivery_timeout: float | None = None, prefix: Sequence[str] = ()) -> OperatorProcess:
        """Start the operator against ``kubeconfig`` and wait until it serves its liveness probe.
        ``delivery_timeout``: its ``--certificate-delivery-timeout`` (None: the operator's default); ``prefix``: a
        command that execs the rest of the argv (as :func:`opsmanager_sandbox.realnodes.faults.in_cgroup`'s)."""
        url = f"http://127.0.0.1:{children.free_port()}/healthz"
        metrics_port = children.free_port()
        argv = [sys.executable, "-m", "opsmanager", "run", "--kubeconfig", os.fspath(kubeconfig), "--liveness", url,
                "--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1"]
        for ns in namespaces:
            argv += ["--namespace", ns]
        if interval is not None:
            argv += ["--interval", str(interval)]
        if standalone:
            argv.append("--standalone")
        if not with_ops:
            argv.append("--no-ops")
        if delivery_timeout is not None:
            argv += ["--certificate-delivery-timeout", str(delivery_timeout)]
        if verbose:
            argv.append("--verbose")
        argv += list(extra_args)
        path = Path(log_path)
        log_file = path.open("ab")
        log_start = log_file.tell()
        process = subprocess.Popen([*prefix, *argv], stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **(env or {})})
        op = cls(process, path, url, f"http://127.0.0.1:{metrics_port}/metrics", log_file, log_start)
        try:
            op.wait_ready(ready_timeout)
        except BaseException:
            op.stop()
            raise
        return op

    def wait_ready(self, timeout: float) -> None:
        """Until the liveness probe answers. An operator armed with a failpoint (``env`` of :meth:`start`) that
        has already crashed at it counts as started: the boundary came before the probe did, and the caller
        watches for that crash."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if self.process.returncode == -signal.SIGKILL and FAILPOINT_CRASH in self.own_log():
                    return
                raise RuntimeError(f"the operator exited with code {self.process.returncode} before it was ready:\n"
                                   f"{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.liveness_url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)  # the poll interval
        raise TimeoutError(f"the operator did not become ready within {timeout}s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def own_log(self) -> str:
        """What this process printed (not the earlier runs before it in the same file)."""
        try:
            return self.log_path.read_bytes()[self.log_start:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        code = stop(self.process, timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code
