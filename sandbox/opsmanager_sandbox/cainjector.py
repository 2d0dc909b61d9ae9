"""cert-manager's cainjector in the sandbox: CA bundles into webhook configurations.

A Validating/MutatingWebhookConfiguration annotated ``cert-manager.io/inject-ca-from: <namespace>/<certificate>``
gets the ``ca.crt`` of that Certificate's Secret (``spec.secretName``) as the ``caBundle`` of every webhook's
``clientConfig``; ``cert-manager.io/inject-ca-from-secret: <namespace>/<secret>`` names the Secret directly. It
is re-injected whenever the configuration, the Certificate or the Secret changes (a renewed CA reaches the API
server's webhook calls without anyone editing the configuration). Nothing is injected while the Secret has no
``ca.crt`` (the Certificate is not issued yet): the webhooks stay without a bundle, as with the real cainjector.
CustomResourceDefinitions and APIServices, which the real cainjector also serves, are not handled (nothing in
the product's bundle needs them).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Any

from opsmanager import kube

log = logging.getLogger(__name__)

Obj = dict[str, Any]

INJECT_FROM_CERTIFICATE = "cert-manager.io/inject-ca-from"
INJECT_FROM_SECRET = "cert-manager.io/inject-ca-from-secret"
KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def _split(ref: str) -> tuple[str, str] | None:
    namespace, _, name = ref.partition("/")
    return (namespace, name) if namespace and name else None


def injected(config: Obj, ca_bundle: str) -> Obj | None:
    """``config`` with ``ca_bundle`` (base64) in every webhook's clientConfig; None when it already has it."""
    hooks = config.get("webhooks") or []
    if all((h.get("clientConfig") or {}).get("caBundle") == ca_bundle for h in hooks):
        return None
    new = dict(config, webhooks=[dict(h, clientConfig=dict(h.get("clientConfig") or {}, caBundle=ca_bundle))
                                 for h in hooks])
    return new


class Controller:
    """Watches the webhook configurations, Certificates and Secrets; injects on every change (see module doc)."""

    def __init__(self, client: kube.Kube) -> None:
        self.client = client
        self.configs = {kind: kube.Informer(client, "admissionregistration.k8s.io/v1", kind) for kind in KINDS}
        self.certificates = kube.Informer(client, "cert-manager.io/v1", "Certificate")
        self.secrets = kube.Informer(client, "v1", "Secret")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def _informers(self) -> list[kube.Informer]:
        return [*self.configs.values(), self.certificates, self.secrets]

    async def start(self) -> None:
        for inf in self._informers:
            inf.add_handler(lambda t, o, old: self._wake.set())
            inf.start()
        for inf in self._informers:
            await inf.synced.wait()
        self._wake.set()
        self._task = asyncio.create_task(self._loop(), name="cainjector")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for inf in self._informers:
            await inf.stop()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for kind, informer in self.configs.items():
                for config in informer.items():
                    try:
                        await self.inject(kind, config)
                    except kube.KubeError as exc:  # a conflict or a deleted object: the next event retries
                        log.info("cainjector: %s %s: %s", kind, config["metadata"]["name"], exc)
                        self._wake.set()
            await asyncio.sleep(0.05)  # coalesce bursts of events

    def ca_for(self, annotations: dict[str, str]) -> bytes | None:
        """The CA (PEM) an annotated configuration asks for, when its Secret holds one."""
        secret_ref: tuple[str, str] | None = None
        if INJECT_FROM_SECRET in annotations:
            secret_ref = _split(annotations[INJECT_FROM_SECRET])
        elif INJECT_FROM_CERTIFICATE in annotations:
            cert_ref = _split(annotations[INJECT_FROM_CERTIFICATE])
            cert = self.certificates.get(*cert_ref) if cert_ref else None
            secret_name = ((cert or {}).get("spec") or {}).get("secretName")
            secret_ref = (cert_ref[0], secret_name) if cert_ref and secret_name else None
        if secret_ref is None:
            return None
        secret = self.secrets.get(*secret_ref)
        data = ((secret or {}).get("data") or {}).get("ca.crt")
        return base64.b64decode(data) if data else None

    async def inject(self, kind: str, config: Obj) -> None:
        ca = self.ca_for((config.get("metadata") or {}).get("annotations") or {})
        if ca is None:
            return
        new = injected(config, base64.b64encode(ca).decode())
        if new is not None:
            await self.client.replace(new)
            log.info("cainjector: injected the CA into %s %s", kind, config["metadata"]["name"])
