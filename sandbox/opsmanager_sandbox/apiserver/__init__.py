"""The sandbox's Kubernetes API server: an in-memory kube-apiserver over real HTTP (aiohttp).

Faithful enough for the official ``kubernetes`` client, kopf and kubectl: resourceVersions and 409s,
watches with bookmarks and 410 Gone, selectors, the three patch types, status/scale subresources,
finalizers, garbage collection, CRDs with schemas and printer columns, Table output, admission webhooks,
eviction with PodDisruptionBudgets. See docs/sandbox.md.

    srv = APIServer(host="127.0.0.1", port=0)
    await srv.start()                      # srv.url == "http://127.0.0.1:<port>"
    srv.register_service_address(ns, service, port, host, target_port)
    srv.write_kubeconfig(path)
    await srv.stop()
"""

from __future__ import annotations

from opsmanager_sandbox.apiserver.crds import apply_crd_files, load_crd_files
from opsmanager_sandbox.apiserver.server import APIServer
from opsmanager_sandbox.apiserver.threaded import ThreadedAPIServer

__all__ = ["APIServer", "ThreadedAPIServer", "apply_crd_files", "load_crd_files"]
