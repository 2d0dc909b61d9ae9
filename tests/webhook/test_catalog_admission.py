"""Admission from the version catalog: the webhook reads ``EtcdVersion`` objects through its lookup.

We test these aspects: an Etcd's ``spec.version`` must name an EtcdVersion (KubeDB's not-found text), a new Etcd may
not choose a deprecated one (KubeDB's text) while an Etcd already on it may still be updated, and a version added as
an object is accepted with no code change; an UpdateVersion's target must be an EtcdVersion, not deprecated, a move
etcd can make (3.5 → 3.7 names 3.6), and one the current version's ``updateConstraints`` allow (KubeDB's text);
defaulting looks the version up the same way.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opsmanager.api import catalog
from opsmanager.webhook import validation

NS = "demo"


def etcd(version: str, name: str = "db") -> dict[str, Any]:
    return {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "metadata": {"name": name, "namespace": NS},
            "spec": {"version": version, "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete"}}


def etcd_version(version: str, *, deprecated: bool = False, allow: str = "", deny: str = "") -> dict[str, Any]:
    return {"apiVersion": "catalog.opsmanager.dev/v1alpha1", "kind": "EtcdVersion", "metadata": {"name": version},
            "spec": {"version": version, "db": {"image": catalog.IMAGE.format(version=version)},
                     "deprecated": deprecated,
                     "updateConstraints": {"allowlist": [allow] if allow else [], "denylist": [deny] if deny else []}}}


def update(target: str) -> dict[str, Any]:
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": "up", "namespace": NS},
            "spec": {"type": "UpdateVersion", "databaseRef": {"name": "db"}, "updateVersion": {"targetVersion": target}}}


def test_an_unknown_version_is_kubedbs_not_found() -> None:
    verdict = validation.validate_etcd("CREATE", etcd("3.4.0"), None, lookup=validation.InMemoryEtcdLookup())
    assert not verdict.allowed
    assert 'etcdversions.catalog.opsmanager.dev "3.4.0" not found' in verdict.message


def test_a_version_added_as_an_object_is_accepted() -> None:
    without = validation.InMemoryEtcdLookup()
    assert not validation.validate_etcd("CREATE", etcd("3.6.17"), None, lookup=without).allowed
    added = validation.InMemoryEtcdLookup([etcd_version("3.6.17")])
    assert validation.validate_etcd("CREATE", etcd("3.6.17"), None, lookup=added).allowed
    assert validation.mutate_etcd("CREATE", etcd("3.6.17"), lookup=added).allowed
    assert not validation.mutate_etcd("CREATE", etcd("3.6.17"), lookup=without).allowed


def test_an_empty_catalog_admits_no_version() -> None:
    empty = validation.InMemoryEtcdLookup(catalog=False)
    verdict = validation.validate_etcd("CREATE", etcd("3.6.16"), None, lookup=empty)
    assert not verdict.allowed and "not found" in verdict.message


def test_a_deprecated_version_refuses_a_new_etcd_not_one_on_it() -> None:
    lookup = validation.InMemoryEtcdLookup([etcd_version("3.5.1", deprecated=True)])
    verdict = validation.validate_etcd("CREATE", etcd("3.5.1"), None, lookup=lookup)
    assert not verdict.allowed
    assert "etcd demo/db is using deprecated version 3.5.1. Skipped processing" in verdict.message
    old = etcd("3.5.1")
    new = copy.deepcopy(old)
    new["spec"]["deletionPolicy"] = "WipeOut"
    assert validation.validate_etcd("UPDATE", new, old, lookup=lookup).allowed


def test_a_version_of_a_minor_the_operator_does_not_run_is_refused() -> None:
    lookup = validation.InMemoryEtcdLookup([etcd_version("3.8.0")])
    verdict = validation.validate_etcd("CREATE", etcd("3.8.0"), None, lookup=lookup)
    assert not verdict.allowed and "which this operator does not run (it runs etcd 3.5, 3.6, 3.7)" in verdict.message


@pytest.mark.parametrize(("current", "target", "message"), [
    ("3.6.16", "3.7.3", None),
    ("3.7.3", "3.6.16", None),
    ("3.5.35", "3.6.16", None),
    ("3.5.35", "3.7.3", "through etcd 3.6 first"),
    ("3.7.3", "3.5.35", "downgrades are not supported from 3.7.3 to 3.5.35"),
    ("3.5.35", "3.5.1", "update version from 3.5.35 to 3.5.1 is not supported"),
    ("3.6.16", "3.4.0", 'etcdversions.catalog.opsmanager.dev "3.4.0" not found'),
])
def test_update_version_against_the_shipped_catalog(current: str, target: str, message: str | None) -> None:
    errors = validation.opsrequest_errors(update(target), NS, validation.InMemoryEtcdLookup([etcd(current)]))
    if message is None:
        assert errors == []
    else:
        assert len(errors) == 1 and message in errors[0].detail, errors
        assert errors[0].field == "spec.updateVersion.targetVersion"


def test_update_to_a_deprecated_target_is_refused() -> None:
    lookup = validation.InMemoryEtcdLookup([etcd("3.6.16"), etcd_version("3.7.3", deprecated=True)])
    errors = validation.opsrequest_errors(update("3.7.3"), NS, lookup)
    assert len(errors) == 1 and "3.7.3 is a deprecated EtcdVersion" in errors[0].detail


def test_the_current_versions_denylist_refuses_a_target() -> None:
    lookup = validation.InMemoryEtcdLookup([etcd("3.6.16"), etcd_version("3.6.16", deny=">= 3.7.0")])
    errors = validation.opsrequest_errors(update("3.7.3"), NS, lookup)
    assert [e.detail for e in errors] == [
        "update version from 3.6.16 to 3.7.3 is not supported (the updateConstraints of EtcdVersion 3.6.16 do not "
        "allow it)"]


def test_a_constraint_that_does_not_parse_is_reported() -> None:
    lookup = validation.InMemoryEtcdLookup([etcd("3.6.16"), etcd_version("3.7.3", allow="~> 3.6")])
    errors = validation.opsrequest_errors(update("3.7.3"), NS, lookup)
    assert len(errors) == 1 and "EtcdVersion 3.7.3 is not a valid catalog object" in errors[0].detail
