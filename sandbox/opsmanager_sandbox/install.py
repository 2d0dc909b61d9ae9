"""Install the product into the sandbox from its bundle, as on a cluster: ``kubectl apply -k deploy/``.

:func:`install` is a sandbox component (``Sandbox(components=[install.install("deploy")])``, ``opsmanager sandbox
up --install deploy/``): with the sandbox in RBAC mode it runs the real ``kubectl apply -k <dir>`` against the
sandbox's admin kubeconfig, then waits until the bundle's Deployments are available — the kubelet runs their pods
of the operator's image as local processes under their own ServiceAccounts (docs/sandbox.md). It replaces the
default components (the operator and the webhook as plain child processes). Then, when the bundle has one, the
version catalog (``kubectl apply -k <dir>/catalog``: the EtcdVersion objects, applied once their CRD is there, the
install's second step).

Before applying, the sandbox serves the one kind of the bundle that a bare cluster lacks: the Prometheus
Operator's ``PrometheusRule`` (storage only: a CRD keeping every field; nothing evaluates the rules here).
Afterwards the operator's metrics URL of each replica is recorded in ``<dir>/endpoints.json``
(``operatorMetrics`` is the first; ``operatorMetrics/<pod>`` each) as the child-process operator does.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from opsmanager import kube
from opsmanager_sandbox import components, statefulset

NAMESPACE = "opsmanager-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=opsmanager,app.kubernetes.io/component=operator"
WEBHOOK_SELECTOR = "app.kubernetes.io/name=opsmanager,app.kubernetes.io/component=webhook"
READY_TIMEOUT = 90.0
METRICS_PORT = 8081

PROMETHEUS_RULE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "PrometheusRule", "plural": "prometheusrules", "singular": "prometheusrule",
                       "listKind": "PrometheusRuleList", "shortNames": ["promrule"]},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


class InstallError(RuntimeError):
    """The bundle could not be applied or its pods did not become Ready."""


def kubectl() -> str:
    path = shutil.which("kubectl") or shutil.which("kubectl", path="/usr/local/bin:/usr/bin")
    if path is None:
        raise InstallError("installing a bundle needs `kubectl` on PATH (it runs `kubectl apply -k DIR`); "
                           "install kubectl or run `opsmanager sandbox up` without --install")
    return path


async def apply_bundle(kubeconfig: Path, bundle: Path, *, timeout: float = 60.0) -> str:
    """``kubectl apply -k <bundle>`` with ``kubeconfig``; its output. Raises :class:`InstallError` on failure."""
    if not (bundle / "kustomization.yaml").is_file():
        raise InstallError(f"--install {bundle}: no kustomization.yaml there (give the bundle's directory, "
                           "e.g. deploy/)")
    proc = await asyncio.create_subprocess_exec(
        kubectl(), "--kubeconfig", str(kubeconfig), "apply", "-k", str(bundle),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise InstallError(f"kubectl apply -k {bundle} did not finish in {timeout}s") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise InstallError(f"kubectl apply -k {bundle} failed (exit {proc.returncode}):\n{text}")
    return text


async def wait_available(client: kube.Kube, namespace: str, names: list[str], timeout: float) -> None:
    """Until every named Deployment has all its replicas Ready and up to date."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        waiting = []
        for name in names:
            dep = await client.get("apps/v1", "Deployment", namespace, name)
            spec, status = (dep or {}).get("spec") or {}, (dep or {}).get("status") or {}
            want = int(spec.get("replicas", 1))
            if dep is None or status.get("readyReplicas", 0) < want or status.get("updatedReplicas", 0) < want \
                    or status.get("replicas", 0) != want:
                waiting.append(f"{name}: {status.get('readyReplicas', 0)}/{want} Ready")
        if not waiting:
            return
        if loop.time() > deadline:
            raise InstallError(f"after {timeout}s: " + "; ".join(waiting) + " (see the pods' logs under "
                               "<dir>/logs/opsmanager-system/)")
        await asyncio.sleep(0.2)


async def operator_pods(client: kube.Kube) -> list[dict[str, Any]]:
    """The operator's Ready pods (by name)."""
    pods = await client.list("v1", "Pod", NAMESPACE, label_selector=OPERATOR_SELECTOR)
    return sorted((p for p in pods if statefulset.is_running_and_ready(p) and not statefulset.is_terminating(p)),
                  key=lambda p: p["metadata"]["name"])


def install(bundle: str | Path, *, timeout: float = READY_TIMEOUT) -> Any:
    """A sandbox component that installs ``bundle`` with ``kubectl apply -k`` (see the module doc)."""
    directory = Path(bundle).resolve()

    @contextlib.asynccontextmanager
    async def component(sb: Any) -> AsyncIterator[str]:
        if sb.authorization != "RBAC":
            raise InstallError("installing the bundle needs the sandbox in RBAC mode (authorization='RBAC' / "
                               "--authorization RBAC): the product runs under its own ServiceAccounts")
        await sb.apply([PROMETHEUS_RULE_CRD])
        output = await apply_bundle(sb.kubeconfig, directory)
        if (directory / "catalog" / "kustomization.yaml").is_file():  # the second step of the install, as documented
            output += await apply_bundle(sb.kubeconfig, directory / "catalog")
        await wait_available(sb.client, NAMESPACE, ["opsmanager-webhook", "opsmanager-operator"], timeout)
        pods = await operator_pods(sb.client)
        for i, pod in enumerate(pods):
            url = f"http://{pod['status']['podIP']}:{METRICS_PORT}/metrics"
            if i == 0:
                components.record_endpoint(sb.dir, "operatorMetrics", url)
            components.record_endpoint(sb.dir, f"operatorMetrics/{pod['metadata']['name']}", url)
        try:
            yield output
        finally:
            for key in list(components.recorded_endpoints(sb.dir)):
                if key.startswith("operatorMetrics"):
                    components.record_endpoint(sb.dir, key, None)

    component.__name__ = f"install({directory})"
    return component
