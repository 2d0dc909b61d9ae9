"""The pure parts of applying: drift detection, the StatefulSet update that keeps restartedAt and the immutable
fields, TLS and scheme detection on a live StatefulSet, PVC selection for WipeOut, spec parsing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render, statefulset
from opsmanager.provisioner import applying


def make_db(tls: bool = False, **spec: Any) -> etcd_api.Etcd:
    body: dict[str, Any] = {"version": "3.5.1", **spec}
    if tls:
        body["tls"] = {"issuerRef": {"name": "ca", "kind": "Issuer"}}
    return etcd_api.Etcd.model_validate({"metadata": {"name": "db", "namespace": "ns", "uid": "u-1"}, "spec": body})


def as_live(rendered: dict[str, Any]) -> dict[str, Any]:
    """What the API server returns: the object plus defaults, server metadata and status."""
    live = copy.deepcopy(rendered)
    live["metadata"].update(uid="sts-uid", resourceVersion="42", generation=1, creationTimestamp="2026-01-01T00:00:00Z")
    live["spec"]["revisionHistoryLimit"] = 10
    c = live["spec"]["template"]["spec"]["containers"][0]
    c.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
    for port in c["ports"]:
        port["protocol"] = "TCP"
    live["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    live["status"] = {"replicas": 3, "readyReplicas": 3}
    return live


def live_sts(db: etcd_api.Etcd, **kw: Any) -> dict[str, Any]:
    return as_live(statefulset.desired_statefulset(render.render_statefulset(db, **kw), None))


def test_is_subset_ignores_added_fields_but_not_changed_or_removed_items() -> None:
    assert statefulset.is_subset({"a": 1, "b": {"c": [1, {"d": 2}]}}, {"a": 1, "x": 0, "b": {"c": [1, {"d": 2, "e": 3}]}})
    assert not statefulset.is_subset({"a": 1}, {"a": 2})
    assert not statefulset.is_subset({"a": [1, 2]}, {"a": [1]})
    assert not statefulset.is_subset({"a": {"b": 1}}, {"a": None})


def test_an_empty_field_the_api_server_omits_is_not_a_difference() -> None:
    # kube-apiserver drops `volumes: []` (omitempty): without this, a plaintext StatefulSet was PUT on every pass
    assert statefulset.is_subset({"spec": {"volumes": [], "env": {}, "x": 1}}, {"spec": {"x": 1}})
    assert not statefulset.is_subset({"spec": {"volumes": [{"name": "a"}]}}, {"spec": {}})
    assert not statefulset.is_subset({"spec": {"volumes": []}}, {"spec": {"volumes": [{"name": "a"}]}})


def test_unchanged_render_against_a_defaulted_live_object_writes_nothing() -> None:
    db = make_db(tls=True)
    assert statefulset.statefulset_update(render.render_statefulset(db), live_sts(db)) is None


def test_live_restarted_at_is_preserved() -> None:
    db = make_db()
    live = live_sts(db, template_annotations={naming.ANNOTATION_RESTARTED_AT: "2026-01-01T10:00:00Z"})
    rendered = render.render_statefulset(db)
    assert statefulset.statefulset_update(rendered, live) is None  # the render lacks it, the live value is kept
    halted = render.render_statefulset(make_db(halted=True))
    body = statefulset.statefulset_update(halted, live)
    assert body is not None
    assert body["spec"]["replicas"] == 0
    assert body["spec"]["template"]["metadata"]["annotations"][naming.ANNOTATION_RESTARTED_AT] == "2026-01-01T10:00:00Z"
    assert body["metadata"]["resourceVersion"] == "42" and "status" not in body


def test_restarted_at_given_by_the_engine_wins() -> None:
    db = make_db()
    live = live_sts(db, template_annotations={naming.ANNOTATION_RESTARTED_AT: "old"})
    body = statefulset.statefulset_update(render.render_statefulset(db), live, restarted_at="new")
    assert body is not None
    assert body["spec"]["template"]["metadata"]["annotations"][naming.ANNOTATION_RESTARTED_AT] == "new"


def test_immutable_fields_keep_their_live_values() -> None:
    db = make_db()
    live = live_sts(db)
    live["spec"]["volumeClaimTemplates"][0]["spec"]["resources"] = {"requests": {"storage": "5Gi"}}
    bigger = make_db(storage={"resources": {"requests": {"storage": "9Gi"}}}, replicas=5)
    body = statefulset.statefulset_update(render.render_statefulset(bigger), live)
    assert body is not None
    assert body["spec"]["replicas"] == 5
    assert body["spec"]["volumeClaimTemplates"] == live["spec"]["volumeClaimTemplates"]
    assert body["spec"]["selector"] == live["spec"]["selector"]
    assert body["spec"]["podManagementPolicy"] == "Parallel"


def test_a_hand_edit_of_the_live_statefulset_is_reverted() -> None:
    db = make_db()
    live = live_sts(db)
    live["spec"]["template"]["spec"]["containers"][0]["args"].append("--snapshot-count=1")
    body = statefulset.statefulset_update(render.render_statefulset(db), live)
    assert body is not None
    assert "--snapshot-count=1" not in body["spec"]["template"]["spec"]["containers"][0]["args"]


def test_a_field_removed_from_the_render_is_detected_by_the_hash() -> None:
    with_res = make_db(podTemplate={"spec": {"resources": {"limits": {"cpu": "1"}}}})
    live = live_sts(with_res)
    body = statefulset.statefulset_update(render.render_statefulset(make_db()), live)
    assert body is not None and "resources" not in body["spec"]["template"]["spec"]["containers"][0]


def test_tls_mounted_and_client_schemes() -> None:
    plain, tls = render.render_statefulset(make_db()), render.render_statefulset(make_db(tls=True))
    assert not statefulset.tls_mounted(plain) and statefulset.tls_mounted(tls)
    assert statefulset.client_schemes(plain) == ("http",)
    assert statefulset.client_schemes(tls) == ("https",)
    db = make_db(tls=True)
    assert db.spec.tls is not None
    dual = render.render_statefulset(db, render.Wiring.dual(db.spec.tls, "http"))
    assert statefulset.client_schemes(dual) == ("https", "http")
    assert statefulset.client_schemes({"spec": {}}) == ("http",)


def test_pvc_names_of_the_members_only() -> None:
    pvcs = [{"metadata": {"name": n}} for n in ("data-db-0", "data-db-1", "data-db-x", "data-dbb-0", "other-db-0")]
    assert statefulset.pvc_names(pvcs, "db") == ["data-db-0", "data-db-1"]


def test_parse_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match="spec.replicas"):
        applying.parse({"metadata": {"name": "db"}, "spec": {"version": "3.5.1", "replicas": 0}})
    db = applying.parse({"metadata": {"name": "db", "namespace": "ns"}, "spec": {"version": "3.5.1"}})
    assert db.spec.replicas == 3


def test_outcome_ok_only_when_done() -> None:
    assert applying.Outcome(applying.DONE, "Reconciled", "").ok
    assert not applying.Outcome(applying.WAITING, "WaitingForCertificates", "", delay=2).ok


def test_defaults_inside_immutable_fields_do_not_trigger_an_update() -> None:
    db = make_db()
    live = live_sts(db)
    live["spec"]["volumeClaimTemplates"][0].update(apiVersion="v1", kind="PersistentVolumeClaim",
                                                   status={"phase": "Pending"})
    live["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"] = "Filesystem"
    live["metadata"]["annotations"][statefulset.ANNOTATION_SPEC_HASH] = statefulset.desired_statefulset(
        render.render_statefulset(db), None)["metadata"]["annotations"][statefulset.ANNOTATION_SPEC_HASH]
    assert statefulset.statefulset_update(render.render_statefulset(db), live) is None
