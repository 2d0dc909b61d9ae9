"""The install bundle deploy/ (rendered: tests/deploy/bundle.py) grants the operator's ServiceAccount every call the
provisioner makes — no more than listed here for the provisioner's own kinds — and runs it as that account.
(The bundle's other requirements: tests/deploy/test_bundle.py.)"""

from __future__ import annotations

import pytest

from tests.deploy import bundle

# (apiGroup, resource, verb) the provisioner and kopf need (applying.py, observe.py, handlers.py, kopf watches).
NEEDED = [
    ("opsmanager.dev", "etcds", v) for v in ("get", "list", "watch", "patch")
] + [
    ("opsmanager.dev", "etcds/status", "patch"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("apps", "statefulsets", "get"), ("apps", "statefulsets", "create"), ("apps", "statefulsets", "update"),
    ("apps", "statefulsets", "patch"), ("apps", "statefulsets", "delete"),
    ("", "services", "create"), ("", "services", "patch"), ("", "services", "delete"),
    ("policy", "poddisruptionbudgets", "create"), ("policy", "poddisruptionbudgets", "delete"),
    ("cert-manager.io", "certificates", "create"), ("cert-manager.io", "certificates", "delete"),
    ("", "secrets", "get"), ("", "secrets", "create"), ("", "secrets", "delete"),
    ("", "pods", "list"), ("", "persistentvolumeclaims", "list"), ("", "persistentvolumeclaims", "delete"),
    ("", "events", "create"),
]


def granted() -> set[tuple[str, str, str]]:
    return bundle.granted(bundle.objects(), bundle.OPERATOR_SA)


@pytest.mark.slow  # seconds: kept out of `make test-fast`
def test_every_needed_call_is_granted() -> None:
    missing = [n for n in NEEDED if n not in granted()]
    assert not missing


def test_no_wildcards() -> None:
    """No wildcard anywhere. (Secrets are listed and watched: the label-selected cache, D14.1.)"""
    rules = granted()
    assert not any("*" in part for rule in rules for part in rule)


def test_the_deployment_runs_as_the_bound_service_account() -> None:
    docs = bundle.objects()
    sa = bundle.one(docs, "ServiceAccount", bundle.OPERATOR_SA)["metadata"]
    assert sa["namespace"] == bundle.NAMESPACE
    assert bundle.bound_roles(docs, sa["name"]), "the operator's ServiceAccount is bound to nothing"
    deployment = bundle.one(docs, "Deployment", "opsmanager-operator")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["name"]
    args = pod["containers"][0]["args"]
    assert args[0] == "run" and "--peering=opsmanager" in args and "--standalone" not in args
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
