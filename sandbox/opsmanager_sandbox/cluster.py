"""The whole sandbox in one object: API server + kubelet + StatefulSet and Deployment controllers + cert-manager
(with its cainjector) (+ extras).

    async with Sandbox(dir=".sandbox") as sb:
        sb.url, sb.kubeconfig, sb.dir        # http://127.0.0.1:<port> (https with RBAC), <dir>/kubeconfig, <dir>
        await sb.apply(yaml_text_or_objects)   # create-or-replace, like kubectl apply
        sb.client                              # the async opsmanager.kube.Kube the controllers share

Start order: API server (with cert-manager's CRDs), ``crds/*.yaml`` applied, then the version catalog (the
EtcdVersion objects of ``deploy/catalog/``, :func:`catalog_objects`), namespace ``cert-manager``,
kubeconfig written, then the controllers, then the extra components. Stop order is the reverse; the kubelet
stops every pod process by PID (SIGTERM, grace capped at ``shutdown_grace``, SIGKILL), also when the body of
the ``async with`` raised. Stopping the sandbox is not a node drain: when every member of an etcd cluster gets
SIGTERM at once the leader waits ~7 s for a leadership transfer nobody can take, so the default grace at
shutdown is 2 s. Each container process also carries ``PR_SET_PDEATHSIG=SIGKILL``, so even a
killed sandbox process leaves no etcd behind.

Extra components are the hook for the operator and the admission webhook: callables taking the started
:class:`Sandbox` and returning an async context manager; they are entered after the controllers are running
and exited first. :data:`DEFAULT_COMPONENTS` is what ``opsmanager sandbox up`` starts unless
``--no-operator`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import yaml  # type: ignore[import-untyped,unused-ignore]

from opsmanager import kube
from opsmanager.api import catalog, constants, crdgen
from opsmanager.kube.resources import Resource
from opsmanager_sandbox import (
    addresses,
    cainjector,
    certmanager,
    children,
    containers,
    deployment,
    kubelet,
    node,
    process,
    realcp,
    statefulset,
)
from opsmanager_sandbox import apiserver as sandbox_apiserver
from opsmanager_sandbox.apiserver.audit import AuditLog
from opsmanager_sandbox.realnodes.cluster import RealNodes
from opsmanager_sandbox.realnodes.volumes import HostPathProvisioner

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Component = Callable[["Sandbox"], contextlib.AbstractAsyncContextManager[Any]]

ENDPOINT_SLICES: Final = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)
EMBEDDED: Final = "embedded"
KUBERNETES: Final = "kubernetes"
CONTROL_PLANES: Final = (EMBEDDED, KUBERNETES)
HOSTPATH: Final = "hostpath"
CSI: Final = "csi"
STORAGES: Final = (HOSTPATH, CSI)
"""How real nodes give claims their volumes (``Sandbox(storage=…)``): the embedded mode and the node agent are hostPath."""


def default_storage(nodes: int) -> str:
    """What a sandbox gives claims unless told: real volumes on real nodes, else the only kind there is."""
    return CSI if nodes else HOSTPATH

# Extra components `opsmanager sandbox up` starts besides the admission webhook and the operator
# (opsmanager_sandbox.components.DEFAULTS), unless --no-operator is given.
DEFAULT_COMPONENTS: list[Component] = []

# The default CRDs: rendered in memory from the API models (the same text `opsmanager crds` writes into crds/), so
# the sandbox works from an installed wheel. Pass a directory to apply CRD files instead, or None for none.
MODEL_CRDS: Final = "models"


def model_crds() -> list[Obj]:
    """The CustomResourceDefinitions of the API models, as ``opsmanager crds`` renders them."""
    return [crdgen.crd(spec) for spec in crdgen.CRDS]


def catalog_objects(crds: list[Obj]) -> list[Obj]:
    """The version catalog the install bundle ships (``deploy/catalog/``: one EtcdVersion per supported version),
    when ``crds`` serve the EtcdVersion kind; the admission webhook admits only the versions it lists."""
    served = {d.get("spec", {}).get("names", {}).get("kind") for d in crds
              if d.get("kind") == "CustomResourceDefinition"}
    return catalog.objects() if constants.ETCDVERSION_KIND in served else []


class _Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


_S = TypeVar("_S", bound=_Startable)


async def _started(stack: contextlib.AsyncExitStack, part: _S) -> _S:
    """Start ``part``, its ``stop`` on ``stack`` first (a start that fails half-way is stopped too)."""
    stack.push_async_callback(part.stop)
    await part.start()
    return part


class Sandbox:
    """The local control plane with real etcd pods (see module docstring)."""

    def __init__(self, dir: str | Path = ".sandbox", *, host: str = "127.0.0.1", port: int = 0,
                 speed: float = 1.0, volume_refresh_delay: float = 0.5, shutdown_grace: float = 2.0,
                 crds_dir: str | Path | None = MODEL_CRDS, components: Sequence[Component] = (),
                 issuance_delay: float = 0.0, cluster_domain: str = "cluster.local",
                 bookmark_interval: float = 5.0, authorization: str = "AlwaysAllow",
                 control_plane: str = EMBEDDED, nodes: int = 0, storage: str = HOSTPATH) -> None:
        if control_plane not in CONTROL_PLANES:
            raise ValueError(f"control_plane must be one of {', '.join(CONTROL_PLANES)}, not {control_plane!r}")
        if nodes and control_plane != KUBERNETES:
            raise ValueError(f"nodes={nodes}: real nodes need the real control plane (control_plane={KUBERNETES!r})")
        if storage not in STORAGES or (storage == CSI and not nodes):
            raise ValueError(f"storage must be one of {', '.join(STORAGES)} ({CSI!r} on real nodes), not {storage!r}")
        self.control_plane = control_plane
        self.nodes = nodes
        self.storage = storage
        """Real nodes' claims: ``hostpath`` (a pre-bound hostPath volume each) or ``csi`` (the sandbox's CSI driver
        with the real external-provisioner and external-resizer, and its classes ``standard``, the cluster's
        default, and ``fast``: :mod:`.realnodes.csi`; a claim of class ``""`` still gets a hostPath volume)."""
        """Real nodes (kubelet, containerd, runc, a pod network, CoreDNS: :mod:`.realnodes`); 0 runs the node
        agent instead."""
        self.realnodes: RealNodes | None = None
        self.volumes: HostPathProvisioner | None = None
        """``embedded`` (the emulated API server and controllers) or ``kubernetes`` (kube-apiserver,
        kube-controller-manager, kube-scheduler built from their Go modules: :mod:`.realcp`, :mod:`.node`)."""
        self.kubernetes: realcp.KubernetesControlPlane | None = None
        self.node: node.NodeAgent | None = None
        self.proxy: node.ServiceProxy | None = None
        self.dir = Path(dir).resolve()
        self.authorization = authorization
        """The API server's mode: ``AlwaysAllow`` or ``RBAC`` (see docs/sandbox.md); the sandbox's own client
        and kubeconfig carry the admin token either way."""
        self.host = host
        self.port = port
        self.speed = speed
        self.volume_refresh_delay = volume_refresh_delay
        self.shutdown_grace = shutdown_grace
        self.crds_dir = crds_dir if crds_dir in (None, MODEL_CRDS) else Path(crds_dir)
        self.components = list(components)
        self.issuance_delay = issuance_delay
        self.cluster_domain = cluster_domain
        self.bookmark_interval = bookmark_interval
        self.apiserver: sandbox_apiserver.APIServer | None = None
        self.client: kube.Kube = kube.Kube.for_url("http://unset")
        self.addresses: addresses.PodAddresses | None = None
        self.kubelet: kubelet.Kubelet | None = None
        self.statefulsets: statefulset.Controller | None = None
        self.certmanager: certmanager.Controller | None = None
        self.deployments: deployment.Controller | None = None
        self.cainjector: cainjector.Controller | None = None
        self.crds: list[str] = []
        self._stack: contextlib.AsyncExitStack | None = None

    def _server(self) -> realcp.KubernetesControlPlane | sandbox_apiserver.APIServer:
        """The API server in use: kube-apiserver's control plane, or the embedded one."""
        if self.kubernetes is not None:
            return self.kubernetes
        assert self.apiserver is not None, "the sandbox is not started"
        return self.apiserver

    @property
    def url(self) -> str:
        return self._server().url

    @property
    def ca_file(self) -> Path | None:
        """The API server's serving CA (None: the embedded one over plain HTTP)."""
        return self._server().ca_file

    @property
    def audit(self) -> AuditLog:
        """Every request the API server answered: the embedded one's records, or kube-apiserver's audit log."""
        return self._server().audit

    async def service_account_token(self, namespace: str, service_account: str) -> str:
        """A token of an existing ServiceAccount, from the TokenRequest API (an hour)."""
        answer = await self.client.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": 3600}})
        return str(answer["status"]["token"])

    @property
    def service_host(self) -> str:
        """Where a process of the sandbox's own that pods or kube-apiserver must reach listens: the host's address
        in the cluster network on real nodes, else loopback."""
        return self.realnodes.plan.host_ip if self.realnodes is not None else "127.0.0.1"

    async def publish_host_service(self, namespace: str, service: str, port: int, target: int) -> None:
        """A Service without selector whose one endpoint is ``service_host:target`` (real nodes: an EndpointSlice
        as a user would write for a server outside the cluster; kube-apiserver routes to endpoints)."""
        await self.apply([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": namespace},
                           "spec": {"ports": [{"name": "https", "port": port, "targetPort": target}]}}])
        if self.realnodes is None:
            self.register_service_address(namespace, service, port, self.service_host, target)
            return
        self.client.resources.add(ENDPOINT_SLICES)
        await self.apply([{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                           "metadata": {"name": f"{service}-host", "namespace": namespace,
                                        "labels": {"kubernetes.io/service-name": service,
                                                   "endpointslice.kubernetes.io/managed-by": "sandbox.opsmanager.dev"}},
                           "addressType": "IPv4", "ports": [{"name": "https", "port": target, "protocol": "TCP"}],
                           "endpoints": [{"addresses": [self.service_host], "conditions": {"ready": True}}]}])

    def register_service_address(self, namespace: str, service: str, port: int, host: str, target: int) -> None:
        """Where connections to a Service without pods go (the sandbox's own webhook process): the emulated API
        server dials it directly; on the real control plane the node agent's proxy listens on the ClusterIP."""
        if self.proxy is not None:
            self.proxy.register(namespace, service, port, host, target)
        else:
            assert self.apiserver is not None, "the sandbox is not started"
            self.apiserver.register_service_address(namespace, service, port, host, target)

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        """The kubeconfig for an operator run beside the sandbox: on the real control plane its own admin user
        (``realcp.OPERATOR_USER``, so the audit log separates its requests), else the sandbox's."""
        return self.dir / "kubeconfig-operator" if self.kubernetes is not None else self.kubeconfig

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        # The API server keeps its objects in memory, so every start is a new cluster: what an earlier run left
        # on disk (pod roots, claim data, logs) belongs to objects that no longer exist.
        for sub in ("pods", "pvc", "node", "logs", "nodes"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        stack = contextlib.AsyncExitStack()
        self._stack = stack
        if self.control_plane == KUBERNETES:
            try:
                await self._start_kubernetes(stack)
            except BaseException:
                await self.stop()
                raise
            return
        try:
            self.apiserver = sandbox_apiserver.APIServer(self.host, self.port,
                                                         bookmark_interval=self.bookmark_interval,
                                                         authorization=self.authorization)
            await self.apiserver.start()
            stack.push_async_callback(self.apiserver.stop)
            self.apiserver.set_log_source(self._log_path)  # kubectl logs reads the kubelet's files
            docs = self._crd_docs()
            if docs:
                await self.apiserver.apply_objects(docs)
                self.crds = [d["metadata"]["name"] for d in docs]
                await self.apiserver.apply_objects(catalog_objects(docs))  # once their CRD is there
            ca_file = self.apiserver.ca_file
            self.client = kube.Kube.for_url(self.apiserver.url, token=self.apiserver.admin_token,
                                            ca_path=str(ca_file) if ca_file else None,
                                            pool_size=64)  # ~13 watches + the controllers
            for doc in docs:  # the client's table learns the kinds of the CRDs just applied
                self.client.resources.add_crd(doc)
            stack.push_async_callback(self.client.aclose)
            await self._ensure_namespace("cert-manager")
            self.apiserver.write_kubeconfig(self.kubeconfig)

            self.addresses = addresses.PodAddresses()
            stack.callback(self.addresses.close)
            kubelet_config = kubelet.KubeletConfig(
                dir=self.dir, speed=self.speed, volume_refresh_delay=self.volume_refresh_delay,
                cluster_domain=self.cluster_domain, shutdown_grace=self.shutdown_grace)
            if self.apiserver.ca_pem:  # pods of the operator's image reach it in-cluster (https, as client-go)
                kubelet_config.api_host, kubelet_config.api_port = self.apiserver.host, self.apiserver.port
                kubelet_config.api_ca_pem = self.apiserver.ca_pem
            self.kubelet = await _started(stack, kubelet.Kubelet(self.client, kubelet_config, self.addresses))
            self.statefulsets = await _started(stack, statefulset.Controller(self.client))
            await self._start_cert_manager(stack)
            self.deployments = await _started(stack, deployment.Controller(self.client))
            for component in self.components:
                await stack.enter_async_context(component(self))
        except BaseException:
            await self.stop()
            raise

    async def _start_kubernetes(self, stack: contextlib.AsyncExitStack) -> None:
        """The real control plane, its nodes (real ones, or the node agent: kubelet, Node, Service proxy) and this
        project's cert-manager."""
        if self.nodes:
            # the cluster network first: kube-apiserver binds and advertises the host's address in it
            self.realnodes = await asyncio.to_thread(RealNodes.reserve, self.dir / "nodes", self.nodes)
            stack.push_async_callback(self.realnodes.release)
            self.kubernetes = realcp.KubernetesControlPlane(
                self.dir / "controlplane", host=self.realnodes.plan.host_ip, port=self.port,
                service_cidr=str(self.realnodes.plan.services), controller_args=RealNodes.CONTROLLER_ARGS)
        else:
            # a /16 of its own for the ClusterIPs, reserved as the pods' range is (the proxy listens on them)
            services = addresses.PodAddresses()
            stack.callback(services.close)
            self.kubernetes = realcp.KubernetesControlPlane(self.dir / "controlplane", host=self.host,
                                                            port=self.port, service_cidr=f"{services.prefix}0.0/16")
        stack.push_async_callback(self.kubernetes.stop)
        await self.kubernetes.start()
        self.client = kube.Kube.for_url(self.kubernetes.url, token=self.kubernetes.admin_token,
                                        ca_path=str(self.kubernetes.ca_file), pool_size=64)
        stack.push_async_callback(self.client.aclose)
        cert_manager = [d for path in sorted(realcp.cert_manager_crds().glob("*.yaml"))
                        for d in yaml.safe_load_all(path.read_text()) if d]
        docs = [*cert_manager, *self._crd_docs()]
        for doc in docs:
            with contextlib.suppress(kube.AlreadyExists):  # a plain create: no last-applied annotation to outgrow
                await self.client.create(doc)
            self.client.resources.add_crd(doc)
        self.crds = [d["metadata"]["name"] for d in docs]
        await self._wait_established(self.crds)
        for obj in catalog_objects(docs):  # the install bundle's deploy/catalog, once its CRD is established
            with contextlib.suppress(kube.AlreadyExists):
                await self.client.create(obj)
        await self._ensure_namespace("cert-manager")
        self.kubernetes.write_kubeconfig(self.kubeconfig)
        self.kubernetes.write_kubeconfig(self.operator_kubeconfig, token=self.kubernetes.operator_token)
        if self.realnodes is not None:
            stack.push_async_callback(self.realnodes.stop_nodes)
            await self.realnodes.start(self.kubernetes, self.client, cluster_domain=self.cluster_domain,
                                       csi=self.storage == CSI)
            self.volumes = await _started(stack, HostPathProvisioner(self.client, self.dir / "nodes" / "volumes"))
            await self._start_cert_manager(stack)
            for component in self.components:
                await stack.enter_async_context(component(self))
            return
        self.addresses = addresses.PodAddresses()
        stack.callback(self.addresses.close)
        config = kubelet.KubeletConfig(
            dir=self.dir, speed=self.speed, volume_refresh_delay=self.volume_refresh_delay,
            cluster_domain=self.cluster_domain, shutdown_grace=self.shutdown_grace, scheduler=True,
            api_host=self.kubernetes.host, api_port=self.kubernetes.port, api_ca_pem=self.kubernetes.ca_pem)
        self.node = await _started(stack, node.NodeAgent(self.client, config.node_name, config.host_ip))
        self.kubelet = await _started(stack, kubelet.Kubelet(self.client, config, self.addresses))
        self.proxy = await _started(stack, node.ServiceProxy(self.client, self.kubelet.service_target))
        await self._start_cert_manager(stack)
        for component in self.components:
            await stack.enter_async_context(component(self))

    async def _start_cert_manager(self, stack: contextlib.AsyncExitStack) -> None:
        """This project's cert-manager issuance and CA injection (either control plane)."""
        self.certmanager = await _started(stack, certmanager.Controller(self.client,
                                                                        issuance_delay=self.issuance_delay))
        self.cainjector = await _started(stack, cainjector.Controller(self.client))

    async def _wait_established(self, names: list[str], timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for name in names:
            while True:
                crd = await self.client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
                conds = ((crd or {}).get("status") or {}).get("conditions") or ()
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                    break
                if loop.time() > deadline:
                    raise TimeoutError(f"CRD {name} not Established within {timeout}s")
                await asyncio.sleep(0.1)  # the poll interval

    async def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def _ensure_namespace(self, name: str) -> None:
        try:
            await self.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except kube.AlreadyExists:
            pass

    # -- conveniences for tests and demos ----------------------------------------------------------------------------

    def _crd_docs(self) -> list[Obj]:
        if self.crds_dir is None:
            return []
        if self.crds_dir == MODEL_CRDS:
            return model_crds()
        path = Path(self.crds_dir)
        if not path.is_dir() or not any(path.glob("*.y*ml")):
            raise FileNotFoundError(f"CRD directory {path} holds no *.yaml files")
        return sandbox_apiserver.load_crd_files([path])

    async def apply(self, manifests: str | Path | Obj | Iterable[Obj]) -> list[Obj]:
        """Create each object, or replace it if it exists (keeping its resourceVersion), like ``kubectl apply``.

        ``manifests`` is YAML text, a path to a YAML file, one object or a list of objects.
        """
        if isinstance(manifests, Path):
            docs = [d for d in yaml.safe_load_all(manifests.read_text()) if d]
        elif isinstance(manifests, str):
            docs = [d for d in yaml.safe_load_all(manifests) if d]
        elif isinstance(manifests, dict):
            docs = [manifests]
        else:
            docs = list(manifests)
        out = []
        for doc in docs:
            res = self.client.resources.get(doc["apiVersion"], doc["kind"])
            meta = doc.setdefault("metadata", {})
            ns = meta.get("namespace") or ("default" if res.namespaced else None)
            if res.namespaced:
                meta["namespace"] = ns
            try:
                out.append(await self.client.create(doc))
            except kube.AlreadyExists:
                current = await self.client.get(doc["apiVersion"], doc["kind"], ns, meta["name"])
                if current is None:  # deleted meanwhile: create it again
                    out.append(await self.client.create(doc))
                    continue
                body = dict(doc, metadata=dict(meta, resourceVersion=current["metadata"]["resourceVersion"]))
                if "status" in current and "status" not in body:
                    body["status"] = current["status"]
                out.append(await self.client.replace(body))
        return out

    async def exec(self, namespace: str, pod: str, container: str, argv: Sequence[str], *,
                   timeout: float = 30.0) -> tuple[int, str]:
        """Run ``argv`` in a running container (what ``kubectl exec`` does; the API server does not serve
        ``pods/exec``). Returns (exit code, combined output). The container's environment is used."""
        if self.realnodes is not None:
            return await self._kubectl(["exec", "-n", namespace, pod, "-c", container, "--", *argv], timeout)
        assert self.kubelet is not None, "the sandbox is not started"
        worker = self.kubelet.worker(namespace, pod)
        runner = next((r for r in (worker.runners if worker else []) if r.name == container), None)
        pid = (worker.pids() if worker else {}).get(container)
        if runner is None or pid is None:
            raise LookupError(f"container {container!r} of pod {namespace}/{pod} is not running")
        argv = [containers.pod_local(a, worker.ip) for a in argv]  # type: ignore[union-attr]
        code, out = await process.exec_in(pid, argv, runner.env, timeout)
        return code, out.decode(errors="replace")

    async def _kubectl(self, args: Sequence[str], timeout: float) -> tuple[int, str]:
        return await children.output(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], timeout)

    def _log_path(self, namespace: str, pod: str, container: str) -> Path:
        return self.dir / "logs" / namespace / pod / f"{container}.log"

    def logs(self, namespace: str, pod: str, container: str) -> str:
        """The container's log, its previous run first (the node agent's file ``<dir>/logs/<ns>/<pod>/<container>.log``
        holds every run; on real nodes ``kubectl logs --previous`` and ``kubectl logs``)."""
        if self.realnodes is not None:
            out = []
            for extra in (["--previous"], []):
                done = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), "logs", "-n", namespace, pod,
                                       "-c", container, *extra], capture_output=True, text=True, timeout=60)
                out.append(done.stdout if done.returncode == 0 else "")
            return "".join(out)
        path = self._log_path(namespace, pod, container)
        return path.read_text(errors="replace") if path.exists() else ""

    async def container_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """The host PID of a running container (None when it does not run): the node agent's process, or
        containerd's task on real nodes."""
        if self.realnodes is not None:
            obj = await self.client.get("v1", "Pod", namespace, pod)
            if obj is None:
                return None
            try:
                return await self.realnodes.container_pid(obj, container)
            except LookupError:
                return None
        assert self.kubelet is not None, "the sandbox is not started"
        return self.kubelet.pids().get((namespace, pod, container))

    def volume_dir(self, pod: Obj, volume: str) -> Path | None:
        """Where the files of ``pod``'s Secret volume ``volume`` are, as its kubelet delivered them (what the
        container reads next); None when the pod runs nowhere."""
        if self.realnodes is not None:
            if not (pod.get("spec") or {}).get("nodeName"):
                return None
            try:
                return Path(self.realnodes.volume_dir(pod, volume))
            except LookupError:  # its node is stopped
                return None
        assert self.kubelet is not None, "the sandbox is not started"
        worker = self.kubelet.workers.get(str(pod["metadata"].get("uid")))
        return None if worker is None else Path(worker.dir) / "volumes" / volume

    def claim_dir(self, pvc: Obj) -> Path:
        """Where the volume of claim ``pvc`` keeps its data on this machine."""
        if self.volumes is not None:
            return self.volumes.path(pvc)
        assert self.kubelet is not None, "the sandbox is not started"
        return self.kubelet.pvc_dir(pvc)

    async def wait_ready_pods(self, namespace: str, label_selector: str, count: int, timeout: float = 30.0) -> list[Obj]:
        """Wait until ``count`` pods matching ``label_selector`` are Ready; returns them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            pods = await self.client.list("v1", "Pod", namespace, label_selector=label_selector)
            ready = [p for p in pods if statefulset.is_running_and_ready(p)
                     and not statefulset.is_terminating(p)]
            if len(ready) >= count:
                return ready
            if loop.time() > deadline:
                raise TimeoutError(f"{len(ready)}/{count} pods ({label_selector}) Ready in {namespace} "
                                   f"after {timeout}s")
            await asyncio.sleep(0.1)
