"""Volumes for claims on real nodes outside the CSI driver's classes (:mod:`.csi`: ``standard``, the default, and
``fast``): a claim of class ``""`` or of a class nobody provisions gets what a local-path provisioner gives.

Each such claim without a volume gets a ``hostPath`` PersistentVolume pre-bound to it (``claimRef``), in a directory of
the sandbox; kube-controller-manager's PV controller binds the two, and the kubelet mounts the directory. All nodes
see the host's file system, so a volume's data follows its pod to any node — like a network file system, unlike a
cloud disk (``docs/sandbox.md``, what differs). The volume is deleted with its claim; its directory with the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from opsmanager import kube
from opsmanager_sandbox import node as node_agent
from opsmanager_sandbox.realnodes import csi

Obj = dict[str, Any]


class HostPathProvisioner:
    def __init__(self, client: kube.Kube, root: Path) -> None:
        self.client = client
        self.root = root
        self.claims = kube.Informer(client, "v1", "PersistentVolumeClaim")
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        client.resources.add(node_agent.PERSISTENT_VOLUMES)

    async def start(self) -> None:
        self.claims.add_handler(self._changed)
        self.claims.start()
        await self.claims.synced.wait()

    async def stop(self) -> None:
        await self.claims.stop()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def path(self, pvc: Obj) -> Path:
        meta = pvc["metadata"]
        return self.root / f"{meta.get('namespace') or 'default'}-{meta['name']}-{meta['uid'][:8]}"

    def _changed(self, etype: str, pvc: Obj, old: Obj | None) -> None:
        uid = str(pvc["metadata"].get("uid"))
        if (pvc.get("spec") or {}).get("storageClassName") in csi.STORAGE_CLASSES:
            return  # the CSI driver's: the external-provisioner makes and deletes its volumes
        if etype == "DELETED":
            self._spawn(self._delete(pvc))
        elif not (pvc.get("spec") or {}).get("volumeName") and uid not in self._busy \
                and not pvc["metadata"].get("deletionTimestamp"):
            self._busy.add(uid)
            self._spawn(self._provide(pvc))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _provide(self, pvc: Obj) -> None:
        try:
            await node_agent.offer_volume(self.client, pvc, self.path(pvc))
        finally:
            self._busy.discard(str(pvc["metadata"].get("uid")))

    async def _delete(self, pvc: Obj) -> None:
        with contextlib.suppress(kube.NotFound):
            await self.client.delete("v1", "PersistentVolume", None, f"pvc-{pvc['metadata'].get('uid')}")
