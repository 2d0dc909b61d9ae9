"""The few kube-controller-manager loops an API server alone is expected to come with: garbage collection
of ownerReferences (background, Foreground and Orphan propagation), namespace termination, CRD instance
cleanup and PodDisruptionBudget status (needed for eviction).

One task wakes up on store changes that can matter (debounced) and reconciles what they touched from the
current state: an object whose owners are all gone is deleted (its own finalizers still honoured); dangling
references next to a live owner are removed; an owner with the ``foregroundDeletion`` finalizer waits for its
dependents; ``orphan`` strips the references first.

What a pass looks at. An object's garbage-collection verdict depends only on its own metadata, on whether its
owners exist (with the referenced uid) and on which kinds are served; an owner being deleted with
``foregroundDeletion``/``orphan`` also on its dependents. So the store's listener keeps a dependents index
(owner uid -> dependents) and marks dirty: an object written with ownerReferences or a deletionTimestamp, and
every dependent of a deleted object. A pass checks the dirty objects and the owners waiting on their dependents;
namespaces being terminated and CRDs being deleted are looked at on every pass, PodDisruptionBudget status is
recomputed for the namespaces whose pods, StatefulSets, Deployments or budgets changed. A CRD change (a kind
appears or disappears) makes the next pass a full one, as does a pass that failed. Changes that cannot matter
(an Event, a Lease, a Secret without owners) do not wake the loop at all.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import Any

from opsmanager.kube.cache import copy_json
from opsmanager_sandbox.apiserver import disruption, operations, store

logger = logging.getLogger(__name__)
Obj = dict[str, Any]
Ref = tuple[store.Key, str, str]  # (storage key, namespace, name)

_NAMESPACES = ("", "namespaces")
_SERVICE_ACCOUNTS = ("", "serviceaccounts")
_PDBS = ("policy", "poddisruptionbudgets")
_PDB_INPUTS = frozenset({("", "pods"), ("apps", "statefulsets"), ("apps", "deployments"), _PDBS})
_WAITING_FINALIZERS = ("orphan", "foregroundDeletion")


def _owner_uids(obj: Obj | None) -> set[str]:
    if obj is None:
        return set()
    return {r.get("uid", "") for r in obj["metadata"].get("ownerReferences") or []}


def _waits_for_dependents(obj: Obj) -> bool:
    meta = obj["metadata"]
    return bool(meta.get("deletionTimestamp")) and any(f in _WAITING_FINALIZERS for f in meta.get("finalizers") or [])


class Controllers:
    def __init__(self, cluster: operations.Cluster, *, delay: float = 0.02) -> None:
        self.cluster = cluster
        self.delay = delay
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._full = True                              # the next pass looks at everything (and rebuilds the index)
        self._dependents: dict[str, set[Ref]] = {}     # owner uid -> objects whose ownerReferences name it
        self._dirty: set[Ref] = set()                  # objects to run the garbage collector's checks on
        self._waiting: set[Ref] = set()                # owners being deleted with orphan/foregroundDeletion
        self._pdb_namespaces: set[str] = set()         # namespaces whose PodDisruptionBudgets' status may change
        self._pdb_rechecks: dict[str, float] = {}      # namespace: loop time of the next look at its budgets
        self._pods_going: set[tuple[str, str]] = set()  # pods seen deleted or being deleted since the last pass
        self._terminating: set[str] = set()            # namespaces with a deletionTimestamp
        self._deleting_crds: set[store.Key] = set()    # storage keys of CRDs with a deletionTimestamp
        self.passes = 0                                # passes run (tests check that irrelevant changes add none)
        cluster.store.listeners.append(self._on_change)

    def _on_change(self, change: store.Change) -> None:
        key, ns = change.key, change.namespace
        ref: Ref = (key, ns, change.obj["metadata"]["name"])
        new = None if change.type == "DELETED" else change.obj
        wake = False
        old_owners, new_owners = _owner_uids(change.old), _owner_uids(new)
        if old_owners != new_owners:
            for uid in old_owners - new_owners:
                deps = self._dependents.get(uid)
                if deps is not None:
                    deps.discard(ref)
                    if not deps:
                        del self._dependents[uid]
            for uid in new_owners - old_owners:
                self._dependents.setdefault(uid, set()).add(ref)
        if old_owners:
            wake = True  # an owner waiting for its dependents may be done
        if new is not None:
            meta = new["metadata"]
            if new_owners or meta.get("deletionTimestamp"):
                self._dirty.add(ref)
                wake = True
            if _waits_for_dependents(new):
                self._waiting.add(ref)
            else:
                self._waiting.discard(ref)
        else:
            self._waiting.discard(ref)
            uid = (change.old or change.obj)["metadata"].get("uid", "")
            deps = self._dependents.get(uid)
            if deps:
                self._dirty.update(deps)
                wake = True
            if key == _SERVICE_ACCOUNTS:
                wake = True
        if key == _NAMESPACES:
            if new is not None and new["metadata"].get("deletionTimestamp"):
                self._terminating.add(ref[2])
            else:
                self._terminating.discard(ref[2])
            wake = True
        elif key == operations.CRD_KEY:
            self._full = wake = True
        elif key in _PDB_INPUTS:
            self._pdb_namespaces.add(ns)
            if key == ("", "pods") and (new is None or new["metadata"].get("deletionTimestamp")):
                # The disruption controller sees every pod deletion (and drops its admitted eviction); here the
                # pass may come only after the StatefulSet put a pod of the same name back.
                self._pods_going.add((ns, ref[2]))
            wake = True
        if ns and ns in self._terminating or key in self._deleting_crds:
            wake = True
        if wake:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="sandbox-apiserver-controllers")
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.delay)
            self._wake.clear()
            try:
                self._pass()
            except Exception:  # a bug here must not stop garbage collection for good
                self._full = True
                logger.exception("sandbox controllers failed; retrying on the next change")

    # -- one pass ------------------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """One full pass: every object is looked at, as after start."""
        self._full = True
        self._pass()

    def _pass(self) -> None:
        self.passes += 1
        if self._full:
            self._full = False
            self._rebuild()
        self._garbage_collect()
        self._terminate_namespaces()
        self._cleanup_crds()
        self._pdb_status()
        self.default_service_accounts()

    def _rebuild(self) -> None:
        """The listener's state from the store as it is (the first pass, a CRD change, a failed pass)."""
        objects = self.cluster.store
        self._dependents.clear()
        self._waiting.clear()
        self._terminating.clear()
        for key in objects.keys():
            for obj in objects.list(key):
                meta = obj["metadata"]
                ref: Ref = (key, meta.get("namespace") or "", meta["name"])
                for uid in _owner_uids(obj):
                    self._dependents.setdefault(uid, set()).add(ref)
                if meta.get("ownerReferences") or meta.get("deletionTimestamp"):
                    self._dirty.add(ref)
                if _waits_for_dependents(obj):
                    self._waiting.add(ref)
                if key == _NAMESPACES and meta.get("deletionTimestamp"):
                    self._terminating.add(meta["name"])
        self._pdb_namespaces.update(p["metadata"].get("namespace") or "" for p in objects.list(_PDBS))

    def _recheck_pdbs(self, namespace: str, after: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a pass run outside the loop (reconcile() from a test): no timers
            return

        when = loop.time() + max(0.0, after)
        scheduled = self._pdb_rechecks.get(namespace)
        if scheduled is not None and loop.time() <= scheduled <= when:
            return  # an earlier look is already due

        def due() -> None:
            self._pdb_rechecks.pop(namespace, None)
            self._pdb_namespaces.add(namespace)
            self._wake.set()
        self._pdb_rechecks[namespace] = when
        loop.call_at(when, due)

    def default_service_accounts(self) -> None:
        """The ServiceAccount ``default`` in every namespace that is not terminating (the real
        serviceaccounts-controller's job; pods without ``serviceAccountName`` run as it)."""
        objects = self.cluster.store
        for ns in objects.list(_NAMESPACES):
            name = ns["metadata"]["name"]
            if ns["metadata"].get("deletionTimestamp") or objects.get(_SERVICE_ACCOUNTS, name, "default"):
                continue
            objects.put(_SERVICE_ACCOUNTS, {
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name, "uid": str(uuid.uuid4()),
                             "creationTimestamp": operations.stamp()}}, event="ADDED")

    def _owner_alive(self, ref: Obj, namespace: str) -> bool | None:
        """True/False for a resolvable owner; None when the kind is unknown (then do nothing)."""
        rt = self.cluster.registry.by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if rt is None:
            return None
        owner = self.cluster.store.get(rt.storage_key, namespace if rt.namespaced else "", ref.get("name", ""))
        return owner is not None and owner["metadata"].get("uid") == ref.get("uid")

    def _delete(self, key: store.Key, obj: Obj) -> None:
        rt = self.cluster.registry.primary(key)
        if rt is not None and not obj["metadata"].get("deletionTimestamp"):
            self.cluster.delete_now(rt, obj, {"propagationPolicy": "Background"})

    def _dependents_of(self, uid: str) -> list[tuple[store.Key, Obj]]:
        out = []
        for key, ns, name in sorted(self._dependents.get(uid, ())):
            obj = self.cluster.store.get(key, ns, name)
            if obj is not None:
                out.append((key, obj))
        return out

    def _garbage_collect(self) -> None:
        todo = sorted(self._dirty | self._waiting)
        self._dirty = set()
        for key, namespace, name in todo:
            obj = self.cluster.store.get(key, namespace, name)
            if obj is None:
                continue
            meta = obj["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs:
                alive = [self._owner_alive(r, meta.get("namespace") or "") for r in refs]
                if all(a is False for a in alive):
                    self._delete(key, obj)
                    continue
                if any(a is False for a in alive):
                    new = copy_json(obj)
                    new["metadata"]["ownerReferences"] = [r for r, a in zip(refs, alive, strict=True)
                                                          if a is not False]
                    self.cluster.write_internal(key, obj, new)
                    continue
            finalizers = meta.get("finalizers") or []
            if not meta.get("deletionTimestamp"):
                continue
            if "orphan" in finalizers:
                for dep_key, current in self._dependents_of(meta["uid"]):
                    new = copy_json(current)
                    new["metadata"]["ownerReferences"] = [
                        r for r in current["metadata"].get("ownerReferences") or [] if r.get("uid") != meta["uid"]]
                    self.cluster.write_internal(dep_key, current, new)
                self._drop_finalizer(key, obj, "orphan")
            elif "foregroundDeletion" in finalizers:
                mine = self._dependents_of(meta["uid"])
                if mine:
                    for dep_key, dep in mine:
                        self._delete(dep_key, dep)
                else:
                    self._drop_finalizer(key, obj, "foregroundDeletion")

    def _drop_finalizer(self, key: store.Key, obj: Obj, finalizer: str) -> None:
        current = self.cluster.store.get(key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        if current is None:
            return
        new = copy_json(current)
        new["metadata"]["finalizers"] = [f for f in current["metadata"].get("finalizers") or [] if f != finalizer]
        self.cluster.write_internal(key, current, new)

    def _terminate_namespaces(self) -> None:
        for name in sorted(self._terminating):
            ns = self.cluster.store.get(_NAMESPACES, "", name)
            if ns is None or not ns["metadata"].get("deletionTimestamp"):
                self._terminating.discard(name)
                continue
            remaining = 0
            for key in self.cluster.store.keys():
                rt = self.cluster.registry.primary(key)
                if rt is None or not rt.namespaced:
                    continue
                for obj in self.cluster.store.list(key, name):
                    remaining += 1
                    self._delete(key, obj)
            if remaining == 0 and not ns["metadata"].get("finalizers"):
                self.cluster.store.remove(_NAMESPACES, "", name)

    def _cleanup_crds(self) -> None:
        deleting: set[store.Key] = set()
        for crd in self.cluster.store.list(operations.CRD_KEY):
            if not crd["metadata"].get("deletionTimestamp"):
                continue
            spec = crd["spec"]
            key = (spec["group"], spec["names"]["plural"])
            deleting.add(key)
            instances = self.cluster.store.list(key)
            for obj in instances:
                self._delete(key, obj)
            if not instances:
                self._drop_finalizer(operations.CRD_KEY, crd, operations.CRD_CLEANUP)
        self._deleting_crds = deleting

    def _pdb_status(self) -> None:
        key = _PDBS
        namespaces, self._pdb_namespaces = self._pdb_namespaces, set()
        going, self._pods_going = self._pods_going, set()
        for ns in sorted(namespaces):
            pdbs = self.cluster.store.list(key, ns)
            if not pdbs:
                continue
            pods = self.cluster.store.list(("", "pods"), ns)
            workloads = self.cluster.store.list(("apps", "statefulsets"), ns) \
                + self.cluster.store.list(("apps", "deployments"), ns)
            by_label: dict[tuple[str, str], list[Obj]] = {}  # a PDB needs only the pods with one of its labels
            for pod in pods:
                for label in (pod["metadata"].get("labels") or {}).items():
                    by_label.setdefault(label, []).append(pod)
            for pdb in pdbs:
                match = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                candidates = by_label.get(next(iter(match.items())), []) if match else pods
                self._one_pdb_status(key, pdb, candidates, workloads, {n for g, n in going if g == ns})

    def _one_pdb_status(self, key: store.Key, pdb: Obj, pods: list[Obj], workloads: list[Obj],
                        gone: set[str]) -> None:
        now = datetime.datetime.now(datetime.UTC)
        entries = (pdb.get("status") or {}).get("disruptedPods") or {}
        if gone & set(entries):
            pdb = copy_json(pdb)
            pdb["status"]["disruptedPods"] = {k: v for k, v in entries.items() if k not in gone}
        status = disruption.status(pdb, pods, workloads, now)
        _, expiry = disruption.disrupted(pdb, disruption.covered_pods(pdb, pods), now)
        if expiry is not None:  # look again when an admitted eviction's pod is overdue (nothing else changes then)
            self._recheck_pdbs(pdb["metadata"].get("namespace") or "", (expiry - now).total_seconds() + 0.1)
        old = pdb.get("status") or {}
        if {k: v for k, v in old.items() if k != "conditions"} == \
                {k: v for k, v in status.items() if k != "conditions"}:
            return
        previous = {c.get("type"): c for c in old.get("conditions") or []}
        for cond in status["conditions"]:
            before = previous.get(cond["type"])
            cond["lastTransitionTime"] = (before or {}).get("lastTransitionTime") \
                if before and before.get("status") == cond["status"] else operations.stamp()
        new = copy_json(pdb)
        new["status"] = status
        self.cluster.write_internal(key, pdb, new)
