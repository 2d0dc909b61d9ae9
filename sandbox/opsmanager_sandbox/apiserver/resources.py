"""The table of resource types the sandbox serves: built-in kinds plus kinds registered from CRDs.

A :class:`ResourceType` is one (group, version, plural) the server answers for; it carries what the generic
request handling needs to behave like the real server for that kind: scope, names for discovery and kubectl
short names, which subresources exist, whether ``metadata.generation`` is kept, printer columns and the
structural schema (for CRs). Objects of all versions of one kind share one storage key ``(group, plural)``
(core ``events`` and ``events.k8s.io`` events share storage too, as on a real cluster).

The :class:`Registry` is mutated only by CRD writes (``register_crd``/``unregister_crd``), which is how a
kind appears in discovery the moment its CRD is created, as on a real cluster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclasses.dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    has_generation: bool = False
    custom: bool = False
    printer_columns: tuple[dict[str, Any], ...] = ()
    schema: dict[str, Any] | None = None
    scale: dict[str, Any] | None = None  # CRD subresources.scale: specReplicasPath, statusReplicasPath, ...
    storage: tuple[str, str] | None = None  # override of the storage key (events.k8s.io -> core events)
    crd_name: str | None = None
    verbs: tuple[str, ...] = VERBS  # a review kind (SelfSubjectAccessReview...) is create-only and never stored

    @property
    def is_review(self) -> bool:
        return self.verbs == ("create",)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        return self.storage or (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


def _core(kind: str, plural: str, namespaced: bool = True, short: tuple[str, ...] = (),
          sub: tuple[str, ...] = (), cats: tuple[str, ...] = (), gen: bool = False) -> ResourceType:
    return ResourceType("", "v1", kind, plural, kind.lower(), namespaced, short, cats, frozenset(sub), gen)


def _grouped(group: str, version: str, kind: str, plural: str, namespaced: bool = True,
             short: tuple[str, ...] = (), sub: tuple[str, ...] = (), cats: tuple[str, ...] = (),
             gen: bool = False, storage: tuple[str, str] | None = None) -> ResourceType:
    return ResourceType(group, version, kind, plural, kind.lower(), namespaced, short, cats, frozenset(sub), gen,
                        storage=storage)


def _review(group: str, kind: str, plural: str, namespaced: bool = False) -> ResourceType:
    return ResourceType(group, "v1", kind, plural, kind.lower(), namespaced, verbs=("create",))


RBAC_GROUP = "rbac.authorization.k8s.io"


BUILTINS: tuple[ResourceType, ...] = (
    _core("Namespace", "namespaces", namespaced=False, short=("ns",), sub=("status", "finalize")),
    _core("Secret", "secrets"),
    _core("ConfigMap", "configmaps", short=("cm",)),
    _core("Service", "services", short=("svc",), sub=("status",), cats=("all",)),
    _core("Pod", "pods", short=("po",), sub=("status", "eviction", "binding", "log", "resize"), cats=("all",)),
    _core("Event", "events", short=("ev",)),
    _core("PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), sub=("status",)),
    _core("ServiceAccount", "serviceaccounts", short=("sa",), sub=("token",)),
    _grouped("apps", "v1", "StatefulSet", "statefulsets", short=("sts",), sub=("status", "scale"), cats=("all",),
             gen=True),
    _grouped("apps", "v1", "ControllerRevision", "controllerrevisions"),
    _grouped("apps", "v1", "Deployment", "deployments", short=("deploy",), sub=("status", "scale"), cats=("all",),
             gen=True),
    _grouped("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",), sub=("status",),
             gen=True),
    _grouped("coordination.k8s.io", "v1", "Lease", "leases"),
    _grouped("storage.k8s.io", "v1", "StorageClass", "storageclasses", namespaced=False, short=("sc",)),
    _grouped("events.k8s.io", "v1", "Event", "events", short=("ev",), storage=("", "events")),
    _grouped("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
             namespaced=False, short=("crd", "crds"), sub=("status",), cats=("api-extensions",), gen=True),
    _grouped("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
             "validatingwebhookconfigurations", namespaced=False, cats=("api-extensions",), gen=True),
    _grouped("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
             "mutatingwebhookconfigurations", namespaced=False, cats=("api-extensions",), gen=True),
    _grouped(RBAC_GROUP, "v1", "Role", "roles"),
    _grouped(RBAC_GROUP, "v1", "RoleBinding", "rolebindings"),
    _grouped(RBAC_GROUP, "v1", "ClusterRole", "clusterroles", namespaced=False),
    _grouped(RBAC_GROUP, "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    _review("authorization.k8s.io", "SelfSubjectAccessReview", "selfsubjectaccessreviews"),
    _review("authorization.k8s.io", "SubjectAccessReview", "subjectaccessreviews"),
    _review("authorization.k8s.io", "SelfSubjectRulesReview", "selfsubjectrulesreviews"),
    _review("authorization.k8s.io", "LocalSubjectAccessReview", "localsubjectaccessreviews", namespaced=True),
    _review("authentication.k8s.io", "SelfSubjectReview", "selfsubjectreviews"),
)

# Group order in discovery: the core-ish groups first, like a real server's priorities; CR groups after.
_GROUP_ORDER = ["", "apps", "events.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "policy",
                RBAC_GROUP, "coordination.k8s.io", "apiextensions.k8s.io", "admissionregistration.k8s.io"]


class Registry:
    """Resource types by (group, version, plural); CRDs add and remove entries at run time."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rt in BUILTINS:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def all(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def for_storage(self, key: tuple[str, str]) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.storage_key == key]

    def primary(self, key: tuple[str, str]) -> ResourceType | None:
        """The type used for internal writes (GC, controllers) to objects stored under ``key``."""
        candidates = [rt for rt in self._types.values() if rt.storage_key == key and rt.storage is None]
        return candidates[0] if candidates else None

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (preferred first), in discovery order."""
        found: dict[str, list[str]] = {}
        for rt in self._types.values():
            versions = found.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        order = {g: i for i, g in enumerate(_GROUP_ORDER)}
        return {g: _sorted_versions(found[g]) for g in sorted(found, key=lambda g: (order.get(g, 99), g))}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]

    def register_crd(self, crd: dict[str, Any]) -> None:
        name = crd["metadata"]["name"]
        self.unregister_crd(name)
        spec = crd["spec"]
        names = spec["names"]
        for v in spec.get("versions") or []:
            if not v.get("served", True):
                continue
            subs = v.get("subresources") or {}
            rt = ResourceType(
                group=spec["group"],
                version=v["name"],
                kind=names["kind"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=frozenset(k for k in ("status", "scale") if k in subs),
                has_generation=True,
                custom=True,
                printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
                schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                scale=subs.get("scale"),
                crd_name=name,
            )
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def unregister_crd(self, name: str) -> None:
        for key, rt in list(self._types.items()):
            if rt.crd_name == name:
                del self._types[key]


def _version_priority(v: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA > beta > alpha, then by numbers (v2 > v1, v1beta2 > v1beta1)."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", v)
    if not m:
        return (-1, 0, 0)
    major = int(m.group(1))
    stage = {"alpha": 0, "beta": 1, None: 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, major, minor)


def _sorted_versions(versions: list[str]) -> list[str]:
    return sorted(versions, key=_version_priority, reverse=True)
