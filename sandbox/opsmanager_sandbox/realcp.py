"""The real Kubernetes control plane as local processes: etcd (the 3.6 build) for the API server, kube-apiserver,
kube-controller-manager and kube-scheduler — built from their Go modules by ``sandbox/controlplane/build.py``
(``make controlplane``), started on loopback, stopped by PID.

    async with KubernetesControlPlane(dir) as cp:
        cp.url, cp.kubeconfig, cp.admin_token, cp.ca_file     # https://127.0.0.1:<port>, <dir>/kubeconfig, …

What is set, and why (``docs/sandbox.md`` has the whole list of what the real API server does differently):

- **PKI** made here with :mod:`opsmanager.pki`: a cluster CA; kube-apiserver's serving certificate (``localhost``,
  ``127.0.0.1``, the ``kubernetes`` Service's names and its ClusterIP); client certificates for the controller
  manager and the scheduler (their own users: ``system:kube-controller-manager``, ``system:kube-scheduler``, which
  the bootstrap RBAC policy grants what they need); a service-account signing key. The admin is a static token in
  ``system:masters`` (``--token-auth-file``) — what the sandbox's clients and kubeconfig already carry.
- **kube-apiserver**: RBAC and Node authorization, the default admission plugins, ``--advertise-address=127.0.0.1``
  with ``--endpoint-reconciler-type=none`` (1.37 refuses a loopback advertise address for the ``kubernetes``
  Service's endpoints otherwise), the Service range inside 127.0.0.0/8 (accepted: ``127.200.0.0/16``, or a /16 the sandbox reserved), so nothing
  ever dials an address off this machine.
- **kube-controller-manager** with every controller (StatefulSet, Deployment/ReplicaSet, garbage collector,
  disruption, EndpointSlice, ServiceAccount token, namespace, node lifecycle …), **kube-scheduler**; both without
  leader election (one replica each: a lost lease after an API server restart would make them exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import importlib.util
import ipaddress
import logging
import secrets
import shutil
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import yaml  # type: ignore[import-untyped,unused-ignore]
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from opsmanager import pki
from opsmanager_sandbox import children, realaudit

log = logging.getLogger(__name__)

SERVICE_CIDR: Final = "127.200.0.0/16"
"""The default Service range; a sandbox passes one it reserved, so that two running side by side (test workers,
the API-cost bench) never hand out the same ClusterIP, where the node agent's proxy listens."""
CLUSTER_DOMAIN: Final = "cluster.local"
OPERATOR_USER: Final = "opsmanager-operator"
BUILD_SCRIPT: Final = Path(__file__).resolve().parents[1] / "controlplane" / "build.py"


class NotBuilt(RuntimeError):
    """A binary of the real control plane is missing: ``make controlplane`` builds it (needs Go)."""


def build_module() -> ModuleType:
    """``sandbox/controlplane/build.py`` of the checkout, which knows the pinned versions and the cache."""
    if not BUILD_SCRIPT.is_file():
        raise NotBuilt(f"{BUILD_SCRIPT} not found: the real control plane runs from a checkout of the repository")
    name = "opsmanager_controlplane_build"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def binary(component: str, tool: str) -> Path:
    """The built binary, or :class:`NotBuilt` saying how to build it."""
    path: Path = build_module().binary(component, tool)
    if not path.is_file():
        raise NotBuilt(f"{tool} of {component} is not built ({path}): run `make controlplane` (needs Go; without "
                       "it, use the embedded control plane: --control-plane embedded)")
    return path


def cert_manager_crds() -> Path:
    path: Path = build_module().cert_manager_crds()
    if not path.is_dir():
        raise NotBuilt(f"cert-manager's CRDs are not fetched ({path}): run `make controlplane`")
    return path


