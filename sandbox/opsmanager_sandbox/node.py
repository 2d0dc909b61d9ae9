"""What the node agent owes the real control plane besides running pods (``--control-plane kubernetes``).

Against the emulated API server the kubelet binds pods itself and marks claims Bound; against kube-apiserver,
kube-scheduler binds pods to a Node that says it is Ready, and the PersistentVolume controller binds claims to
volumes. So, on the real control plane:

- :class:`NodeAgent` registers the Node (``sandbox``: capacity, addresses, ``Ready``) and keeps it alive — its
  status every :data:`HEARTBEAT` seconds and its Lease in ``kube-node-lease`` (the node lifecycle controller marks
  a silent node ``NotReady`` and taints it after its grace period);
- :func:`persistent_volume` is the volume a claim gets: a ``hostPath`` PersistentVolume in the kubelet's claim
  directory, pre-bound to the claim (``claimRef``), which the PV controller then binds;
- :class:`ServiceProxy` does what kube-proxy would for a Service with a ClusterIP: it listens on
  ``<clusterIP>:<port>`` (the Service range is inside 127.0.0.0/8) and forwards each connection to a Ready pod of
  the Service (or to an address registered for a Service without selector: the sandbox's own webhook process).
  kube-apiserver reaches an admission webhook at its Service's ClusterIP this way; EndpointSlices cannot help here,
  as they refuse loopback addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from opsmanager import kube
from opsmanager.kube.resources import Resource

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NODES: Final = Resource("", "v1", "nodes", "Node", namespaced=False)
PERSISTENT_VOLUMES: Final = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
HEARTBEAT: Final = 10.0  # seconds between status updates and Lease renewals (the kubelet's default Lease period)
LEASE_SECONDS: Final = 40
KUBELET_VERSION: Final = "v1.37.2"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(name: str, host_ip: str) -> Obj:
    """The Node's status: room for every pod the sandbox will run, ``Ready``, its addresses."""
    now = _now()
    room = {"cpu": "64", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"}

    def cond(type_: str, status: str, reason: str, message: str) -> Obj:
        return {"type": type_, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}

    return {"capacity": room, "allocatable": room,
            "conditions": [cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "no pressure"),
                           cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no pressure"),
                           cond("PIDPressure", "False", "KubeletHasSufficientPID", "no pressure"),
                           cond("Ready", "True", "KubeletReady", "the sandbox node agent is posting ready status")],
            "addresses": [{"type": "InternalIP", "address": host_ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "", "architecture": "amd64",
                         "operatingSystem": "linux", "osImage": "opsmanager sandbox",
                         "containerRuntimeVersion": "sandbox://1", "kernelVersion": "", "bootID": "",
                         "machineID": "", "systemUUID": ""}}


class NodeAgent:
    """Registers the Node and keeps its status and Lease fresh (see the module docstring)."""

    def __init__(self, client: kube.Kube, name: str, host_ip: str) -> None:
        self.client = client
        self.name = name
        self.host_ip = host_ip
        client.resources.add(NODES)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with contextlib.suppress(kube.AlreadyExists):
            await self.client.create({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": self.name, "labels": {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                                              "kubernetes.io/arch": "amd64"}}})
        await self._beat()
        self._task = asyncio.create_task(self._heartbeat(), name="node-heartbeat")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _beat(self) -> None:
        await self.client.patch("v1", "Node", None, self.name, {"status": node_status(self.name, self.host_ip)},
                                subresource="status")
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS,
                          "renewTime": _micro_now()}}
        try:
            await self.client.create(lease)
        except kube.AlreadyExists:
            await self.client.patch("coordination.k8s.io/v1", "Lease", "kube-node-lease", self.name,
                                    {"spec": {"renewTime": _micro_now(), "holderIdentity": self.name}})

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)  # the heartbeat's period, not a synchronisation
            try:
                await self._beat()
            except kube.KubeError as exc:
                log.warning("node %s heartbeat: %s", self.name, exc)


