"""Pure parts of the sandbox API server, without I/O: patches, selectors, structural schemas, printing,
disruption budgets, watch history.

We test these aspects: strategic-merge directives and merge keys; RFC 7386 nulls; label-selector errors as
400s (the grammar is tested with :mod:`opsmanager.kube.selectors`); field selectors on nested paths; defaulting inside defaulted values, pruning with
preserve-unknown-fields, validation messages, ``self == oldSelf``; kubectl's Age rendering and the
JSONPath subset of printer columns; PDB arithmetic with percentages; history compaction.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from opsmanager_sandbox.apiserver import disruption, errors, patching, schema, selectors, store, tables


def test_strategic_merge_directives() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}]},
                                   {"name": "b", "image": "1"}],
                    "tolerations": [{"key": "t1"}]},
           "metadata": {"finalizers": ["f1"], "labels": {"x": "1", "y": "2"}}}
    patched = patching.strategic_merge_patch(pod, {
        "spec": {"containers": [{"name": "b", "$patch": "delete"}, {"name": "c", "image": "2"},
                                {"name": "a", "env": [{"name": "Y", "value": "2"}]}],
                 "tolerations": [{"key": "t2"}]},
        "metadata": {"finalizers": ["f2"], "labels": {"x": None},
                     "$deleteFromPrimitiveList/finalizers": ["f1"], "$setElementOrder/finalizers": ["f2"]}},
        "Pod")
    assert [c["name"] for c in patched["spec"]["containers"]] == ["a", "c"]
    assert patched["spec"]["containers"][0]["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]
    assert patched["spec"]["tolerations"] == [{"key": "t2"}], "lists without a strategy are replaced"
    assert patched["metadata"] == {"finalizers": ["f2"], "labels": {"y": "2"}}
    replaced = patching.strategic_merge_patch(pod, {"spec": {"containers": [{"$patch": "replace"},
                                                                             {"name": "z", "image": "3"}]}}, "Pod")
    assert replaced["spec"]["containers"] == [{"name": "z", "image": "3"}]
    retained = patching.strategic_merge_patch({"spec": {"a": 1, "b": 2}}, {"spec": {"$retainKeys": ["b"], "b": 3}},
                                              "Pod")
    assert retained == {"spec": {"b": 3}}
    assert pod["spec"]["containers"][1]["name"] == "b", "the input is not changed"


def test_json_patch() -> None:
    with pytest.raises(errors.StatusError) as info:
        patching.json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    assert info.value.code == 422
    with pytest.raises(errors.StatusError) as info:
        patching.json_patch({"a": 1}, {"op": "add"})
    assert info.value.code == 400


@pytest.mark.parametrize("bad", ["a in 1", "a>x", "=1", "a b"])
def test_bad_label_selectors_are_400(bad: str) -> None:
    """The grammar is :mod:`opsmanager.kube.selectors`' (tests/kube/test_selectors.py); here, its errors are 400s."""
    with pytest.raises(errors.StatusError) as info:
        selectors.parse_label_selector(bad)
    assert info.value.code == 400 and "unable to parse requirement" in info.value.message
    assert selectors.parse_label_selector("a in (1, 2)")({"a": "2"})


def test_field_selectors() -> None:
    obj = {"metadata": {"name": "p"}, "spec": {"nodeName": "n"}, "status": {"ready": True}}
    assert selectors.parse_field_selector("metadata.name=p,spec.nodeName!=m")(obj)
    assert selectors.parse_field_selector("status.ready=true")(obj)
    assert selectors.parse_field_selector("spec.missing=")(obj)
    assert not selectors.parse_field_selector("metadata.name==q")(obj)
    with pytest.raises(errors.StatusError) as info:
        selectors.parse_field_selector("metadata.name")
    assert info.value.code == 400


SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "spec": {"type": "object", "required": ["n"], "properties": {
        "n": {"type": "integer", "minimum": 1},
        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
        "nested": {"type": "object", "default": {}, "properties": {"x": {"type": "integer", "default": 7}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "k": {"type": "string", "default": "v"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "fixed": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]},
        "size": {"x-kubernetes-int-or-string": True},
    }},
}}


def test_structural_defaulting_and_pruning() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "x", "whatever": 1},
                           "spec": {"n": 1, "mode": None, "items": [{}], "free": {"any": {"thing": 1}}, "gone": 1}}
    schema.default(SCHEMA, obj)
    assert obj["spec"]["mode"] == "a" and obj["spec"]["nested"] == {"x": 7} and obj["spec"]["items"] == [{"k": "v"}]
    assert schema.prune(SCHEMA, obj) == ["spec.gone"]
    assert obj["spec"]["free"] == {"any": {"thing": 1}} and obj["metadata"]["whatever"] == 1


