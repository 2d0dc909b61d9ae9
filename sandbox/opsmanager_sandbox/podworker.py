"""The pod worker: everything the node agent does for one pod (one UID) — its volumes and service-account token,
its containers in order (init containers first), their status and the pod's conditions, its termination."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from opsmanager import kube
from opsmanager_sandbox import (
    containers,
    dns,
    process,
    volumes,
)
from opsmanager_sandbox.nodeconfig import (
    ANNOTATION_HOLD_VOLUME_REFRESH,
    SERVICE_ACCOUNT_DIR,
    SERVICE_ACCOUNT_VOLUME,
    PodHost,
    _now,
    holds_volume_refresh,
)
from opsmanager_sandbox.runtime import ContainerRunner

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# The kubelet's minimumGracePeriodInSeconds: "always give containers a minimal shutdown window" — every stop, a
# force delete's or a shorter override's too, waits this long after SIGTERM before SIGKILL.
MINIMUM_GRACE_SECONDS = 2.0


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
        """The stop's grace: the delete's (or the probe's) override, else the pod's, never under the kubelet's
        minimal shutdown window (a force delete too)."""
        if override is None:
            override = (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return max(MINIMUM_GRACE_SECONDS, float(30 if override is None else override))

    def update(self, pod: Obj) -> None:
        old_labels = (self.pod.get("metadata") or {}).get("labels")
        resized = _resources_of(pod) != _resources_of(self.pod)
        self.pod = pod
        if resized:  # an in-place resize (pods/resize): nothing to restart, the status reports the new resources
            self.changed()
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
                           dns.resolv_conf(self.namespace, cfg.cluster_domain, dns.dead_nameserver(self.ip)))
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
            data = volumes.decoded(self.host.secret(self.namespace, name), volumes.decode_secret)
        else:
            data = volumes.decoded(self.host.configmap(self.namespace, name), volumes.decode_configmap)
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
            "containerStatuses": [_with_resources(r.status(), spec) for r in self.runners],
        }
        if (generation := (self.pod.get("metadata") or {}).get("generation")) is not None:
            status["observedGeneration"] = generation  # the spec this status reflects (an in-place resize included)
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




def _resources_of(pod: Obj) -> dict[str, Any]:
    return {c.get("name"): c.get("resources") for c in (pod.get("spec") or {}).get("containers") or []}


def _with_resources(status: Obj, spec: Obj) -> Obj:
    """A container's status with the resources it runs with, as the kubelet reports them since in-place resize:
    ``resources`` (what it was given) and ``allocatedResources`` (its requests). Local processes have no cgroup
    to change, so what the pod's spec asks for now is what it has."""
    container: Obj = next((c for c in spec.get("containers") or [] if c.get("name") == status.get("name")), {})
    resources = container.get("resources") or {}
    if resources:
        status["resources"] = resources
        if resources.get("requests"):
            status["allocatedResources"] = resources["requests"]
    return status
