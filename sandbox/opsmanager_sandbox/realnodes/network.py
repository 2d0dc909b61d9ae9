"""The cluster network of a sandbox on real nodes: its slice reserved, its namespaces, bridge, veths and routes made,
and everything of a slice swept away — what a stopped sandbox made, or what a killed one left.

Layout (:mod:`.netplan` has the addresses): a **cluster namespace** holding the bridge that is the cluster's L2
segment; each **node** a namespace of its own with an ``eth0`` on that bridge; the **host** one veth on that bridge
with a route for exactly the slice. Pods get their own namespaces from CNI inside the nodes.

A slice is reserved with an exclusive ``flock`` on ``/tmp/opsmanager-sandbox-ips/slice-<NN>.lock``, held for the
sandbox's life (released by the kernel when its process dies). Whoever takes a free lock first sweeps the slice:
whatever has the slice's names then belongs to a sandbox that is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Final

from opsmanager_sandbox import addresses
from opsmanager_sandbox.realnodes import netplan

log = logging.getLogger(__name__)

LOCK_DIR: Final = Path("/tmp/opsmanager-sandbox-ips")
RUN_DIR: Final = Path("/run/opsmanager")
"""Where the nodes' persistent mount namespaces are pinned (``<tag>/node-<i>.mnt``): a fixed place, so a sweep
finds a killed sandbox's pins whatever its directory was."""
CGROUP_FS: Final = Path("/sys/fs/cgroup")


class NetworkError(RuntimeError):
    """A command that builds the cluster network failed (the message has the command and its output)."""


