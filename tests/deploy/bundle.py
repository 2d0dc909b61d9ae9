"""The install bundle ``deploy/`` as objects: rendered offline with ``kubectl kustomize`` (never skipped: kubectl is
part of the machine, see README "Tests"), and the RBAC it grants as ``(apiGroup, resource, verb)`` triples.

Shared by tests/deploy/test_bundle.py (the bundle's requirements) and tests/provisioner/test_deploy.py (the rules
the provisioner needs)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
SINGLE_NAMESPACE = DEPLOY / "overlays" / "single-namespace"
NAMESPACE = "opsmanager-system"
OPERATOR_SA = "opsmanager-operator"
WEBHOOK_SA = "opsmanager-webhook"

Obj = dict[str, Any]
Grant = tuple[str, str, str]


def kubectl() -> str:
    path = shutil.which("kubectl")
    assert path, "kubectl is missing: the bundle tests render deploy/ with `kubectl kustomize` (offline); install it"
    return path


def render(path: Path) -> list[Obj]:
    """``kubectl kustomize PATH`` (offline), as objects."""
    done = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {path} failed:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@functools.cache
def _rendered(path: str) -> str:
    return yaml.safe_dump_all(render(Path(path)))


def objects(path: Path = DEPLOY) -> list[Obj]:
    """The rendered objects of ``path`` (rendered once per session; each call returns fresh copies)."""
    return [d for d in yaml.safe_load_all(_rendered(str(path))) if d]


def one(docs: list[Obj], kind: str, name: str) -> Obj:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def bound_roles(docs: list[Obj], sa: str, namespace: str = NAMESPACE) -> list[Obj]:
    """The Roles and ClusterRoles bound to ServiceAccount ``namespace/sa``."""
    subject = {"kind": "ServiceAccount", "name": sa, "namespace": namespace}
    roles = []
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if subject in binding["subjects"]:
            ref = binding["roleRef"]
            roles.append(one(docs, ref["kind"], ref["name"]))
    return roles


def grants(roles: list[Obj]) -> set[Grant]:
    out = set()
    for role in roles:
        for rule in role.get("rules", []):
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((group, res, verb))
    return out


def granted(docs: list[Obj], sa: str, namespace: str = NAMESPACE) -> set[Grant]:
    """Everything ServiceAccount ``namespace/sa`` may do, over all its bindings."""
    return grants(bound_roles(docs, sa, namespace))
