"""Installing CRD files (``crds/*.yaml``) into a running sandbox API server.

``apply_crd_files`` accepts either an :class:`APIServer` in this process (applied directly) or the URL of
one (applied over HTTP, the way ``kubectl apply -f crds/`` does it: create, or replace on conflict).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from opsmanager_sandbox.apiserver import server

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def load_crd_files(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """All YAML documents of the given files and directories (``*.yaml``/``*.yml``, sorted)."""
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml")) if p.is_dir() else [p]
    docs = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                if doc.get("kind") != "CustomResourceDefinition":
                    raise ValueError(f"{f}: expected kind CustomResourceDefinition, got {doc.get('kind')!r}")
                docs.append(doc)
    return docs


async def apply_crd_files(target: server.APIServer | str, paths: Iterable[str | Path]) -> list[str]:
    """Create or replace the CRDs in ``paths``; returns their names."""
    docs = load_crd_files(paths)
    if isinstance(target, server.APIServer):
        await target.apply_objects(docs)
    else:
        import asyncio

        await asyncio.to_thread(_apply_over_http, target.rstrip("/"), docs)
    return [d["metadata"]["name"] for d in docs]


def _request(method: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def _apply_over_http(url: str, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        try:
            _request("POST", url + CRD_PATH, doc)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise
            current = _request("GET", f"{url}{CRD_PATH}/{doc['metadata']['name']}")
            body = dict(doc, metadata=dict(doc["metadata"], resourceVersion=current["metadata"]["resourceVersion"]))
            _request("PUT", f"{url}{CRD_PATH}/{doc['metadata']['name']}", body)
