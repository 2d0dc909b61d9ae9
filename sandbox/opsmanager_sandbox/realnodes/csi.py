"""Real storage on real nodes: the sandbox's CSI driver (``csi-loop``, sandbox/controlplane/csi-loop) beside the real
``external-provisioner`` and ``external-resizer``, and the StorageClasses that name it.

Each volume is a sparse file in ``<nodes dir>/csi/volumes``, formatted XFS, attached to a loop device and mounted by
the node plugin where the kubelet asks: a claim has a real capacity, and grows online (the resizer calls
ControllerExpandVolume, which grows the file; the kubelet then calls NodeExpandVolume, which refreshes the loop
device and runs ``xfs_growfs``; the kubelet's stats summary reports the new size through NodeGetVolumeStats).

Where each part runs, and why host processes rather than pods: the nodes have no image with ``mkfs.xfs``,
``losetup`` and ``xfs_growfs`` (no base image can be pulled; the operator image is the only root file system made
here), and a plugin in a pod needs Bidirectional mount propagation into a node namespace made private on purpose.

- the controller (Identity + Controller) and the two sidecars: one host process each, for the whole cluster, on a
  socket in the slice's run directory. Each sidecar runs as its own ServiceAccount with the RBAC its release ships
  (``deploy/kubernetes/rbac.yaml`` of its module, copied by ``make controlplane`` and applied as it is), through a
  kubeconfig holding a token the TokenRequest API issued for that ServiceAccount — what a sidecar in a pod gets
  mounted; no sidecar has more than upstream asks for;
- the node plugin (Identity + Node): one per node, started by :class:`.node.RealNode` in the node's mount and network
  namespaces and its cgroups (so it sees the node's ``/var/lib/kubelet`` and its mounts are the kubelet's); it
  registers itself on the kubelet's plugin-registration socket, since node-driver-registrar is not served.

Every node sees the host's file system, so a volume can be published on any node: a member evicted to another node
keeps its data, as with the hostPath volumes before (no topology, ``attachRequired: false``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from pathlib import Path
from typing import Any, Final

import yaml

from opsmanager import kube
from opsmanager.kube.resources import Resource
from opsmanager_sandbox import children, realcp

log = logging.getLogger(__name__)

DRIVER: Final = "loop.csi.opsmanager.dev"
STORAGE_CLASSES: Final = ("standard", "fast")
"""Both classes name the driver; ``standard`` may be the cluster's default (then a claim without a class gets it)."""
CSI_DRIVERS: Final = Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", namespaced=False)
CSI_NODES: Final = Resource("storage.k8s.io", "v1", "csinodes", "CSINode", namespaced=False)
# The sidecars: (component, binary), each with its release's RBAC.
SIDECARS: Final = (("external-provisioner", "csi-provisioner"), ("external-resizer", "csi-resizer"))
TOKEN_SECONDS: Final = 7 * 24 * 3600  # longer than any sandbox lives


def sidecar_rbac(component: str) -> list[dict[str, Any]]:
    """The objects of a sidecar's released ``rbac.yaml`` (ServiceAccount, ClusterRole, Role and their bindings)."""
    path = realcp.build_module().sidecar_rbac(component)
    if not path.is_file():
        raise realcp.NotBuilt(f"{path} is missing: run `make controlplane` (it copies the sidecars' RBAC)")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def service_account(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount a sidecar's RBAC binds."""
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    return sa["metadata"].get("namespace", "default"), sa["metadata"]["name"]


def manifests(default_class: bool) -> list[dict[str, Any]]:
    """The CSIDriver (no ControllerPublish, so no attacher) and the two StorageClasses, both expandable and binding
    ``WaitForFirstConsumer`` (a volume is made once its pod is scheduled, as for any node-local storage; a
    StorageMigration asks for it); ``default_class``: ``standard`` is the cluster's default."""
    driver = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
              "spec": {"attachRequired": False, "podInfoOnMount": False, "volumeLifecycleModes": ["Persistent"],
                       "fsGroupPolicy": "File"}}
    classes = [{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": name, "annotations": {
                    "storageclass.kubernetes.io/is-default-class": str(default_class and name == STORAGE_CLASSES[0]).lower()}},
                "provisioner": DRIVER, "allowVolumeExpansion": True, "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer"} for name in STORAGE_CLASSES]
    return [driver, *classes]


