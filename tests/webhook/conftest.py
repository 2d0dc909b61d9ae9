"""Fixtures for the webhook tests: real certificates (``opsmanager.pki``) and the real HTTPS server.

Nothing is mocked: the server is ``opsmanager.webhook.server.WebhookServer`` on a loopback port with a certificate signed by
a test CA, and clients verify it against that CA. The Etcd lookup is the in-memory implementation (the
Kubernetes-API one has its own tests against an HTTP API server in ``test_lookup.py``).
"""

from __future__ import annotations

import pathlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from opsmanager import pki
from opsmanager.webhook import server, validation

DB = {
    "apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd",
    "metadata": {"name": "etcd-cluster", "namespace": "demo"},
    "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete",
             "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}}},
}


@pytest.fixture(scope="session")
def webhook_ca() -> pki.KeyPair:
    return pki.make_ca("webhook-test-ca")


def write_serving_pair(ca: pki.KeyPair, directory: pathlib.Path, *, serial: int | None = None) -> pki.KeyPair:
    pair = pki.make_leaf(ca, "opsmanager-webhook", dns_names=["localhost"], ip_addresses=["127.0.0.1"],
                         usages=["server"], serial=serial)
    (directory / "tls.key").write_bytes(pair.key_pem)
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    return pair


@pytest.fixture
def cert_dir(tmp_path: pathlib.Path, webhook_ca: pki.KeyPair) -> pathlib.Path:
    write_serving_pair(webhook_ca, tmp_path, serial=1001)
    return tmp_path


@pytest.fixture
def client_ssl(webhook_ca: pki.KeyPair) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=webhook_ca.cert_pem.decode())


@pytest.fixture
def lookup() -> validation.InMemoryEtcdLookup:
    return validation.InMemoryEtcdLookup([DB])


@pytest.fixture
async def webhook(cert_dir: pathlib.Path, lookup: validation.InMemoryEtcdLookup) -> AsyncIterator[server.WebhookServer]:
    srv = server.WebhookServer(cert_file=cert_dir / "tls.crt", key_file=cert_dir / "tls.key", lookup=lookup,
                               reload_interval=0.05)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def http(client_ssl: ssl.SSLContext) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as session:
        yield session


def review(obj: dict[str, Any] | None, *, operation: str = "CREATE", old: dict[str, Any] | None = None,
           uid: str = "uid-1", kind: str | None = None) -> dict[str, Any]:
    source = obj if obj is not None else old or {}
    meta = source.get("metadata", {})
    request: dict[str, Any] = {
        "uid": uid, "operation": operation, "namespace": meta.get("namespace", "demo"), "name": meta.get("name", ""),
        "object": obj, "oldObject": old,
    }
    if kind or source.get("kind"):
        request["kind"] = {"group": "", "version": "v1alpha1", "kind": kind or source.get("kind")}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
