"""The hosts of pod workers: what both share (the worker registry, the pods' DNS files, the PVC directories) and
:class:`StandaloneHost`, which runs a pod from memory without an API server."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opsmanager import kube
from opsmanager_sandbox import (
    addresses,
    dns,
    events,
)
from opsmanager_sandbox.nodeconfig import (
    KubeletConfig,
)
from opsmanager_sandbox.podworker import PodWorker

log = logging.getLogger(__name__)

Obj = dict[str, Any]



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


