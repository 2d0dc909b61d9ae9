"""Request attributes and the RBAC authorizer of the sandbox API server, as pure logic (no HTTP, no store).

Two halves, both ported from kube-apiserver's behaviour rather than invented:

* :func:`request_attributes` turns a method, path and query into the attributes kube-apiserver's
  ``RequestInfoFactory`` computes: resource requests (``/api/v1/...``, ``/apis/<group>/<version>/...``) get a verb
  from the method (GET one → ``get``, GET a collection → ``list``, ``watch=true`` → ``watch``, POST → ``create``,
  PUT → ``update``, PATCH → ``patch``, DELETE one → ``delete``, DELETE a collection → ``deletecollection``), a
  namespace, resource, subresource and name; a ``list``/``watch`` with ``fieldSelector=metadata.name=X`` carries
  ``X`` as its name, so ``resourceNames`` can authorize it. Everything else (``/version``, ``/healthz``, ``/api``,
  ``/apis/<group>/<version>``) is a non-resource request whose verb is the lower-cased method.
* :func:`authorize` decides like the RBAC authorizer: the subject's ClusterRoleBindings grant everywhere, its
  RoleBindings (to a Role or a ClusterRole) only in their namespace; a rule matches on verb, API group,
  ``resource`` or ``resource/subresource`` (``*`` and ``*/subresource`` wildcards), ``resourceNames`` (a request
  without a name — create, list without the field selector, deletecollection — never matches a rule with
  names) or on ``nonResourceURLs`` (exact, ``*``, or a ``prefix*``). Members of ``system:masters`` bypass it.

The objects come through :class:`PolicySource` (the server adapts its store to it), so the tests feed plain
dicts. :func:`forbidden_message` is kube-apiserver's wording of a denial.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

Obj = dict[str, Any]

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SA_PREFIX = "system:serviceaccount:"
GROUP = "rbac.authorization.k8s.io"

_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_SEGMENT = re.compile(r"^[^/%]+$")


# What Kubernetes puts in user.extra for a Pod-bound ServiceAccount token (ServiceAccountTokenPodNodeInfo, 1.30+).
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"


@dataclasses.dataclass(frozen=True)
class UserInfo:
    """Who is asking: the authenticated (or anonymous) user and its groups."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, str], ...] = ()
    """Kubernetes' ``user.extra``, as (key, value) pairs: a Pod-bound ServiceAccount token carries
    ``authentication.kubernetes.io/pod-name`` and ``pod-uid`` (never used for authorization here)."""

    @classmethod
    def service_account(cls, namespace: str, name: str, uid: str = "",
                        extra: tuple[tuple[str, str], ...] = ()) -> UserInfo:
        return cls(f"{SA_PREFIX}{namespace}:{name}",
                   ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED), uid, extra)

    def extra_value(self, key: str) -> str:
        return next((v for k, v in self.extra if k == key), "")

    @classmethod
    def anonymous(cls) -> UserInfo:
        return cls(ANONYMOUS, (UNAUTHENTICATED,))


ADMIN = UserInfo("system:admin", (MASTERS, AUTHENTICATED))
"""The sandbox's administrator: the admin kubeconfig's token and in-process writes."""


@dataclasses.dataclass(frozen=True)
class Attributes:
    """What a request asks for, as the authorizer sees it (kube-apiserver's ``authorizer.Attributes``)."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        """``resource`` or ``resource/subresource``: how RBAC rules and audit records name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class PolicySource(Protocol):
    """The RBAC objects the authorizer reads (plain ``rbac.authorization.k8s.io/v1`` dicts)."""

    def cluster_role(self, name: str) -> Obj | None: ...

    def role(self, namespace: str, name: str) -> Obj | None: ...

    def cluster_role_bindings(self) -> Iterable[Obj]: ...

    def role_bindings(self, namespace: str) -> Iterable[Obj]: ...


# -- request attributes ------------------------------------------------------------------------------------------

