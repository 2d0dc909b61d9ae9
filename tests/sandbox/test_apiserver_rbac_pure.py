"""The sandbox's RBAC authorizer and request attributes, as pure logic (``opsmanager_sandbox.apiserver.rbac``).

We test these aspects: HTTP → verb/resource/subresource/name/namespace exactly as kube-apiserver's RequestInfo
(list vs get, watch, deletecollection, ``metadata.name`` field selector, namespaces and their subresources,
non-resource paths); rule matching (verbs, API groups, ``*``, ``resource/subresource``, ``*/subresource``,
resourceNames on get vs list vs create, nonResourceURLs with a trailing ``*``); bindings (RoleBinding to a Role
or to a ClusterRole only in its namespace, ClusterRoleBinding everywhere, User/Group/ServiceAccount subjects,
missing roles, ``system:masters``); the bootstrap policy; the 403 wording; validation of RBAC objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from opsmanager_sandbox.apiserver import rbac

Obj = dict[str, Any]
G = rbac.GROUP
ALICE = rbac.UserInfo("alice", (rbac.AUTHENTICATED,))
SA = rbac.UserInfo.service_account("ops", "operator")


class Policy:
    """A PolicySource over plain lists, as the store adapter is over stored objects."""

    def __init__(self, *objects: Obj) -> None:
        self.objects = list(objects) + rbac.bootstrap_policy()

    def _of(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def cluster_role(self, name: str) -> Obj | None:
        return next((o for o in self._of("ClusterRole") if o["metadata"]["name"] == name), None)

    def role(self, namespace: str, name: str) -> Obj | None:
        return next((o for o in self._of("Role") if o["metadata"]["name"] == name
                     and o["metadata"]["namespace"] == namespace), None)

    def cluster_role_bindings(self) -> Iterable[Obj]:
        return self._of("ClusterRoleBinding")

    def role_bindings(self, namespace: str) -> Iterable[Obj]:
        return [o for o in self._of("RoleBinding") if o["metadata"]["namespace"] == namespace]


def role(name: str, *rules: Obj, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": "Role" if namespace else "ClusterRole", "metadata": meta, "rules": list(rules)}


def binding(name: str, role_kind: str, role_name: str, *subjects: Obj, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": "RoleBinding" if namespace else "ClusterRoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": G, "kind": role_kind, "name": role_name}, "subjects": list(subjects)}


def user(name: str) -> Obj:
    return {"apiGroup": G, "kind": "User", "name": name}


def group(name: str) -> Obj:
    return {"apiGroup": G, "kind": "Group", "name": name}


def sa(name: str, namespace: str | None = None) -> Obj:
    out = {"kind": "ServiceAccount", "name": name}
    if namespace:
        out["namespace"] = namespace
    return out


def ask(who: rbac.UserInfo, method: str, path: str, **query: str) -> rbac.Attributes:
    return rbac.request_attributes(who, method, path, query)


def allowed(policy: Policy, who: rbac.UserInfo, method: str, path: str, **query: str) -> bool:
    return rbac.authorize(ask(who, method, path, **query), policy).allowed


# -- request attributes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/namespaces/ns/pods/p", {}, ("get", "ns", "", "pods", "", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "ns", "", "pods", "", "")),
    ("GET", "/api/v1/pods", {}, ("list", "", "", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "ns", "", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns/secrets", {"fieldSelector": "metadata.name=s1"},
     ("list", "ns", "", "secrets", "", "s1")),
    ("GET", "/api/v1/namespaces/ns/secrets", {"fieldSelector": "metadata.name==s1", "watch": "1"},
     ("watch", "ns", "", "secrets", "", "s1")),
    ("GET", "/api/v1/namespaces/ns/secrets", {"fieldSelector": "metadata.name!=s1"},
     ("list", "ns", "", "secrets", "", "")),
    ("POST", "/api/v1/namespaces/ns/pods", {}, ("create", "ns", "", "pods", "", "")),
    ("PUT", "/apis/apps/v1/namespaces/ns/statefulsets/s/scale", {},
     ("update", "ns", "apps", "statefulsets", "scale", "s")),
    ("PATCH", "/apis/opsmanager.dev/v1alpha1/namespaces/ns/etcds/e/status", {},
     ("patch", "ns", "opsmanager.dev", "etcds", "status", "e")),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, ("delete", "ns", "", "pods", "", "p")),
    ("DELETE", "/api/v1/namespaces/ns/pods", {}, ("deletecollection", "ns", "", "pods", "", "")),
    ("POST", "/api/v1/namespaces/ns/pods/p/eviction", {}, ("create", "ns", "", "pods", "eviction", "p")),
    ("POST", "/api/v1/namespaces/ns/serviceaccounts/op/token", {},
     ("create", "ns", "", "serviceaccounts", "token", "op")),
    # a namespace is its own namespace; its status and finalize are its subresources
    ("GET", "/api/v1/namespaces/ns", {}, ("get", "ns", "", "namespaces", "", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "ns", "", "namespaces", "finalize", "ns")),
    ("GET", "/api/v1/namespaces", {}, ("list", "", "", "namespaces", "", "")),
    ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:discovery", {},
     ("get", "", G, "clusterroles", "", "system:discovery")),
])
def test_resource_requests_map_like_kube_apiserver(method: str, path: str, query: dict[str, str],
                                                    expected: tuple[str, ...]) -> None:
    attrs = rbac.request_attributes(ALICE, method, path, query)
    assert attrs.resource_request
    assert (attrs.verb, attrs.namespace, attrs.api_group, attrs.resource, attrs.subresource, attrs.name) == expected


@pytest.mark.parametrize(("method", "path", "verb"), [
    ("GET", "/version", "get"), ("GET", "/healthz", "get"), ("GET", "/api", "get"), ("GET", "/api/v1", "get"),
    ("GET", "/apis", "get"), ("GET", "/apis/apps", "get"), ("GET", "/apis/apps/v1", "get"),
    ("GET", "/openapi/v3/apis/apps/v1", "get"), ("POST", "/metrics", "post"),
])
def test_other_paths_are_non_resource_requests_with_the_method_as_verb(method: str, path: str, verb: str) -> None:
    attrs = rbac.request_attributes(ALICE, method, path, {})
    assert not attrs.resource_request and attrs.verb == verb and attrs.path == path


# -- rules --------------------------------------------------------------------------------------------------------

def test_verbs_groups_and_resources_must_all_match() -> None:
    policy = Policy(role("reader", {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                         namespace="ns"),
                    binding("b", "Role", "reader", user("alice"), namespace="ns"))
    assert allowed(policy, ALICE, "GET", "/api/v1/namespaces/ns/pods/p")
    assert allowed(policy, ALICE, "GET", "/api/v1/namespaces/ns/pods")
    assert not allowed(policy, ALICE, "GET", "/api/v1/namespaces/ns/pods", watch="true")
    assert not allowed(policy, ALICE, "DELETE", "/api/v1/namespaces/ns/pods/p")
    assert not allowed(policy, ALICE, "GET", "/api/v1/namespaces/ns/secrets/s")
    assert not allowed(policy, ALICE, "GET", "/apis/apps/v1/namespaces/ns/pods/p")  # another group
    assert not allowed(policy, ALICE, "GET", "/api/v1/namespaces/other/pods/p")  # another namespace
    assert not allowed(policy, ALICE, "GET", "/api/v1/pods")  # all namespaces is the cluster scope


def test_subresources_are_separate_resources_unless_a_wildcard_names_them() -> None:
    policy = Policy(
        role("r", {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]},
             {"apiGroups": ["opsmanager.dev"], "resources": ["etcds/status"], "verbs": ["patch"]},
             {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]}, namespace="ns"),
        binding("b", "Role", "r", user("alice"), namespace="ns"))
    base = "/api/v1/namespaces/ns/pods/p"
    assert allowed(policy, ALICE, "PATCH", base)
    assert not allowed(policy, ALICE, "PATCH", base + "/status")
    assert not allowed(policy, ALICE, "POST", base + "/eviction")
    assert allowed(policy, ALICE, "PATCH", "/apis/opsmanager.dev/v1alpha1/namespaces/ns/etcds/e/status")
    assert not allowed(policy, ALICE, "PATCH", "/apis/opsmanager.dev/v1alpha1/namespaces/ns/etcds/e")
    assert allowed(policy, ALICE, "PUT", "/apis/apps/v1/namespaces/ns/statefulsets/s/scale")
    assert not allowed(policy, ALICE, "PUT", "/apis/apps/v1/namespaces/ns/statefulsets/s/status")
    assert not allowed(policy, ALICE, "PUT", "/apis/apps/v1/namespaces/ns/statefulsets/s")

    everything = Policy(role("all", {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, namespace="ns"),
                        binding("b", "Role", "all", user("alice"), namespace="ns"))
    assert allowed(everything, ALICE, "POST", base + "/eviction")  # "*" covers subresources too
    assert allowed(everything, ALICE, "DELETE", "/apis/x.io/v1/namespaces/ns/things")


def test_resource_names_restrict_get_and_name_selected_lists_but_never_allow_create() -> None:
    policy = Policy(role("r", {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"],
                               "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"]},
                         namespace="ns"),
                    binding("b", "Role", "r", user("alice"), namespace="ns"))
    path = "/api/v1/namespaces/ns/secrets"
    assert allowed(policy, ALICE, "GET", path + "/s1")
    assert not allowed(policy, ALICE, "GET", path + "/s2")
    assert not allowed(policy, ALICE, "GET", path)  # a plain list has no name
    assert allowed(policy, ALICE, "GET", path, fieldSelector="metadata.name=s1")
    assert allowed(policy, ALICE, "GET", path, fieldSelector="metadata.name=s1", watch="true")
    assert not allowed(policy, ALICE, "GET", path, fieldSelector="metadata.name=s2")
    assert not allowed(policy, ALICE, "POST", path)  # a create has no name to match
    assert allowed(policy, ALICE, "DELETE", path + "/s1")
    assert not allowed(policy, ALICE, "DELETE", path)  # deletecollection neither


def test_non_resource_urls_match_exactly_or_by_prefix_star() -> None:
    policy = Policy(role("metrics", {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}),
                    binding("b", "ClusterRole", "metrics", user("alice")))
    assert allowed(policy, ALICE, "GET", "/metrics")
    assert not allowed(policy, ALICE, "GET", "/metrics/cadvisor")
    assert allowed(policy, ALICE, "GET", "/debug/pprof/heap")
    assert not allowed(policy, ALICE, "POST", "/metrics")
    assert not allowed(policy, ALICE, "GET", "/healthzx")


# -- bindings -----------------------------------------------------------------------------------------------------

def test_a_rolebinding_to_a_clusterrole_grants_only_in_its_namespace() -> None:
    policy = Policy(role("secret-reader", {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
                    binding("b", "ClusterRole", "secret-reader", user("alice"), namespace="ns"))
    assert allowed(policy, ALICE, "GET", "/api/v1/namespaces/ns/secrets/s")
    assert not allowed(policy, ALICE, "GET", "/api/v1/namespaces/other/secrets/s")
    cluster_wide = Policy(role("secret-reader", {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
                          binding("b", "ClusterRole", "secret-reader", user("alice")))
    assert allowed(cluster_wide, ALICE, "GET", "/api/v1/namespaces/other/secrets/s")


def test_cluster_scoped_resources_need_a_clusterrolebinding() -> None:
    rule = {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"]}
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/etcds.opsmanager.dev"
    assert not allowed(Policy(role("crd", rule), binding("b", "ClusterRole", "crd", user("alice"), namespace="ns")),
                       ALICE, "GET", path)
    assert allowed(Policy(role("crd", rule), binding("b", "ClusterRole", "crd", user("alice"))), ALICE, "GET", path)


def test_group_and_service_account_subjects() -> None:
    read = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    path = "/api/v1/namespaces/ops/configmaps/c"
    by_group = Policy(role("r", read, namespace="ops"),
                      binding("b", "Role", "r", group("system:serviceaccounts:ops"), namespace="ops"))
    assert allowed(by_group, SA, "GET", path)
    assert not allowed(by_group, ALICE, "GET", path)
    # a ServiceAccount subject without a namespace means the binding's namespace
    local = Policy(role("r", read, namespace="ops"), binding("b", "Role", "r", sa("operator"), namespace="ops"))
    assert allowed(local, SA, "GET", path)
    elsewhere = Policy(role("r", read, namespace="ops"),
                       binding("b", "Role", "r", sa("operator", "other"), namespace="ops"))
    assert not allowed(elsewhere, SA, "GET", path)
    assert not allowed(local, rbac.UserInfo.service_account("other", "operator"), "GET", path)
    # a User subject never matches a ServiceAccount by its short name
    assert not allowed(Policy(role("r", read, namespace="ops"),
                              binding("b", "Role", "r", user("operator"), namespace="ops")), SA, "GET", path)


def test_a_binding_to_a_missing_role_grants_nothing_and_masters_bypass_everything() -> None:
    policy = Policy(binding("b", "Role", "missing", user("alice"), namespace="ns"),
                    binding("c", "ClusterRole", "missing", user("alice")))
    assert not allowed(policy, ALICE, "GET", "/api/v1/namespaces/ns/pods/p")
    admin = rbac.UserInfo("root", (rbac.MASTERS,))
    assert allowed(Policy(), admin, "DELETE", "/api/v1/namespaces/ns/pods")
    assert allowed(Policy(), admin, "POST", "/anything")


def test_the_reason_names_the_binding_and_role_that_allowed() -> None:
    policy = Policy(role("r", {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, namespace="ops"),
                    binding("b", "Role", "r", sa("operator"), namespace="ops"))
    decision = rbac.authorize(ask(SA, "GET", "/api/v1/namespaces/ops/pods/p"), policy)
    assert decision == rbac.Decision(
        True, 'RBAC: allowed by RoleBinding "b/ops" of Role "r" to ServiceAccount "ops/operator"')


def test_bootstrap_policy_opens_health_to_everyone_and_discovery_to_the_authenticated() -> None:
    anonymous, policy = rbac.UserInfo.anonymous(), Policy()
    for path in ("/version", "/healthz", "/livez", "/readyz"):
        assert allowed(policy, anonymous, "GET", path) and allowed(policy, SA, "GET", path)
    for path in ("/api", "/api/v1", "/apis", "/apis/apps/v1", "/openapi/v3"):
        assert allowed(policy, SA, "GET", path)
        assert not allowed(policy, anonymous, "GET", path)
    assert not allowed(policy, SA, "GET", "/metrics")
    assert allowed(policy, SA, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
    assert not allowed(policy, anonymous, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
    assert not allowed(policy, SA, "GET", "/api/v1/namespaces/ops/pods")


# -- wording and validation ---------------------------------------------------------------------------------------

def test_forbidden_messages_are_kube_apiservers() -> None:
    def message(method: str, path: str, **query: str) -> str:
        return rbac.forbidden_message(ask(SA, method, path, **query))
    who = 'User "system:serviceaccount:ops:operator"'
    assert message("GET", "/api/v1/namespaces/ops/secrets/s") == \
        f'secrets "s" is forbidden: {who} cannot get resource "secrets" in API group "" in the namespace "ops"'
    assert message("GET", "/apis/apps/v1/namespaces/ops/statefulsets") == \
        (f'statefulsets.apps is forbidden: {who} cannot list resource "statefulsets" in API group "apps" in the '
         f'namespace "ops"')
    assert message("POST", "/api/v1/namespaces/ops/pods/p/eviction") == \
        f'pods "p" is forbidden: {who} cannot create resource "pods/eviction" in API group "" in the namespace "ops"'
    assert message("GET", "/api/v1/nodes") == \
        f'nodes is forbidden: {who} cannot list resource "nodes" in API group "" at the cluster scope'
    assert message("GET", "/metrics") == f'forbidden: {who} cannot get path "/metrics"'


def test_validation_of_rbac_objects_names_the_field() -> None:
    def fields(kind: str, obj: Obj, old: Obj | None = None) -> list[str]:
        return [c["field"] for c in rbac.validate(kind, obj, old)]
    assert fields("Role", {"rules": [{"apiGroups": [""], "resources": ["pods"]}]}) == ["rules[0].verbs"]
    assert fields("Role", {"rules": [{"nonResourceURLs": ["/x"], "verbs": ["get"]}]}) == ["rules[0].nonResourceURLs"]
    assert fields("ClusterRole", {"rules": [{"nonResourceURLs": ["/x"], "verbs": ["get"]}]}) == []
    assert fields("ClusterRole", {"rules": [{"resources": ["pods"], "verbs": ["get"]}]}) == ["rules[0].apiGroups"]
    good = {"roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": "r"}, "subjects": [sa("x", "ns")]}
    assert fields("ClusterRoleBinding", good) == []
    assert fields("ClusterRoleBinding", {"roleRef": {"apiGroup": G, "kind": "Role", "name": "r"}}) == \
        ["roleRef.kind"]
    assert fields("ClusterRoleBinding", dict(good, subjects=[sa("x")])) == ["subjects[0].namespace"]
    assert fields("RoleBinding", dict(good, subjects=[sa("x")])) == []
    assert fields("RoleBinding", dict(good, subjects=[{"kind": "Robot", "name": "x"}])) == ["subjects[0].kind"]
    changed = dict(good, roleRef={"apiGroup": G, "kind": "ClusterRole", "name": "other"})
    assert fields("RoleBinding", changed, good) == ["roleRef"]
