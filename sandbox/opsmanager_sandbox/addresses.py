"""Pod IP addresses: each pod gets its own loopback address ``127.x.y.z``.

A real pod has its own network namespace and IP; in the sandbox every pod shares the host's loopback, so the
kubelet gives each pod a distinct address of 127.0.0.0/8 and binds its servers there. Addresses are stable
per (namespace, pod name) for the life of the sandbox — a StatefulSet pod that is deleted and recreated gets
the same IP back, like a StatefulSet pod keeps its DNS name.

The second octet ``x`` is chosen at random per sandbox and reserved with an exclusive ``flock`` on
``/tmp/opsmanager-sandbox-ips/127.<x>.lock`` held for the sandbox's life, so sandboxes running in parallel on
one machine (test workers, a demo) never hand out the same address; ranges where something already listens
(another tool's local etcd on 127.x.y.z) are skipped. ``127.0.x.x`` and ``127.255.x.x`` are
never used. Within ``127.x.0.0/16`` pods get ``127.x.<y>.<z>`` with y in 1..254 and z in 1..254.
"""

from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path

LOCK_DIR = Path("/tmp/opsmanager-sandbox-ips")


class AddressSpaceExhausted(RuntimeError):
    pass


def _listening_second_octets() -> set[int]:
    """Second octets of 127.x.y.z addresses with a listening TCP socket right now (from /proc/net/tcp)."""
    busy: set[int] = set()
    try:
        with open("/proc/net/tcp") as fh:
            next(fh, None)
            for line in fh:
                fields = line.split()
                if len(fields) > 3 and fields[3] == "0A":  # LISTEN
                    addr = int(fields[1].split(":")[0], 16)  # little-endian hex: first octet in the low byte
                    if addr & 0xFF == 127:
                        busy.add((addr >> 8) & 0xFF)
    except OSError:
        pass
    return busy


def try_lock(path: Path) -> int | None:
    """An exclusive ``flock`` on ``path`` (created if missing, our PID written in it), or None if another process
    holds it. The kernel releases it when the holder dies: a reservation outlives no sandbox."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


class PodAddresses:
    """Allocator of pod IPs inside one reserved ``127.x.0.0/16``. Call :meth:`close` to release it."""

    def __init__(self, second_octet: int | None = None, *, lock_dir: Path = LOCK_DIR) -> None:
        lock_dir.mkdir(parents=True, exist_ok=True)
        if second_octet is not None:
            candidates = [second_octet]
        else:  # avoid ranges where something (another tool's etcd, a test) already listens
            busy = _listening_second_octets()
            candidates = [x for x in random.sample(range(16, 255), k=239) if x not in busy]
        self._fd: int | None = None
        for x in candidates:
            fd = try_lock(lock_dir / f"127.{x}.lock")
            if fd is None:
                continue
            self._fd = fd
            self.second_octet = x
            break
        else:
            raise AddressSpaceExhausted(
                f"every 127.x.0.0/16 range is reserved by another sandbox (locks in {lock_dir})"
                if second_octet is None else f"127.{second_octet}.0.0/16 is reserved by another sandbox")
        self._by_pod: dict[tuple[str, str], str] = {}
        self._next = 0

    @property
    def prefix(self) -> str:
        return f"127.{self.second_octet}."

    def get(self, namespace: str, name: str) -> str | None:
        return self._by_pod.get((namespace, name))

    def allocate(self, namespace: str, name: str) -> str:
        """The address of pod ``namespace/name``, allocated on first use and the same afterwards."""
        key = (namespace, name)
        if key in self._by_pod:
            return self._by_pod[key]
        if self._next >= 254 * 254:
            raise AddressSpaceExhausted(f"127.{self.second_octet}.0.0/16 has no free pod address left")
        y, z = divmod(self._next, 254)
        self._next += 1
        ip = f"127.{self.second_octet}.{y + 1}.{z + 1}"
        self._by_pod[key] = ip
        return ip

    def owner(self, ip: str) -> tuple[str, str] | None:
        for key, value in self._by_pod.items():
            if value == ip:
                return key
        return None

    def close(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> PodAddresses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