def run(*argv: str, check: bool = True, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command (in network namespace ``netns`` through ``nsenter``, which keeps the mount namespace)."""
    full = [*(["nsenter", f"--net=/run/netns/{netns}", "--"] if netns else []), *argv]
    done = subprocess.run(full, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise NetworkError(f"`{' '.join(full)}` failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done


def sysctl(netns: str | None, key: str, value: str) -> None:
    run("sysctl", "-q", "-w", f"{key}={value}", netns=netns)


class SliceLock:
    """The exclusive reservation of one slice index (:data:`netplan.SLICES` of them)."""

    def __init__(self, index: int | None = None, *, lock_dir: Path = LOCK_DIR) -> None:
        lock_dir.mkdir(parents=True, exist_ok=True)
        candidates = [index] if index is not None else random.sample(range(netplan.SLICES), k=netplan.SLICES)
        self._fd: int | None = None
        for i in candidates:
            fd = addresses.try_lock(lock_dir / f"slice-{i:02d}.lock")
            if fd is not None:
                self._fd, self.index = fd, i
                return
        raise NetworkError(f"every slice of {netplan.SUPERNET} is taken by a running sandbox (locks in {lock_dir})"
                           if index is None else f"slice {index} is taken by a running sandbox")

    def close(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


# -- the sweep -------------------------------------------------------------------------------------------------------

def _cgroup_dirs(tag: str) -> list[Path]:
    """Every cgroup directory of the slice, in every v1 hierarchy, deepest first."""
    found: list[Path] = []
    if not CGROUP_FS.is_dir():
        return found
    for hierarchy in CGROUP_FS.iterdir():
        with contextlib.suppress(OSError):
            for top in hierarchy.iterdir():
                if top.is_dir() and top.name.startswith(tag):
                    found += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def cgroup_pids(tag: str) -> set[int]:
    pids: set[int] = set()
    for d in _cgroup_dirs(tag):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
    return pids


def kill_cgroups(tag: str, timeout: float = 20.0) -> int:
    """SIGKILL every process in the slice's cgroups until none is left, then remove the cgroups; how many were
    killed. Shims and containers are not children of the sandbox, so this is how none of them outlives it."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = cgroup_pids(tag)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        if time.monotonic() > deadline:
            raise NetworkError(f"processes {sorted(pids)} in the cgroups of {tag} survive SIGKILL")
        time.sleep(0.05)  # the kernel reaps them
    for d in _cgroup_dirs(tag):
        deadline = time.monotonic() + 5.0
        while d.exists():
            try:
                d.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # a dying task still counted
    return len(killed)


def _mounts_under(prefix: Path) -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if point == str(prefix) or point.startswith(str(prefix) + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def release_pins(tag: str) -> None:
    """Unmount the pinned mount namespaces of the slice (a namespace goes once no process and no pin holds it)."""
    where = RUN_DIR / tag
    for point in _mounts_under(where):
        run("umount", "-l", point, check=False)
    shutil.rmtree(where, ignore_errors=True)


def namespaces(tag: str) -> list[str]:
    out = run("ip", "netns", "list", check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    index = int(tag.removeprefix(netplan.PREFIX))
    return [n for n in names if netplan.owns(n, index)]


def links(tag: str) -> list[str]:
    out = run("ip", "-o", "link", "show", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    index = int(tag.removeprefix(netplan.PREFIX))
    return [n for n in names if netplan.owns(n, index)]


def sweep(index: int) -> list[str]:
    """Remove everything of slice ``index``: processes in its cgroups (killed), its cgroups, its pinned mount
    namespaces, its network namespaces, its host veth. Returns what was found (empty: nothing was left)."""
    tag = f"{netplan.PREFIX}{index:02d}"
    found = []
    killed = kill_cgroups(tag)
    if killed:
        found.append(f"{killed} processes")
    pins = _mounts_under(RUN_DIR / tag)
    if pins:
        found.append(f"{len(pins)} mount namespace pins")
    release_pins(tag)
    for ns in namespaces(tag):
        found.append(f"netns {ns}")
        run("ip", "netns", "delete", ns, check=False)
    for link in links(tag):
        found.append(f"link {link}")
        run("ip", "link", "delete", link, check=False)
    if found:
        log.warning("swept what a stopped or killed sandbox left in slice %s: %s", tag, ", ".join(found))
    return found


def leftovers(index: int) -> list[str]:
    """What of slice ``index`` still exists (for tests of a clean stop): processes, cgroups, pins, namespaces,
    links."""
    tag = f"{netplan.PREFIX}{index:02d}"
    out = [f"process {p}" for p in sorted(cgroup_pids(tag))]
    out += [f"cgroup {d}" for d in _cgroup_dirs(tag)]
    out += [f"mount {m}" for m in _mounts_under(RUN_DIR / tag)]
    out += [f"netns {n}" for n in namespaces(tag)]
    out += [f"link {n}" for n in links(tag)]
    return out


# -- building it -----------------------------------------------------------------------------------------------------

class ClusterNetwork:
    """The namespaces, bridge, veths and routes of one slice (see the module docstring)."""

    def __init__(self, plan: netplan.NetPlan) -> None:
        self.plan = plan

    def create(self) -> None:
        p = self.plan
        ns = p.cluster_netns
        run("ip", "netns", "add", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", ns, "addr", "add", f"{p.gateway}/{p.segment.prefixlen}", "dev", "br0")
        run("ip", "-n", ns, "link", "set", "br0", "up")
        sysctl(ns, "net.ipv4.ip_forward", "1")
        # the host's veth: its far end a port of the bridge
        run("ip", "link", "add", p.host_veth, "type", "veth", "peer", "name", "host", "netns", ns)
        run("ip", "-n", ns, "link", "set", "host", "master", "br0", "up")
        run("ip", "addr", "add", f"{p.host_ip}/{p.segment.prefixlen}", "dev", p.host_veth)
        run("ip", "link", "set", p.host_veth, "up")
        # nothing that arrives from the slice is forwarded by the host
        sysctl(None, f"net.ipv4.conf.{p.host_veth}.forwarding", "0")
        run("ip", "route", "add", str(p.slice), "via", p.gateway, "dev", p.host_veth)
        for node in range(1, p.nodes + 1):
            self._add_node(node)

    def _add_node(self, node: int) -> None:
        p = self.plan
        ns, cluster = p.node_netns(node), p.cluster_netns
        run("ip", "netns", "add", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", cluster, "link", "add", p.node_veth(node), "type", "veth", "peer", "name", "eth0",
            "netns", ns)
        run("ip", "-n", cluster, "link", "set", p.node_veth(node), "master", "br0", "up")
        run("ip", "-n", ns, "addr", "add", f"{p.node_ip(node)}/{p.segment.prefixlen}", "dev", "eth0")
        run("ip", "-n", ns, "link", "set", "eth0", "up")
        run("ip", "-n", ns, "route", "add", str(p.slice), "via", p.gateway)
        run("ip", "-n", cluster, "route", "add", str(p.pod_cidr(node)), "via", p.node_ip(node))
        sysctl(ns, "net.ipv4.ip_forward", "1")
        # pod-to-Service traffic DNATed to a pod of the same bridge must come back through the node's NAT
        sysctl(ns, "net.bridge.bridge-nf-call-iptables", "1")

    def destroy(self) -> None:
        p = self.plan
        for node in range(1, p.nodes + 1):
            run("ip", "netns", "delete", p.node_netns(node), check=False)
        run("ip", "netns", "delete", p.cluster_netns, check=False)  # takes the veths (and the host route) along
        run("ip", "link", "delete", p.host_veth, check=False)
