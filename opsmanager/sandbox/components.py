"""The operator and the admission webhook as sandbox components — what ``opsmanager sandbox up`` starts by default.

* :func:`webhook` runs the real admission webhook (:class:`opsmanager.webhook.server.WebhookServer`) on loopback with a
  serving certificate from a CA made for this sandbox, registers it as the Service
  ``opsmanager-system/opsmanager-webhook:443`` and installs the Validating/MutatingWebhookConfigurations with
  that CA as ``caBundle`` — so ``kubectl apply`` of an invalid request is denied with the webhook's message,
  exactly as on a real cluster (``failurePolicy: Fail``).
* :func:`operator` runs ``opsmanager run`` against the sandbox as a child process (stopped by PID).

The webhook goes first: the API server calls it on every create and update of an Etcd or EtcdOpsRequest.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from opsmanager import operator as operator_mod
from opsmanager import pki
from opsmanager.webhook import config as webhook_config
from opsmanager.webhook import lookup as webhook_lookup
from opsmanager.webhook import server as webhook_server


@contextlib.asynccontextmanager
async def webhook(sb: Any) -> AsyncIterator[webhook_server.WebhookServer]:
    namespace, service = webhook_config.NAMESPACE, webhook_config.SERVICE
    tls_dir = sb.dir / "webhook"
    tls_dir.mkdir(parents=True, exist_ok=True)
    ca = pki.make_ca("opsmanager-webhook-ca")
    serving = pki.make_leaf(ca, f"{service}.{namespace}.svc",
                            dns_names=[service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
                                       f"{service}.{namespace}.svc.cluster.local"],
                            ip_addresses=["127.0.0.1"], usages=("server",))
    cert_file, key_file = tls_dir / "tls.crt", tls_dir / "tls.key"
    cert_file.write_bytes(serving.cert_pem)
    key_file.touch(mode=0o600)
    key_file.write_bytes(serving.key_pem)
    lookup = webhook_lookup.KubernetesEtcdLookup(kubeconfig=str(sb.kubeconfig))
    server = webhook_server.WebhookServer("127.0.0.1", 0, cert_file, key_file, lookup)
    await server.start()
    try:
        sb.apiserver.register_service_address(namespace, service, webhook_config.PORT, "127.0.0.1", server.port)
        await sb.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
        await sb.apply(webhook_config.render_webhook_configurations(namespace, service, ca_bundle=ca.cert_pem))
        yield server
    finally:
        await server.stop()
        lookup.close()


@contextlib.asynccontextmanager
async def operator(sb: Any) -> AsyncIterator[operator_mod.OperatorProcess]:
    async with operator_mod.sandbox_component(sb, interval=1.0) as op:
        yield op


DEFAULTS = (webhook, operator)
