"""A kubeconfig file pointing kubectl, the ``kubernetes`` client and kopf at the sandbox API server.

Plain HTTP, no credentials: the sandbox has no authentication, and every client named above accepts an
``http://`` server with an empty user.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def render(url: str, *, name: str = "opsmanager-sandbox", namespace: str = "default") -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }
    return str(yaml.safe_dump(config, sort_keys=False))


def write(path: str | Path, url: str, *, namespace: str = "default") -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(url, namespace=namespace))
    return target
