"""Kubernetes Events from the sandbox's controllers (what ``kubectl describe`` shows at the bottom).

Each controller records events as its real counterpart does (component ``kubelet``, ``statefulset-controller``,
``cert-manager-certificates-issuing``, ...). Recording never blocks the caller and never fails it: an event
is best effort, like in client-go's recorder. Repeats of the same (object, reason, message) within a short
time bump ``count``/``lastTimestamp`` of the existing Event instead of creating a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import secrets
from typing import Any

from opsmanager import kube

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recorder:
    def __init__(self, client: kube.Kube | None, component: str, host: str = "sandbox") -> None:
        self.client = client
        self.component = component
        self.host = host
        self._tasks: set[asyncio.Task[None]] = set()
        self._seen: dict[tuple[str, str, str, str, str], tuple[str, int]] = {}
        self.recorded: list[tuple[str, str, str, str]] = []  # (object, type, reason, message), newest last

    def event(self, obj: Obj, type_: str, reason: str, message: str, *, field_path: str = "") -> None:
        meta = obj.get("metadata") or {}
        self.recorded.append((f"{obj.get('kind')}/{meta.get('name')}", type_, reason, message))
        del self.recorded[:-500]
        if self.client is None:
            return
        task = asyncio.get_running_loop().create_task(self._send(obj, type_, reason, message, field_path))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, obj: Obj, type_: str, reason: str, message: str, field_path: str) -> None:
        assert self.client is not None
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        key = (ns, str(meta.get("uid")), reason, message, field_path)
        stamp = now_rfc3339()
        try:
            if key in self._seen:
                name, count = self._seen[key]
                self._seen[key] = (name, count + 1)
                await self.client.patch("v1", "Event", ns, name, {"count": count + 1, "lastTimestamp": stamp})
                return
            name = f"{meta.get('name')}.{secrets.token_hex(8)}"
            involved = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", ""),
                        "name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                        "resourceVersion": meta.get("resourceVersion")}
            if field_path:
                involved["fieldPath"] = field_path
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": ns},
                "involvedObject": {k: v for k, v in involved.items() if v},
                "reason": reason, "message": message, "type": type_, "count": 1,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
                "source": {"component": self.component, "host": self.host},
                "reportingComponent": self.component, "reportingInstance": self.host,
            }
            await self.client.create(body)
            self._seen[key] = (name, 1)
            if len(self._seen) > 2000:
                self._seen.pop(next(iter(self._seen)))
        except kube.KubeError as exc:
            log.debug("event %s/%s not recorded: %s", reason, meta.get("name"), exc)

    async def flush(self) -> None:
        """Wait for in-flight event writes (used on shutdown)."""
        if self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self._tasks), timeout=2)
