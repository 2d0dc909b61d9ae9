"""The import contracts in pyproject.toml (``[tool.importlinter]``, run by ``make lint``) bite.

We test these aspects, each on a copy of the package in a temporary folder (the checkout is never touched):

* the untouched copy keeps every contract;
* an I/O import injected into a pure module (directly, or through one of our own I/O modules) breaks the contract
  named ``pure``, and the report names the offending import;
* an import of the test harness, an operator internal from the sandbox, the engine from the webhook, or an upward
  import across the layers breaks the contract that forbids it.

``lint-imports`` runs in a subprocess with the copy first on ``sys.path``, so it analyses the copy rather than the
editable install. It takes a fraction of a second per run.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

import pytest

# Seconds, not milliseconds: kept out of `make test-fast`, run by `make test`.
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONTRACTS = {
    contract["id"]: contract["name"]
    for contract in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}
_LINT_IMPORTS = "import sys; from importlinter import cli; sys.exit(cli.lint_imports_command())"


def _flat(text: str) -> str:
    """The report with its line wrapping undone (lint-imports wraps long contract names)."""
    return " ".join(text.split())


@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the product package, of the sandbox's and of the contracts."""
    shutil.copytree(ROOT / "opsmanager", tmp_path / "opsmanager", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "sandbox" / "opsmanager_sandbox", tmp_path / "opsmanager_sandbox",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_imports(tree: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-c", _LINT_IMPORTS, "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def inject(tree: pathlib.Path, module: str, statement: str) -> None:
    path = tree / module
    assert path.is_file(), f"{module} is gone: update the cases in tests/test_layers.py"
    path.write_text(path.read_text() + f"\n{statement}  # injected by tests/test_layers.py\n")


def test_the_untouched_package_keeps_every_contract(tree: pathlib.Path) -> None:
    result = lint_imports(tree)
    report = _flat(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in report
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in report


@pytest.mark.parametrize(("module", "statement", "contract", "offence"), [
    # pure modules: direct I/O imports of ours and of third-party and standard-library I/O packages
    ("opsmanager/ops/plan.py", "import opsmanager.kube", "pure", "opsmanager.ops.plan -> opsmanager.kube"),
    ("opsmanager/ops/rollout.py", "from opsmanager.etcd import client", "pure",
     "opsmanager.ops.rollout -> opsmanager.etcd.client"),
    ("opsmanager/webhook/validation/etcd.py", "import aiohttp", "pure",
     "opsmanager.webhook.validation.etcd -> aiohttp"),
    # the Kubernetes layer's pure modules stay pure: importing its client from them breaks the contract
    ("opsmanager/kube/mergepatch.py", "from opsmanager.kube import client", "pure",
     "opsmanager.kube.mergepatch -> opsmanager.kube.client"),
    ("opsmanager/webhook/admission.py", "import kubernetes", "pure", "opsmanager.webhook.admission -> kubernetes"),
    ("opsmanager/cluster/render.py", "import subprocess", "pure", "opsmanager.cluster.render -> subprocess"),
    ("opsmanager/pki.py", "import socket", "pure", "opsmanager.pki -> socket"),
    # ... and indirectly, through an I/O module of ours that imports kopf and the Kubernetes client
    ("opsmanager/api/etcd.py", "from opsmanager.provisioner import applying", "pure",
     "opsmanager.api.etcd -> opsmanager.provisioner.applying"),
    # the harness
    ("opsmanager/ops/core/queue.py", "import e2e.scenario", "no-harness", "opsmanager.ops.core.queue -> e2e"),
    ("opsmanager/kube/client.py", "from tests import polling", "no-harness", "opsmanager.kube.client -> tests"),
    # the product never imports the sandbox; the sandbox and the webhook stay out of the operator's internals
    ("opsmanager/operator.py", "import opsmanager_sandbox.cluster", "product",
     "opsmanager.operator -> opsmanager_sandbox.cluster"),
    ("opsmanager_sandbox/cluster.py", "from opsmanager.ops import engine", "sandbox-boundary",
     "opsmanager_sandbox.cluster -> opsmanager.ops.engine"),
    ("opsmanager/webhook/server.py", "from opsmanager.provisioner import applying", "webhook-boundary",
     "opsmanager.webhook.server -> opsmanager.provisioner.applying"),
    # what a cluster looks like and its TLS trust know nothing of the engine; a step never imports another step
    ("opsmanager/cluster/members.py", "from opsmanager.ops import context", "cluster-tls",
     "opsmanager.cluster.members -> opsmanager.ops.context"),
    ("opsmanager/tls/trust.py", "from opsmanager.provisioner import applying", "cluster-tls",
     "opsmanager.tls.trust -> opsmanager.provisioner.applying"),
    ("opsmanager/ops/steps/verify_served.py", "from opsmanager.ops.steps import restart_pods", "independent-steps",
     "opsmanager.ops.steps.verify_served -> opsmanager.ops.steps.restart_pods"),
    # the engine core knows nothing of etcd
    ("opsmanager/ops/core/loop.py", "from opsmanager.etcd import errors", "engine-core",
     "opsmanager.ops.core.loop -> opsmanager.etcd.errors"),
    # layers: what a cluster looks like may not import the ops engine, nor the etcd client the cluster layer
    ("opsmanager/cluster/naming.py", "from opsmanager.ops.core import queue", "layers",
     "opsmanager.cluster.naming -> opsmanager.ops.core.queue"),
    ("opsmanager/etcd/access.py", "from opsmanager.cluster import naming", "layers",
     "opsmanager.etcd.access -> opsmanager.cluster.naming"),
])
def test_a_forbidden_import_breaks_its_contract(
    tree: pathlib.Path, module: str, statement: str, contract: str, offence: str,
) -> None:
    inject(tree, module, statement)
    result = lint_imports(tree)
    report = _flat(result.stdout)
    assert result.returncode != 0, result.stdout + result.stderr
    assert f"{CONTRACTS[contract]} BROKEN" in report, result.stdout
    assert offence in report, result.stdout
