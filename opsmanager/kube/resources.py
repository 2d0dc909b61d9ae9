"""The one resource table: where each ``(apiVersion, kind)`` lives on the API server.

Why a table and not discovery: the operator, the webhook and the sandbox controllers use a fixed, small set of
kinds (core, apps, policy, cert-manager, and this project's two CRDs), so a lookup costs nothing and cannot fail
at run time; a kind nobody listed is a programming error (``ValueError`` naming the table). Kinds that come
from CRDs applied at run time (e.g. everything ``opsmanager sandbox up --crds DIR`` installs) are added with
:meth:`Resources.add_crd`, which reads the plural, the scope and the storage version from the CRD itself.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Resource:
    """One served resource type: its group/version, URL plural, kind and scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path of the collection (``name`` None) or of one object (and its ``subresource``).

        A namespaced collection without a namespace is the cluster-wide one (list/watch across namespaces);
        one object of a namespaced kind needs its namespace."""
        parts = [f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{urllib.parse.quote(namespace, safe='')}")
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required")
        parts.append(self.plural)
        if name is not None:
            parts.append(urllib.parse.quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


def from_crd(crd: Mapping[str, Any]) -> Resource:
    """The :class:`Resource` of a CustomResourceDefinition's storage version."""
    spec = crd["spec"]
    versions = spec.get("versions") or []
    version = next((v["name"] for v in versions if v.get("storage")), versions[0]["name"] if versions else "v1")
    return Resource(spec["group"], version, spec["names"]["plural"], spec["names"]["kind"],
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced")


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
STORAGECLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
CONTROLLERREVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTERROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTERROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                               namespaced=False)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                               "ValidatingWebhookConfiguration", False)
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                             "MutatingWebhookConfiguration", False)
ISSUERS = Resource("cert-manager.io", "v1", "issuers", "Issuer")
CLUSTERISSUERS = Resource("cert-manager.io", "v1", "clusterissuers", "ClusterIssuer", namespaced=False)
CERTIFICATES = Resource("cert-manager.io", "v1", "certificates", "Certificate")
# This project's kinds (their CRDs are rendered from opsmanager.api; spelled out here so the layer imports no model).
ETCDS = Resource("opsmanager.dev", "v1alpha1", "etcds", "Etcd")
ETCDOPSREQUESTS = Resource("ops.opsmanager.dev", "v1alpha1", "etcdopsrequests", "EtcdOpsRequest")
ETCDVERSIONS = Resource("catalog.opsmanager.dev", "v1alpha1", "etcdversions", "EtcdVersion", namespaced=False)

BUILTIN: tuple[Resource, ...] = (
    NAMESPACES, PODS, NODES, SECRETS, CONFIGMAPS, SERVICES, EVENTS, PVCS, PVS, STORAGECLASSES, STATEFULSETS, DEPLOYMENTS, CONTROLLERREVISIONS, PDBS,
    LEASES, CRDS, VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS, ISSUERS, CLUSTERISSUERS, CERTIFICATES, ETCDS,
    ETCDOPSREQUESTS, ETCDVERSIONS, SERVICEACCOUNTS, ROLES, ROLEBINDINGS, CLUSTERROLES, CLUSTERROLEBINDINGS,
)


class Resources:
    """A table of :class:`Resource` by ``(apiVersion, kind)``: the built-ins, plus what is added."""

    def __init__(self, resources: Iterable[Resource] = BUILTIN) -> None:
        self._by_key: dict[tuple[str, str], Resource] = {}
        for res in resources:
            self.add(res)

    def add(self, res: Resource) -> Resource:
        self._by_key[(res.api_version, res.kind)] = res
        return res

    def add_crd(self, crd: Mapping[str, Any]) -> Resource:
        """Add the kind a CustomResourceDefinition serves (its storage version)."""
        return self.add(from_crd(crd))

    def get(self, api_version: str, kind: str) -> Resource:
        try:
            return self._by_key[(api_version, kind)]
        except KeyError:
            raise ValueError(f"unknown resource {api_version} {kind}: add it to opsmanager.kube.resources.BUILTIN "
                             f"or register its CRD with Resources.add_crd") from None

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Resource]:
        return iter(self._by_key.values())

    def copy(self) -> Resources:
        return Resources(self)


DEFAULT = Resources()
"""The built-in table (module-level functions below use it; each client holds its own copy)."""


def resource(api_version: str, kind: str) -> Resource:
    """The built-in :class:`Resource` of ``(apiVersion, kind)``; ``ValueError`` when unknown."""
    return DEFAULT.get(api_version, kind)


def path_for(api_version: str, kind: str, namespace: str | None, name: str | None = None,
             subresource: str | None = None) -> str:
    """The URL path of a built-in kind's collection or object (see :meth:`Resource.path`)."""
    return resource(api_version, kind).path(namespace, name, subresource)
