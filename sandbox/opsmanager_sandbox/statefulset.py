"""The StatefulSet controller: a pure planner (:func:`plan`) and the loop that applies its plans (:class:`Controller`).

It follows kube-controller-manager's ``statefulset`` controller (k8s 1.32, pkg/controller/statefulset):

- pods ``<sts>-<ordinal>`` (``spec.ordinals.start`` honoured) with ``hostname`` = pod name and
  ``subdomain`` = ``serviceName``, labels ``controller-revision-hash``, ``statefulset.kubernetes.io/pod-name``
  and ``apps.kubernetes.io/pod-index``, a controller ownerReference to the StatefulSet;
- one PersistentVolumeClaim ``<template>-<pod>`` per volumeClaimTemplate, created before the pod and kept when
  the pod goes (``persistentVolumeClaimRetentionPolicy`` Retain by default; ``whenDeleted: Delete`` puts an
  ownerReference on the claim, ``whenScaled: Delete`` deletes the claims of pods removed by a scale-down);
- ``podManagementPolicy`` OrderedReady (create in ordinal order, each after the previous is Running and Ready;
  remove from the highest, one at a time; stop at the first unhealthy pod) or Parallel (all at once);
- revisions: a ControllerRevision ``<sts>-<hash>`` per distinct pod template, ``revision`` numbers increasing;
  ``updateRevision`` is the current template's, ``currentRevision`` the one all pods had before;
- ``updateStrategy`` RollingUpdate (delete the highest-ordinal pod ≥ ``partition`` not at the update revision,
  wait until it is back Running and Ready, continue downwards) or OnDelete (never delete; a pod deleted by
  someone else comes back from the update revision). A pod below the partition is recreated from the current
  revision. As in k8s 1.32 (kubernetes/kubernetes#73492, fixed only in 2026), with OnDelete ``currentRevision``
  is NOT advanced when every pod has been updated: compare pods' ``controller-revision-hash`` with
  ``updateRevision`` instead, as on a real cluster;
- a deleted pod is recreated (after the old one is fully gone) from the revision its ordinal should have; a
  Failed/Succeeded pod is deleted so that it is recreated;
- status: observedGeneration, replicas, readyReplicas, availableReplicas (``minReadySeconds``),
  currentReplicas, updatedReplicas, currentRevision, updateRevision, collisionCount.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import logging
import re
from typing import Any

from opsmanager import kube
from opsmanager_sandbox import events, workqueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]

REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


# ---------------------------------------------------------------------------------------------------------------
# pure helpers


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def template_patch(sts: Obj) -> Obj:
    """The ControllerRevision ``data`` of a StatefulSet: its pod template as a replace patch (as k8s stores it)."""
    template = copy.deepcopy((sts.get("spec") or {}).get("template") or {})
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def revision_hash(data: Obj, collision_count: int = 0) -> str:
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        raw += str(collision_count).encode()
    return "".join(_SAFE[b % len(_SAFE)] for b in str(_fnv32a(raw)).encode())


def template_of(revision: Obj) -> Obj:
    template = copy.deepcopy(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    return template


def _owner_ref(sts: Obj) -> Obj:
    meta = sts["metadata"]
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": meta["name"], "uid": meta.get("uid", ""),
            "controller": True, "blockOwnerDeletion": True}


def _owned_by(obj: Obj, sts: Obj) -> bool:
    uid = sts["metadata"].get("uid")
    return any(r.get("controller") and r.get("uid") == uid for r in (obj.get("metadata") or {}).get("ownerReferences")
               or [])


def ordinal_of(sts_name: str, pod_name: str) -> int | None:
    m = re.fullmatch(re.escape(sts_name) + r"-(\d+)", pod_name)
    return int(m.group(1)) if m else None


def claim_name(template_name: str, pod_name: str) -> str:
    return f"{template_name}-{pod_name}"


def new_pod(sts: Obj, template: Obj, ordinal: int, revision: str) -> Obj:
    meta = sts["metadata"]
    name = f"{meta['name']}-{ordinal}"
    spec = copy.deepcopy(template.get("spec") or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels.update({REVISION_LABEL: revision, POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal)})
    spec["hostname"] = name
    service = (sts.get("spec") or {}).get("serviceName")
    if service:
        spec["subdomain"] = service
    vols = [v for v in spec.get("volumes") or []]
    for claim in (sts.get("spec") or {}).get("volumeClaimTemplates") or []:
        cname = (claim.get("metadata") or {}).get("name", "")
        vol = {"name": cname, "persistentVolumeClaim": {"claimName": claim_name(cname, name)}}
        vols = [v for v in vols if v.get("name") != cname] + [vol]
    if vols:
        spec["volumes"] = vols
    pod_meta: Obj = {"name": name, "namespace": meta.get("namespace") or "default", "labels": labels,
                     "ownerReferences": [_owner_ref(sts)]}
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def new_claims(sts: Obj, pod_name: str) -> list[Obj]:
    meta = sts["metadata"]
    spec = sts.get("spec") or {}
    policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
    out = []
    for claim in spec.get("volumeClaimTemplates") or []:
        cmeta = claim.get("metadata") or {}
        labels = dict(cmeta.get("labels") or {})
        labels.update((spec.get("selector") or {}).get("matchLabels") or {})
        body: Obj = {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim_name(cmeta.get("name", ""), pod_name),
                         "namespace": meta.get("namespace") or "default", "labels": labels},
            "spec": copy.deepcopy(claim.get("spec") or {}),
        }
        if cmeta.get("annotations"):
            body["metadata"]["annotations"] = dict(cmeta["annotations"])
        if policy.get("whenDeleted") == "Delete":
            ref = _owner_ref(sts)
            ref["controller"] = False
            body["metadata"]["ownerReferences"] = [ref]
        out.append(body)
    return out


def _cond_true(pod: Obj, type_: str) -> Obj | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return dict(c)
    return None


def is_running_and_ready(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and _cond_true(pod, "Ready") is not None


def is_terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_failed(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def is_healthy(pod: Obj) -> bool:
    return is_running_and_ready(pod) and not is_terminating(pod)


def is_available(pod: Obj, min_ready: int, now: datetime.datetime) -> bool:
    ready = _cond_true(pod, "Ready")
    if not is_running_and_ready(pod) or ready is None:
        return False
    if min_ready <= 0:
        return True
    since = ready.get("lastTransitionTime")
    if not since:
        return False
    t = datetime.datetime.fromisoformat(str(since).replace("Z", "+00:00"))
    return (now - t).total_seconds() >= min_ready


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def revision_of(pod: Obj) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, ""))


# ---------------------------------------------------------------------------------------------------------------
# the plan


@dataclasses.dataclass
class Plan:
    """What to do now for one StatefulSet (applied in this order), and the status to write."""

    create_revisions: list[Obj] = dataclasses.field(default_factory=list)
    update_revisions: list[Obj] = dataclasses.field(default_factory=list)   # revision number bumps
    delete_revisions: list[str] = dataclasses.field(default_factory=list)
    create_claims: list[Obj] = dataclasses.field(default_factory=list)
    claim_pods: dict[str, str] = dataclasses.field(default_factory=dict)        # claim name -> pod name
    create_pods: list[Obj] = dataclasses.field(default_factory=list)
    delete_pods: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)   # (name, uid, reason)
    delete_claims: list[str] = dataclasses.field(default_factory=list)
    status: Obj = dataclasses.field(default_factory=dict)
    requeue_after: float | None = None


def plan(sts: Obj, pods: list[Obj], revisions: list[Obj], claims: set[str], *,
         now: datetime.datetime | None = None) -> Plan:
    """Decide the next actions for ``sts`` given the pods and ControllerRevisions it owns and the names of
    existing PVCs in its namespace. Pure: no I/O."""
    now = now or datetime.datetime.now(datetime.UTC)
    out = Plan()
    meta = sts["metadata"]
    name = meta["name"]
    spec = sts.get("spec") or {}
    status = sts.get("status") or {}
    replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    start = int((spec.get("ordinals") or {}).get("start") or 0)
    monotonic = (spec.get("podManagementPolicy") or "OrderedReady") != "Parallel"
    strategy = spec.get("updateStrategy") or {}
    strategy_type = strategy.get("type") or "RollingUpdate"
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    min_ready = int(spec.get("minReadySeconds") or 0)
    collision = int(status.get("collisionCount") or 0)

    # -- revisions ------------------------------------------------------------------------------------------------
    revisions = sorted(revisions, key=lambda r: int(r.get("revision") or 0))
    data = template_patch(sts)
    update_rev: Obj | None = None
    for rev in revisions:
        if rev.get("data") == data:
            update_rev = rev
    max_number = max((int(r.get("revision") or 0) for r in revisions), default=0)
    if update_rev is None:
        hash_ = revision_hash(data, collision)
        update_rev = {
            "apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": f"{name}-{hash_}", "namespace": meta.get("namespace") or "default",
                         "labels": dict((spec.get("selector") or {}).get("matchLabels") or {},
                                        **{"controller.kubernetes.io/hash": hash_}),
                         "ownerReferences": [_owner_ref(sts)]},
            "data": data, "revision": max_number + 1,
        }
        out.create_revisions.append(update_rev)
    elif revisions and update_rev is not revisions[-1]:
        # rolling back to an older template: it becomes the newest revision again
        update_rev = dict(update_rev, revision=max_number + 1)
        out.update_revisions.append(update_rev)
    update_name = update_rev["metadata"]["name"]
    by_name = {r["metadata"]["name"]: r for r in revisions}
    by_name[update_name] = update_rev
    current_name = status.get("currentRevision") or update_name
    current_rev = by_name.get(current_name) or update_rev
    current_name = current_rev["metadata"]["name"]

    # -- pods by ordinal ---------------------------------------------------------------------------------------------
    in_range: dict[int, Obj] = {}
    condemned: list[Obj] = []
    for pod in pods:
        ordinal = ordinal_of(name, pod["metadata"]["name"])
        if ordinal is None:
            continue
        if start <= ordinal < start + replicas:
            in_range[ordinal] = pod
        else:
            condemned.append(pod)
    condemned.sort(key=lambda p: -(ordinal_of(name, p["metadata"]["name"]) or 0))

    def template_for(ordinal: int) -> tuple[Obj, str]:
        if strategy_type == "RollingUpdate" and ordinal - start < partition:
            return template_of(current_rev), current_name
        return template_of(update_rev), update_name

    # -- status (from what is observed now) --------------------------------------------------------------------------
    all_pods = list(in_range.values()) + condemned
    st: Obj = {
        "observedGeneration": meta.get("generation", 1),
        "replicas": len(all_pods),
        "readyReplicas": sum(1 for p in all_pods if is_running_and_ready(p)),
        "availableReplicas": sum(1 for p in all_pods if is_available(p, min_ready, now)),
        "currentReplicas": sum(1 for p in all_pods if revision_of(p) == current_name and not is_terminating(p)),
        "updatedReplicas": sum(1 for p in all_pods if revision_of(p) == update_name and not is_terminating(p)),
        "currentRevision": current_name,
        "updateRevision": update_name,
        "collisionCount": collision,
    }
    if min_ready and st["readyReplicas"] > st["availableReplicas"]:
        out.requeue_after = 1.0
    out.status = st

    # -- replicas in range -------------------------------------------------------------------------------------------
    blocked = False
    for ordinal in range(start, start + replicas):
        replica = in_range.get(ordinal)
        pod_name = f"{name}-{ordinal}"
        if replica is None:
            for claim in new_claims(sts, pod_name):
                if claim["metadata"]["name"] not in claims:
                    out.create_claims.append(claim)
                    out.claim_pods[claim["metadata"]["name"]] = pod_name
            template, rev_name = template_for(ordinal)
            out.create_pods.append(new_pod(sts, template, ordinal, rev_name))
            if monotonic:
                blocked = True
                break
            continue
        pod = replica
        if is_failed(pod) and not is_terminating(pod):
            out.delete_pods.append((pod_name, _uid(pod), f"pod {pod_name} is {pod['status'].get('phase')}"))
            if monotonic:
                blocked = True
                break
            continue
        if is_terminating(pod) and monotonic:
            blocked = True
            break
        if not is_running_and_ready(pod) and monotonic:
            blocked = True
            break
    if blocked:
        return out

    # -- scale down ------------------------------------------------------------------------------------------------
    unhealthy = any(not is_healthy(p) for p in in_range.values())
    for pod in condemned:
        if is_terminating(pod):
            if monotonic:
                return out
            continue
        if monotonic and unhealthy:
            return out
        out.delete_pods.append((pod["metadata"]["name"], _uid(pod), "scale down"))
        if monotonic:
            return out
    policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
    if policy.get("whenScaled") == "Delete":
        live = {p["metadata"]["name"] for p in all_pods}
        for existing in sorted(claims):
            for tmpl in spec.get("volumeClaimTemplates") or []:
                prefix = f"{(tmpl.get('metadata') or {}).get('name', '')}-{name}-"
                tail = existing[len(prefix):]
                if existing.startswith(prefix) and tail.isdigit() and not (start <= int(tail) < start + replicas) \
                        and f"{name}-{tail}" not in live:
                    out.delete_claims.append(existing)
    if condemned:
        return out

    # -- rolling update ----------------------------------------------------------------------------------------------
    if strategy_type != "RollingUpdate":
        return out
    for ordinal in range(start + replicas - 1, start + partition - 1, -1):
        target = in_range.get(ordinal)
        if target is None:
            return out
        pod = target
        if revision_of(pod) != update_name and not is_terminating(pod):
            out.delete_pods.append((pod["metadata"]["name"], _uid(pod), "rolling update"))
            return out
        if not is_healthy(pod):
            return out
    # complete: every pod at the update revision and ready
    if st["updatedReplicas"] == st["replicas"] == replicas and st["readyReplicas"] == replicas:
        st["currentRevision"] = update_name
        st["currentReplicas"] = st["updatedReplicas"]
    # keep history bounded
    limit = int(spec.get("revisionHistoryLimit", 10) if spec.get("revisionHistoryLimit") is not None else 10)
    live_revs = {revision_of(p) for p in all_pods} | {st["currentRevision"], update_name}
    stale = [r["metadata"]["name"] for r in revisions if r["metadata"]["name"] not in live_revs]
    if len(stale) > limit:
        out.delete_revisions = stale[: len(stale) - limit]
    return out


# ---------------------------------------------------------------------------------------------------------------
# the controller


class Controller:
    """Runs :func:`plan` for every StatefulSet whenever it, its pods or its revisions change."""

    def __init__(self, client: kube.Kube) -> None:
        self.client = client
        self.recorder = events.Recorder(client, "statefulset-controller")
        self.sets = kube.Informer(client, "apps/v1", "StatefulSet")
        self.pods = kube.Informer(client, "v1", "Pod")
        self.revisions = kube.Informer(client, "apps/v1", "ControllerRevision")
        self.claims = kube.Informer(client, "v1", "PersistentVolumeClaim")
        self.queue: workqueue.WorkQueue[tuple[str, str]] = workqueue.WorkQueue("statefulset", self.reconcile)
        self._deleting: set[str] = set()  # UIDs of pods we asked to delete (client-go's "expectations")

    async def start(self) -> None:
        self.sets.add_handler(lambda t, o, old: self.queue.add(kube.key_of(o)))
        for inf in (self.pods, self.revisions):
            inf.add_handler(self._on_owned)
        self.claims.add_handler(self._on_claim)
        for inf in (self.sets, self.pods, self.revisions, self.claims):
            inf.start()
        for inf in (self.sets, self.pods, self.revisions, self.claims):
            await inf.synced.wait()
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        for inf in (self.sets, self.pods, self.revisions, self.claims):
            await inf.stop()
        await self.recorder.flush()

    def _on_owned(self, etype: str, obj: Obj, old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "StatefulSet" and ref.get("controller"):
                self.queue.add((meta.get("namespace") or "default", ref.get("name", "")))

    def _on_claim(self, etype: str, obj: Obj, old: Obj | None) -> None:
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        for sts in self.sets.items(ns):
            self.queue.add(kube.key_of(sts))

    async def reconcile(self, key: tuple[str, str]) -> float | None:
        ns, name = key
        sts = self.sets.get(ns, name)
        if sts is None or (sts.get("metadata") or {}).get("deletionTimestamp"):
            return None
        pods = [p for p in self.pods.items(ns) if _owned_by(p, sts)]
        self._deleting &= {_uid(p) for p in pods if not is_terminating(p)}
        revisions = [r for r in self.revisions.items(ns) if _owned_by(r, sts)]
        claims = {c["metadata"]["name"] for c in self.claims.items(ns)}
        the_plan = plan(sts, pods, revisions, claims)
        await self._apply(sts, the_plan)
        return the_plan.requeue_after

    async def _apply(self, sts: Obj, p: Plan) -> None:
        ns = sts["metadata"].get("namespace") or "default"
        name = sts["metadata"]["name"]
        for rev in p.create_revisions:
            try:
                await self.client.create(rev)
            except kube.AlreadyExists:
                pass
        for rev in p.update_revisions:
            await self.client.patch("apps/v1", "ControllerRevision", ns, rev["metadata"]["name"],
                                    {"revision": rev["revision"]})
        for claim in p.create_claims:
            try:
                await self.client.create(claim)
                self.recorder.event(sts, "Normal", "SuccessfulCreate",
                                    f"create Claim {claim['metadata']['name']} Pod "
                                    f"{p.claim_pods.get(claim['metadata']['name'], '')} in StatefulSet {name} success")
            except kube.AlreadyExists:
                pass
        for pod in p.create_pods:
            pod_name = pod["metadata"]["name"]
            try:
                await self.client.create(pod)
                self.recorder.event(sts, "Normal", "SuccessfulCreate",
                                    f"create Pod {pod_name} in StatefulSet {name} successful")
            except kube.AlreadyExists:
                pass  # the old pod is still being removed; its DELETED event requeues us
            except kube.KubeError as exc:
                self.recorder.event(sts, "Warning", "FailedCreate",
                                    f"create Pod {pod_name} in StatefulSet {name} failed error: {exc.message}")
                raise
        for pod_name, uid, _reason in p.delete_pods:
            if uid in self._deleting:
                continue  # already asked; the informer has not seen the deletionTimestamp yet
            self._deleting.add(uid)
            await self.client.delete("v1", "Pod", ns, pod_name, uid=uid or None)
            self.recorder.event(sts, "Normal", "SuccessfulDelete",
                                f"delete Pod {pod_name} in StatefulSet {name} successful")
        for claim_name_ in p.delete_claims:
            await self.client.delete("v1", "PersistentVolumeClaim", ns, claim_name_)
        for rev_name in p.delete_revisions:
            await self.client.delete("apps/v1", "ControllerRevision", ns, rev_name)
        current = {k: (sts.get("status") or {}).get(k) for k in p.status}
        if current != p.status:
            try:
                await self.client.patch("apps/v1", "StatefulSet", ns, name, {"status": p.status},
                                        subresource="status")
            except kube.NotFound:
                pass
