"""Discovery documents (legacy and aggregated) and the minimal OpenAPI v3 kubectl needs.

Legacy: ``/api`` (APIVersions), ``/apis`` (APIGroupList), ``/apis/<g>`` (APIGroup), ``/api/v1`` and
``/apis/<g>/<v>`` (APIResourceList with subresources). Aggregated (``apidiscovery.k8s.io/v2``
``APIGroupDiscoveryList``) is what kubectl 1.32 asks for first, saving it a request per group version.

OpenAPI v3: kubectl's ``--validate=strict`` (the default) asks the server whether it supports the
``fieldValidation`` query parameter by looking for it on each kind's PATCH operation in
``/openapi/v3/<gv>``; when it is there, kubectl leaves validation to the server instead of downloading
``/openapi/v2`` to validate client-side. So each group version document lists the PATCH operations with
``x-kubernetes-group-version-kind`` and that parameter, and schemas only for custom resources (from their
CRDs). Strategic merge is not advertised, so ``kubectl apply`` computes patches from its compiled-in types.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from opsmanager_sandbox.apiserver import resources

Obj = dict[str, Any]
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

_SUBRESOURCE_KINDS = {
    "status": None,
    "scale": ("autoscaling", "v1", "Scale"),
    "eviction": ("policy", "v1", "Eviction"),
    "binding": ("", "v1", "Binding"),
    "finalize": None,
    "log": ("", "v1", "Pod"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
    "resize": None,
}
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"],
                      "eviction": ["create"], "binding": ["create"], "finalize": ["update"],
                      "log": ["get"], "token": ["create"], "resize": ["get", "patch", "update"]}


def _gv(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def api_versions(server_address: str) -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group(name: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": _gv(name, v), "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(registry: resources.Registry) -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, vs) for g, vs in registry.groups().items() if g]}


def api_group(registry: resources.Registry, group: str) -> Obj | None:
    versions = registry.groups().get(group)
    if not versions or not group:
        return None
    return dict(_group(group, versions), kind="APIGroup", apiVersion="v1")


def resource_list(registry: resources.Registry, group: str, version: str) -> Obj | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    out = []
    for rt in sorted(types, key=lambda r: r.plural):
        entry: Obj = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                      "kind": rt.kind, "verbs": list(rt.verbs)}
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        out.append(entry)
        for sub in sorted(rt.subresources):
            target = _SUBRESOURCE_KINDS.get(sub)
            sub_entry: Obj = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                              "kind": target[2] if target else rt.kind, "verbs": _SUBRESOURCE_VERBS[sub]}
            if target:
                sub_entry["group"], sub_entry["version"] = target[0], target[1]
            out.append(sub_entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": _gv(group, version), "resources": out}


def _aggregated_resource(rt: resources.ResourceType) -> Obj:
    entry: Obj = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subs = []
    for sub in sorted(rt.subresources):
        target = _SUBRESOURCE_KINDS.get(sub) or (rt.group, rt.version, rt.kind)
        subs.append({"subresource": sub,
                     "responseKind": {"group": target[0], "version": target[1], "kind": target[2]},
                     "verbs": _SUBRESOURCE_VERBS[sub]})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(registry: resources.Registry, *, core: bool) -> Obj:
    items = []
    for group, versions in registry.groups().items():
        if (group == "") != core:
            continue
        items.append({
            "metadata": {"name": group, "creationTimestamp": None},
            "versions": [{"version": v,
                          "resources": [_aggregated_resource(rt) for rt in
                                        sorted(registry.in_group_version(group, v), key=lambda r: r.plural)],
                          "freshness": "Current"} for v in versions],
        })
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": items}


def _openapi_gv_document(registry: resources.Registry, group: str, version: str) -> Obj:
    field_validation = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True},
                        "description": "fieldValidation instructs the server on how to handle objects in the "
                                       "request containing unknown or duplicate fields."}
    paths: Obj = {}
    schemas: Obj = {}
    prefix = f"/apis/{group}/{version}" if group else "/api/v1"
    for rt in registry.in_group_version(group, version):
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        item = f"{prefix}/namespaces/{{namespace}}/{rt.plural}/{{name}}" if rt.namespaced \
            else f"{prefix}/{rt.plural}/{{name}}"
        operation = {
            "operationId": f"patch{rt.kind}",
            "parameters": [field_validation],
            "requestBody": {"content": {"application/json-patch+json": {"schema": {"type": "object"}},
                                        "application/merge-patch+json": {"schema": {"type": "object"}}}},
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
        }
        paths[item] = {"patch": operation}
        if rt.custom and rt.schema:
            name = f"{'.'.join(reversed(rt.group.split('.')))}.{rt.version}.{rt.kind}"
            schemas[name] = dict(rt.schema, **{"x-kubernetes-group-version-kind": [gvk]})
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (opsmanager sandbox)", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": schemas}}


def openapi_v3_root(registry: resources.Registry) -> Obj:
    paths = {}
    for group, versions in registry.groups().items():
        for v in versions:
            path = f"apis/{group}/{v}" if group else "api/v1"
            digest = hashlib.sha256(json.dumps(_openapi_gv_document(registry, group, v), sort_keys=True)
                                    .encode()).hexdigest()[:32].upper()
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def openapi_v3_document(registry: resources.Registry, path: str) -> Obj | None:
    parts = path.strip("/").split("/")
    if parts == ["api", "v1"]:
        return _openapi_gv_document(registry, "", "v1")
    if len(parts) == 3 and parts[0] == "apis" and registry.in_group_version(parts[1], parts[2]):
        return _openapi_gv_document(registry, parts[1], parts[2])
    return None
