"""The StatefulSet planner, without I/O: ordinal pods and claims, OrderedReady vs Parallel, scale down,
RollingUpdate (highest ordinal first, one at a time, partition), OnDelete (and k8s 1.32's stale
currentRevision), recreation of missing/failed pods from the right revision, status counts."""

from __future__ import annotations

import copy
from typing import Any

from opsmanager_sandbox import statefulset as ss


def make_sts(replicas: int = 3, policy: str = "Parallel", strategy: dict[str, Any] | None = None,
             image: str = "registry.k8s.io/etcd:3.5.1-0") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "etcd", "namespace": "ns", "uid": "sts-uid", "generation": 2},
        "spec": {
            "replicas": replicas, "serviceName": "etcd-peers", "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": "etcd"}},
            "updateStrategy": strategy or {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {"app": "etcd"}},
                         "spec": {"containers": [{"name": "etcd", "image": image}],
                                  "volumes": [{"name": "data", "emptyDir": {}}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                      "spec": {"resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }


def ready(pod: dict[str, Any], ok: bool = True) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["uid"] = pod["metadata"]["name"] + "-uid"
    pod["status"] = {"phase": "Running",
                     "conditions": [{"type": "Ready", "status": "True" if ok else "False",
                                     "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
    return pod


def settle(sts: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Run the plan until it creates nothing more, with every pod becoming ready at once."""
    pods: list[dict[str, Any]] = []
    revisions: list[dict[str, Any]] = []
    for _ in range(10):
        p = ss.plan(sts, pods, revisions, set())
        revisions += p.create_revisions
        if not p.create_pods:
            return pods, revisions, p.status
        pods += [ready(x) for x in p.create_pods]
    raise AssertionError("did not settle")


def test_parallel_creates_every_ordinal_with_claims_identity_and_owner() -> None:
    sts = make_sts()
    p = ss.plan(sts, [], [], set())
    assert [x["metadata"]["name"] for x in p.create_pods] == ["etcd-0", "etcd-1", "etcd-2"]
    assert [c["metadata"]["name"] for c in p.create_claims] == ["data-etcd-0", "data-etcd-1", "data-etcd-2"]
    assert p.claim_pods["data-etcd-2"] == "etcd-2"
    assert p.create_claims[0]["metadata"]["labels"] == {"app": "etcd"}
    pod = p.create_pods[1]
    assert pod["spec"]["hostname"] == "etcd-1" and pod["spec"]["subdomain"] == "etcd-peers"
    rev = p.create_revisions[0]["metadata"]["name"]
    assert rev.startswith("etcd-") and pod["metadata"]["labels"] == {
        "app": "etcd", "controller-revision-hash": rev, "statefulset.kubernetes.io/pod-name": "etcd-1",
        "apps.kubernetes.io/pod-index": "1"}
    assert pod["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-etcd-1"}}]
    ref = pod["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("StatefulSet", "sts-uid", True)
    # claims that exist are not created again
    assert ss.plan(sts, [], [], {"data-etcd-0"}).create_claims[0]["metadata"]["name"] == "data-etcd-1"


def test_ordered_ready_waits_for_each_pod() -> None:
    sts = make_sts(policy="OrderedReady")
    p = ss.plan(sts, [], [], set())
    assert [x["metadata"]["name"] for x in p.create_pods] == ["etcd-0"]
    revs = p.create_revisions
    pod0 = p.create_pods[0]
    assert ss.plan(sts, [ready(pod0, ok=False)], revs, set()).create_pods == []
    assert [x["metadata"]["name"] for x in ss.plan(sts, [ready(pod0)], revs, set()).create_pods] == ["etcd-1"]


def test_scale_down_removes_highest_first() -> None:
    sts = make_sts(replicas=4, policy="OrderedReady")
    pods, revs, _ = settle(sts)
    small = make_sts(replicas=2, policy="OrderedReady")
    assert [d[0] for d in ss.plan(small, pods, revs, set()).delete_pods] == ["etcd-3"]
    parallel = make_sts(replicas=2)
    assert [d[0] for d in ss.plan(parallel, pods, revs, set()).delete_pods] == ["etcd-3", "etcd-2"]


def test_rolling_update_goes_down_one_at_a_time_and_respects_partition() -> None:
    sts = make_sts()
    pods, revs, status = settle(sts)
    assert status["currentRevision"] == status["updateRevision"] and status["readyReplicas"] == 3
    sts["status"] = status
    new = make_sts(image="registry.k8s.io/etcd:3.5.2-0")
    new["status"] = status
    p = ss.plan(new, pods, revs, set())
    assert len(p.create_revisions) == 1 and p.create_revisions[0]["revision"] == 2
    assert [d[0] for d in p.delete_pods] == ["etcd-2"]
    assert p.status["updateRevision"] != p.status["currentRevision"] == status["currentRevision"]
    revs += p.create_revisions
    # etcd-2 recreated at the new revision but not ready yet: wait
    p2 = ss.plan(new, pods[:2], revs, set())
    recreated = p2.create_pods[0]
    assert recreated["metadata"]["labels"]["controller-revision-hash"] == p.status["updateRevision"]
    assert recreated["spec"]["containers"][0]["image"] == "registry.k8s.io/etcd:3.5.2-0"
    pods2 = pods[:2] + [ready(recreated, ok=False)]
    assert ss.plan(new, pods2, revs, set()).delete_pods == []
    pods2[2] = ready(recreated)
    assert [d[0] for d in ss.plan(new, pods2, revs, set()).delete_pods] == ["etcd-1"]
    # partition 2: nothing below ordinal 2 is touched, and a deleted etcd-0 comes back at the old revision
    part = make_sts(image="registry.k8s.io/etcd:3.5.2-0",
                    strategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}})
    part["status"] = status
    assert ss.plan(part, pods2, revs, set()).delete_pods == []
    back = ss.plan(part, pods2[1:], revs, set()).create_pods[0]
    assert back["metadata"]["labels"]["controller-revision-hash"] == status["currentRevision"]
    assert back["spec"]["containers"][0]["image"] == "registry.k8s.io/etcd:3.5.1-0"


def test_rolling_update_completes_by_advancing_current_revision() -> None:
    sts = make_sts(image="v2")
    pods, revs, status = settle(sts)
    sts["status"] = dict(status, currentRevision="etcd-old")
    p = ss.plan(sts, pods, revs, set())
    assert p.status["currentRevision"] == p.status["updateRevision"] and p.status["currentReplicas"] == 3


def test_on_delete_never_deletes_and_keeps_current_revision_like_k8s_1_32() -> None:
    sts = make_sts(strategy={"type": "OnDelete"})
    pods, revs, status = settle(sts)
    new = make_sts(image="v2", strategy={"type": "OnDelete"})
    new["status"] = status
    p = ss.plan(new, pods, revs, set())
    assert p.delete_pods == [] and p.create_pods == []
    revs += p.create_revisions
    update = p.status["updateRevision"]
    # someone deletes every pod: they come back from the update revision ...
    recreated = [ready(x) for x in ss.plan(new, [], revs, set()).create_pods]
    assert {x["metadata"]["labels"]["controller-revision-hash"] for x in recreated} == {update}
    final = ss.plan(new, recreated, revs, set()).status
    assert final["updatedReplicas"] == 3
    # ... but currentRevision stays (kubernetes/kubernetes#73492)
    assert final["currentRevision"] == status["currentRevision"] != update


def test_failed_pod_is_deleted_and_status_counts() -> None:
    sts = make_sts()
    pods, revs, _ = settle(sts)
    pods[1]["status"]["phase"] = "Failed"
    p = ss.plan(sts, pods, revs, set())
    assert [d[0] for d in p.delete_pods] == ["etcd-1"]
    assert p.status["replicas"] == 3 and p.status["readyReplicas"] == 2
    terminating = copy.deepcopy(pods)
    terminating[0]["metadata"]["deletionTimestamp"] = "2020-01-01T00:00:00Z"
    st = ss.plan(sts, terminating, revs, set()).status
    assert st["replicas"] == 3 and st["updatedReplicas"] == 2 and st["observedGeneration"] == 2


def test_revision_hash_is_stable_and_changes_with_the_template() -> None:
    a, b = make_sts(), make_sts(image="other")
    assert ss.revision_hash(ss.template_patch(a)) == ss.revision_hash(ss.template_patch(make_sts()))
    assert ss.revision_hash(ss.template_patch(a)) != ss.revision_hash(ss.template_patch(b))
    assert set(ss.revision_hash(ss.template_patch(a))) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_claims_of_scaled_away_pods_are_deleted_only_when_the_policy_says_so() -> None:
    sts = make_sts(replicas=2)
    pods, revs, _ = settle(sts)
    claims = {"data-etcd-0", "data-etcd-1", "data-etcd-2", "other-claim"}
    assert ss.plan(sts, pods, revs, claims).delete_claims == []  # Retain by default
    sts["spec"]["persistentVolumeClaimRetentionPolicy"] = {"whenScaled": "Delete"}
    assert ss.plan(sts, pods, revs, claims).delete_claims == ["data-etcd-2"]
    sts["spec"]["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Delete"}
    owner = ss.plan(make_sts(replicas=1) | {"spec": sts["spec"] | {"replicas": 1}}, [], [], set()).create_claims[0]
    assert owner["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
