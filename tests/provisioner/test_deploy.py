"""deploy/operator.yaml: parses, wires the ServiceAccount, and grants every call the provisioner makes — no more
than listed here for the provisioner's own kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "operator.yaml"

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


def docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(DEPLOY.read_text()) if d]


def granted() -> set[tuple[str, str, str]]:
    role = next(d for d in docs() if d["kind"] == "ClusterRole")
    out = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, res, verb))
    return out


def test_every_needed_call_is_granted() -> None:
    missing = [n for n in NEEDED if n not in granted()]
    assert not missing


def test_no_wildcards_and_no_secret_listing() -> None:
    rules = granted()
    assert not any("*" in part for rule in rules for part in rule)
    assert ("", "secrets", "list") not in rules and ("", "secrets", "watch") not in rules


def test_the_deployment_runs_as_the_bound_service_account() -> None:
    by_kind = {d["kind"]: d for d in docs()}
    sa = by_kind["ServiceAccount"]["metadata"]
    binding = by_kind["ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["name"]
    args = pod["containers"][0]["args"]
    assert args[0] == "run" and "--standalone" in args
    assert by_kind["Deployment"]["spec"]["strategy"]["type"] == "Recreate"