def _write(path: Path, data: bytes, mode: int = 0o600) -> str:
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def kubeconfig(server: str, ca_pem: bytes, *, token: str | None = None, cert: str | None = None,
               key: str | None = None, user: str = "admin") -> dict[str, Any]:
    """A kubeconfig for ``server`` (embedding the CA), with a bearer token or a client certificate (file paths)."""
    import base64

    creds: dict[str, Any] = {"token": token} if token else {"client-certificate": cert, "client-key": key}
    return {"apiVersion": "v1", "kind": "Config", "current-context": "sandbox",
            "clusters": [{"name": "sandbox", "cluster": {
                "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
            "users": [{"name": user, "user": creds}],
            "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": user}}]}


class KubernetesControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler (see the module docstring)."""

    def __init__(self, dir: str | Path, *, host: str = "127.0.0.1", port: int = 0,
                 controllers: bool = True, ready_timeout: float = 120.0, service_cidr: str = SERVICE_CIDR,
                 controller_args: tuple[str, ...] = ()) -> None:
        self.dir = Path(dir).resolve()
        self.host = host
        self.port = port
        self.controllers = controllers
        self.ready_timeout = ready_timeout
        self.service_cidr = service_cidr
        self.controller_args = controller_args
        """Extra kube-controller-manager flags (real nodes: how soon a silent node is NotReady)."""
        # the first address of the range is the `kubernetes` Service's
        self.kubernetes_service_ip = str(ipaddress.ip_network(service_cidr)[1])
        self.admin_token = secrets.token_urlsafe(24)
        self.operator_token = secrets.token_urlsafe(24)
        """A second admin (``OPERATOR_USER``, ``system:masters``) for the operator a test or benchmark runs beside
        the sandbox: kube-apiserver's audit log then tells its requests from the sandbox's own."""
        self.ca: pki.KeyPair | None = None
        self.children: list[children.Child] = []
        self.etcd_url = ""
        self.audit = realaudit.KubeAuditLog(self.dir / "audit.log")
        """Every request kube-apiserver answered (its own audit log; ``realaudit.py``)."""

    # -- the shape the sandbox reads from its API server ---------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def pki_dir(self) -> Path:
        return self.dir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def ca_pem(self) -> bytes:
        assert self.ca is not None, "not started"
        return self.ca.cert_pem

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def write_kubeconfig(self, path: Path, *, token: str | None = None) -> None:
        path.write_text(yaml.safe_dump(kubeconfig(self.url, self.ca_pem, token=token or self.admin_token)))
        path.chmod(0o600)

    def pids(self) -> dict[str, int]:
        return {c.name: c.pid for c in self.children if c.process.returncode is None}

    # -- lifecycle -----------------------------------------------------------------------------------------------

    async def __aenter__(self) -> KubernetesControlPlane:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        apiserver_bin = binary("kubernetes", "kube-apiserver")
        etcd_bin = binary("etcd-3.6", "etcd")
        self.dir.mkdir(parents=True, exist_ok=True)
        # a fresh cluster each start: a previous run's objects (and its Service range) must not come back
        shutil.rmtree(self.dir / "etcd", ignore_errors=True)
        self.audit.path.unlink(missing_ok=True)
        (self.dir / "etcd").mkdir(exist_ok=True)
        try:
            files = self._pki()
            await self._start_etcd(etcd_bin)
            await self._start_apiserver(apiserver_bin, files)
            self.write_kubeconfig(self.kubeconfig)
            if self.controllers:
                await self._start_controllers(files)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop every process, last started first (SIGTERM, a grace, SIGKILL), by PID."""
        for child in reversed(self.children):
            await child.stop(grace=10.0)
        self.children.clear()

    # -- parts ---------------------------------------------------------------------------------------------------

    def _pki(self) -> dict[str, str]:
        d = self.pki_dir
        d.mkdir(parents=True, exist_ok=True)
        self.ca = pki.make_ca("opsmanager-sandbox-kubernetes-ca", duration=datetime.timedelta(days=30))
        files = {"ca": _write(d / "ca.crt", self.ca.cert_pem, 0o644), "ca_key": _write(d / "ca.key", self.ca.key_pem)}
        names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 f"kubernetes.default.svc.{CLUSTER_DOMAIN}"]
        serving = pki.make_leaf(self.ca, "kube-apiserver", dns_names=names,
                                ip_addresses=[self.host, self.kubernetes_service_ip], usages=("server",),
                                duration=datetime.timedelta(days=30))
        files["serving"] = _write(d / "apiserver.crt", serving.cert_pem, 0o644)
        files["serving_key"] = _write(d / "apiserver.key", serving.key_pem)
        for user, who in (("kcm", "system:kube-controller-manager"), ("scheduler", "system:kube-scheduler"),
                          ("kubelet-client", "kube-apiserver-kubelet-client")):
            leaf = pki.make_leaf(self.ca, who, usages=("client",), duration=datetime.timedelta(days=30))
            files[user] = _write(d / f"{user}.crt", leaf.cert_pem, 0o644)
            files[f"{user}_key"] = _write(d / f"{user}.key", leaf.key_pem)
        signer = ec.generate_private_key(ec.SECP256R1())  # service-account tokens: ES256
        files["sa_key"] = _write(d / "sa.key", signer.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        files["sa_pub"] = _write(d / "sa.pub", signer.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
        files["tokens"] = _write(d / "tokens.csv", (
            f"{self.admin_token},admin,admin-uid,system:masters\n"
            f"{self.operator_token},{OPERATOR_USER},operator-uid,system:masters\n").encode())
        return files

    async def _start(self, name: str, argv: list[str], probe: Any, timeout: float) -> children.Child:
        child = await children.Child.start(name, argv, log_path=self.dir / "logs" / f"{name}.log",
                                           die_with_parent=True)
        self.children.append(child)
        await child.wait_ready(probe, timeout=timeout, interval=0.2)
        return child

    async def _start_etcd(self, etcd_bin: Path, *, attempts: int = 3) -> None:
        """The API server's etcd on two free ports. A free port is free when asked, not when etcd binds it a moment
        later (parallel test workers start control planes at once): a bind that lost that race is retried on new
        ports with a fresh data directory."""
        for attempt in range(1, attempts + 1):
            client, peer = children.free_port(self.host), children.free_port(self.host)
            self.etcd_url = f"http://{self.host}:{client}"
            data = self.dir / "etcd" / "data"
            argv = [str(etcd_bin), "--name", "apiserver-etcd", "--data-dir", str(data),
                    "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                    "--listen-peer-urls", f"http://{self.host}:{peer}",
                    "--initial-advertise-peer-urls", f"http://{self.host}:{peer}",
                    "--initial-cluster", f"apiserver-etcd=http://{self.host}:{peer}",
                    "--initial-cluster-state", "new", "--listen-metrics-urls", "", "--log-level", "warn"]
            try:
                await self._start("etcd", argv, lambda: _get_ok(f"{self.etcd_url}/health"), 30.0)
                return
            except RuntimeError as err:
                if "address already in use" not in str(err) or attempt == attempts:
                    raise
                log.info("the API server's etcd lost a port to another process (%s); new ports", err)
                shutil.rmtree(data, ignore_errors=True)

    async def _start_apiserver(self, apiserver_bin: Path, f: dict[str, str]) -> None:
        self.port = self.port or children.free_port(self.host)
        argv = [str(apiserver_bin), f"--etcd-servers={self.etcd_url}",
                f"--bind-address={self.host}", f"--secure-port={self.port}", f"--advertise-address={self.host}",
                # the `kubernetes` Service's endpoints: impossible on loopback (refused), kept by a lease otherwise
                *(["--endpoint-reconciler-type=none"] if ipaddress.ip_address(self.host).is_loopback else
                  ["--enable-aggregator-routing=true", "--kubelet-preferred-address-types=InternalIP"]),
                f"--tls-cert-file={f['serving']}", f"--tls-private-key-file={f['serving_key']}",
                f"--client-ca-file={f['ca']}", f"--token-auth-file={f['tokens']}",
                f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
                f"--service-account-key-file={f['sa_pub']}", f"--service-account-signing-key-file={f['sa_key']}",
                f"--service-cluster-ip-range={self.service_cidr}", "--authorization-mode=Node,RBAC",
                "--allow-privileged=true", "--profiling=false",
                f"--audit-policy-file={_write(self.dir / 'audit-policy.yaml', realaudit.POLICY.encode(), 0o644)}",
                f"--audit-log-path={self.audit.path}", "--audit-log-format=json", "--audit-log-maxsize=4000",
                f"--kubelet-client-certificate={f['kubelet-client']}", f"--kubelet-client-key={f['kubelet-client_key']}"]
        await self._start("kube-apiserver", argv, lambda: self._readyz(), self.ready_timeout)

    async def _start_controllers(self, f: dict[str, str]) -> None:
        configs = {}
        for user in ("kcm", "scheduler"):
            path = self.dir / f"{user}.kubeconfig"
            path.write_text(yaml.safe_dump(kubeconfig(self.url, self.ca_pem, cert=f[user], key=f[f"{user}_key"],
                                                      user=user)))
            path.chmod(0o600)
            configs[user] = str(path)
        kcm_port, scheduler_port = children.free_port(self.host), children.free_port(self.host)
        (self.dir / "flexvolume").mkdir(exist_ok=True)  # else it creates /usr/libexec/kubernetes/…
        kcm = [str(binary("kubernetes", "kube-controller-manager")), f"--kubeconfig={configs['kcm']}",
               f"--authentication-kubeconfig={configs['kcm']}", f"--authorization-kubeconfig={configs['kcm']}",
               f"--bind-address={self.host}", f"--secure-port={kcm_port}", f"--root-ca-file={f['ca']}",
               f"--service-account-private-key-file={f['sa_key']}", "--use-service-account-credentials=true",
               f"--cluster-signing-cert-file={f['ca']}", f"--cluster-signing-key-file={f['ca_key']}",
               f"--service-cluster-ip-range={self.service_cidr}", f"--flex-volume-plugin-dir={self.dir / 'flexvolume'}",
               "--controllers=*", "--leader-elect=false", "--profiling=false", *self.controller_args]
        scheduler = [str(binary("kubernetes", "kube-scheduler")), f"--kubeconfig={configs['scheduler']}",
                     f"--authentication-kubeconfig={configs['scheduler']}",
                     f"--authorization-kubeconfig={configs['scheduler']}", f"--bind-address={self.host}",
                     f"--secure-port={scheduler_port}", "--leader-elect=false", "--profiling=false"]
        await self._start("kube-controller-manager", kcm,
                          lambda: _get_ok(f"https://{self.host}:{kcm_port}/healthz", insecure=True), 60.0)
        await self._start("kube-scheduler", scheduler,
                          lambda: _get_ok(f"https://{self.host}:{scheduler_port}/healthz", insecure=True), 60.0)

    async def _readyz(self) -> bool:
        return await _get_ok(f"{self.url}/readyz", ca=str(self.ca_file), token=self.admin_token)

    async def get(self, path: str) -> tuple[int, str]:
        """A GET as the admin (for checks such as ``/readyz?verbose``)."""
        return await asyncio.to_thread(_get, f"{self.url}{path}", str(self.ca_file), self.admin_token, False)


def _get(url: str, ca: str | None, token: str | None, insecure: bool) -> tuple[int, str]:
    context = None
    if url.startswith("https"):
        context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
        if insecure:  # the controllers' self-signed health endpoints on loopback: only "is it up"
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2.0, context=context) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


async def _get_ok(url: str, *, ca: str | None = None, token: str | None = None, insecure: bool = False) -> bool:
    with contextlib.suppress(Exception):
        code, _ = await asyncio.to_thread(_get, url, ca, token, insecure)
        return code == 200
    return False
