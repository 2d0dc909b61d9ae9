"""The product's own processes as children of the sandbox: started from its CLI, awaited ready, stopped by PID.

Why child processes and not imports: the sandbox is an emulated cluster, and in a cluster the operator and the
admission webhook are separate processes that reach the API server over HTTP with a kubeconfig. Running them as
``python -m opsmanager run …`` / ``python -m opsmanager webhook serve …`` keeps the sandbox free of operator
internals (it imports only the API models, pki and the Kubernetes layer), exercises the real command lines, and
makes a crash visible as an exit code with a log instead of a stuck task in the sandbox's loop.

Readiness is polled (a probe, every ``interval``, until a deadline); an early exit fails at once with the tail
of the child's log. :meth:`Child.stop` sends SIGTERM to that PID, waits ``grace`` seconds, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from opsmanager_sandbox import process


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the child binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` run under util-linux's ``setpriv --pdeathsig KILL`` (``PR_SET_PDEATHSIG``, kept across its exec).
    Not a ``preexec_fn``: that makes Python fork() instead of vfork(), which runs grpc's fork handlers in the child
    of a process that uses grpc (the harness's etcd clients), and they abort it before it execs."""
    return [process.find_tool("setpriv"), "--pdeathsig", "KILL", *argv]


async def output(argv: Sequence[str], timeout: float) -> tuple[int, str]:
    """Run ``argv`` to its end (stdout and stderr together): (exit code, output); (-1, why) past ``timeout``."""
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, f"{' '.join(argv)}: no answer in {timeout}s"
    return proc.returncode or 0, out.decode(errors="replace")


def product_argv(*args: str) -> list[str]:
    """``python -m opsmanager ARGS`` with this interpreter (the installed product's CLI)."""
    return [sys.executable, "-m", "opsmanager", *args]


@dataclasses.dataclass
class Child:
    """One child process with its log file."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    _log_file: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(cls, name: str, argv: Sequence[str], *, log_path: Path,
                    env: Mapping[str, str] | None = None, die_with_parent: bool = False) -> Child:
        """``die_with_parent``: the kernel SIGKILLs the child when this process dies (``PR_SET_PDEATHSIG``), so a
        killed sandbox leaves no control-plane process behind."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = log_path.open("ab")
        try:
            process = await asyncio.create_subprocess_exec(
                *(_die_with_parent(argv) if die_with_parent else argv), stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file, stderr=asyncio.subprocess.STDOUT, env={**os.environ, **(env or {})})
        except BaseException:
            log_file.close()
            raise
        return cls(name, process, log_path, log_file)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    async def wait_ready(self, probe: Callable[[], Awaitable[bool]], *, timeout: float,
                         interval: float = 0.1) -> None:
        """Poll ``probe`` until it is true; RuntimeError if the child exits first, TimeoutError at the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self.process.returncode is not None:
                raise RuntimeError(f"{self.name} exited with code {self.process.returncode} before it was ready:\n"
                                   f"{self.log()[-3000:]}")
            if await probe():
                return
            if loop.time() > deadline:
                raise TimeoutError(f"{self.name} was not ready within {timeout}s:\n{self.log()[-3000:]}")
            await asyncio.sleep(interval)  # the poll interval

    async def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM to the PID, wait up to ``grace``, then SIGKILL. Returns the exit code."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return self.process.returncode
