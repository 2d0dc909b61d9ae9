"""A kubeconfig file pointing kubectl, the ``kubernetes`` client and kopf at the sandbox API server.

The user is the server's admin token (``system:masters``), so whatever uses this file keeps full rights when the
server enforces RBAC. Over ``https://`` (the server's ``tls``) the file carries the server's CA. kubectl
(client-go) sends no credentials to an ``http://`` server, so with plain HTTP it is anonymous; the Python
``kubernetes`` client and kopf send the token either way.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def render(url: str, *, name: str = "opsmanager-sandbox", namespace: str = "default",
           token: str | None = None, ca_pem: bytes | None = None) -> str:
    cluster: dict[str, str] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token} if token else {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }
    return str(yaml.safe_dump(config, sort_keys=False))


def write(path: str | Path, url: str, *, namespace: str = "default", token: str | None = None,
          ca_pem: bytes | None = None) -> Path:
    """Write the kubeconfig (owner-only: it holds a credential when ``token`` is given)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.touch(mode=0o600, exist_ok=True)
    target.chmod(0o600)
    target.write_text(render(url, namespace=namespace, token=token, ca_pem=ca_pem))
    return target
