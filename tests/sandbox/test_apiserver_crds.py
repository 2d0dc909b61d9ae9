"""Contract tests: CRDs installed like on a real cluster, and the cert-manager kinds the sandbox serves.

We test these aspects: ``apply_crd_files`` with the project's ``crds/`` both in-process and over HTTP;
re-applying a CRD updates its printer columns; deleting a CRD deletes its objects and then the kind itself
(404 and gone from discovery); cert-manager's Issuer, ClusterIssuer and Certificate with their status
subresources; a watch resumed with a resourceVersion the server never had gets 410.
"""

from __future__ import annotations

import copy
import json
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes.client as k
import pytest
from kubernetes.client.rest import ApiException

from opsmanager_sandbox.apiserver import apply_crd_files
from tests.fixtures.sandbox import WIDGET_CRD, SandboxAPI
from tests.polling import eventually

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CRD_NAMES = {"etcds.opsmanager.dev", "etcdopsrequests.ops.opsmanager.dev", "etcdversions.catalog.opsmanager.dev"}


def crd_names(apiserver: SandboxAPI) -> set[str]:
    crds = k.ApiextensionsV1Api(apiserver.api_client).list_custom_resource_definition().items
    return {c.metadata.name for c in crds}


def test_apply_crd_files_in_process_and_over_http(apiserver: SandboxAPI) -> None:
    names = apiserver.call(apply_crd_files, apiserver.server, [REPO / "crds"])
    assert set(names) == CRD_NAMES and CRD_NAMES <= crd_names(apiserver)
    again = apiserver.call(apply_crd_files, apiserver.url, [REPO / "crds"])  # replaces over HTTP
    assert set(again) == CRD_NAMES
    custom = k.CustomObjectsApi(apiserver.api_client)
    resources = {r.name for r in custom.get_api_resources("ops.opsmanager.dev", "v1alpha1").resources}
    assert {"etcdopsrequests", "etcdopsrequests/status"} <= resources


def test_reapplying_a_crd_changes_its_printer_columns(apiserver: SandboxAPI, widget_crd: dict[str, Any]) -> None:
    api = k.ApiextensionsV1Api(apiserver.api_client)
    current = api.read_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
    changed = copy.deepcopy(WIDGET_CRD)
    changed["metadata"]["resourceVersion"] = current.metadata.resource_version
    changed["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Owner", "type": "string", "jsonPath": ".spec.owner"}]
    api.replace_custom_resource_definition(WIDGET_CRD["metadata"]["name"], changed)
    k.CustomObjectsApi(apiserver.api_client).create_namespaced_custom_object(
        "test.opsmanager.dev", "v1", "default", "widgets",
        {"metadata": {"name": "w"}, "spec": {"size": 1, "owner": "me"}})
    _, _, table = apiserver.raw("GET", "/apis/test.opsmanager.dev/v1/namespaces/default/widgets",
                                headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Owner"]
    assert table["rows"][0]["cells"] == ["w", "me"]


def test_deleting_a_crd_deletes_its_objects_then_the_kind(apiserver: SandboxAPI,
                                                           widget_crd: dict[str, Any]) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    held = {"metadata": {"name": "held", "finalizers": ["test/hold"]}, "spec": {"size": 1}}
    custom.create_namespaced_custom_object("test.opsmanager.dev", "v1", "default", "widgets", held)
    api = k.ApiextensionsV1Api(apiserver.api_client)
    api.delete_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
    eventually(lambda: custom.get_namespaced_custom_object("test.opsmanager.dev", "v1", "default", "widgets",
                                                           "held")["metadata"].get("deletionTimestamp"))
    crd = api.read_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
    assert "Terminating" in [c.type for c in crd.status.conditions]
    custom.patch_namespaced_custom_object("test.opsmanager.dev", "v1", "default", "widgets", "held",
                                          {"metadata": {"finalizers": None}})
    eventually(lambda: WIDGET_CRD["metadata"]["name"] not in crd_names(apiserver))
    code, _, _ = apiserver.raw("GET", "/apis/test.opsmanager.dev/v1/namespaces/default/widgets")
    assert code == 404
    groups = [g.name for g in k.ApisApi(apiserver.api_client).get_api_versions().groups]
    assert "test.opsmanager.dev" not in groups


def test_cert_manager_kinds_are_served(apiserver: SandboxAPI) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    cm = ("cert-manager.io", "v1")
    custom.create_cluster_custom_object(*cm, "clusterissuers", {
        "apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": "selfsigned"},
        "spec": {"selfSigned": {}}})
    custom.create_namespaced_custom_object(*cm, "default", "issuers", {
        "apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "ca"},
        "spec": {"ca": {"secretName": "ca-key-pair"}}})
    cert = custom.create_namespaced_custom_object(*cm, "default", "certificates", {
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "etcd-server"},
        "spec": {"secretName": "etcd-server-tls", "commonName": "etcd", "dnsNames": ["etcd-0.etcd.default.svc"],
                 "ipAddresses": ["127.0.0.1"], "duration": "2160h", "renewBefore": "360h",
                 "usages": ["server auth", "client auth"], "privateKey": {"algorithm": "ECDSA", "size": 256},
                 "issuerRef": {"name": "ca", "kind": "Issuer", "group": "cert-manager.io"},
                 "subject": {"organizations": ["opsmanager"]}}})
    assert cert["spec"]["dnsNames"] == ["etcd-0.etcd.default.svc"] and "status" not in cert
    cert = custom.patch_namespaced_custom_object_status(*cm, "default", "certificates", "etcd-server", {
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                  "message": "Certificate is up to date and has not expired"}],
                   "revision": 1, "notBefore": "2026-01-01T00:00:00Z", "notAfter": "2026-04-01T00:00:00Z",
                   "renewalTime": "2026-03-17T00:00:00Z"}})
    assert cert["status"]["revision"] == 1 and cert["metadata"]["generation"] == 1
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(*cm, "default", "certificates", {
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "bad"},
            "spec": {"commonName": "x"}})
    assert info.value.status == 422
    assert "spec.secretName: Required value" in json.loads(info.value.body)["message"]
    _, _, table = apiserver.raw("GET", "/apis/cert-manager.io/v1/namespaces/default/certificates",
                                headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert table["rows"][0]["cells"][:3] == ["etcd-server", "True", "etcd-server-tls"]


def test_watch_from_a_version_the_server_never_had_is_gone(apiserver: SandboxAPI) -> None:
    with urllib.request.urlopen(f"{apiserver.url}/api/v1/namespaces/default/pods?watch=true"
                                f"&resourceVersion=999999", timeout=10) as response:
        events = [json.loads(line) for line in response]
    assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
