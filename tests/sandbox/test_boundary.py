"""The sandbox's import rule: it imports the API models, pki and the Kubernetes layer — never operator internals.

Checked at run time in a fresh interpreter: importing every sandbox module (the CLI and the default components
included) must not load ``opsmanager.operator``, ``opsmanager.ops`` or ``opsmanager.provisioner``. The operator
and the webhook reach the sandbox only as child processes (``python -m opsmanager ...``).
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import opsmanager_sandbox

FORBIDDEN = ("opsmanager.operator", "opsmanager.ops", "opsmanager.provisioner", "opsmanager.webhook.server",
             "opsmanager.webhook.lookup")


def test_sandbox_modules_load_no_operator_internals() -> None:
    modules = sorted(m.name for m in pkgutil.walk_packages(opsmanager_sandbox.__path__, "opsmanager_sandbox."))
    assert "opsmanager_sandbox.components" in modules and "opsmanager_sandbox.cli" in modules
    script = ("import importlib, json, sys\n"
              f"for name in {modules!r}: importlib.import_module(name)\n"
              "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                       text=True).stdout)
    leaked = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert leaked == []
    assert "opsmanager.kube" in loaded
