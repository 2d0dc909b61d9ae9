"""End to end: while an EtcdOpsRequest holds an Etcd paused, ``kubectl`` cannot change its ``spec.tls``, and the
request's own ``UpdateDatabase`` write still goes through — the same webhook, the same API server.

What is real: the sandbox API server (in-process, over HTTP), our HTTPS webhook registered with it through a
``service`` clientConfig and a caBundle (its lookup reads the holding request through the one Kubernetes client),
``/usr/bin/kubectl``, and the ops engine driving an add-TLS request (every step; its writes go through the webhook
like anyone's). Played: the controllers and etcd of the fast engine suite (``tests/ops/world.py``), so the test
takes seconds.

We test these aspects: ``kubectl patch`` of ``spec.tls`` on the paused Etcd is refused with the message naming the
request and the fix, and nothing is stored; an edit of another field is not refused; the request still ends
``Successful`` with ``spec.tls`` written by the engine, and the Etcd is no longer paused.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from opsmanager import pki
from opsmanager.api import constants
from opsmanager.webhook import config, lookup, server
from tests.ops import world as w

pytestmark = pytest.mark.slow

ISSUER_A = {**w.ISSUER, "name": "ca-a"}
REFUSAL = ('The Etcd "db" is invalid: spec.tls: Forbidden: Etcd db is paused by EtcdOpsRequest add-tls; spec.tls '
           "can change only through an EtcdOpsRequest once add-tls has finished")


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[w.World]:
    """The fast engine world with the real webhook registered in its API server."""
    api, client = await w.start(tmp_path)
    ca = pki.make_ca("paused-tls-webhook-ca")
    pair = pki.make_leaf(ca, "opsmanager-webhook", usages=["server"],
                         dns_names=[f"{config.SERVICE}.{config.NAMESPACE}.svc"])
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    etcd_lookup = lookup.KubernetesEtcdLookup(kubeconfig=tmp_path / "kubeconfig")
    hook = server.WebhookServer(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key", lookup=etcd_lookup)
    await hook.start()
    try:
        api.register_service_address(config.NAMESPACE, config.SERVICE, config.PORT, "127.0.0.1", hook.port)
        await api.apply_objects(config.render(ca_bundle=ca.cert_pem))
        yield w.World(api, client)
    finally:
        await hook.stop()
        await etcd_lookup.aclose()
        client.close()
        await api.stop()


async def kubectl(tmp_path: Path, *args: str) -> tuple[int, str]:
    """``kubectl`` against the world's API server, as a subprocess that does not block the loop serving it."""
    proc = await asyncio.create_subprocess_exec(
        "/usr/bin/kubectl", "--kubeconfig", str(tmp_path / "kubeconfig"), "--cache-dir", str(tmp_path / "cache"),
        "-n", w.NS, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ, HOME=str(tmp_path)))
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode().strip()


async def test_kubectl_cannot_change_tls_under_a_request_but_the_request_can(world: w.World, tmp_path: Path) -> None:
    await world.etcd("db")
    await world.request("add-tls", "db", "ReconfigureTLS", tls={"issuerRef": ISSUER_A})
    tried: list[tuple[int, str]] = []

    async def meddle(_: int) -> None:
        if tried or not await world.is_paused("db"):
            return
        tried.append(await kubectl(tmp_path, "patch", "etcd", "db", "--type", "merge",
                                   "-p", json.dumps({"spec": {"tls": {"issuerRef": {"name": "someone-elses-ca"}}}})))
        tried.append(await kubectl(tmp_path, "label", "etcd", "db", "team=storage"))
        assert (await world.get_etcd("db"))["spec"].get("tls") is None  # the refused edit stored nothing

    req = await world.run("add-tls", between=meddle)

    assert len(tried) == 2, "the Etcd was never seen paused"
    (patch_rc, patch_out), (label_rc, label_out) = tried
    assert patch_rc != 0 and patch_out == REFUSAL  # kubectl renders the 422 from its causes
    assert label_rc == 0, label_out
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req)[-2:] == [constants.COND_UPDATE_DATABASE, constants.COND_SUCCESSFUL]
    db = await world.get_etcd("db")
    assert db["spec"]["tls"] == {"issuerRef": ISSUER_A}  # written by the engine, through the same webhook
    assert db["metadata"]["labels"] == {"team": "storage"}
    assert not await world.is_paused("db")