def _exact_name(field_selector: str | None) -> str:
    """``X`` of a ``metadata.name=X`` (or ``==``) term, as kube-apiserver's ``RequiresExactMatch``; else ""."""
    for term in (field_selector or "").split(","):
        m = re.fullmatch(r"\s*metadata\.name\s*(==|=)\s*(.*?)\s*", term)
        if m and _SEGMENT.match(m.group(2)) and m.group(2) not in (".", ".."):
            return m.group(2)
    return ""


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The attributes kube-apiserver's RequestInfoFactory computes for ``method path?query``."""
    path = path or "/"
    parts = [p for p in path.strip("/").split("/") if p]
    non_resource = Attributes(user, method.lower(), False, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}.get(method.upper(), "")
    if parts and parts[0] == "watch":  # the deprecated /watch/ prefix
        verb, parts = "watch", parts[1:]
    namespace = ""
    if parts and parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0] if parts else ""
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 and verb != "watch" else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("true", "1", "True") else "list"
    if not name and verb in ("list", "watch"):
        name = _exact_name(query.get("fieldSelector"))
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, verb, True, path=path, namespace=namespace, api_group=group, api_version=version,
                      resource=resource, subresource=subresource, name=name)


# -- rules -------------------------------------------------------------------------------------------------------

def _verb_matches(rule: Obj, verb: str) -> bool:
    return any(v in ("*", verb) for v in rule.get("verbs") or ())


def _group_matches(rule: Obj, group: str) -> bool:
    return any(g in ("*", group) for g in rule.get("apiGroups") or ())


def _resource_matches(rule: Obj, combined: str, subresource: str) -> bool:
    for resource in rule.get("resources") or ():
        if resource in ("*", combined):
            return True
        if subresource and resource == f"*/{subresource}":
            return True
    return False


def _name_matches(rule: Obj, name: str) -> bool:
    names = rule.get("resourceNames") or ()
    return not names or name in names


def _url_matches(rule: Obj, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or ():
        if url in ("*", path) or (url.endswith("*") and path.startswith(url.rstrip("*"))):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Obj) -> bool:
    """One PolicyRule against one request (kube-apiserver's ``RuleAllows``)."""
    if not _verb_matches(rule, attrs.verb):
        return False
    if not attrs.resource_request:
        return _url_matches(rule, attrs.path)
    return (_group_matches(rule, attrs.api_group)
            and _resource_matches(rule, attrs.combined_resource, attrs.subresource)
            and _name_matches(rule, attrs.name))


