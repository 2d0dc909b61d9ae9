"""Proving the bundle's RBAC rule by rule: what a ServiceAccount did (kube-apiserver's audit log), replayed with one
rule removed from the live ClusterRole, must be refused (403). Used by the install module (every rule the
operator's and the webhook's traffic there exercises) and by the CSI module (the rules only real volumes
exercise, with the operator running as the bundle's ServiceAccount)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import yaml

from e2e import scenario
from opsmanager import kube
from tests.polling import aeventually

BUNDLE = Path(__file__).resolve().parents[2] / "deploy"
SYSTEM_NAMESPACE = "opsmanager-system"
OPERATOR_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:opsmanager-operator"
WEBHOOK_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:opsmanager-webhook"
# The roles the bundle grants, and whose ServiceAccount uses them.
ROLES = {"opsmanager-operator-cluster": OPERATOR_USER, "opsmanager-operator": OPERATOR_USER,
         "opsmanager-webhook": WEBHOOK_USER}
# Rules only a CSI volume exercises: the kubelet's stats (a VolumeExpansion's check of each file system) and a
# PersistentVolume's reclaim policy (a StorageMigration with oldPVReclaimPolicy: Retain). The install module's
# node agent volumes neither grow nor migrate; the CSI module proves these two.
CSI_ONLY = {("opsmanager-operator-cluster", "nodes/proxy"), ("opsmanager-operator", "persistentvolumes")}
VERSIONS = {"": "v1", "apps": "v1", "policy": "v1", "cert-manager.io": "v1", "opsmanager.dev": "v1alpha1",
            "ops.opsmanager.dev": "v1alpha1", "apiextensions.k8s.io": "v1", "kopf.dev": "v1",
            "events.k8s.io": "v1", "coordination.k8s.io": "v1", "catalog.opsmanager.dev": "v1alpha1",
            "storage.k8s.io": "v1"}
METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
           "delete": "DELETE", "deletecollection": "DELETE"}
CLUSTER_ROLE = "rbac.authorization.k8s.io/v1"


@dataclasses.dataclass(frozen=True)
class Call:
    verb: str
    api_group: str
    resource: str
    namespace: str
    name: str

    def path(self) -> str:
        version = VERSIONS[self.api_group]
        base = f"/api/{version}" if not self.api_group else f"/apis/{self.api_group}/{version}"
        resource, _, sub = self.resource.partition("/")
        path = base + (f"/namespaces/{self.namespace}" if self.namespace else "") + f"/{resource}"
        if self.name and self.verb not in ("list", "watch"):  # a list/watch by name is a fieldSelector
            path += f"/{self.name}"
        return path + (f"/{sub}" if sub else "")


def granted_by(rule: dict[str, Any], call: Call) -> bool:
    return call.api_group in rule["apiGroups"] and call.resource in rule["resources"] and call.verb in rule["verbs"]


def bundle_docs(*paths: str) -> list[dict[str, Any]]:
    """The objects of the bundle's ``base/<path>`` files (default: the operator's and the webhook's rbac.yaml)."""
    return [d for path in (paths or ("operator/rbac.yaml", "webhook/rbac.yaml"))
            for d in yaml.safe_load_all((BUNDLE / "base" / path).read_text()) if d]


def bundle_roles() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in bundle_docs() if d["kind"] == "ClusterRole"}


def calls_made(sandbox: Any, user: str) -> list[Call]:
    """What ``user`` did, by the audit log: answered, or 404 (authorized: the object did not exist)."""
    return [Call(r.verb, r.api_group, r.resource, r.namespace, r.name)
            for r in sandbox.audit.records(user=user) if r.code < 400 or r.code == 404]


async def refused(client: kube.Kube, call: Call) -> bool:
    query: dict[str, str] = {"watch": "true", "timeoutSeconds": "1"} if call.verb == "watch" else {}
    if call.name and call.verb in ("list", "watch"):
        query["fieldSelector"] = f"metadata.name={call.name}"
    body = {} if METHODS[call.verb] in ("POST", "PUT", "PATCH") else None
    content_type = "application/merge-patch+json" if call.verb == "patch" else "application/json"
    try:
        await client.request(METHODS[call.verb], call.path(), query=query, body=body, content_type=content_type,
                             timeout=10)
    except kube.Forbidden:
        return True
    except kube.KubeError:
        return False
    return False


async def authorizer_sees(client: kube.Kube, calls: Collection[Call], *, allowed: bool) -> None:
    """Poll the ServiceAccount's own SelfSubjectAccessReviews until the authorizer answers ``allowed`` for every
    call: kube-apiserver's RBAC authorizer reads roles from an informer, so an edit takes effect a moment later."""
    async def settled() -> bool:
        for call in calls:
            resource, _, sub = call.resource.partition("/")
            review = await client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body={
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": call.namespace, "verb": call.verb,
                                                "group": call.api_group, "resource": resource,
                                                "subresource": sub, "name": call.name}}})
            if bool(review.get("status", {}).get("allowed")) != allowed:
                return False
        return True
    await aeventually(settled, timeout=20, what=f"the authorizer to answer allowed={allowed} for "
                                                f"{sorted((c.verb, c.resource) for c in calls)}")


async def refused_without(sc: scenario.Scenario, client: kube.Kube, user: str, role_name: str, index: int,
                          calls: Iterable[Call]) -> None:
    """Remove rule ``index`` from the live ClusterRole ``role_name``, replay one of ``calls`` per verb as ``user``
    (``client`` holds its token), put the rule back; assert each replay was refused with 403 (by the client and
    by the audit log)."""
    live = await sc.k.get(CLUSTER_ROLE, "ClusterRole", None, role_name)
    assert live is not None
    rule = live["rules"][index]
    without = dict(live, rules=[r for j, r in enumerate(live["rules"]) if j != index])
    samples = {c.verb: c for c in sorted(calls, key=lambda c: (c.verb, c.name))}
    await sc.k.replace(without)
    since = time.monotonic()
    try:
        await authorizer_sees(client, samples.values(), allowed=False)
        results = {verb: await refused(client, c) for verb, c in samples.items()}
    finally:
        restored = await sc.k.get(CLUSTER_ROLE, "ClusterRole", None, role_name)
        assert restored is not None
        await sc.k.replace(dict(restored, rules=live["rules"]))
        await authorizer_sees(client, samples.values(), allowed=True)
    assert all(results.values()), (role_name, rule, results)
    denied = {(r.verb, r.resource) for r in sc.sandbox.audit.records(user=user, since=since) if r.code == 403}
    assert {(c.verb, c.resource) for c in samples.values()} <= denied, (rule, denied)


async def service_account_client(sc: scenario.Scenario, user: str) -> kube.Kube:
    """A client holding a token the TokenRequest API issued for ``user``'s ServiceAccount."""
    namespace, name = user.split(":")[2:4]
    token = await sc.sandbox.service_account_token(namespace, name)
    return kube.Kube.for_url(sc.sandbox.url, token=token, ca_path=str(sc.sandbox.ca_file or "") or None)
