"""Network faults on real nodes: an nftables table in a pod's own network namespace (:class:`Cut`), or in the
host's for the sockets of one process (:class:`ProcessCut`).

A pod's namespace is reached from the host through the PID of one of its containers (containerd knows it); the
table is named so that healing removes exactly it. Only what is named is cut: dropping a member's peer ports leaves
its client port and the kubelet's probes alone, so the member stays Running and is judged by etcd, not restarted by
the kubelet.

A process on the host (the operator, run beside the sandbox) shares the host's address with the harness's writer,
so an address cannot tell their packets apart. Its cgroup can: the process is started in a cgroup v2 group of its
own (:class:`ProcessGroup`; this machine kind mounts the v1 controllers and the unified hierarchy beside them), every
socket it opens carries that group, and nftables' ``socket cgroupv2`` matches it in the host's output hook.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
from collections.abc import Sequence
from typing import Final

TABLE: Final = "opsmanager_fault"
UNIFIED: Final = pathlib.Path("/sys/fs/cgroup/unified")
"""Where the cgroup v2 hierarchy is mounted beside the v1 controllers (nftables resolves a ``socket cgroupv2`` path
under ``/sys/fs/cgroup``)."""


class FaultError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Cut:
    """A table of drop rules in one pod's network namespace (``pid``: a process of the pod)."""

    pid: int
    ports: tuple[int, ...]
    inbound: bool = True
    outbound: bool = True

    def ruleset(self) -> str:
        ports = ", ".join(str(p) for p in self.ports)
        chains = []
        if self.inbound:  # connections to the pod's ports, and replies to the pod's own connections to them
            chains.append(f"  chain in {{ type filter hook input priority 0; policy accept;\n"
                          f"    tcp dport {{ {ports} }} drop\n    tcp sport {{ {ports} }} drop\n  }}")
        if self.outbound:
            chains.append(f"  chain out {{ type filter hook output priority 0; policy accept;\n"
                          f"    tcp dport {{ {ports} }} drop\n    tcp sport {{ {ports} }} drop\n  }}")
        return f"table inet {TABLE} {{\n" + "\n".join(chains) + "\n}\n"

    def apply(self) -> None:
        _nft(self.pid, ["-f", "-"], self.ruleset())

    def heal(self) -> None:
        _nft(self.pid, ["delete", "table", "inet", TABLE], None)


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
    """A cgroup v2 group of its own for a process started through :meth:`prefix` (made by :meth:`create`, removed
    by :meth:`remove` once its processes are gone)."""

    name: str

    @property
    def path(self) -> pathlib.Path:
        return UNIFIED / self.name

    def create(self) -> ProcessGroup:
        if not UNIFIED.is_dir():
            raise FaultError(f"no cgroup v2 hierarchy at {UNIFIED}: a process cannot be cut by its cgroup here")
        self.path.mkdir(exist_ok=True)
        return self

    def prefix(self) -> tuple[str, ...]:
        """A command that moves itself into the group and execs the rest of its argv: every socket the process
        opens is the group's from the start."""
        return ("sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', os.fspath(self.path))

    def remove(self) -> None:
        if self.path.is_dir():
            self.path.rmdir()


@dataclasses.dataclass(frozen=True)
class ProcessCut:
    """A table in the host's network namespace that drops what the sockets of ``group`` send to ``address`` (on
    ``port``, or any): the process's connections there stall, as behind a partition, and resume when it heals
    (TCP retransmits); nothing else on the host is touched. ``table``: a name of its own, so faults can overlap."""

    group: ProcessGroup
    address: str
    port: int | None = None
    table: str = TABLE

    def ruleset(self) -> str:
        family = "ip6" if ":" in self.address else "ip"
        port = f" tcp dport {self.port}" if self.port is not None else ""
        return (f"table inet {self.table} {{\n  chain out {{ type filter hook output priority 0; policy accept;\n"
                f"    socket cgroupv2 level 1 \"{UNIFIED.name}/{self.group.name}\" {family} daddr {self.address}"
                f"{port} drop\n  }}\n}}\n")

    def apply(self) -> None:
        _nft(None, ["-f", "-"], self.ruleset())

    def heal(self) -> None:
        _nft(None, ["delete", "table", "inet", self.table], None)


def _nft(pid: int | None, args: Sequence[str], stdin: str | None) -> None:
    """``nft`` in the network namespace of ``pid`` (None: the host's own)."""
    enter = ["nsenter", f"--net=/proc/{pid}/ns/net", "--"] if pid is not None else []
    done = subprocess.run([*enter, "nft", *args], input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        where = f"the network namespace of PID {pid}" if pid is not None else "the host's network namespace"
        raise FaultError(f"nft {' '.join(args)} in {where} failed: {(done.stderr or done.stdout).strip()}")

