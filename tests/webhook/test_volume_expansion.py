"""The VolumeExpansion admission rules, pure: KubeDB's messages, then the Etcd's StorageClass read through the
lookup.

We test these aspects: the options missing, the size or the mode missing, ephemeral storage, a size not larger than
the Etcd's (``spec.storage`` or the default 1Gi) — each with KubeDB's words; a StorageClass that does not exist or
does not allow expansion is refused in Kubernetes' own words; an expandable class, or an Etcd naming no class (the
API server's resize admission checks the default one), is admitted; the lookup that does not hold the class is asked
once (``afetch``) by the admission driver.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opsmanager.api import rules
from opsmanager.webhook import admission, validation

NS = "demo"
PREFIX = 'EtcdOpsRequest.ops.opsmanager.dev "grow" is invalid: spec.volumeExpansion: Invalid value: "grow": '


def etcd(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "metadata": {"name": name, "namespace": NS},
            "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete", **spec}}


def storage_class(name: str, expandable: bool | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                           "provisioner": "x"}
    if expandable is not None:
        obj["allowVolumeExpansion"] = expandable
    return obj


def in_class(cls: str, size: str = "1Gi") -> dict[str, Any]:
    return {"storageClassName": cls, "resources": {"requests": {"storage": size}}}


@pytest.fixture
def lookup() -> validation.InMemoryEtcdLookup:
    return validation.InMemoryEtcdLookup([
        etcd("plain"), etcd("ephemeral", storageType="Ephemeral"), etcd("big", storage=in_class("standard", "4Gi")),
        etcd("fixed", storage=in_class("fixed")), etcd("lost", storage=in_class("nowhere")),
        etcd("standard", storage=in_class("standard")),
        storage_class("standard", True), storage_class("fixed", None)])


def grow(db: str, options: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "VolumeExpansion", "databaseRef": {"name": db}}
    if options is not None:
        spec["volumeExpansion"] = options
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": "grow", "namespace": NS}, "spec": spec}


@pytest.mark.parametrize(("db", "options", "message"), [
    ("plain", None, "spec.volumeExpansion is nil, not supported in VolumeExpansion type"),
    ("plain", {"mode": "Online"}, "spec.volumeExpansion.etcd can not be empty"),
    ("plain", {"etcd": "2Gi"}, "spec.volumeExpansion.mode can not be empty: Online or Offline"),
    ("ephemeral", {"etcd": "2Gi", "mode": "Online"}, "storage not configured for etcd"),
    ("plain", {"etcd": "1Gi", "mode": "Online"},
     "desired etcd storage size must be greater than current storage. Current storage: 1Gi"),
    ("big", {"etcd": "3Gi", "mode": "Offline"},
     "desired etcd storage size must be greater than current storage. Current storage: 4Gi"),
    ("fixed", {"etcd": "2Gi", "mode": "Online"}, rules.MSG_STORAGE_CLASS_NOT_EXPANDABLE.format(name="fixed")),
    ("lost", {"etcd": "2Gi", "mode": "Online"}, "storage class nowhere not found"),
])
def test_refused_with_kubedbs_words(db: str, options: Any, message: str,
                                    lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = validation.validate_opsrequest("CREATE", grow(db, options), None, namespace=NS, lookup=lookup)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == PREFIX + message


@pytest.mark.parametrize("db", ["plain", "standard", "big"])
def test_a_larger_size_on_an_expandable_or_default_class_is_admitted(
        db: str, lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = validation.validate_opsrequest("CREATE", grow(db, {"etcd": "8Gi", "mode": "Online"}), None,
                                             namespace=NS, lookup=lookup)
    assert verdict.allowed, verdict.message


class Fetching(validation.InMemoryEtcdLookup):
    """A lookup that holds the Etcds but no StorageClass: it answers a class only through ``afetch``."""

    def __init__(self, objects: list[dict[str, Any]], classes: dict[str, dict[str, Any]]) -> None:
        super().__init__(objects)
        self.classes = classes
        self.fetched: list[str] = []

    def get_storage_class(self, name: str) -> dict[str, Any] | None:
        raise validation.NotCached("StorageClass", "", name, "not watched")

    async def afetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.fetched.append(f"{kind}/{name}")
        return copy.deepcopy(self.classes.get(name))


async def test_the_admission_driver_fetches_the_class_once() -> None:
    lookup = Fetching([etcd("fixed", storage=in_class("fixed"))], {"fixed": storage_class("fixed", False)})
    request = admission.AdmissionRequest("uid", "CREATE", NS, "grow", grow("fixed", {"etcd": "2Gi", "mode": "Online"}),
                                         None, False)
    verdict = await admission.rule_verdict(admission.ENDPOINTS["/validate-etcdopsrequest"], request, lookup)
    assert not verdict.allowed and "does not allow volume expansion" in verdict.message
    assert lookup.fetched == ["StorageClass/fixed"]
