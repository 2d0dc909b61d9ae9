"""The few kube-controller-manager loops an API server alone is expected to come with: garbage collection
of ownerReferences (background, Foreground and Orphan propagation), namespace termination, CRD instance
cleanup and PodDisruptionBudget status (needed for eviction).

One task wakes up on every store change (debounced) and reconciles everything from the current state, so
there is no per-object bookkeeping to get wrong: an object whose owners are all gone is deleted (its own
finalizers still honoured); dangling references next to a live owner are removed; an owner with the
``foregroundDeletion`` finalizer waits for its dependents; ``orphan`` strips the references first.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from typing import Any

from opsmanager.sandbox.apiserver import disruption, operations, store

logger = logging.getLogger(__name__)
Obj = dict[str, Any]


class Controllers:
    def __init__(self, cluster: operations.Cluster, *, delay: float = 0.02) -> None:
        self.cluster = cluster
        self.delay = delay
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        cluster.store.listeners.append(self._on_change)

    def _on_change(self, change: store.Change) -> None:
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
                self.reconcile()
            except Exception:  # a bug here must not stop garbage collection for good
                logger.exception("sandbox controllers failed; retrying on the next change")

    # -- one pass ------------------------------------------------------------------------------------------

    def reconcile(self) -> None:
        self._garbage_collect()
        self._terminate_namespaces()
        self._cleanup_crds()
        self._pdb_status()
        self.default_service_accounts()

    def default_service_accounts(self) -> None:
        """The ServiceAccount ``default`` in every namespace that is not terminating (the real
        serviceaccounts-controller's job; pods without ``serviceAccountName`` run as it)."""
        objects = self.cluster.store
        for ns in objects.list(("", "namespaces")):
            name = ns["metadata"]["name"]
            if ns["metadata"].get("deletionTimestamp") or objects.get(("", "serviceaccounts"), name, "default"):
                continue
            objects.put(("", "serviceaccounts"), {
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name, "uid": str(uuid.uuid4()),
                             "creationTimestamp": operations.stamp()}}, event="ADDED")

    def _all(self) -> list[tuple[store.Key, Obj]]:
        return [(key, obj) for key in self.cluster.store.keys() for obj in self.cluster.store.list(key)]

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

    def _garbage_collect(self) -> None:
        everything = self._all()
        dependents: dict[str, list[tuple[store.Key, Obj]]] = {}
        for key, obj in everything:
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid", ""), []).append((key, obj))
        for key, snapshot in everything:
            found = self.cluster.store.get(key, snapshot["metadata"].get("namespace") or "",
                                           snapshot["metadata"]["name"])
            if found is None or found["metadata"].get("uid") != snapshot["metadata"].get("uid"):
                continue  # changed earlier in this pass: the next pass sees it as it is now
            obj = found
            meta = obj["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs:
                alive = [self._owner_alive(r, meta.get("namespace") or "") for r in refs]
                if all(a is False for a in alive):
                    self._delete(key, obj)
                    continue
                if any(a is False for a in alive):
                    new = copy.deepcopy(obj)
                    new["metadata"]["ownerReferences"] = [r for r, a in zip(refs, alive, strict=True)
                                                          if a is not False]
                    self.cluster.write_internal(key, obj, new)
                    continue
            finalizers = meta.get("finalizers") or []
            if not meta.get("deletionTimestamp"):
                continue
            mine = dependents.get(meta["uid"], [])
            if "orphan" in finalizers:
                for dep_key, dep in mine:
                    current = self.cluster.store.get(dep_key, dep["metadata"].get("namespace") or "",
                                                     dep["metadata"]["name"])
                    if current is not None:
                        new = copy.deepcopy(current)
                        new["metadata"]["ownerReferences"] = [
                            r for r in current["metadata"].get("ownerReferences") or [] if r.get("uid") != meta["uid"]]
                        self.cluster.write_internal(dep_key, current, new)
                self._drop_finalizer(key, obj, "orphan")
            elif "foregroundDeletion" in finalizers:
                if mine:
                    for dep_key, dep in mine:
                        self._delete(dep_key, dep)
                else:
                    self._drop_finalizer(key, obj, "foregroundDeletion")

    def _drop_finalizer(self, key: store.Key, obj: Obj, finalizer: str) -> None:
        current = self.cluster.store.get(key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        if current is None:
            return
        new = copy.deepcopy(current)
        new["metadata"]["finalizers"] = [f for f in current["metadata"].get("finalizers") or [] if f != finalizer]
        self.cluster.write_internal(key, current, new)

    def _terminate_namespaces(self) -> None:
        for ns in self.cluster.store.list(("", "namespaces")):
            if not ns["metadata"].get("deletionTimestamp"):
                continue
            name = ns["metadata"]["name"]
            remaining = 0
            for key in self.cluster.store.keys():
                rt = self.cluster.registry.primary(key)
                if rt is None or not rt.namespaced:
                    continue
                for obj in self.cluster.store.list(key, name):
                    remaining += 1
                    self._delete(key, obj)
            if remaining == 0 and not ns["metadata"].get("finalizers"):
                self.cluster.store.remove(("", "namespaces"), "", name)

    def _cleanup_crds(self) -> None:
        for crd in self.cluster.store.list(operations.CRD_KEY):
            if not crd["metadata"].get("deletionTimestamp"):
                continue
            spec = crd["spec"]
            key = (spec["group"], spec["names"]["plural"])
            instances = self.cluster.store.list(key)
            for obj in instances:
                self._delete(key, obj)
            if not instances:
                self._drop_finalizer(operations.CRD_KEY, crd, operations.CRD_CLEANUP)

    def _pdb_status(self) -> None:
        key = ("policy", "poddisruptionbudgets")
        for pdb in self.cluster.store.list(key):
            ns = pdb["metadata"].get("namespace") or ""
            status = disruption.status(pdb, self.cluster.store.list(("", "pods"), ns),
                                       self.cluster.store.list(("apps", "statefulsets"), ns)
                                       + self.cluster.store.list(("apps", "deployments"), ns))
            old = pdb.get("status") or {}
            if {k: v for k, v in old.items() if k != "conditions"} == \
                    {k: v for k, v in status.items() if k != "conditions"}:
                continue
            previous = {c.get("type"): c for c in old.get("conditions") or []}
            for cond in status["conditions"]:
                before = previous.get(cond["type"])
                cond["lastTransitionTime"] = (before or {}).get("lastTransitionTime") \
                    if before and before.get("status") == cond["status"] else operations.stamp()
            new = copy.deepcopy(pdb)
            new["status"] = status
            self.cluster.write_internal(key, pdb, new)


