"""A minimal Deployment controller for the sandbox: what runs the install bundle's operator and webhook.

Simplification (docs/sandbox.md): there are no ReplicaSets — a Deployment owns its pods directly. Everything
else a user can observe follows the real controller well enough for two-replica Deployments:

- Pods are named ``<deployment>-<pod-template-hash>-<5 random>`` and labelled ``pod-template-hash`` (the hash
  of ``spec.template``, as the ReplicaSet name would carry it), with a controller ``ownerReference`` to the
  Deployment (so the PodDisruptionBudget's ``expectedPods`` is ``spec.replicas``, and deleting the Deployment
  deletes them).
- A pod that goes away (deleted, evicted, failed) is replaced at once.
- ``RollingUpdate``: new pods are created while the total stays within ``replicas + maxSurge``; old pods are
  deleted (not-Ready ones first) while the Ready count stays at least ``replicas - maxUnavailable`` (both
  resolved from percentages as Kubernetes does: surge rounded up, unavailable down). ``Recreate``: every old pod
  is gone before a new one is created.
- Status: ``observedGeneration``, ``replicas``, ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``
  (``minReadySeconds`` is not honoured: Ready is available), ``unavailableReplicas``, conditions ``Available``
  and ``Progressing``.
"""

from __future__ import annotations

import copy
import dataclasses
import secrets
from typing import Any

from opsmanager import kube
from opsmanager_sandbox import events, statefulset, workqueue
from opsmanager_sandbox.apiserver import disruption

Obj = dict[str, Any]

HASH_LABEL = "pod-template-hash"
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' utilrand alphabet


def template_hash(deployment: Obj) -> str:
    return statefulset.revision_hash((deployment.get("spec") or {}).get("template") or {})


