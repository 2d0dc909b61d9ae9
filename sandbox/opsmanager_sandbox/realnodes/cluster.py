"""The nodes of a sandbox on real nodes, together: the cluster network, N nodes with their images loaded, and the
cluster's add-ons (CoreDNS), brought up and torn down as one.

    net = RealNodes.reserve(dir, nodes=3)        # the slice: before the control plane, which binds net.plan.host_ip
    cp = KubernetesControlPlane(..., host=net.plan.host_ip, service_cidr=str(net.plan.services), …)
    await cp.start()
    await net.start(cp, client)                  # nodes Ready, CoreDNS answering
    …
    await net.stop_nodes(); await cp.stop()
    await net.release()                          # nothing of the slice left: processes, cgroups, mounts, namespaces
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from opsmanager import kube
from opsmanager_sandbox import node as node_agent
from opsmanager_sandbox import realcp
from opsmanager_sandbox.realnodes import csi, images, netplan, network, operator_image
from opsmanager_sandbox.realnodes.node import RealNode

log = logging.getLogger(__name__)


class RealNodes:
    CONTROLLER_ARGS = ("--node-monitor-period=2s", "--node-monitor-grace-period=20s")
    """A node whose kubelet is silent for 20 s is NotReady (upstream: 50 s), so a test of a stopped node waits 20 s,
    not a minute; the kubelets renew their Lease every 5 s (``nodeLeaseDurationSeconds: 20``)."""

    def __init__(self, dir: Path, plan: netplan.NetPlan, lock: network.SliceLock) -> None:
        self.dir = dir
        self.plan = plan
        self._lock: network.SliceLock | None = lock
        self.network = network.ClusterNetwork(plan)
        self.nodes: list[RealNode] = []
        self.images: dict[str, Path] = {}
        self.timings: dict[str, float] = {}
        self.csi: csi.CsiStorage | None = None

    @classmethod
    def reserve(cls, dir: Path, nodes: int, *, index: int | None = None) -> RealNodes:
        """Take a free slice, sweep what a killed sandbox left in it, and make the cluster network."""
        lock = network.SliceLock(index)
        try:
            plan = netplan.NetPlan(lock.index, nodes)
            network.sweep(lock.index)
            self = cls(dir, plan, lock)
            self.network.create()
        except BaseException:
            network.sweep(lock.index)
            lock.close()
            raise
        return self

    async def start(self, cp: realcp.KubernetesControlPlane, client: kube.Kube, *,
                    cluster_domain: str = "cluster.local", ready_timeout: float = 120.0,
                    csi: bool = False) -> None:
        """``csi``: also the CSI driver, its sidecars (each as its own ServiceAccount) and StorageClasses
        (:mod:`.csi`), ``standard`` the cluster's default; without it every claim gets a hostPath volume
        (:mod:`.volumes`)."""
        assert cp.ca is not None, "the control plane is not started"
        client.resources.add(node_agent.NODES)
        t0 = time.monotonic()
        archives = await asyncio.to_thread(self._archives)
        self.timings["images"] = time.monotonic() - t0
        self.nodes = [RealNode(self.plan, i, self.dir / self.plan.node_name(i), cp, cluster_domain=cluster_domain)
                      for i in range(1, self.plan.nodes + 1)]
        t0 = time.monotonic()
        await asyncio.gather(*(n.start_runtime() for n in self.nodes))
        await asyncio.gather(*(n.load(path, repo) for n in self.nodes for repo, path in archives))
        self.timings["runtime"] = time.monotonic() - t0
        t0 = time.monotonic()
        for n in self.nodes:
            await n.start_kubelet(cp.ca)
        await self._wait_nodes_ready(client, ready_timeout)
        self.timings["nodes"] = time.monotonic() - t0
        t0 = time.monotonic()
        await self._apply(client, coredns_manifests(self.plan, cluster_domain))
        await self._wait_available(client, "kube-system", "coredns", ready_timeout)
        self.timings["dns"] = time.monotonic() - t0
        if csi:
            t0 = time.monotonic()
            await self._start_csi(client, cp, ready_timeout)
            self.timings["csi"] = time.monotonic() - t0

    async def _start_csi(self, client: kube.Kube, cp: realcp.KubernetesControlPlane, timeout: float) -> None:
        self.csi = csi.CsiStorage(self.dir / "csi", network.RUN_DIR / self.plan.tag, cp.url, cp.ca_pem)
        for n in self.nodes:
            await n.start_csi(self.csi.volumes)
        await self.csi.start(client, [n.name for n in self.nodes], timeout, default_class=True)

    def _archives(self) -> list[tuple[str, Path]]:
        # the operator's image too: every member pod's first init container copies etcdstop from it
        wanted = [images.pause_image(), *images.etcd_images(), images.coredns_image(), operator_image.image()]
        out = [(i.repository, images.archive(i)) for i in wanted]
        self.images = {f"{i.repository}:{i.tag}": path for i, (_, path) in zip(wanted, out, strict=True)}
        return out

    async def _wait_nodes_ready(self, client: kube.Kube, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        names = {n.name for n in self.nodes}
        while True:
            ready = {n["metadata"]["name"] for n in await client.list("v1", "Node", None)
                     if any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (n.get("status") or {}).get("conditions") or ())}
            if names <= ready:
                return
            for n in self.nodes:
                for child in (n.containerd, n.kubelet, n.proxy):
                    if child is not None and child.process.returncode is not None:
                        raise RuntimeError(f"{child.name} exited with {child.process.returncode}:\n"
                                           f"{child.log()[-3000:]}")
            if loop.time() > deadline:
                raise TimeoutError(f"nodes {sorted(names - ready)} not Ready within {timeout}s (kubelet logs in "
                                   f"{self.dir}/node-*/logs)")
            await asyncio.sleep(0.5)  # the poll interval

    @staticmethod
    async def _apply(client: kube.Kube, docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            with contextlib.suppress(kube.AlreadyExists):
                await client.create(doc)

    @staticmethod
    async def _wait_available(client: kube.Kube, namespace: str, name: str, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            d = await client.get("apps/v1", "Deployment", namespace, name)
            status = (d or {}).get("status") or {}
            if status.get("availableReplicas", 0) >= ((d or {}).get("spec") or {}).get("replicas", 1):
                return
            if loop.time() > deadline:
                raise TimeoutError(f"Deployment {namespace}/{name} not available within {timeout}s: {status}")
            await asyncio.sleep(0.5)  # the poll interval

    async def load_image(self, image: images.Image) -> Path:
        """Make ``image`` (unless cached) and import it into every node; its archive."""
        path = await asyncio.to_thread(images.archive, image)
        await asyncio.gather(*(n.load(path, image.repository) for n in self.nodes))
        self.images[image.ref] = path
        return path

    async def stop_node(self, name: str) -> None:
        """Node ``name`` stops as a machine whose agents died: its kubelet, kube-proxy and containerd are killed; its
        containers run on under their shims (and stay in its cgroups, so the sandbox's stop still ends them)."""
        await self.node(name).halt()

    async def start_node(self, name: str, cp: realcp.KubernetesControlPlane) -> None:
        """Start a stopped node's containerd, kubelet and kube-proxy again (the kubelet finds its pods)."""
        assert cp.ca is not None, "the control plane is not started"
        await self.node(name).resume(cp.ca)

    def node(self, name: str) -> RealNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise LookupError(f"no node {name!r} (nodes: {', '.join(n.name for n in self.nodes)})")

    @staticmethod
    def pod_processes(uid: str, command: str) -> list[int]:
        """The host PIDs of every ``command`` process in the pod whose UID is ``uid``, found by the pod's cgroup
        (the nodes' kubelets use cgroupfs, whose layout names it ``pod<uid>``): a container the kubelet has just
        started is there before the pod's status names it."""
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/comm") as f:
                    if f.read().strip() != command:
                        continue
                with open(f"/proc/{entry.name}/cgroup") as f:
                    if f"pod{uid}" in f.read():
                        found.append(int(entry.name))
            except OSError:  # gone meanwhile
                continue
        return found

    def volume_dir(self, pod: dict[str, Any], volume: str, plugin: str = "kubernetes.io~secret") -> Path:
        """Where the kubelet of ``pod``'s node keeps the files of the pod's volume ``volume`` (a Pod object)."""
        node = self.node(str((pod.get("spec") or {}).get("nodeName")))
        return node.inside(f"/var/lib/kubelet/pods/{pod['metadata']['uid']}/volumes/{plugin}/{volume}")

    async def container_pid(self, pod: dict[str, Any], container: str) -> int:
        """The host PID of a running container of ``pod`` (a Pod object): what enters its namespaces."""
        node = self.node(str((pod.get("spec") or {}).get("nodeName")))
        statuses = (pod.get("status") or {}).get("containerStatuses") or ()
        cid = next((str(s.get("containerID") or "") for s in statuses if s.get("name") == container), "")
        pid = (await node.task_pids()).get(cid.removeprefix("containerd://"))
        if not cid or pid is None:
            raise LookupError(f"container {container!r} of pod {pod['metadata']['name']} is not running on "
                              f"{node.name}")
        return pid

    async def stop_nodes(self) -> None:
        """Every node: pods through containerd, daemons by PID, then its cgroups and mount namespace."""
        if self.csi is not None:
            await self.csi.stop()
        results = await asyncio.gather(*(n.stop() for n in self.nodes), return_exceptions=True)
        for node, result in zip(self.nodes, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("stopping %s: %s", node.name, result)

    async def release(self) -> None:
        """The network, then a sweep of the slice for anything still there, and the slice's lock (after the
        control plane, which listens on the host's address in the slice)."""
        await asyncio.to_thread(self.network.destroy)
        if self._lock is not None:
            await asyncio.to_thread(network.sweep, self.plan.index)
            self._lock.close()
            self._lock = None


def coredns_manifests(plan: netplan.NetPlan, cluster_domain: str) -> list[dict[str, Any]]:
    """CoreDNS as a cluster runs it: a Deployment of two replicas in kube-system, on two nodes and with a budget (a
    drained node must not take the cluster's DNS with it), behind the Service ``kube-dns`` at the address every
    kubelet's ``clusterDNS`` names. No ``forward``: nothing is asked outside. A name outside the cluster's zones
    gets NXDOMAIN from a catch-all server block; without it CoreDNS answers SERVFAIL ("no next plugin"), which a
    resolver reports as a temporary failure, and a short name tried last as absolute (``x.ns.svc.``) would turn a
    miss in the cluster's zone into "try again" instead of "no such name"."""
    labels = {"k8s-app": "kube-dns"}
    corefile = (f"{cluster_domain}:53 in-addr.arpa:53 ip6.arpa:53 {{\n    errors\n    health :8080\n    ready :8181\n"
                f"    kubernetes {cluster_domain} in-addr.arpa ip6.arpa {{\n       pods insecure\n       ttl 5\n    }}\n"
                f"    cache 5\n    loadbalance\n}}\n"
                f".:53 {{\n    errors\n    template ANY ANY {{\n       rcode NXDOMAIN\n    }}\n}}\n")
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "namespace": "kube-system",
                                                                     "labels": labels},
         "spec": {"replicas": min(2, plan.nodes), "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"serviceAccountName": "coredns", "dnsPolicy": "Default", "priorityClassName":
                      "system-cluster-critical",
                      "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                          "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                             "labelSelector": {"matchLabels": labels}}}]}},
                      "containers": [{
                          "name": "coredns", "image": f"{images.COREDNS_REPO}:{images.coredns_version()}",
                          "imagePullPolicy": "IfNotPresent", "args": ["-conf", "/etc/coredns/Corefile"],
                          "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                    {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                          "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10,
                                            "failureThreshold": 5},
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}]}],
                      "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "coredns",
                                                                                 "namespace": "kube-system"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": "kube-system",
                                                             "labels": labels},
         "spec": {"clusterIP": plan.dns_ip, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]