def _applies_to(user: UserInfo, subject: Obj, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(user.name == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == f"{SA_PREFIX}{namespace}:{name}"
    return False


def _binds(user: UserInfo, binding: Obj) -> bool:
    namespace = (binding.get("metadata") or {}).get("namespace") or ""
    return any(_applies_to(user, s, namespace) for s in binding.get("subjects") or ())


def _role_of(source: PolicySource, binding: Obj) -> tuple[Obj | None, str]:
    ref = binding.get("roleRef") or {}
    namespace = (binding.get("metadata") or {}).get("namespace") or ""
    if ref.get("kind") == "ClusterRole":
        return source.cluster_role(ref.get("name", "")), f'ClusterRole "{ref.get("name")}"'
    if ref.get("kind") == "Role" and namespace:
        return source.role(namespace, ref.get("name", "")), f'Role "{ref.get("name")}"'
    return None, ""


def authorize(attrs: Attributes, source: PolicySource) -> Decision:
    """Allow when a rule of a role bound to the user (or one of its groups) matches; ``reason`` names it."""
    if MASTERS in attrs.user.groups:
        return Decision(True, f"{MASTERS} bypasses authorization")
    scopes: list[tuple[str, Iterable[Obj]]] = [("ClusterRoleBinding", source.cluster_role_bindings())]
    if attrs.namespace:
        scopes.append(("RoleBinding", source.role_bindings(attrs.namespace)))
    for binding_kind, bindings in scopes:
        for binding in bindings:
            if not _binds(attrs.user, binding):
                continue
            role, role_name = _role_of(source, binding)
            if role is None:
                continue
            for rule in role.get("rules") or ():
                if rule_allows(attrs, rule):
                    where = (binding.get("metadata") or {}).get("namespace")
                    scope = f"/{where}" if where else ""
                    return Decision(True, f'RBAC: allowed by {binding_kind} "{binding["metadata"]["name"]}{scope}" '
                                          f'of {role_name} to {_who(attrs.user)}')
    return Decision(False, "")


def rules_for(user: UserInfo, namespace: str, source: PolicySource) -> list[Obj]:
    """Every rule granted to ``user`` in ``namespace`` (cluster-wide ones included): a SelfSubjectRulesReview."""
    bindings = list(source.cluster_role_bindings())
    if namespace:
        bindings += list(source.role_bindings(namespace))
    rules: list[Obj] = []
    for binding in bindings:
        if _binds(user, binding):
            role, _ = _role_of(source, binding)
            rules += [dict(rule) for rule in (role or {}).get("rules") or () if isinstance(rule, dict)]
    return rules


def _who(user: UserInfo) -> str:
    if user.name.startswith(SA_PREFIX):
        return f'ServiceAccount "{user.name[len(SA_PREFIX):].replace(":", "/", 1)}"'
    return f'User "{user.name}"'


# -- wording -----------------------------------------------------------------------------------------------------

def forbidden_message(attrs: Attributes, reason: str = "") -> str:
    """kube-apiserver's 403 message, e.g. ``pods "p" is forbidden: User "u" cannot get resource "pods" in API
    group "" in the namespace "ns"``; ``forbidden: User "u" cannot get path "/api"`` for a non-resource URL."""
    who = attrs.user.name
    if not attrs.resource_request:
        why = f'User "{who}" cannot {attrs.verb} path "{attrs.path}"'
    elif attrs.namespace:
        why = (f'User "{who}" cannot {attrs.verb} resource "{attrs.combined_resource}" in API group '
               f'"{attrs.api_group}" in the namespace "{attrs.namespace}"')
    else:
        why = (f'User "{who}" cannot {attrs.verb} resource "{attrs.combined_resource}" in API group '
               f'"{attrs.api_group}" at the cluster scope')
    if reason:
        why = f"{why}: {reason}"
    if not attrs.resource_request:
        return f"forbidden: {why}"
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    if attrs.name:
        return f'{qualified} "{attrs.name}" is forbidden: {why}'
    return f"{qualified} is forbidden: {why}"


# -- validation --------------------------------------------------------------------------------------------------

def validate(kind: str, obj: Obj, old: Obj | None) -> list[dict[str, str]]:
    """Field causes for a Role/ClusterRole/RoleBinding/ClusterRoleBinding, as the real server's validation."""
    causes: list[dict[str, str]] = []

    def cause(reason: str, field: str, message: str) -> None:
        causes.append({"reason": reason, "field": field, "message": message})

    if kind in ("Role", "ClusterRole"):
        for i, rule in enumerate(obj.get("rules") or []):
            at = f"rules[{i}]"
            if not isinstance(rule, dict):
                cause("FieldValueInvalid", at, "Invalid value: must be an object")
                continue
            if not rule.get("verbs"):
                cause("FieldValueRequired", f"{at}.verbs", "Required value: verbs must contain at least one value")
            if rule.get("nonResourceURLs"):
                if kind == "Role":
                    cause("FieldValueInvalid", f"{at}.nonResourceURLs",
                          f"Invalid value: {rule['nonResourceURLs']}: namespaced rules cannot apply to non-resource "
                          f"URLs")
                if rule.get("resources") or rule.get("apiGroups"):
                    cause("FieldValueInvalid", f"{at}.nonResourceURLs",
                          f"Invalid value: {rule['nonResourceURLs']}: rules cannot apply to both regular resources "
                          f"and non-resource URLs")
            else:
                if not rule.get("resources"):
                    cause("FieldValueRequired", f"{at}.resources",
                          "Required value: resource rules must supply at least one resource")
                if rule.get("apiGroups") is None or rule.get("apiGroups") == []:
                    cause("FieldValueRequired", f"{at}.apiGroups",
                          "Required value: resource rules must supply at least one api group")
        return causes
    ref = obj.get("roleRef") or {}
    allowed = ("Role", "ClusterRole") if kind == "RoleBinding" else ("ClusterRole",)
    if ref.get("apiGroup") != GROUP:
        cause("FieldValueNotSupported", "roleRef.apiGroup",
              f'Unsupported value: "{ref.get("apiGroup", "")}": supported values: "{GROUP}"')
    if ref.get("kind") not in allowed:
        cause("FieldValueNotSupported", "roleRef.kind",
              f'Unsupported value: "{ref.get("kind", "")}": supported values: '
              + ", ".join(f'"{k}"' for k in allowed))
    if not ref.get("name"):
        cause("FieldValueRequired", "roleRef.name", "Required value")
    if old is not None and (old.get("roleRef") or {}) != ref:
        cause("FieldValueInvalid", "roleRef", "Invalid value: cannot change roleRef")
    for i, subject in enumerate(obj.get("subjects") or []):
        at = f"subjects[{i}]"
        if not isinstance(subject, dict):
            cause("FieldValueInvalid", at, "Invalid value: must be an object")
            continue
        if subject.get("kind") not in ("User", "Group", "ServiceAccount"):
            cause("FieldValueNotSupported", f"{at}.kind",
                  f'Unsupported value: "{subject.get("kind", "")}": supported values: "Group", "ServiceAccount", '
                  f'"User"')
        if not subject.get("name"):
            cause("FieldValueRequired", f"{at}.name", "Required value")
        if subject.get("kind") == "ServiceAccount":
            if subject.get("apiGroup"):
                cause("FieldValueNotSupported", f"{at}.apiGroup",
                      f'Unsupported value: "{subject["apiGroup"]}": supported values: ""')
            if kind == "ClusterRoleBinding" and not subject.get("namespace"):
                cause("FieldValueRequired", f"{at}.namespace", "Required value")
        elif subject.get("kind") in ("User", "Group") and subject.get("apiGroup") != GROUP:
            cause("FieldValueNotSupported", f"{at}.apiGroup",
                  f'Unsupported value: "{subject.get("apiGroup", "")}": supported values: "{GROUP}"')
    return causes


# -- the bootstrap policy ----------------------------------------------------------------------------------------

def _cluster_role(name: str, rules: list[Obj]) -> Obj:
    return {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "rules": rules}


def _cluster_binding(name: str, role: str, groups: list[str]) -> Obj:
    return {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups]}


def bootstrap_policy() -> list[Obj]:
    """The default ClusterRoles and bindings of a real cluster that the sandbox needs: ``cluster-admin``
    (bound to ``system:masters``), ``system:discovery`` (authenticated users read discovery and OpenAPI),
    ``system:public-info-viewer`` (everyone, anonymous included, reads ``/version`` and the health checks)
    and ``system:basic-user`` (authenticated users ask what they may do: ``kubectl auth can-i``, ``whoami``)."""
    return [
        _cluster_role("cluster-admin", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                                        {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        _cluster_binding("cluster-admin", "cluster-admin", [MASTERS]),
        _cluster_role("system:discovery", [{"nonResourceURLs": [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
            "/version", "/version/"], "verbs": ["get"]}]),
        _cluster_binding("system:discovery", "system:discovery", [AUTHENTICATED]),
        _cluster_role("system:public-info-viewer", [{"nonResourceURLs": [
            "/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        _cluster_binding("system:public-info-viewer", "system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]),
        _cluster_role("system:basic-user", [
            {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews",
                                                                  "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
        _cluster_binding("system:basic-user", "system:basic-user", [AUTHENTICATED]),
    ]