def limits(deployment: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as numbers of pods; never both 0 (Kubernetes then allows one unavailable)."""
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    surge = disruption.scaled(rolling.get("maxSurge", "25%"), replicas, True)
    unavailable = disruption.scaled(rolling.get("maxUnavailable", "25%"), replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def new_pod(deployment: Obj, pod_hash: str) -> Obj:
    meta = deployment["metadata"]
    template = copy.deepcopy((deployment.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    suffix = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
    labels = dict(tmeta.get("labels") or {}, **{HASH_LABEL: pod_hash})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{meta['name']}-{pod_hash}-{suffix}", "namespace": meta.get("namespace") or "default",
                     "labels": labels, "annotations": dict(tmeta.get("annotations") or {}),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": template.get("spec") or {},
    }


@dataclasses.dataclass
class Plan:
    create: int = 0
    delete: list[Obj] = dataclasses.field(default_factory=list)
    status: Obj = dataclasses.field(default_factory=dict)


def plan(deployment: Obj, pods: list[Obj]) -> Plan:
    """What to do now, from the Deployment and the pods it owns (pure; see the module doc)."""
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    pod_hash = template_hash(deployment)
    live = [p for p in pods if not statefulset.is_terminating(p) and not statefulset.is_failed(p)]
    new = [p for p in live if (p["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash]
    old = [p for p in live if p not in new]
    ready = [p for p in live if statefulset.is_running_and_ready(p)]
    out = Plan()
    recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
    if recreate:
        out.delete = list(old)
        if not old and not any(statefulset.is_terminating(p) for p in pods):
            out.create = max(0, replicas - len(new))
    else:
        surge, unavailable = limits(deployment)
        out.create = max(0, min(replicas - len(new), replicas + surge - len(live)))
        min_ready = replicas - unavailable
        ready_left = len(ready)
        # Old pods, not-Ready first, then the surplus of new ones (scale down).
        surplus_new = sorted(new, key=lambda p: statefulset.is_running_and_ready(p))[:max(0, len(new) - replicas)]
        for pod in sorted(old, key=lambda p: statefulset.is_running_and_ready(p)) + surplus_new:
            is_ready = statefulset.is_running_and_ready(pod)
            if is_ready and ready_left - 1 < min_ready:
                break
            out.delete.append(pod)
            ready_left -= int(is_ready)
    ready_new = sum(1 for p in new if statefulset.is_running_and_ready(p))
    available = len(ready)
    _, unavailable_allowed = limits(deployment) if not recreate else (0, 0)
    is_available = available >= replicas - unavailable_allowed
    out.status = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": len(live), "updatedReplicas": len(new), "readyReplicas": available,
        "availableReplicas": available, "unavailableReplicas": max(0, replicas - available),
        "conditions": [
            {"type": "Available", "status": "True" if is_available else "False",
             "reason": "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
             "message": "Deployment has minimum availability." if is_available
             else "Deployment does not have minimum availability."},
            {"type": "Progressing", "status": "True",
             "reason": "NewReplicaSetAvailable" if ready_new == replicas and not old else "ReplicaSetUpdated",
             "message": f'pods of template hash "{pod_hash}": {ready_new}/{replicas} Ready'},
        ],
    }
    return out


def _owned_by(pod: Obj, deployment: Obj) -> bool:
    return any(r.get("controller") and r.get("uid") == deployment["metadata"]["uid"]
               for r in pod["metadata"].get("ownerReferences") or [])


class Controller:
    """Runs :func:`plan` for every Deployment whenever it or its pods change."""

    def __init__(self, client: kube.Kube) -> None:
        self.client = client
        self.recorder = events.Recorder(client, "deployment-controller")
        self.deployments = kube.Informer(client, "apps/v1", "Deployment")
        self.pods = kube.Informer(client, "v1", "Pod")
        self.queue: workqueue.WorkQueue[tuple[str, str]] = workqueue.WorkQueue("deployment", self.reconcile)
        self._deleting: set[str] = set()

    async def start(self) -> None:
        self.deployments.add_handler(lambda t, o, old: self.queue.add(kube.key_of(o)))
        self.pods.add_handler(self._on_pod)
        for inf in (self.deployments, self.pods):
            inf.start()
        for inf in (self.deployments, self.pods):
            await inf.synced.wait()
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        for inf in (self.deployments, self.pods):
            await inf.stop()
        await self.recorder.flush()

    def _on_pod(self, etype: str, obj: Obj, old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "Deployment" and ref.get("controller"):
                self.queue.add((meta.get("namespace") or "default", ref.get("name", "")))

    async def reconcile(self, key: tuple[str, str]) -> float | None:
        ns, name = key
        deployment = self.deployments.get(ns, name)
        if deployment is None or (deployment.get("metadata") or {}).get("deletionTimestamp"):
            return None
        pods = [p for p in self.pods.items(ns) if _owned_by(p, deployment)]
        pods = [p for p in pods if p["metadata"].get("uid") not in self._deleting]
        the_plan = plan(deployment, pods)
        pod_hash = template_hash(deployment)
        for _ in range(the_plan.create):
            pod = new_pod(deployment, pod_hash)
            created = await self.client.create(pod)
            self.pods.observe(created)  # counted at once: the next reconcile does not create it again
            self.recorder.event(deployment, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        for pod in the_plan.delete:
            uid = pod["metadata"].get("uid", "")
            self._deleting.add(uid)
            await self.client.delete("v1", "Pod", ns, pod["metadata"]["name"], uid=uid or None)
            self.recorder.event(deployment, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}")
        live_uids = {p["metadata"].get("uid") for p in self.pods.items(ns) if not statefulset.is_terminating(p)}
        self._deleting &= live_uids
        current = {k: (deployment.get("status") or {}).get(k) for k in the_plan.status}
        if current != the_plan.status:
            try:
                await self.client.patch("apps/v1", "Deployment", ns, name, {"status": the_plan.status},
                                        subresource="status")
            except kube.NotFound:
                pass
        return None
