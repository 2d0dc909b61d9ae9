"""The members' data volumes: their claims (what each asks for, what it has, whether a resize is under way) and the
size of each member's filesystem as the kubelet measures it.

A claim is ``data-<pod>`` (the StatefulSet's claim template ``data``). Growing one is a patch of its
``spec.resources.requests.storage``; Kubernetes then grows the volume (the external resizer: the claim's condition
``Resizing``), and the filesystem on it (the kubelet: ``FileSystemResizePending`` until it has — while the volume
is mounted for an online expansion, at the next mount for an offline one). ``status.capacity.storage`` becomes the
new size once both are done.

The filesystem's size is read from the kubelet's own statfs of the mounted volume: ``GET
/api/v1/nodes/<node>/proxy/stats/summary`` (``pods[].volume[].capacityBytes`` of the volume named ``data``) —
through the API server, with no exec into the etcd container (its image has no shell) and no agent of ours on the
node. That is what the member's etcd sees on its data directory; the claim's capacity is only what Kubernetes
recorded. The fast tests answer the same request from their fake kubelet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from opsmanager import kube
from opsmanager.api import common, constants
from opsmanager.cluster import naming

# Claim conditions Kubernetes sets while a resize is under way.
RESIZING = "Resizing"
FILESYSTEM_RESIZE_PENDING = "FileSystemResizePending"


def claim_name(pod: str) -> str:
    """The data claim of member ``pod`` (as the StatefulSet names it from its claim template)."""
    return f"{naming.DATA_VOLUME}-{pod}"


def size_bytes(quantity: str | int) -> int:
    """A quantity (``2Gi``) in bytes."""
    return int(common.quantity_value(quantity))


@dataclasses.dataclass(frozen=True)
class Claim:
    """One member's data claim as Kubernetes reports it (bytes; 0 when not reported yet)."""

    name: str
    requested: int
    capacity: int
    storage_class: str | None
    conditions: tuple[str, ...]  # the types of its True conditions

    @property
    def resizing(self) -> bool:
        return RESIZING in self.conditions

    @property
    def filesystem_pending(self) -> bool:
        return FILESYSTEM_RESIZE_PENDING in self.conditions

    def grown(self, size: int) -> bool:
        """The volume and its filesystem have the size: the claim's capacity says so and no resize is pending."""
        return self.capacity >= size and not self.resizing and not self.filesystem_pending

    def volume_grown(self, size: int) -> bool:
        """The volume has the size, its filesystem perhaps not yet (it grows at the next mount)."""
        return self.grown(size) or (self.requested >= size and self.filesystem_pending)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Claim:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        capacity = (status.get("capacity") or {}).get("storage")
        conds = tuple(str(c.get("type")) for c in status.get("conditions") or () if c.get("status") == constants.TRUE)
        return cls(name=str(obj["metadata"]["name"]), requested=size_bytes(requested) if requested else 0,
                   capacity=size_bytes(capacity) if capacity else 0, storage_class=spec.get("storageClassName"),
                   conditions=conds)


async def claim(k: kube.Kube, namespace: str, pod: str) -> Claim | None:
    """Member ``pod``'s data claim, None when there is none (ephemeral storage, or not created yet)."""
    obj = await k.get("v1", "PersistentVolumeClaim", namespace, claim_name(pod))
    return Claim.of(obj) if obj is not None else None


async def request_size(k: kube.Kube, namespace: str, pod: str, size: str) -> None:
    """Ask member ``pod``'s claim for ``size`` (the API server refuses a class that cannot expand:
    ``kube.Invalid``/``kube.Forbidden``, with its reason)."""
    await k.patch("v1", "PersistentVolumeClaim", namespace, claim_name(pod),
                  {"spec": {"resources": {"requests": {"storage": size}}}})


async def capacities(k: kube.Kube, namespace: str, pods: list[str]) -> dict[str, int]:
    """The capacity of each member's data volume (claims not found, or not bound yet, left out)."""
    out: dict[str, int] = {}
    for pod in pods:
        found = await claim(k, namespace, pod)
        if found is not None and found.capacity:
            out[pod] = found.capacity
    return out


async def filesystem_bytes(k: kube.Kube, namespace: str, pod: Mapping[str, Any]) -> int | None:
    """The size of member ``pod``'s data filesystem as the kubelet's statfs reports it (``capacityBytes``); None
    when the pod is not on a node yet or the kubelet does not report the volume (yet)."""
    node = (pod.get("spec") or {}).get("nodeName")
    name = (pod.get("metadata") or {}).get("name")
    if not node or not name:
        return None
    summary = await k.request("GET", f"/api/v1/nodes/{node}/proxy/stats/summary")
    for entry in (summary or {}).get("pods") or ():
        ref = entry.get("podRef") or {}
        if (ref.get("namespace"), ref.get("name")) != (namespace, name):
            continue
        for volume in entry.get("volume") or ():
            if volume.get("name") == naming.DATA_VOLUME and volume.get("capacityBytes") is not None:
                return int(volume["capacityBytes"])
    return None
