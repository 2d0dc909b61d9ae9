"""The StorageMigration admission rules, pure: KubeDB's messages, then the target StorageClass read through the
lookup.

We test these aspects: the options missing, the class missing, ``spec.timeout`` not written (KubeDB's words, each);
ephemeral storage and a move to the class the Etcd already names (ours); a target class that does not exist or does
not bind ``WaitForFirstConsumer`` (KubeDB's words); a request on another existing class with a timeout is admitted,
from a named class or from the cluster's default; the lookup that does not hold the class is asked once (``afetch``).
"""

from __future__ import annotations

from typing import Any

import pytest

from opsmanager.webhook import admission, validation
from tests.webhook.test_volume_expansion import Fetching  # a lookup that answers a class only through afetch

NS = "demo"
PREFIX = 'EtcdOpsRequest.ops.opsmanager.dev "move" is invalid: '


def etcd(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "metadata": {"name": name, "namespace": NS},
            "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete", **spec}}


def storage_class(name: str, binding: str | None = "WaitForFirstConsumer") -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                           "provisioner": "x"}
    if binding is not None:
        obj["volumeBindingMode"] = binding
    return obj


@pytest.fixture
def lookup() -> validation.InMemoryEtcdLookup:
    return validation.InMemoryEtcdLookup([
        etcd("plain"), etcd("ephemeral", storageType="Ephemeral"),
        etcd("standard", storage={"storageClassName": "standard"}),
        storage_class("standard"), storage_class("fast"), storage_class("eager", "Immediate"),
        storage_class("unset", None)])


def move(db: str, options: Any, timeout: str | None = "30m") -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "StorageMigration", "databaseRef": {"name": db}}
    if options is not None:
        spec["migration"] = options
    if timeout is not None:
        spec["timeout"] = timeout
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": "move", "namespace": NS}, "spec": spec}


def field(path: str, message: str) -> str:
    return f'{path}: Invalid value: "move": {message}'


@pytest.mark.parametrize(("db", "options", "timeout", "message"), [
    ("plain", None, "30m", field("spec.migration", "spec.migration is required for StorageMigration type")),
    ("plain", {}, "30m", field("spec.migration", "spec.migration.storageClassName is required")),
    ("plain", {"storageClassName": "fast"}, None, field(
        "spec.timeout", "spec.timeout is required for Storage Migration ops request, adjust timeout according to "
                        "the size of your database")),
    ("ephemeral", {"storageClassName": "fast"}, "30m", field("spec.migration", "storage not configured for etcd")),
    ("standard", {"storageClassName": "standard"}, "30m", field(
        "spec.migration", "spec.migration.storageClassName standard is the StorageClass the members' volumes "
                          "already use: nothing to migrate")),
    ("plain", {"storageClassName": "nowhere"}, "30m", field("spec.migration", "storage class nowhere not found")),
    ("plain", {"storageClassName": "eager"}, "30m", field(
        "spec.migration", "volume binding mode should be WaitForFirstConsumer for eager storageClass")),
    ("standard", {"storageClassName": "unset"}, "30m", field(
        "spec.migration", "volume binding mode should be WaitForFirstConsumer for unset storageClass")),
])
def test_refused_with_kubedbs_words(db: str, options: Any, timeout: str | None, message: str,
                                    lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = validation.validate_opsrequest("CREATE", move(db, options, timeout), None, namespace=NS, lookup=lookup)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == PREFIX + message


def test_a_missing_class_and_timeout_are_both_reported(lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = validation.validate_opsrequest("CREATE", move("plain", {}, None), None, namespace=NS, lookup=lookup)
    assert [e.field for e in verdict.errors] == ["spec.migration", "spec.timeout"]


@pytest.mark.parametrize(("db", "options"), [
    ("plain", {"storageClassName": "fast"}),
    ("standard", {"storageClassName": "fast", "oldPVReclaimPolicy": "Retain"}),
    ("plain", {"storageClassName": "standard", "oldPVReclaimPolicy": "Delete"}),
])
def test_another_binding_class_with_a_timeout_is_admitted(db: str, options: dict[str, Any],
                                                          lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = validation.validate_opsrequest("CREATE", move(db, options), None, namespace=NS, lookup=lookup)
    assert verdict.allowed, verdict.message


async def test_the_admission_driver_fetches_the_target_class_once() -> None:
    lookup = Fetching([etcd("plain")], {"eager": storage_class("eager", "Immediate")})
    request = admission.AdmissionRequest("uid", "CREATE", NS, "move", move("plain", {"storageClassName": "eager"}),
                                         None, False)
    verdict = await admission.rule_verdict(admission.ENDPOINTS["/validate-etcdopsrequest"], request, lookup)
    assert not verdict.allowed and "WaitForFirstConsumer" in verdict.message
    assert lookup.fetched == ["StorageClass/eager"]