class CsiStorage:
    """The cluster-wide half (controller and sidecars) and the manifests; the node plugins are the nodes'."""

    def __init__(self, dir: Path, run_dir: Path, server: str, ca_pem: bytes) -> None:
        self.dir = dir
        self.volumes = dir / "volumes"
        self.socket = run_dir / "csi-controller.sock"  # short: a unix socket path has at most 107 bytes
        self.server, self.ca_pem = server, ca_pem
        self.kubeconfigs: dict[str, Path] = {}  # per sidecar binary, its ServiceAccount's
        self.children: list[children.Child] = []

    async def start(self, client: kube.Kube, node_names: list[str], timeout: float = 60.0, *,
                    default_class: bool = False) -> None:
        client.resources.add(CSI_DRIVERS)
        client.resources.add(CSI_NODES)
        self.volumes.mkdir(parents=True, exist_ok=True)
        for doc in manifests(default_class):
            with contextlib.suppress(kube.AlreadyExists):
                await client.create(doc)
        controller = await self._start("csi-loop", [str(realcp.binary("csi-loop", "csi-loop")), "--mode=controller",
                                                    f"--endpoint={self.socket}", f"--volumes={self.volumes}"])

        async def listening() -> bool:
            return self.socket.exists()

        await controller.wait_ready(listening, timeout=timeout)
        for component, tool in SIDECARS:
            kubeconfig = await self._sidecar_kubeconfig(client, component, tool)
            await self._start(tool, [str(realcp.binary(component, tool)), f"--csi-address={self.socket}",
                                     f"--kubeconfig={kubeconfig}", "--leader-election=false", "--timeout=60s",
                                     "--v=2", "--retry-interval-max=5s"])
        await self._wait_registered(client, node_names, timeout)

    async def _sidecar_kubeconfig(self, client: kube.Kube, component: str, tool: str) -> Path:
        """The sidecar's released RBAC applied, and a kubeconfig with a token issued to its ServiceAccount."""
        docs = sidecar_rbac(component)
        for doc in docs:
            with contextlib.suppress(kube.AlreadyExists):
                await client.create(doc)
        namespace, name = service_account(docs)
        issued = await client.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": TOKEN_SECONDS}})
        path = self.dir / f"{tool}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(realcp.kubeconfig(self.server, self.ca_pem, token=issued["status"]["token"],
                                                         user=f"system:serviceaccount:{namespace}:{name}")))
        path.chmod(0o600)
        self.kubeconfigs[tool] = path
        return path

    async def _start(self, name: str, argv: list[str]) -> children.Child:
        path = f"{os.environ.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin"
        child = await children.Child.start(f"csi/{name}", argv, log_path=self.dir / "logs" / f"{name}.log",
                                           env={"PATH": path}, die_with_parent=True)
        self.children.append(child)
        return child

    async def _wait_registered(self, client: kube.Kube, names: list[str], timeout: float) -> None:
        """Until every node's CSINode lists the driver: the kubelet took the plugin's registration."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            registered = {n["metadata"]["name"] for n in await client.list("storage.k8s.io/v1", "CSINode", None)
                          if any(d.get("name") == DRIVER for d in (n.get("spec") or {}).get("drivers") or ())}
            if set(names) <= registered:
                return
            for child in self.children:
                if child.process.returncode is not None:
                    raise RuntimeError(f"{child.name} exited with {child.process.returncode}:\n{child.log()[-3000:]}")
            if loop.time() > deadline:
                raise TimeoutError(f"the CSI driver is not registered on {sorted(set(names) - registered)} within "
                                   f"{timeout}s (node-*/logs/csi-loop.log, the kubelets' logs)")
            await asyncio.sleep(0.5)  # the poll interval

    async def stop(self) -> None:
        """The sidecars and the controller; then every loop device still backed by a volume here (a node stopped
        with its pods mounted never unpublished them), so no loop device outlives the sandbox."""
        for child in reversed(self.children):
            await child.stop(grace=5.0)
        self.children.clear()
        await asyncio.to_thread(detach_loops, self.volumes)


def detach_loops(volumes: Path) -> None:
    done = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"], capture_output=True,
                          text=True, check=False)
    for line in done.stdout.splitlines():
        fields = line.split(None, 1)
        if len(fields) == 2 and fields[1].strip().startswith(f"{volumes}/"):
            # still mounted somewhere: the kernel detaches it (autoclear) once the last mount goes with its namespace
            subprocess.run(["losetup", "--detach", fields[0]], capture_output=True, check=False)
