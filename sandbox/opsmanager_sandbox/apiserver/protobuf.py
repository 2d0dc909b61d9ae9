"""Just enough Kubernetes protobuf to read what ``kubectl create namespace|secret|configmap|serviceaccount|role|
clusterrole|rolebinding|clusterrolebinding|token`` and ``kubectl auth can-i|whoami`` send.

kubectl's typed clients write built-in objects as ``application/vnd.kubernetes.protobuf`` (``k8s\\0`` +
``runtime.Unknown``), and a 415 does not make it retry with JSON. Object bodies of other kinds are answered
with 415 UnsupportedMediaType. The field numbers are those of k8s.io/api and apimachinery's generated.proto.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"

Schema = dict[int, tuple[str, str]]

_OWNER_REFERENCE: Schema = {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
                            5: ("apiVersion", "string"), 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}
_OBJECT_META: Schema = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                        5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
                        11: ("labels", "map:string"), 12: ("annotations", "map:string"),
                        13: ("ownerReferences", "list:ownerReference"), 14: ("finalizers", "list:string")}
_SCHEMAS: dict[str, Schema] = {
    "ownerReference": _OWNER_REFERENCE,
    "meta": _OBJECT_META,
    "namespaceSpec": {1: ("finalizers", "list:string")},
    "Namespace": {1: ("metadata", "msg:meta"), 2: ("spec", "msg:namespaceSpec")},
    "Secret": {1: ("metadata", "msg:meta"), 2: ("data", "map:bytes"), 3: ("type", "string"),
               4: ("stringData", "map:string"), 5: ("immutable", "bool")},
    "ConfigMap": {1: ("metadata", "msg:meta"), 2: ("data", "map:string"), 3: ("binaryData", "map:bytes"),
                  4: ("immutable", "bool")},
    "ServiceAccount": {1: ("metadata", "msg:meta"), 4: ("automountServiceAccountToken", "bool")},
    # rbac.authorization.k8s.io/v1
    "policyRule": {1: ("verbs", "list:string"), 2: ("apiGroups", "list:string"), 3: ("resources", "list:string"),
                   4: ("resourceNames", "list:string"), 5: ("nonResourceURLs", "list:string")},
    "subject": {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"),
                4: ("namespace", "string")},
    "roleRef": {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")},
    "Role": {1: ("metadata", "msg:meta"), 2: ("rules", "list:policyRule")},
    "ClusterRole": {1: ("metadata", "msg:meta"), 2: ("rules", "list:policyRule")},
    "RoleBinding": {1: ("metadata", "msg:meta"), 2: ("subjects", "list:subject"), 3: ("roleRef", "msg:roleRef")},
    "ClusterRoleBinding": {1: ("metadata", "msg:meta"), 2: ("subjects", "list:subject"),
                           3: ("roleRef", "msg:roleRef")},
    # authentication.k8s.io/v1
    "boundObjectRef": {1: ("kind", "string"), 2: ("apiVersion", "string"), 3: ("name", "string"),
                       4: ("uid", "string")},
    "tokenRequestSpec": {1: ("audiences", "list:string"), 4: ("expirationSeconds", "int"),
                         3: ("boundObjectRef", "msg:boundObjectRef")},
    "TokenRequest": {1: ("metadata", "msg:meta"), 2: ("spec", "msg:tokenRequestSpec")},
    "SelfSubjectReview": {1: ("metadata", "msg:meta")},
    # authorization.k8s.io/v1
    "resourceAttributes": {1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"),
                           4: ("version", "string"), 5: ("resource", "string"), 6: ("subresource", "string"),
                           7: ("name", "string")},
    "nonResourceAttributes": {1: ("path", "string"), 2: ("verb", "string")},
    "selfSubjectAccessReviewSpec": {1: ("resourceAttributes", "msg:resourceAttributes"),
                                    2: ("nonResourceAttributes", "msg:nonResourceAttributes")},
    "subjectAccessReviewSpec": {1: ("resourceAttributes", "msg:resourceAttributes"),
                                2: ("nonResourceAttributes", "msg:nonResourceAttributes"), 3: ("user", "string"),
                                4: ("groups", "list:string"), 6: ("uid", "string")},
    "SelfSubjectAccessReview": {1: ("metadata", "msg:meta"), 2: ("spec", "msg:selfSubjectAccessReviewSpec")},
    "SubjectAccessReview": {1: ("metadata", "msg:meta"), 2: ("spec", "msg:subjectAccessReviewSpec")},
    "LocalSubjectAccessReview": {1: ("metadata", "msg:meta"), 2: ("spec", "msg:subjectAccessReviewSpec")},
    "SelfSubjectRulesReview": {1: ("metadata", "msg:meta"), 2: ("spec", "msg:rulesReviewSpec")},
    "rulesReviewSpec": {1: ("namespace", "string")},
}
_RBAC, _AUTHN, _AUTHZ = "rbac.authorization.k8s.io/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1"
KINDS = {("v1", "Namespace"), ("v1", "Secret"), ("v1", "ConfigMap"), ("v1", "ServiceAccount"),
         (_RBAC, "Role"), (_RBAC, "ClusterRole"), (_RBAC, "RoleBinding"), (_RBAC, "ClusterRoleBinding"),
         (_AUTHN, "TokenRequest"), (_AUTHN, "SelfSubjectReview"), (_AUTHZ, "SelfSubjectAccessReview"),
         (_AUTHZ, "SubjectAccessReview"), (_AUTHZ, "LocalSubjectAccessReview"), (_AUTHZ, "SelfSubjectRulesReview")}


class Unsupported(Exception):
    """Not a body this decoder understands."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise Unsupported("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    out = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise Unsupported(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, _, value in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if kind in ("string", "int", "bool") and not value:
            continue  # Go writes zero values of optional scalars; JSON would omit them
        if kind == "string":
            obj[name] = value.decode()
        elif kind == "int":
            obj[name] = value
        elif kind == "bool":
            obj[name] = bool(value)
        elif kind.startswith("msg:"):
            obj[name] = _message(value, _SCHEMAS[kind[4:]])
        elif kind.startswith("map:"):
            entry = {n: v for n, _, v in _fields(value)}
            key = entry.get(1, b"").decode()
            raw = entry.get(2, b"")
            obj.setdefault(name, {})[key] = raw.decode() if kind == "map:string" else base64.b64encode(raw).decode()
        elif kind == "list:string":
            obj.setdefault(name, []).append(value.decode())
        elif kind.startswith("list:"):
            obj.setdefault(name, []).append(_message(value, _SCHEMAS[kind[5:]]))
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object of one of :data:`KINDS`; Unsupported otherwise."""
    if not body.startswith(MAGIC):
        raise Unsupported("no k8s protobuf envelope")
    envelope = {n: v for n, _, v in _fields(body[len(MAGIC):])}
    type_meta = {n: v.decode() for n, _, v in _fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    if (api_version, kind) not in KINDS:
        raise Unsupported(f"{api_version}/{kind}")
    obj = _message(envelope.get(2, b""), _SCHEMAS[kind])
    return {"apiVersion": api_version, "kind": kind, **obj}

