"""One real node: containerd (with runc) and the kubelet, plus kube-proxy, in a network namespace and a mount namespace
of the node's own, started and stopped by PID.

Why a mount namespace per node: the kubelet and containerd write to fixed host paths whatever their configuration
says (``/var/lib/kubelet/device-plugins``, ``/var/log/pods``, ``/var/log/containers``, ``/var/lib/cni``,
``/run/containerd``). Each node binds its own directories over those paths in a private mount namespace, pinned at
``/run/opsmanager/<tag>/node-<i>.mnt`` so that every daemon of the node enters the same one. The mounts the kubelet and
containerd make (volumes, container root filesystems, pod network namespaces) stay in there and vanish with it.

Why cgroups of the node's own: containerd's shims and the containers are not children of the sandbox (a shim
re-parents itself), so a parent-death signal cannot reach them. Every daemon of the node is put into
``/<tag>n<i>/system`` in every cgroup hierarchy before it execs, and the kubelet's ``cgroupRoot`` is ``/<tag>n<i>``:
everything the node ever started is in a cgroup of the node, which :func:`.network.kill_cgroups` empties and
removes. Stopping is: the kubelet and kube-proxy by PID, every container through containerd (SIGTERM, a grace,
SIGKILL), containerd by PID, then whatever is left in the node's cgroups, then the cgroups and the pin.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Final

import yaml  # type: ignore[import-untyped,unused-ignore]

from opsmanager import pki
from opsmanager_sandbox import children, realcp
from opsmanager_sandbox.realnodes import netplan, network

log = logging.getLogger(__name__)

FIXED_PATHS: Final = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/containerd",
                      "/run/netns")
"""Host paths the kubelet or containerd use whatever they are told; each node binds a directory of its own there."""
RUNC: Final = "/usr/sbin/runc"
KUBELET_PORT: Final = 10250
# cpu.shares of a node's cgroup: as much as sixteen busy host processes, more than the test tier keeps busy beside
# it at once (its workers, their control planes and operators), so that a node's pods are not starved by the host.
NODE_CPU_SHARES: Final = 16 * 1024



class RealNode:
    """Node ``index`` of a sandbox (see the module docstring)."""

    def __init__(self, plan: netplan.NetPlan, index: int, dir: Path, cp: realcp.KubernetesControlPlane, *,
                 cluster_domain: str = "cluster.local", sync_frequency: float = 3.0) -> None:
        self.plan = plan
        self.index = index
        self.name = plan.node_name(index)
        self.ip = plan.node_ip(index)
        self.netns = plan.node_netns(index)
        self.dir = dir
        self.cp = cp
        self.cluster_domain = cluster_domain
        self.sync_frequency = sync_frequency
        self.run_dir = network.RUN_DIR / plan.tag / self.name
        self.pin = network.RUN_DIR / plan.tag / f"{self.name}.mnt"
        self.cgroup = plan.cgroup_root(index).lstrip("/")
        self.containerd: children.Child | None = None
        self.kubelet: children.Child | None = None
        self.proxy: children.Child | None = None
        self.csi: children.Child | None = None
        self.csi_volumes: Path | None = None

    # -- paths ---------------------------------------------------------------------------------------------------

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    def inside(self, path: str) -> Path:
        """``path`` as the node's mount namespace shows it, readable from the host: through a daemon's
        ``/proc/<pid>/root``. The kubelet mounts a tmpfs over each Secret volume there, so the host's own view of
        the node's directories has the mount points but not the files."""
        daemon = next((c for c in (self.containerd, self.kubelet) if c is not None
                       and c.process.returncode is None), None)
        if daemon is None:
            raise LookupError(f"{self.name} is stopped: nothing shows its mount namespace")
        return Path(f"/proc/{daemon.process.pid}/root") / path.lstrip("/")

    def host_path(self, fixed: str) -> Path:
        """Where the node's ``fixed`` path (one of :data:`FIXED_PATHS`) is on the host: the node's own directory
        bound over it inside its mount namespace."""
        base = self.run_dir if fixed.startswith("/run/") else self.dir
        return base / "fixed" / fixed.strip("/").replace("/", "-")

    def pod_log_dir(self) -> Path:
        """Where the kubelet writes this node's pod logs (``/var/log/pods`` inside the node)."""
        return self.host_path("/var/log/pods")

    # -- start ---------------------------------------------------------------------------------------------------

    async def start_runtime(self) -> None:
        """The mount namespace, the cgroups and containerd (images are loaded next, then :meth:`start_kubelet`)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self._make_mount_namespace)
        self._make_cgroups()
        await self._start_containerd()

    async def _start_containerd(self) -> None:
        config = self._containerd_config()
        self.containerd = await self._start("containerd", [str(realcp.binary("containerd", "containerd")),
                                                           "--config", str(config)])
        await self.containerd.wait_ready(self._socket_ready, timeout=60.0, interval=0.1)

    async def halt(self) -> None:
        """SIGKILL the kubelet, kube-proxy and containerd (by PID); the containers and their shims run on."""
        for child in (self.kubelet, self.proxy, self.csi, self.containerd):
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.kill()
                await child.stop(grace=5.0)
        self.kubelet = self.proxy = self.csi = self.containerd = None

    async def resume(self, ca: pki.KeyPair) -> None:
        await self._start_containerd()
        await self.start_kubelet(ca)
        if self.csi_volumes is not None:
            await self.start_csi(self.csi_volumes)

    async def _socket_ready(self) -> bool:
        if not self.socket.exists():
            return False
        code, _ = await self.ctr("version")
        return code == 0

    def _make_mount_namespace(self) -> None:
        self.pin.touch()
        network.run("unshare", f"--mount={self.pin}", "--propagation", "private", "true")
        # Copies of other sandboxes' pins and network namespaces would keep those alive as long as this node
        # lives: drop them first (this node's daemons are entered from the host's namespace, not from inside).
        script = ["for m in $(awk '{print $5}' /proc/self/mountinfo | grep -E '^/run/(netns|opsmanager)/' "
                  "| sort -r); do umount -l \"$m\" 2>/dev/null; done; true"]
        for fixed in FIXED_PATHS:  # the pods' network namespaces (containerd's /run/netns) among them
            own = self.host_path(fixed)
            own.mkdir(parents=True, exist_ok=True)
            Path(fixed).mkdir(parents=True, exist_ok=True)  # the mount point (empty on the host)
            script.append(f"mount --bind {own} {fixed}")
        network.run("nsenter", f"--mount={self.pin}", "--", "sh", "-c", "; ".join(script))

    def _make_cgroups(self) -> None:
        for hierarchy in network.CGROUP_FS.iterdir():
            if hierarchy.is_dir() and not hierarchy.is_symlink() and (hierarchy / "cgroup.procs").exists():
                (hierarchy / self.cgroup / "system").mkdir(parents=True, exist_ok=True)
        # A node is a machine of its own in a cloud; here it is one cgroup beside the host's processes, and under
        # cgroup v1 every busy process at the root weighs as much as a cgroup of default shares. Left at the default,
        # a node's pods together got the CPU of one host process: a loaded host starved its members (a restarted
        # member's TLS handshakes took longer than a client's try). The node weighs as a machine's worth of busy
        # processes instead; inside it, the kubelet shares the CPU among pods by their requests as on any node.
        for cpu in (network.CGROUP_FS / "cpu", network.CGROUP_FS / "cpu,cpuacct"):
            shares = cpu / self.cgroup / "cpu.shares"
            if shares.exists():
                shares.write_text(str(NODE_CPU_SHARES))

    def _argv(self, argv: list[str]) -> list[str]:
        """``argv`` in the node's namespaces, in the node's ``system`` cgroups (joined before the exec, so the PID
        started is the daemon's)."""
        join = (f"for f in /sys/fs/cgroup/*/{self.cgroup}/system/cgroup.procs; do echo $$ > \"$f\"; done; "
                'exec "$@"')
        return ["nsenter", f"--mount={self.pin}", f"--net=/run/netns/{self.netns}", "--",
                "sh", "-c", join, "sh", *argv]

    async def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> children.Child:
        path = f"{realcp.binary('containerd', 'containerd').parent}:{os.environ.get('PATH', '/usr/bin:/bin')}" \
               ":/usr/sbin:/sbin"
        return await children.Child.start(f"{self.name}/{name}", self._argv(argv),
                                          log_path=self.dir / "logs" / f"{name}.log",
                                          env={"PATH": path, **(env or {})}, die_with_parent=True)

    def _containerd_config(self) -> Path:
        cni = realcp.binary("cni-plugins", "bridge").parent
        net_d = self.dir / "cni" / "net.d"
        net_d.mkdir(parents=True, exist_ok=True)
        (net_d / "10-opsmanager.conflist").write_text(json.dumps(self._cni_config(), indent=1))
        text = f"""version = 3
root = '{self.dir / "containerd"}'
state = '{self.run_dir / "state"}'
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.erofs',
  'io.containerd.snapshotter.v1.blockfile', 'io.containerd.differ.v1.erofs', 'io.containerd.mount-handler.v1.erofs',
  'io.containerd.image-verifier.v1.bindir', 'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing']

[grpc]
  address = '{self.socket}'

[ttrpc]
  address = '{self.socket}.ttrpc'

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '{self.dir / "opt"}'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'registry.k8s.io/pause:3.10.2'
  [plugins.'io.containerd.cri.v1.runtime']
    # runc cannot lower oom_score_adj here (no CAP_SYS_RESOURCE in the bounding set)
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{RUNC}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{cni}']
      conf_dir = '{net_d}'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
"""
        path = self.dir / "containerd.toml"
        path.write_text(text)
        return path

    def _cni_config(self) -> dict[str, Any]:
        return {"cniVersion": "1.0.0", "name": "opsmanager", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": str(self.plan.pod_cidr(self.index))}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.dir / "cni" / "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}

    async def ctr(self, *args: str, timeout: float = 120.0) -> tuple[int, str]:
        """``ctr`` against this node's containerd, in the ``k8s.io`` namespace (the CRI's)."""
        return await children.output([str(realcp.binary("containerd", "ctr")), "--address", str(self.socket),
                                      "--namespace", "k8s.io", *args], timeout)

    async def task_pids(self) -> dict[str, int]:
        """The PID of every running container (and pod sandbox) of this node, by container ID, from containerd."""
        code, out = await self.ctr("tasks", "list", timeout=10.0)
        if code != 0:
            raise RuntimeError(f"{self.name}: ctr tasks list failed: {out.strip()}")
        pids = {}
        for line in out.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "RUNNING":
                pids[fields[0]] = int(fields[1])
        return pids

    async def load(self, archive: Path, repository: str) -> None:
        """Import an OCI archive as ``repository:<its tag>``."""
        code, out = await self.ctr("images", "import", "--base-name", repository, str(archive))
        if code != 0:
            raise RuntimeError(f"{self.name}: importing {archive.name} failed: {out.strip()}")

    async def start_kubelet(self, ca: pki.KeyPair) -> None:
        kubeconfig = self._client_kubeconfig(ca, "kubelet", f"system:node:{self.name}", ("system:nodes",))
        config = self._kubelet_config(ca)
        argv = [str(realcp.binary("kubernetes", "kubelet")), f"--config={config}", f"--kubeconfig={kubeconfig}",
                f"--hostname-override={self.name}", f"--node-ip={self.ip}", "--v=1"]
        self.kubelet = await self._start("kubelet", argv)
        proxy = [str(realcp.binary("kubernetes", "kube-proxy")), f"--config={self._proxy_config(ca)}", "--v=1"]
        self.proxy = await self._start("kube-proxy", proxy)

    async def start_csi(self, volumes: Path) -> None:
        """The CSI driver's node plugin (:mod:`.csi`), in the node's namespaces: it mounts where this node's kubelet
        looks, and registers on this kubelet's plugin-registration socket."""
        self.csi_volumes = volumes
        self.csi = await self._start("csi-loop", [str(realcp.binary("csi-loop", "csi-loop")), "--mode=node",
                                                  f"--node-id={self.name}", f"--volumes={volumes}"])

    def _client_kubeconfig(self, ca: pki.KeyPair, file: str, user: str, groups: tuple[str, ...]) -> Path:
        leaf = pki.make_leaf(ca, user, organizations=groups, usages=("client",),
                             duration=datetime.timedelta(days=30))
        pki_dir = self.dir / "pki"
        pki_dir.mkdir(parents=True, exist_ok=True)
        cert, key = pki_dir / f"{file}.crt", pki_dir / f"{file}.key"
        cert.write_bytes(leaf.cert_pem)
        key.write_bytes(leaf.key_pem)
        key.chmod(0o600)
        path = self.dir / f"{file}.kubeconfig"
        path.write_text(yaml.safe_dump(realcp.kubeconfig(self.cp.url, self.cp.ca_pem, cert=str(cert), key=str(key),
                                                         user=user)))
        path.chmod(0o600)
        return path

    def _kubelet_config(self, ca: pki.KeyPair) -> Path:
        (self.dir / "pki").mkdir(parents=True, exist_ok=True)
        ca_file = self.dir / "pki" / "ca.crt"
        ca_file.write_bytes(ca.cert_pem)
        serving = pki.make_leaf(ca, f"system:node:{self.name}", organizations=("system:nodes",),
                                dns_names=[self.name], ip_addresses=[self.ip], usages=("server",),
                                duration=datetime.timedelta(days=30))
        (self.dir / "pki" / "kubelet-serving.crt").write_bytes(serving.cert_pem)
        (self.dir / "pki" / "kubelet-serving.key").write_bytes(serving.key_pem)
        resolv = self.dir / "resolv.conf"
        resolv.write_text("# no upstream: nothing leaves the cluster network\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # cgroup v1 is all this machine kind has; 1.37 refuses it unless told
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{self.cgroup}",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.ip, "port": KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "tlsCertFile": str(self.dir / "pki" / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(self.dir / "pki" / "kubelet-serving.key"),
            # only clients with a certificate of the cluster's CA (kube-apiserver's kubelet client) get in
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(ca_file)}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDomain": self.cluster_domain, "clusterDNS": [self.plan.dns_ip], "resolvConf": str(resolv),
            "syncFrequency": f"{self.sync_frequency}s",
            "volumePluginDir": str(self.dir / "volume-plugins"),
            "failSwapOn": False, "serializeImagePulls": False,
            # a node's disk is the machine's, shared with everything else a test run writes: evict only when it is
            # truly full (a percentage of a large disk with a reserve put every node under DiskPressure)
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "100Mi", "imagefs.available": "100Mi",
                             "nodefs.inodesFree": "1%", "imagefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "5s", "nodeStatusReportFrequency": "30s", "nodeLeaseDurationSeconds": 20,
            "fileCheckFrequency": "5s", "staticPodPath": "",
            # the stats summary's volume sizes (what the engine verifies a VolumeExpansion by): every 10 s, not 1 min
            "volumeStatsAggPeriod": "10s",
            "logging": {"format": "text"},
        }
        path = self.dir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _proxy_config(self, ca: pki.KeyPair) -> Path:
        kubeconfig = self._client_kubeconfig(ca, "kube-proxy", "system:kube-proxy", ())
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "nftables", "clusterCIDR": str(self.plan.pods), "hostnameOverride": self.name,
            "bindAddress": self.ip, "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            # a network namespace's conntrack table cannot be sized from inside it
            "conntrack": {"maxPerCore": 0, "min": 0},
            "nodePortAddresses": [f"{self.ip}/32"],
        }
        path = self.dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    # -- stop ----------------------------------------------------------------------------------------------------

    async def stop(self, grace: float = 2.0) -> None:
        """The kubelet and kube-proxy, the containers through containerd, containerd, then anything left in the
        node's cgroups; the cgroups and the mount namespace go last."""
        for child in (self.kubelet, self.proxy, self.csi):
            if child is not None:
                await child.stop(grace=5.0)
        if self.containerd is not None and self.containerd.process.returncode is None:
            await self._stop_tasks(grace)
            await self.containerd.stop(grace=5.0)
        await asyncio.to_thread(network.kill_cgroups, self.cgroup)
        await asyncio.to_thread(self._release)
        # the images unpacked in its containerd (about half a GiB a node): a test run makes dozens of nodes
        await asyncio.to_thread(shutil.rmtree, self.dir / "containerd", True)

    async def _stop_tasks(self, grace: float) -> None:
        code, out = await self.ctr("tasks", "list", "--quiet", timeout=10.0)
        ids = out.split() if code == 0 else []
        if not ids:
            return
        await asyncio.gather(*(self.ctr("tasks", "kill", "--signal", "SIGTERM", i, timeout=10.0) for i in ids))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline:
            code, out = await self.ctr("tasks", "list", timeout=10.0)
            if code != 0 or all("RUNNING" not in line for line in out.splitlines()[1:]):
                break
            await asyncio.sleep(0.1)  # the poll interval
        await asyncio.gather(*(self.ctr("tasks", "kill", "--signal", "SIGKILL", i, timeout=10.0) for i in ids))

    def _release(self) -> None:
        with contextlib.suppress(OSError):
            if self.pin.exists():
                network.run("umount", "-l", str(self.pin), check=False)
                self.pin.unlink()
        shutil.rmtree(self.run_dir, ignore_errors=True)
