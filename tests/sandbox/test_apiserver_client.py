"""Contract tests: the official ``kubernetes`` client against the sandbox API server.

We test these aspects, each as the real kube-apiserver behaves: object metadata (uid, creationTimestamp,
global resourceVersion, generation, namespace from the URL, generateName, 201); list with label and field
selectors and pagination; PUT, merge/JSON/strategic-merge PATCH and their 409/422 answers; the status and
scale subresources; finalizers and graceful deletion; garbage collection; namespaces; events in both APIs;
eviction against PodDisruptionBudgets; error bodies.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes.client as k
import pytest
from kubernetes.client.rest import ApiException

from tests.fixtures.sandbox import SandboxAPI
from tests.polling import eventually

pytestmark = pytest.mark.slow

G, V, P = "test.opsmanager.dev", "v1", "widgets"


def status_of(e: ApiException) -> dict[str, Any]:
    return json.loads(e.body)


def raises(code: int, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as info:
        fn(*args, **kwargs)
    assert info.value.status == code, info.value.body
    body = status_of(info.value)
    assert body["kind"] == "Status" and body["code"] == code
    return body


def widget(name: str, size: int = 1, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{G}/{V}", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size, **spec}}


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "etcd:3.5.1"}], **spec}}


def test_create_assigns_server_metadata_and_namespace_from_url(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    a = core.create_namespaced_secret("default", {"metadata": {"name": "a"}, "stringData": {"x": "1"}})
    b = core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    assert a.metadata.uid and a.metadata.uid != b.metadata.uid
    assert a.metadata.creation_timestamp is not None
    assert a.metadata.namespace == "default"
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    assert a.metadata.generation is None  # Secrets have no generation
    listed = core.list_secret_for_all_namespaces()
    assert [s.metadata.namespace for s in listed.items if s.metadata.name == "a"] == ["default"]
    assert int(listed.metadata.resource_version) >= int(b.metadata.resource_version)


def test_a_secrets_string_data_is_stored_in_data_on_create_update_and_patch(apiserver: SandboxAPI) -> None:
    """As kube-apiserver: ``stringData`` is folded into ``data`` (base64, overwriting a key of the same name) and
    never stored or returned."""
    core = k.CoreV1Api(apiserver.api_client)
    made = core.create_namespaced_secret("default", {"metadata": {"name": "sd"}, "data": {"a": "eA==", "b": "eA=="},
                                                     "stringData": {"b": "two", "c": "three"}})
    assert made.data == {"a": "eA==", "b": "dHdv", "c": "dGhyZWU="} and made.string_data is None
    patched = core.patch_namespaced_secret("sd", "default", {"stringData": {"a": "one"}})
    assert patched.data == {"a": "b25l", "b": "dHdv", "c": "dGhyZWU="} and patched.string_data is None
    patched.string_data = {"d": "four"}
    replaced = core.replace_namespaced_secret("sd", "default", patched)
    assert replaced.data["d"] == "Zm91cg==" and replaced.string_data is None
    assert core.read_namespaced_secret("sd", "default").string_data is None


def test_create_answers_201_so_custom_objects_api_returns_the_body(apiserver: SandboxAPI,
                                                                   widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    created = custom.create_namespaced_custom_object(G, V, "default", P, widget("w1", 2))
    assert created is not None and created["metadata"]["generation"] == 1
    _, code, _ = custom.create_namespaced_custom_object_with_http_info(G, V, "default", P, widget("w2"))
    assert code == 201


def test_generate_name_makes_unique_names(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    names = {core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-"}}).metadata.name
             for _ in range(5)}
    assert len(names) == 5 and all(n.startswith("cm-") and len(n) == 8 for n in names)


def test_errors_have_real_status_bodies(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    body = raises(404, core.read_namespaced_secret, "missing", "default")
    assert body["reason"] == "NotFound" and body["message"] == 'secrets "missing" not found'
    assert body["details"] == {"name": "missing", "kind": "secrets"}
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}})
    body = raises(409, core.create_namespaced_secret, "default", {"metadata": {"name": "s"}})
    assert body["reason"] == "AlreadyExists" and body["message"] == 'secrets "s" already exists'
    body = raises(422, core.create_namespaced_secret, "default", {"metadata": {"name": "Bad_Name"}})
    assert body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "metadata.name"
    body = raises(400, core.create_namespaced_secret, "default",
                  {"metadata": {"name": "x", "namespace": "kube-system"}})
    assert body["reason"] == "BadRequest"
    body = raises(404, core.create_namespaced_secret, "nowhere", {"metadata": {"name": "x"}})
    assert body["message"] == 'namespaces "nowhere" not found'


def test_generation_bumps_on_spec_changes_only(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    w = custom.create_namespaced_custom_object(G, V, "default", P, widget("w", 1))
    w = custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"metadata": {"labels": {"a": "b"}}})
    assert w["metadata"]["generation"] == 1
    w = custom.patch_namespaced_custom_object_status(G, V, "default", P, "w", {"status": {"phase": "Up"}})
    assert w["metadata"]["generation"] == 1
    w = custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"spec": {"size": 5}})
    assert w["metadata"]["generation"] == 2
    rv = w["metadata"]["resourceVersion"]
    same = custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"spec": {"size": 5}})
    assert same["metadata"]["resourceVersion"] == rv, "a no-op patch must not write"
    apps = k.AppsV1Api(apiserver.api_client)
    sts = apps.create_namespaced_stateful_set("default", {
        "metadata": {"name": "s"}, "spec": {"selector": {"matchLabels": {"app": "s"}}, "serviceName": "s",
                                            "template": {"metadata": {"labels": {"app": "s"}},
                                                         "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}})
    assert sts.metadata.generation == 1
    sts = apps.patch_namespaced_stateful_set_status("s", "default", {"status": {"replicas": 1}})
    assert sts.metadata.generation == 1 and sts.status.replicas == 1
    sts = apps.patch_namespaced_stateful_set("s", "default", {"spec": {"replicas": 3}})
    assert sts.metadata.generation == 2


def test_label_selectors(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    for name, labels in [("a", {"app": "x", "tier": "1"}), ("b", {"app": "y"}), ("c", {"tier": "2"})]:
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": labels}})

    def names(selector: str) -> list[str]:
        return sorted(c.metadata.name for c in core.list_namespaced_config_map("default",
                                                                                label_selector=selector).items)

    assert names("app=x") == ["a"]
    assert names("app==y") == ["b"]
    assert names("app!=x") == ["b", "c"]
    assert names("app in (x, y)") == ["a", "b"]
    assert names("app notin (x)") == ["b", "c"]
    assert names("tier") == ["a", "c"]
    assert names("!tier") == ["b"]
    assert names("app,tier") == ["a"]
    assert names("tier>1") == ["c"]
    raises(400, core.list_namespaced_config_map, "default", label_selector="app in x")


def test_field_selectors(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_pod("default", pod("p1"))
    core.create_namespaced_pod("other", pod("p2", nodeName="n1"))
    core.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Running"}})
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="metadata.name=p2").items] == \
        ["p2"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(
        field_selector="metadata.namespace!=default").items] == ["p2"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="status.phase=Running").items] \
        == ["p1"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1").items] == \
        ["p2"]


def test_pagination_with_limit_and_continue(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    for i in range(5):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm{i}"}})
    seen, token = [], None
    while True:
        page = core.list_namespaced_config_map("default", limit=2, _continue=token)
        seen += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"cm{i}" for i in range(5)]


def test_put_replaces_and_stale_resource_version_conflicts(apiserver: SandboxAPI,
                                                            widget_crd: dict[str, Any]) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    cm.data = {"b": "2"}
    fresh = core.replace_namespaced_config_map("c", "default", cm)
    assert fresh.data == {"b": "2"}
    body = raises(409, core.replace_namespaced_config_map, "c", "default", cm)  # cm carries the old version
    assert body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "c": the object has been modified; '
                               "please apply your changes to the latest version and try again")
    stale = {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"c": "3"}}
    raises(409, core.patch_namespaced_config_map, "c", "default", stale)
    custom = k.CustomObjectsApi(apiserver.api_client)
    custom.create_namespaced_custom_object(G, V, "default", P, widget("w"))
    body = raises(422, custom.replace_namespaced_custom_object, G, V, "default", P, "w", widget("w", 3))
    assert "must be specified for an update" in body["message"]


def test_json_patch_test_operation(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    rv = cm.metadata.resource_version
    ok = core.patch_namespaced_config_map("c", "default", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]}])
    assert ok.metadata.finalizers == ["x/y"]
    body = raises(422, core.patch_namespaced_config_map, "c", "default", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "remove", "path": "/metadata/finalizers"}])
    assert body["reason"] == "Invalid"
    raises(409, core.patch_namespaced_config_map, "c", "default",
           [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv}])


def test_merge_patch_deletes_with_null(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    custom.create_namespaced_custom_object(G, V, "default", P, widget("w", 1, owner="me"))
    w = custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"spec": {"owner": None, "size": 2}})
    assert "owner" not in w["spec"] and w["spec"]["size"] == 2


def test_strategic_merge_patch_merges_lists_by_key(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "main", "image": "img:1", "env": [{"name": "A", "value": "1"}],
                        "ports": [{"containerPort": 2379}], "volumeMounts": [{"name": "d", "mountPath": "/d"}]},
                       {"name": "side", "image": "side:1"}],
        "volumes": [{"name": "d", "emptyDir": {}}, {"name": "e", "emptyDir": {}}]}})
    p = core.patch_namespaced_pod("p", "default", {"spec": {
        "containers": [{"name": "main", "image": "img:2", "env": [{"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 2380}]},
                       {"name": "side", "$patch": "delete"}],
        "volumes": [{"name": "e", "$patch": "delete"}]}})
    main = p.spec.containers[0]
    assert [c.name for c in p.spec.containers] == ["main"] and main.image == "img:2"
    assert [(e.name, e.value) for e in main.env] == [("A", "1"), ("B", "2")]
    assert [x.container_port for x in main.ports] == [2379, 2380]
    assert [m.mount_path for m in main.volume_mounts] == ["/d"]
    assert [v.name for v in p.spec.volumes] == ["d"]
    core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}})
    p = core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [
        {"type": "Ready", "status": "True"}]}})
    assert sorted((c.type, c.status) for c in p.status.conditions) == [("Initialized", "True"), ("Ready", "True")]
    custom = k.CustomObjectsApi(apiserver.api_client)
    custom.create_namespaced_custom_object(G, V, "default", P, widget("w"))
    code, _, body = apiserver.raw("PATCH", f"/apis/{G}/{V}/namespaces/default/{P}/w", {"spec": {"size": 2}},
                                  content_type="application/strategic-merge-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


def test_status_subresource_is_separated_both_ways(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    created = custom.create_namespaced_custom_object(G, V, "default", P, dict(widget("w"), status={"phase": "X"}))
    assert "status" not in created, "status is ignored on create"
    w = custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"status": {"phase": "A"}, "spec": {"size": 2}})
    assert "status" not in w and w["spec"]["size"] == 2
    w = custom.patch_namespaced_custom_object_status(G, V, "default", P, "w",
                                                     {"status": {"phase": "B"}, "spec": {"size": 99},
                                                      "metadata": {"labels": {"x": "y"}}})
    assert w["status"] == {"phase": "B"} and w["spec"]["size"] == 2 and not w["metadata"].get("labels")
    w["status"]["phase"] = "C"
    w["spec"]["size"] = 50
    w = custom.replace_namespaced_custom_object_status(G, V, "default", P, "w", w)
    assert w["status"]["phase"] == "C" and w["spec"]["size"] == 2
    core = k.CoreV1Api(apiserver.api_client)
    p = core.create_namespaced_pod("default", pod("p"))
    assert p.status.phase == "Pending"
    p = core.patch_namespaced_pod("p", "default", {"status": {"phase": "Running"}})
    assert p.status.phase == "Pending"
    p = core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running", "podIP": "127.0.1.1"}})
    assert p.status.phase == "Running" and p.status.pod_ip == "127.0.1.1"


def test_scale_subresource(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    apps = k.AppsV1Api(apiserver.api_client)
    apps.create_namespaced_stateful_set("default", {
        "metadata": {"name": "s"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "s"}},
                                            "serviceName": "s", "template": {
                                                "metadata": {"labels": {"app": "s"}},
                                                "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}})
    scale = apps.read_namespaced_stateful_set_scale("s", "default")
    assert scale.kind == "Scale" and scale.spec.replicas == 1 and scale.status.selector == "app=s"
    scale = apps.patch_namespaced_stateful_set_scale("s", "default", {"spec": {"replicas": 3}})
    assert scale.spec.replicas == 3
    assert apps.read_namespaced_stateful_set("s", "default").spec.replicas == 3
    custom = k.CustomObjectsApi(apiserver.api_client)
    custom.create_namespaced_custom_object(G, V, "default", P, widget("w", 2))
    scale = custom.patch_namespaced_custom_object_scale(G, V, "default", P, "w", {"spec": {"replicas": 4}})
    assert scale["spec"]["replicas"] == 4
    assert custom.get_namespaced_custom_object(G, V, "default", P, "w")["spec"]["size"] == 4


def test_finalizers_hold_deletion_until_removed(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    body = widget("w")
    body["metadata"]["finalizers"] = ["test/hold"]
    custom.create_namespaced_custom_object(G, V, "default", P, body)
    deleted = custom.delete_namespaced_custom_object(G, V, "default", P, "w")
    assert deleted["metadata"]["deletionTimestamp"]
    w = custom.get_namespaced_custom_object(G, V, "default", P, "w")
    assert w["metadata"]["deletionTimestamp"] and w["metadata"]["finalizers"] == ["test/hold"]
    raises(422, custom.patch_namespaced_custom_object, G, V, "default", P, "w",
           {"metadata": {"finalizers": ["test/hold", "test/new"]}})
    custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"metadata": {"finalizers": None}})
    raises(404, custom.get_namespaced_custom_object, G, V, "default", P, "w")


def test_delete_returns_status_or_object_like_the_real_server(apiserver: SandboxAPI,
                                                               widget_crd: dict[str, Any]) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    s = core.create_namespaced_secret("default", {"metadata": {"name": "s"}})
    status = core.delete_namespaced_secret("s", "default")
    assert status["kind"] == "Status" and status["status"] == "Success"
    assert status["details"] == {"name": "s", "group": "", "kind": "secrets", "uid": s.metadata.uid}
    custom = k.CustomObjectsApi(apiserver.api_client)
    custom.create_namespaced_custom_object(G, V, "default", P, widget("w"))
    assert custom.delete_namespaced_custom_object(G, V, "default", P, "w")["kind"] == "Widget"
    raises(404, core.delete_namespaced_secret, "s", "default")
    core.create_namespaced_secret("default", {"metadata": {"name": "t"}})
    raises(409, core.delete_namespaced_secret, "t", "default", body=k.V1DeleteOptions(
        preconditions=k.V1Preconditions(uid="not-the-uid")))


def test_pod_on_a_node_is_deleted_gracefully(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespaced_pod("default", pod("unbound"))
    core.delete_namespaced_pod("unbound", "default")
    raises(404, core.read_namespaced_pod, "unbound", "default")
    core.create_namespaced_pod("default", pod("bound", nodeName="sandbox", terminationGracePeriodSeconds=7))
    core.delete_namespaced_pod("bound", "default")
    p = core.read_namespaced_pod("bound", "default")
    assert p.metadata.deletion_timestamp and p.metadata.deletion_grace_period_seconds == 7
    core.patch_namespaced_pod_status("bound", "default", {"status": {"phase": "Running"}})  # kubelet still writes
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)  # what the kubelet does at the end
    raises(404, core.read_namespaced_pod, "bound", "default")


def test_binding_assigns_a_node(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespaced_pod("default", pod("p"))
    code, _, _ = apiserver.raw("POST", "/api/v1/namespaces/default/pods/p/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "sandbox"}})
    assert code == 201
    assert core.read_namespaced_pod("p", "default").spec.node_name == "sandbox"


def owner_ref(obj: dict[str, Any] | Any, api_version: str, kind: str) -> dict[str, Any]:
    meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata
    name = meta["name"] if isinstance(meta, dict) else meta.name
    uid = meta["uid"] if isinstance(meta, dict) else meta.uid
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def test_garbage_collection_deletes_dependents_of_custom_resources(apiserver: SandboxAPI,
                                                                   widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    apps, core = k.AppsV1Api(apiserver.api_client), k.CoreV1Api(apiserver.api_client)
    w = custom.create_namespaced_custom_object(G, V, "default", P, widget("w"))
    ref = owner_ref(w, f"{G}/{V}", "Widget")
    apps.create_namespaced_stateful_set("default", {
        "metadata": {"name": "s", "ownerReferences": [ref]},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "serviceName": "s",
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c",
                                                                                           "image": "i"}]}}}})
    sts = apps.read_namespaced_stateful_set("s", "default")
    core.create_namespaced_pod("default", {**pod("s-0"), "metadata": {
        "name": "s-0", "ownerReferences": [owner_ref(sts, "apps/v1", "StatefulSet")]}})
    core.create_namespaced_secret("default", {"metadata": {"name": "keep"}})
    custom.delete_namespaced_custom_object(G, V, "default", P, "w")

    def gone() -> bool:
        names = [s.metadata.name for s in apps.list_namespaced_stateful_set("default").items]
        pods = [p.metadata.name for p in core.list_namespaced_pod("default").items]
        return names == [] and pods == []

    eventually(gone)
    assert core.read_namespaced_secret("keep", "default")


def test_foreground_and_orphan_propagation(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    for owner_name in ("fg", "orphan"):
        owner = core.create_namespaced_config_map("default", {"metadata": {"name": owner_name}})
        dep = {"metadata": {"name": f"{owner_name}-dep", "finalizers": ["test/slow"],
                            "ownerReferences": [owner_ref(owner, "v1", "ConfigMap")]}}
        core.create_namespaced_config_map("default", dep)
    core.delete_namespaced_config_map("fg", "default", propagation_policy="Foreground")
    eventually(lambda: core.read_namespaced_config_map("fg-dep", "default").metadata.deletion_timestamp)
    owner = core.read_namespaced_config_map("fg", "default")
    assert "foregroundDeletion" in owner.metadata.finalizers, "the owner waits for its dependents"
    core.patch_namespaced_config_map("fg-dep", "default", {"metadata": {"finalizers": None}})
    eventually(lambda: not [c for c in core.list_namespaced_config_map("default").items
                            if c.metadata.name in ("fg", "fg-dep")])
    core.delete_namespaced_config_map("orphan", "default", propagation_policy="Orphan")
    eventually(lambda: "orphan" not in [c.metadata.name for c in core.list_namespaced_config_map("default").items])
    dep = core.read_namespaced_config_map("orphan-dep", "default")
    assert not dep.metadata.owner_references and not dep.metadata.deletion_timestamp


def test_namespaces_exist_and_deleting_one_removes_its_objects(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system"} <= names
    assert core.read_namespace("default").status.phase == "Active"
    core.create_namespace({"metadata": {"name": "tmp"}})
    core.create_namespaced_config_map("tmp", {"metadata": {"name": "c"}})
    core.delete_namespace("tmp")
    eventually(lambda: "tmp" not in {n.metadata.name for n in core.list_namespace().items})
    assert core.list_namespaced_config_map("tmp").items == []
    raises(403, core.delete_namespace, "default")


def test_events_in_both_apis(apiserver: SandboxAPI) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    events = k.EventsV1Api(apiserver.api_client)
    core.create_namespaced_event("default", {
        "metadata": {"generateName": "kopf-event-"}, "involvedObject": {"kind": "Pod", "name": "p", "uid": "u1"},
        "reason": "Tested", "message": "hello", "type": "Normal", "eventTime": "2026-01-01T00:00:00.000000Z"})
    events.create_namespaced_event("default", {
        "metadata": {"name": "e2"}, "eventTime": "2026-01-01T00:00:00.000000Z", "regarding": {"kind": "Pod",
                                                                                              "name": "q"},
        "reason": "Other", "note": "world", "type": "Warning", "action": "Testing",
        "reportingController": "test", "reportingInstance": "test-1"})
    core_view = {e.reason: e for e in core.list_namespaced_event("default").items}
    assert core_view["Other"].message == "world" and core_view["Other"].involved_object.name == "q"
    v1_view = {e.reason: e for e in events.list_namespaced_event("default").items}
    assert v1_view["Tested"].note == "hello" and v1_view["Tested"].regarding.uid == "u1"
    selected = core.list_namespaced_event("default", field_selector="involvedObject.uid=u1").items
    assert [e.reason for e in selected] == ["Tested"]


def test_eviction_honours_pod_disruption_budgets(apiserver: SandboxAPI) -> None:
    core, policy = k.CoreV1Api(apiserver.api_client), k.PolicyV1Api(apiserver.api_client)
    for i in range(2):
        core.create_namespaced_pod("default", pod(f"m{i}", {"app": "m"}))
        core.patch_namespaced_pod_status(f"m{i}", "default", {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}})
    core.create_namespaced_pod("default", pod("free"))
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "pdb"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "m"}}}})
    eventually(lambda: policy.read_namespaced_pod_disruption_budget("pdb", "default").status.current_healthy == 2)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "m0", "namespace": "default"}}
    body = raises(429, core.create_namespaced_pod_eviction, "m0", "default", eviction)
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    policy.patch_namespaced_pod_disruption_budget("pdb", "default", {"spec": {"minAvailable": 1}})
    # decided from the stored status, as kube-apiserver does: the new generation must be processed first
    eventually(lambda: policy.read_namespaced_pod_disruption_budget("pdb", "default").status.observed_generation == 2)
    allowed = policy.read_namespaced_pod_disruption_budget("pdb", "default").status.disruptions_allowed
    core.create_namespaced_pod_eviction("m0", "default", eviction, dry_run="All")  # decided, nothing touched
    assert core.read_namespaced_pod("m0", "default").metadata.deletion_timestamp is None
    assert policy.read_namespaced_pod_disruption_budget("pdb", "default").status.disruptions_allowed == allowed == 1
    core.create_namespaced_pod_eviction("m0", "default", eviction)
    raises(404, core.read_namespaced_pod, "m0", "default")
    eventually(lambda: policy.read_namespaced_pod_disruption_budget(
        "pdb", "default").status.disruptions_allowed == 0)
    raises(429, core.create_namespaced_pod_eviction, "m1", "default", dict(eviction, metadata={"name": "m1"}))
    # a budget short of healthy pods refuses even an unready pod, but not a Pending one: it is not asked
    policy.patch_namespaced_pod_disruption_budget("pdb", "default", {"spec": {"minAvailable": 2}})
    eventually(lambda: policy.read_namespaced_pod_disruption_budget("pdb", "default").status.observed_generation == 3)
    core.create_namespaced_pod("default", pod("m2", {"app": "m"}))
    core.patch_namespaced_pod_status("m2", "default", {"status": {"phase": "Running"}})
    raises(429, core.create_namespaced_pod_eviction, "m2", "default", dict(eviction, metadata={"name": "m2"}))
    core.patch_namespaced_pod_status("m2", "default", {"status": {"phase": "Pending"}})
    core.create_namespaced_pod_eviction("m2", "default", dict(eviction, metadata={"name": "m2"}))
    core.create_namespaced_pod_eviction("free", "default", dict(eviction, metadata={"name": "free"}))
    raises(404, core.read_namespaced_pod, "free", "default")


def test_leases_and_pvcs_and_controller_revisions_are_served(apiserver: SandboxAPI) -> None:
    coord = k.CoordinationV1Api(apiserver.api_client)
    lease = coord.create_namespaced_lease("default", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}})
    assert lease.spec.holder_identity == "me"
    core = k.CoreV1Api(apiserver.api_client)
    pvc = core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "data-0"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                 "resources": {"requests": {"storage": "1Gi"}}}})
    assert pvc.status.phase == "Pending" and pvc.spec.volume_mode == "Filesystem"
    apps = k.AppsV1Api(apiserver.api_client)
    rev = apps.create_namespaced_controller_revision("default", {"metadata": {"name": "s-abc"}, "revision": 1,
                                                                 "data": {"spec": {"x": 1}}})
    assert rev.revision == 1
    svc = core.create_namespaced_service("default", {"metadata": {"name": "h"}, "spec": {
        "clusterIP": "None", "selector": {"app": "m"}, "ports": [{"name": "client", "port": 2379}]}})
    assert svc.spec.cluster_ip == "None" and svc.spec.ports[0].target_port == 2379


def test_discovery_documents(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    version = k.VersionApi(apiserver.api_client).get_code()
    assert version.major == "1" and version.minor == "32"
    core = k.CoreApi(apiserver.api_client).get_api_versions()
    assert core.versions == ["v1"]
    groups = {g.name: g for g in k.ApisApi(apiserver.api_client).get_api_versions().groups}
    assert {"apps", "policy", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io",
            "admissionregistration.k8s.io", "cert-manager.io", G} <= set(groups)
    resources = k.CoreV1Api(apiserver.api_client).get_api_resources()
    by_name = {r.name: r for r in resources.resources}
    assert resources.group_version == "v1"
    assert by_name["pods"].namespaced and "po" in by_name["pods"].short_names
    assert not by_name["namespaces"].namespaced and "pods/status" in by_name and "pods/eviction" in by_name
    mine = k.CustomObjectsApi(apiserver.api_client).get_api_resources(G, V)
    widgets = {r.name: r for r in mine.resources}
    assert widgets["widgets"].kind == "Widget" and widgets["widgets"].short_names == ["wd"]
    assert {"widgets/status", "widgets/scale"} <= set(widgets)
    _, headers, aggregated = apiserver.raw("GET", "/apis", headers={
        "Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
    assert "apidiscovery.k8s.io" in headers["Content-Type"]
    assert G in [item["metadata"]["name"] for item in aggregated["items"]]


def test_crd_schema_defaults_pruning_and_validation(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    w = custom.create_namespaced_custom_object(G, V, "default", P, widget("w", 1, unknown="dropped", owner="a"))
    assert w["spec"]["mode"] == "fast" and w["spec"]["options"] == {"retries": 3}
    assert "unknown" not in w["spec"]
    body = raises(422, custom.create_namespaced_custom_object, G, V, "default", P, widget("bad", 1, mode="slow"))
    assert 'spec.mode: Unsupported value: "slow": supported values: "fast", "safe"' in body["message"]
    body = raises(422, custom.create_namespaced_custom_object, G, V, "default", P,
                  {"metadata": {"name": "bad"}, "spec": {"mode": "safe"}})
    assert "spec.size: Required value" in body["message"]
    body = raises(422, custom.create_namespaced_custom_object, G, V, "default", P, widget("bad", "many"))
    assert "spec.size in body must be of type integer" in body["message"]
    body = raises(422, custom.patch_namespaced_custom_object, G, V, "default", P, "w", {"spec": {"owner": "b"}})
    assert "owner is immutable" in body["message"]
    crds = k.ApiextensionsV1Api(apiserver.api_client)
    crd = crds.read_custom_resource_definition("widgets.test.opsmanager.dev")
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
    assert crd.status.accepted_names.plural == "widgets"


def test_table_output_uses_printer_columns(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    custom.create_namespaced_custom_object(G, V, "default", P, widget("w", 7))
    custom.patch_namespaced_custom_object_status(G, V, "default", P, "w", {"status": {"phase": "Ready"}})
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    _, _, table = apiserver.raw("GET", f"/apis/{G}/{V}/namespaces/default/{P}", headers={"Accept": accept})
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Mode", "Phase", "Age"]
    cells = table["rows"][0]["cells"]
    assert cells[:4] == ["w", 7, "fast", "Ready"] and cells[4].endswith("s")
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespaced_pod("default", pod("p"))
    _, _, table = apiserver.raw("GET", "/api/v1/namespaces/default/pods", headers={"Accept": accept})
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["p", "0/1", "Pending", 0]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
