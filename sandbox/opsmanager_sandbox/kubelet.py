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
  removed from the API server without a graceful deletion (``gracePeriodSeconds: 0``, a force delete) is stopped
  at once. Every stop gets the kubelet's minimal window of 2 s between SIGTERM and SIGKILL. A new
  pod of the same name (a StatefulSet replacement) starts only after the old one's processes are gone, and
  gets the same IP.
- Secret/ConfigMap volume updates are applied after ``volume_refresh_delay`` through the atomic ``..data`` swap.
  Test-only knob (no real kubelet has it): while a pod carries the annotation
  ``sandbox.opsmanager.dev/hold-volume-refresh: "true"`` (:data:`ANNOTATION_HOLD_VOLUME_REFRESH`) its Secret and
  ConfigMap volumes are not re-projected — a kubelet that is slow to deliver; removing the annotation delivers
  what was held. A replacement pod has no such annotation, so a restarted member gets fresh files.
- Probe periods, delays and restart back-off are multiplied by ``speed`` (1.0 = real time).

The node agent is split by concern: :mod:`.nodeconfig` (its configuration, the constants pods see, and the
:class:`PodHost` protocol — what a pod needs from its host: objects, status sink, events, DNS), :mod:`.runtime`
(one container as a local process, its probes and restarts), :mod:`.podworker` (one pod: volumes, token,
containers, status, termination), :mod:`.podhost` (the worker registry and DNS files both hosts share, and
:class:`StandaloneHost`, which runs a pod from memory without an API server) and this module, :class:`Kubelet`,
the host driven by the API server (watches, binding, PersistentVolumes, status writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opsmanager import kube
from opsmanager.kube import selectors
from opsmanager_sandbox import (
    addresses,
    dns,
    events,
    process,
)
from opsmanager_sandbox import node as node_agent
from opsmanager_sandbox.nodeconfig import (
    ANNOTATION_HOLD_VOLUME_REFRESH,
    NODE_NAME,
    KubeletConfig,
    holds_volume_refresh,
)
from opsmanager_sandbox.podhost import StandaloneHost, _HostBase
from opsmanager_sandbox.podworker import PodWorker

# The node agent's face to the rest of the sandbox and to the tests; its parts live in nodeconfig (configuration,
# constants, the PodHost protocol), runtime (containers), podworker (pods), podhost (hosts, DNS files).
__all__ = ["ANNOTATION_HOLD_VOLUME_REFRESH", "NODE_NAME", "Kubelet", "KubeletConfig", "PodWorker", "StandaloneHost",
           "holds_volume_refresh", "kill_leftovers"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


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
        try:
            await node_agent.offer_volume(self.client, pvc, self.pvc_dir(pvc))
        finally:
            self._binding_pvcs.discard(str(pvc["metadata"].get("uid")))

    async def _delete_pv(self, pvc: Obj) -> None:
        self.client.resources.add(node_agent.PERSISTENT_VOLUMES)
        with contextlib.suppress(kube.NotFound):
            await self.client.delete("v1", "PersistentVolume", None, f"pvc-{pvc['metadata'].get('uid')}")

    def service_target(self, svc: Obj, port: Obj) -> tuple[str, int] | None:
        """A Ready pod of ``svc`` (by its selector) and the port ``port`` targets on it: what kube-proxy would
        pick (:class:`opsmanager_sandbox.node.ServiceProxy`)."""
        meta, selector = svc["metadata"], (svc.get("spec") or {}).get("selector") or {}
        if not selector:
            return None
        target = port.get("targetPort", port.get("port"))
        for worker in self.workers.values():
            labels = (worker.pod.get("metadata") or {}).get("labels") or {}
            if worker.namespace != (meta.get("namespace") or "default") or not worker.ready or \
                    not selectors.matches_set(selector, labels):
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