def persistent_volume(pvc: Obj, path: str) -> Obj:
    """The hostPath PersistentVolume for claim ``pvc``, pre-bound to it, in the kubelet's directory ``path``."""
    meta = pvc["metadata"]
    spec = pvc.get("spec") or {}
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"pvc-{meta['uid']}", "labels": {"sandbox.opsmanager.dev/claim": meta["uid"]}},
            "spec": {"capacity": {"storage": storage}, "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                     "hostPath": {"path": path, "type": "DirectoryOrCreate"},
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": spec.get("storageClassName") or "",
                     "volumeMode": spec.get("volumeMode") or "Filesystem",
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": meta["name"],
                                  "namespace": meta.get("namespace") or "default", "uid": meta["uid"]}}}


async def offer_volume(client: kube.Kube, pvc: Obj, path: Path) -> None:
    """Create the directory and :func:`persistent_volume` for claim ``pvc`` (one that exists already is fine; any
    other refusal is logged: the claim stays Pending and is offered again on its next change)."""
    meta = pvc["metadata"]
    path.mkdir(parents=True, exist_ok=True)
    client.resources.add(PERSISTENT_VOLUMES)
    try:
        await client.create(persistent_volume(pvc, str(path)))
    except kube.AlreadyExists:
        pass
    except kube.KubeError as exc:
        log.warning("volume for claim %s/%s: %s", meta.get("namespace"), meta["name"], exc)


Target = tuple[str, int]


class ServiceProxy:
    """Listens on each Service's ``<clusterIP>:<port>`` and forwards to a Ready pod (or a registered address).

    ``resolve(namespace, service, port)`` gives the target of a Service with a selector (the kubelet knows which
    pods are Ready and their addresses); :meth:`register` sets the target of a Service without one."""

    def __init__(self, client: kube.Kube, resolve: Callable[[Obj, Obj], Target | None]) -> None:
        self.client = client
        self.resolve = resolve
        self.services = kube.Informer(client, "v1", "Service")
        self._servers: dict[tuple[str, str, int], asyncio.Server] = {}
        self._registered: dict[tuple[str, str, int], Target] = {}

    def register(self, namespace: str, service: str, port: int, host: str, target_port: int) -> None:
        self._registered[(namespace, service, port)] = (host, target_port)

    async def start(self) -> None:
        self.services.add_handler(self._changed)
        self.services.start()
        await self.services.synced.wait()

    async def stop(self) -> None:
        await self.services.stop()
        for server in self._servers.values():
            server.close()
        for server in self._servers.values():
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()

    def _changed(self, etype: str, svc: Obj, old: Obj | None) -> None:
        asyncio.get_running_loop().create_task(self._sync(etype, svc))

    async def _sync(self, etype: str, svc: Obj) -> None:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        ns, name = meta.get("namespace") or "default", meta["name"]
        ip = spec.get("clusterIP")
        wanted = set() if etype == "DELETED" or not ip or ip == "None" else {
            int(p["port"]) for p in spec.get("ports") or () if (p.get("protocol") or "TCP") == "TCP"}
        for key in [k for k in self._servers if k[:2] == (ns, name) and k[2] not in wanted]:
            self._servers.pop(key).close()
        for port in wanted - {k[2] for k in self._servers if k[:2] == (ns, name)}:
            try:
                self._servers[(ns, name, port)] = await asyncio.start_server(self._handler((ns, name, port)), ip,
                                                                             port)
            except OSError as exc:
                log.warning("service %s/%s: cannot listen on %s:%s: %s", ns, name, ip, port, exc)

    def _handler(self, key: tuple[str, str, int]) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                                              Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._forward(key, reader, writer)
        return handle

    def _target(self, key: tuple[str, str, int]) -> Target | None:
        if key in self._registered:
            return self._registered[key]
        svc = self.services.get(key[0], key[1])
        if svc is None:
            return None
        port = next((p for p in (svc.get("spec") or {}).get("ports") or () if int(p["port"]) == key[2]), None)
        return self.resolve(svc, port or {}) if port is not None else None

    async def _forward(self, key: tuple[str, str, int], reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        target = self._target(key)
        if target is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