def test_validation_messages_and_transition_rules() -> None:
    causes = schema.validate(SCHEMA, {"spec": {"n": 0, "mode": "c", "size": 1.5}})
    messages = {c["field"]: c["message"] for c in causes}
    assert messages["spec.n"] == "Invalid value: 0: spec.n in body should be greater than or equal to 1"
    assert messages["spec.mode"] == 'Unsupported value: "c": supported values: "a", "b"'
    assert "must be of type integer or string" in messages["spec.size"]
    assert schema.validate(SCHEMA, {"spec": {}}) == [{"reason": "FieldValueRequired", "field": "spec.n",
                                                      "message": "Required value"}]
    assert schema.transition_rules(SCHEMA, {"spec": {"fixed": "a"}}, {"spec": {"fixed": "a"}}) == []
    changed = schema.transition_rules(SCHEMA, {"spec": {"fixed": "b"}}, {"spec": {"fixed": "a"}})
    assert [c["field"] for c in changed] == ["spec.fixed"] and "failed rule: self == oldSelf" in changed[0]["message"]


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (185, "3m5s"), (600, "10m"),
    (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"), (50 * 3600, "2d2h"), (400 * 86400, "400d"),
    (3 * 365 * 86400 + 86400, "3y1d"),
])
def test_age_is_rendered_like_kubectl(seconds: int, shown: str) -> None:
    assert tables.human_duration(seconds) == shown


def test_printer_column_jsonpath() -> None:
    obj = {"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]},
           "spec": {"list": [1, 2]}}
    assert tables.jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert tables.jsonpath(obj, ".spec.list[1]") == [2]
    assert tables.jsonpath(obj, "{.spec.list[*]}") == [1, 2]
    assert tables.jsonpath(obj, ".spec.missing") == []


def test_pdb_arithmetic() -> None:
    def pod(name: str, ready: bool) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {"app": "e"}},
                "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}

    pods = [pod("a", True), pod("b", True), pod("c", False)]
    pdb = {"metadata": {"generation": 1}, "spec": {"maxUnavailable": "34%", "selector": {"matchLabels": {"app": "e"}}}}
    status = disruption.status(pdb, pods, [])
    assert (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"],
            status["disruptionsAllowed"]) == (3, 2, 1, 1)
    pdb["spec"] = {"minAvailable": 2, "selector": {"matchLabels": {"app": "e"}}}
    assert disruption.status(pdb, pods, [])["disruptionsAllowed"] == 0


def test_a_pod_an_eviction_was_admitted_for_stays_disrupted_until_deleted_or_two_minutes_pass() -> None:
    """As kube-controller-manager: the pod in ``disruptedPods`` is not healthy for the budget while it runs on
    (an eviction whose delete never happened), for ``DELETION_TIMEOUT``; a pod being deleted drops its entry."""
    def pod(name: str, *, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": {"app": "e"}}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
        return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    admitted = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    pdb = {"metadata": {"generation": 1}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "e"}}},
           "status": {"disruptedPods": {"c": "2026-01-01T00:00:00Z"}}}
    pods = [pod("a"), pod("b"), pod("c")]
    soon = admitted + datetime.timedelta(seconds=90)
    status = disruption.status(pdb, pods, [], soon)
    assert (status["currentHealthy"], status["disruptionsAllowed"], status["disruptedPods"]) == \
        (2, 0, {"c": "2026-01-01T00:00:00Z"})
    assert disruption.disrupted(pdb, pods, soon)[1] == admitted + disruption.DELETION_TIMEOUT
    late = admitted + disruption.DELETION_TIMEOUT + datetime.timedelta(seconds=1)
    status = disruption.status(pdb, pods, [], late)
    assert (status["currentHealthy"], status["disruptionsAllowed"], "disruptedPods" in status) == (3, 1, False)
    status = disruption.status(pdb, [pod("a"), pod("b"), pod("c", deleting=True)], [], soon)
    assert "disruptedPods" not in status and status["currentHealthy"] == 2


def test_history_is_bounded_and_expires() -> None:
    s = store.Store(history_size=2)
    for i in range(4):
        s.put(("", "configmaps"), {"metadata": {"name": f"c{i}", "namespace": "d"}}, event="ADDED")
    assert [c.obj["metadata"]["name"] for c in s.since(("", "configmaps"), None, 2)] == ["c2", "c3"]
    with pytest.raises(store.TooOld):
        s.since(("", "configmaps"), None, 1)
    with pytest.raises(store.TooOld):
        s.since(("", "configmaps"), None, 99)
