"""The operator and the admission webhook as sandbox components — what ``opsmanager sandbox up`` starts by default.

Both run as child processes of the product CLI (:mod:`opsmanager_sandbox.children`), against the sandbox's
kubeconfig, logging to ``<dir>/logs/{webhook,operator}.log``, stopped by PID; the sandbox imports none of their
code (only the pure rendering of the webhook's configurations, :mod:`opsmanager.webhook.config`).

* :func:`webhook` makes a CA for this sandbox and a serving certificate, starts
  ``python -m opsmanager webhook serve`` on a loopback port, waits until ``/healthz`` answers over HTTPS (verified
  against that CA), registers it as the Service ``opsmanager-system/opsmanager-webhook:443`` and installs the
  Validating/MutatingWebhookConfigurations with the CA as ``caBundle`` — so ``kubectl apply`` of an invalid
  request is denied with the webhook's message, exactly as on a real cluster (``failurePolicy: Fail``).
* :func:`operator` starts ``python -m opsmanager run`` for all namespaces with ``--metrics-port`` on a free loopback
  port and ``--certificate-delivery-timeout`` (default :data:`SANDBOX_CERTIFICATE_DELIVERY_TIMEOUT`, 15 s: the
  sandbox kubelet refreshes a changed Secret after 0.5 s, not the real kubelet's minute or so), waits until its
  liveness endpoint answers and records its metrics URL as ``operatorMetrics`` in ``<dir>/endpoints.json``
  (removed again when it stops).

The webhook goes first: the API server calls it on every create and update of an Etcd or EtcdOpsRequest.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from opsmanager import pki
from opsmanager.webhook import config as webhook_config
from opsmanager_sandbox import children

READY_TIMEOUT = 30.0
# How long the operator in the sandbox allows the kubelet to deliver a changed Secret (`opsmanager run
# --certificate-delivery-timeout`): the sandbox kubelet does it after 0.5 s, so 15 s is a wide margin.
SANDBOX_CERTIFICATE_DELIVERY_TIMEOUT = 15.0
ENDPOINTS_FILE = "endpoints.json"


def recorded_endpoints(directory: Path) -> dict[str, str]:
    """``<directory>/endpoints.json`` ({} when there is none or it is unreadable)."""
    try:
        endpoints = json.loads((directory / ENDPOINTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return endpoints if isinstance(endpoints, dict) else {}


def record_endpoint(directory: Path, name: str, url: str | None) -> None:
    """Set (or, with ``url=None``, remove) one entry of ``<directory>/endpoints.json``, keeping the others."""
    path = directory / ENDPOINTS_FILE
    endpoints = recorded_endpoints(directory)
    if url is None:
        endpoints.pop(name, None)
    else:
        endpoints[name] = url
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(endpoints, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


async def _answers(url: str, ssl_context: ssl.SSLContext | None = None) -> bool:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as session, \
                session.get(url, ssl=ssl_context if ssl_context is not None else True) as response:
            return response.status == 200
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False


@contextlib.asynccontextmanager
async def webhook(sb: Any) -> AsyncIterator[children.Child]:
    namespace, service = webhook_config.NAMESPACE, webhook_config.SERVICE
    tls_dir = sb.dir / "webhook"
    tls_dir.mkdir(parents=True, exist_ok=True)
    ca = pki.make_ca("opsmanager-webhook-ca")
    serving = pki.make_leaf(ca, f"{service}.{namespace}.svc",
                            dns_names=[service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
                                       f"{service}.{namespace}.svc.cluster.local"],
                            ip_addresses=sorted({"127.0.0.1", sb.service_host}), usages=("server",))
    cert_file, key_file = tls_dir / "tls.crt", tls_dir / "tls.key"
    cert_file.write_bytes(serving.cert_pem)
    key_file.touch(mode=0o600)
    key_file.write_bytes(serving.key_pem)
    port = children.free_port()
    host = sb.service_host  # where kube-apiserver reaches it: loopback, or the host's address on real nodes
    argv = children.product_argv("webhook", "serve", "--host", host, "--port", str(port),
                                 "--tls-cert", str(cert_file), "--tls-key", str(key_file),
                                 "--kubeconfig", str(sb.kubeconfig))
    child = await children.Child.start("the admission webhook", argv, log_path=sb.dir / "logs" / "webhook.log")
    try:
        trust = ssl.create_default_context(cadata=ca.cert_pem.decode())
        await child.wait_ready(lambda: _answers(f"https://{host}:{port}/healthz", trust), timeout=READY_TIMEOUT)
        await sb.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
        if getattr(sb, "realnodes", None) is not None:
            await sb.publish_host_service(namespace, service, webhook_config.PORT, port)
        elif sb.control_plane == "kubernetes":  # the real API server dials the Service's ClusterIP: it must exist
            await sb.apply([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": service,
                                                                                 "namespace": namespace},
                             "spec": {"ports": [{"port": webhook_config.PORT, "targetPort": port}]}}])
        if getattr(sb, "realnodes", None) is None:
            sb.register_service_address(namespace, service, webhook_config.PORT, "127.0.0.1", port)
        await sb.apply(webhook_config.render_webhook_configurations(namespace, service, ca_bundle=ca.cert_pem))
        yield child
    finally:
        await child.stop()


@contextlib.asynccontextmanager
async def operator(sb: Any, *, interval: float = 1.0,
                   delivery_timeout: float = SANDBOX_CERTIFICATE_DELIVERY_TIMEOUT,
                   extra_args: tuple[str, ...] = ()) -> AsyncIterator[children.Child]:
    liveness = f"http://127.0.0.1:{children.free_port()}/healthz"
    metrics_port = children.free_port()
    argv = children.product_argv("run", "--kubeconfig", str(sb.kubeconfig), "--liveness", liveness,
                                 "--interval", str(interval), "--standalone", "--metrics-port", str(metrics_port),
                                 "--metrics-address", "127.0.0.1",
                                 "--certificate-delivery-timeout", str(delivery_timeout), *extra_args)
    child = await children.Child.start("the operator", argv, log_path=sb.dir / "logs" / "operator.log")
    try:
        await child.wait_ready(lambda: _answers(liveness), timeout=READY_TIMEOUT)
        record_endpoint(Path(sb.dir), "operatorMetrics", f"http://127.0.0.1:{metrics_port}/metrics")
        yield child
    finally:
        record_endpoint(Path(sb.dir), "operatorMetrics", None)
        await child.stop()


DEFAULTS = (webhook, operator)
