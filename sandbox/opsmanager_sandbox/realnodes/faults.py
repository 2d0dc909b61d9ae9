"""Network faults inside a pod on real nodes: an nftables table in the pod's own network namespace.

A pod's namespace is reached from the host through the PID of one of its containers (containerd knows it); the
table is named so that healing removes exactly it. Only what is named is cut: dropping a member's peer ports leaves
its client port and the kubelet's probes alone, so the member stays Running and is judged by etcd, not restarted by
the kubelet.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Sequence
from typing import Final

TABLE: Final = "opsmanager_fault"


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


def _nft(pid: int, args: Sequence[str], stdin: str | None) -> None:
    done = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", "nft", *args], input=stdin,
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise FaultError(f"nft {' '.join(args)} in the network namespace of PID {pid} failed: "
                         f"{(done.stderr or done.stdout).strip()}")

