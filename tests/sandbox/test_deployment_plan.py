"""The sandbox's Deployment controller decisions (pure): replicas kept, rolling updates within maxSurge and
maxUnavailable, Recreate, status; and the cainjector's injection."""

from __future__ import annotations

import copy
from typing import Any

from opsmanager_sandbox import cainjector, deployment

Obj = dict[str, Any]


def _deployment(replicas: int = 2, surge: Any = 1, unavailable: Any = 0, image: str = "opsmanager:1",
                strategy: str = "RollingUpdate") -> Obj:
    spec: Obj = {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "c", "image": image}]}}}
    spec["strategy"] = {"type": strategy} if strategy == "Recreate" else \
        {"type": strategy, "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "spec": spec,
            "metadata": {"name": "op", "namespace": "ns", "uid": "dep-uid", "generation": 3}}


def _pod(dep: Obj, n: int, *, ready: bool = True, terminating: bool = False) -> Obj:
    pod = deployment.new_pod(dep, deployment.template_hash(dep))
    pod["metadata"]["uid"] = f"uid-{n}-{pod['metadata']['labels']['pod-template-hash']}"
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod["status"] = {"phase": "Running",
                     "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return pod


def test_new_pods_carry_the_template_hash_and_the_controller_reference() -> None:
    dep = _deployment()
    pod = deployment.new_pod(dep, deployment.template_hash(dep))
    meta = pod["metadata"]
    assert meta["labels"] == {"app": "x", "pod-template-hash": deployment.template_hash(dep)}
    assert meta["name"].startswith(f"op-{deployment.template_hash(dep)}-") and len(meta["name"].rsplit("-", 1)[1]) == 5
    assert meta["ownerReferences"][0]["uid"] == "dep-uid" and meta["ownerReferences"][0]["controller"] is True
    assert pod["spec"] == dep["spec"]["template"]["spec"]


def test_replicas_are_created_and_a_lost_pod_replaced() -> None:
    dep = _deployment()
    assert deployment.plan(dep, []).create == 2
    one = [_pod(dep, 1)]
    assert deployment.plan(dep, one).create == 1
    # a pod being deleted no longer counts: its replacement is made at once
    assert deployment.plan(dep, [_pod(dep, 1), _pod(dep, 2, terminating=True)]).create == 1
    steady = deployment.plan(dep, [_pod(dep, 1), _pod(dep, 2)])
    assert steady.create == 0 and steady.delete == []
    assert steady.status["readyReplicas"] == 2 and steady.status["updatedReplicas"] == 2
    assert steady.status["observedGeneration"] == 3
    assert steady.status["conditions"][0] == {"type": "Available", "status": "True",
                                              "reason": "MinimumReplicasAvailable",
                                              "message": "Deployment has minimum availability."}


def test_rolling_update_surges_one_and_keeps_every_replica_ready() -> None:
    old_dep = _deployment()
    old = [_pod(old_dep, 1), _pod(old_dep, 2)]
    new_dep = _deployment(image="opsmanager:2")
    first = deployment.plan(new_dep, old)
    assert first.create == 1 and first.delete == []           # maxSurge 1: a third pod, nothing deleted yet
    starting = old + [_pod(new_dep, 3, ready=False)]
    second = deployment.plan(new_dep, starting)
    assert second.create == 0 and second.delete == []         # maxUnavailable 0: no old pod goes before it is Ready
    ready = old + [_pod(new_dep, 3)]
    third = deployment.plan(new_dep, ready)
    assert third.create == 0 and len(third.delete) == 1 and third.delete[0] in old


def test_rolling_update_deletes_not_ready_old_pods_first() -> None:
    old_dep = _deployment(surge=0, unavailable=1)
    old = [_pod(old_dep, 1), _pod(old_dep, 2, ready=False)]
    step = deployment.plan(_deployment(surge=0, unavailable=1, image="opsmanager:2"), old)
    assert [p["metadata"]["uid"] for p in step.delete] == [old[1]["metadata"]["uid"]]
    assert step.create == 0  # no surge: the replacement comes once the old pod is gone


def test_percentages_resolve_as_kubernetes_does() -> None:
    assert deployment.limits(_deployment(replicas=2, surge="25%", unavailable="25%")) == (1, 0)
    assert deployment.limits(_deployment(replicas=4, surge="50%", unavailable="50%")) == (2, 2)
    assert deployment.limits(_deployment(replicas=2, surge=0, unavailable=0)) == (0, 1)


def test_recreate_deletes_every_old_pod_before_creating() -> None:
    old_dep = _deployment(strategy="Recreate")
    old = [_pod(old_dep, 1), _pod(old_dep, 2)]
    new_dep = _deployment(strategy="Recreate", image="opsmanager:2")
    step = deployment.plan(new_dep, old)
    assert len(step.delete) == 2 and step.create == 0
    gone = [_pod(old_dep, 1, terminating=True)]
    assert deployment.plan(new_dep, gone).create == 0       # still terminating
    assert deployment.plan(new_dep, []).create == 2


def test_cainjector_puts_the_bundle_into_every_webhook() -> None:
    config = {"metadata": {"name": "x"}, "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "s"}}},
                                                      {"name": "b", "clientConfig": {"caBundle": "old"}}]}
    before = copy.deepcopy(config)
    new = cainjector.injected(config, "Q0E=")
    assert new is not None and config == before
    assert [h["clientConfig"]["caBundle"] for h in new["webhooks"]] == ["Q0E=", "Q0E="]
    assert new["webhooks"][0]["clientConfig"]["service"] == {"name": "s"}
    assert cainjector.injected(new, "Q0E=") is None  # already there: no write
