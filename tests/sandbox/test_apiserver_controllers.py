"""The API server's controllers (garbage collector, namespace and CRD cleanup, PDB status) driven directly on a
store, pass by pass: a pass looks only at what the changes since the last one touched, so these tests check that
what the old full pass did still happens after the one change that matters, however many irrelevant changes
come after it, and that irrelevant changes do not wake the loop at all."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from opsmanager_sandbox.apiserver import server
from tests.fixtures.sandbox import WIDGET_CRD
from tests.polling import aeventually

Obj = dict[str, Any]
CM = ("", "configmaps")
EVENTS = ("", "events")
PODS = ("", "pods")
PDBS = ("policy", "poddisruptionbudgets")


def _api() -> server.APIServer:
    api = server.APIServer()
    api.store.put(("", "namespaces"), {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "default", "uid": "ns-default"}}, event="ADDED")
    api.controllers.reconcile()
    return api


def _put(api: server.APIServer, key: tuple[str, str], obj: Obj, *, event: str = "ADDED") -> Obj:
    obj["metadata"].setdefault("namespace", "default")
    obj["metadata"].setdefault("uid", str(uuid.uuid4()))
    return api.store.put(key, obj, event=event)


def _cm(name: str, *owners: Obj, **meta: Any) -> Obj:
    refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}
            for o in owners]
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, **({"ownerReferences": refs} if refs else {}), **meta}}


def _noise(api: server.APIServer, n: int = 5) -> None:
    """Changes no controller cares about: Events and owner-less ConfigMaps."""
    for _ in range(n):
        _put(api, EVENTS, {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"e-{uuid.uuid4().hex[:6]}"},
                           "involvedObject": {"kind": "Pod", "name": "x"}, "reason": "Noise"})
        _put(api, CM, _cm(f"free-{uuid.uuid4().hex[:6]}"))


def _get(api: server.APIServer, name: str) -> Obj | None:
    return api.store.get(CM, "default", name)


def test_irrelevant_changes_do_not_wake_the_loop_and_relevant_ones_do() -> None:
    api = _api()
    ctrl = api.controllers
    ctrl._wake.clear()
    _noise(api)
    assert not ctrl._wake.is_set(), "an Event or an owner-less ConfigMap woke the controllers"
    owner = _put(api, CM, _cm("owner"))
    assert not ctrl._wake.is_set()
    _put(api, CM, _cm("dep", owner))
    assert ctrl._wake.is_set(), "an object with ownerReferences must be looked at"
    ctrl._pass()
    ctrl._wake.clear()
    api.store.remove(CM, "default", "owner")
    assert ctrl._wake.is_set(), "deleting an owner must wake the garbage collector"


def test_the_dependent_of_a_deleted_owner_is_collected_though_only_irrelevant_changes_followed() -> None:
    api = _api()
    ctrl = api.controllers
    owner = _put(api, CM, _cm("owner"))
    _put(api, CM, _cm("dep", owner))
    _put(api, CM, _cm("grandchild", _get(api, "dep") or {}))
    ctrl._pass()
    assert _get(api, "dep") is not None and _get(api, "grandchild") is not None
    api.store.remove(CM, "default", "owner")
    _noise(api)
    ctrl._pass()
    assert _get(api, "dep") is None, "the dependent of the deleted owner is gone"
    _noise(api)
    ctrl._pass()  # the dependent's own deletion is the change that reaches its dependents
    assert _get(api, "grandchild") is None
    assert any(obj["metadata"]["name"].startswith("free-") for obj in api.store.list(CM)), "owner-less ones stay"


def test_a_dependent_created_with_a_missing_owner_is_collected_and_a_dangling_reference_is_removed() -> None:
    api = _api()
    ctrl = api.controllers
    ghost = {"metadata": {"name": "ghost", "uid": "no-such-uid"}}
    owner = _put(api, CM, _cm("owner"))
    _put(api, CM, _cm("orphaned", ghost))
    _put(api, CM, _cm("half", owner, ghost))
    ctrl._pass()
    assert _get(api, "orphaned") is None
    half = _get(api, "half")
    assert half is not None and [r["name"] for r in half["metadata"]["ownerReferences"]] == ["owner"]


def test_foreground_owner_waits_for_its_dependents_and_orphan_strips_the_references() -> None:
    api = _api()
    ctrl = api.controllers
    fg = _put(api, CM, _cm("fg", finalizers=["foregroundDeletion"]))
    _put(api, CM, _cm("fg-dep", fg, finalizers=["test/slow"]))
    orphan = _put(api, CM, _cm("orphan"))
    _put(api, CM, _cm("orphan-dep", orphan))
    ctrl._pass()
    for name in ("fg", "orphan"):
        current = _get(api, name)
        assert current is not None
        new = copy.deepcopy(current)
        new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        if name == "orphan":
            new["metadata"]["finalizers"] = ["orphan"]
        _put(api, CM, new, event="MODIFIED")
    ctrl._pass()
    dep = _get(api, "fg-dep")
    assert dep is not None and dep["metadata"].get("deletionTimestamp"), "foreground: the dependent is being deleted"
    assert "foregroundDeletion" in (_get(api, "fg") or {})["metadata"]["finalizers"], "the owner waits"
    orphan_dep = _get(api, "orphan-dep")
    assert orphan_dep is not None and not orphan_dep["metadata"].get("ownerReferences")
    assert _get(api, "orphan") is None, "orphan: the owner goes once its dependents are released"
    _noise(api)
    ctrl._pass()
    assert _get(api, "fg") is not None, "still waiting: the dependent's finalizer holds it"
    dep = copy.deepcopy(_get(api, "fg-dep") or {})
    dep["metadata"]["finalizers"] = []
    api.cluster.write_internal(CM, _get(api, "fg-dep") or {}, dep)  # removes it (deletionTimestamp, no finalizers)
    assert _get(api, "fg-dep") is None
    _noise(api)
    ctrl._pass()
    assert _get(api, "fg") is None, "the dependent is gone: the owner's foregroundDeletion finalizer is dropped"


def test_a_reference_to_a_kind_that_becomes_served_is_checked_then() -> None:
    api = _api()
    ctrl = api.controllers
    ref = {"apiVersion": "test.opsmanager.dev/v1", "kind": "Widget", "name": "w", "uid": "w-uid"}
    _put(api, CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dep", "ownerReferences": [ref]}})
    ctrl._pass()
    assert _get(api, "dep") is not None, "an owner of an unknown kind: nothing is done"
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["uid"] = "crd-uid"
    api.store.put(("apiextensions.k8s.io", "customresourcedefinitions"), crd, event="ADDED")
    ctrl._pass()
    assert _get(api, "dep") is None, "the kind is served now and the Widget does not exist"


def _pod(name: str, ready: bool) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "etcd"}},
            "spec": {"nodeName": "node"},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_pdb_status_follows_the_pods_of_its_namespace() -> None:
    api = _api()
    ctrl = api.controllers
    _put(api, PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "etcd"},
                     "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "etcd"}}}})
    for i in range(3):
        _put(api, PODS, _pod(f"etcd-{i}", ready=True))
    ctrl._pass()
    status = (api.store.get(PDBS, "default", "etcd") or {})["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (3, 1)
    _put(api, PODS, _pod("etcd-1", ready=False), event="MODIFIED")
    _noise(api)
    ctrl._pass()
    status = (api.store.get(PDBS, "default", "etcd") or {})["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 0)


def test_pdbs_of_one_namespace_count_only_the_pods_their_whole_selector_matches() -> None:
    api = _api()
    for db in ("a", "b"):
        _put(api, PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": db},
                         "spec": {"maxUnavailable": 1,
                                  "selector": {"matchLabels": {"app": "etcd", "instance": db}}}})
        for i in range(3):
            pod = _pod(f"{db}-{i}", ready=not (db == "b" and i == 0))
            pod["metadata"]["labels"]["instance"] = db
            _put(api, PODS, pod)
    api.controllers._pass()
    a, b = ((api.store.get(PDBS, "default", n) or {})["status"] for n in ("a", "b"))
    assert (a["expectedPods"], a["currentHealthy"], a["disruptionsAllowed"]) == (3, 3, 1)
    assert (b["expectedPods"], b["currentHealthy"], b["disruptionsAllowed"]) == (3, 2, 0)


async def test_the_loop_collects_after_the_owner_is_deleted() -> None:
    api = _api()
    ctrl = api.controllers
    owner = _put(api, CM, _cm("owner"))
    _put(api, CM, _cm("dep", owner))
    ctrl.start()
    try:
        passes = ctrl.passes
        await aeventually(lambda: ctrl.passes > passes and not ctrl._wake.is_set(), timeout=5, what="idle")
        api.store.remove(CM, "default", "owner")
        _noise(api)
        await aeventually(lambda: _get(api, "dep") is None, timeout=5, what="dependent collected")
    finally:
        await ctrl.stop()
