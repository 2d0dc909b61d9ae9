"""The webhook's watch-fed lookup (``lookup.CachedEtcdLookup``) against the sandbox API server, which records every
request it answers (``APIServer.requests``), and the admission driver that fetches on a miss
(``admission.decide``).

We test these aspects: once synced, a lookup — and a whole review through the HTTPS server — is answered with no
API request; a miss (an object the cache does not have, or any object before the caches synced) is exactly one GET,
logged with the object's name, and 404 stays "not found"; a deleted Etcd leaves the cache; the driver fetches each
missing object once, turns a failed fetch into the rules' 503, and refuses a lookup that misses with no way to
fetch.
"""

from __future__ import annotations

import copy
import json
import logging
import pathlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from opsmanager import kube
from opsmanager.api import constants, crdgen
from opsmanager.webhook import admission, server, validation
from opsmanager.webhook import lookup as lookup_module
from opsmanager_sandbox.apiserver import server as apiserver_server
from tests import polling
from tests.webhook import conftest

ETCD_PATH = "/apis/opsmanager.dev/v1alpha1/namespaces/demo/etcds/"


@pytest.fixture
async def api() -> AsyncIterator[apiserver_server.APIServer]:
    srv = apiserver_server.APIServer()  # with cert-manager's CRDs: the webhook also watches Issuers
    await srv.start()
    try:
        await srv.apply_objects([crdgen.crd(spec) for spec in crdgen.CRDS])
        await srv.apply_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}])
        await srv.apply_objects([copy.deepcopy(conftest.DB)])
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def client(api: apiserver_server.APIServer) -> AsyncIterator[kube.Kube]:
    async with kube.Kube.for_url(api.url) as k:
        yield k


@pytest.fixture
async def cached(client: kube.Kube) -> AsyncIterator[lookup_module.CachedEtcdLookup]:
    look = lookup_module.CachedEtcdLookup(client)
    await look.start()
    try:
        assert await look.wait_synced(10), "the caches did not sync"
        yield look
    finally:
        await look.aclose()


def reads(api: apiserver_server.APIServer) -> list[tuple[str, str, int]]:
    """Every request answered so far but the informers' long-running watches (recorded when they end)."""
    return [r for r in api.requests if "watch=" not in r[1]]


def ops(db: str) -> dict[str, Any]:
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": "r", "namespace": "demo"},
            "spec": {"type": "Restart", "databaseRef": {"name": db}}}


async def test_a_synced_cache_answers_with_no_api_request(
    api: apiserver_server.APIServer, cached: lookup_module.CachedEtcdLookup, cert_dir: pathlib.Path,
    client_ssl: ssl.SSLContext,
) -> None:
    before = len(reads(api))
    assert cached.get_etcd("demo", "etcd-cluster")["spec"]["tls"] == conftest.DB["spec"]["tls"]
    assert (await cached.aget_etcd("demo", "etcd-cluster"))["spec"]["tls"] == conftest.DB["spec"]["tls"]
    async with server.WebhookServer(cert_file=cert_dir / "tls.crt", key_file=cert_dir / "tls.key",
                                    lookup=cached) as srv, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as http:
        async with http.post(srv.url + "/validate-etcdopsrequest",
                             json=conftest.review(ops("etcd-cluster"))) as resp:
            assert (await resp.json())["response"]["allowed"] is True
    assert reads(api)[before:] == []
    assert cached.fallbacks == 0


async def test_a_miss_is_exactly_one_get_and_says_so(
    api: apiserver_server.APIServer, client: kube.Kube, cached: lookup_module.CachedEtcdLookup,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="opsmanager.webhook.lookup")
    # an Etcd the cache has not seen yet: freeze the Etcd cache (stop its watch), then create one
    await cached._informers[constants.ETCD_KIND].stop()
    fresh = copy.deepcopy(conftest.DB)
    fresh["metadata"]["name"] = "fresh"
    await client.create(fresh)
    before = len(reads(api))
    verdict = await admission.decide(admission.ENDPOINTS["/validate-etcdopsrequest"],
                                     admission.parse_review(json.dumps(conftest.review(ops("fresh"))).encode(),
                                                            admission.ENDPOINTS["/validate-etcdopsrequest"]),
                                     cached)
    assert verdict.allowed
    assert reads(api)[before:] == [("GET", ETCD_PATH + "fresh", 200)]
    assert "Etcd demo/fresh is not in the cache: one GET" in caplog.text
    # a missing Etcd: one GET, 404, still "not found"
    before = len(reads(api))
    assert await cached.aget_etcd("demo", "nope") is None
    assert reads(api)[before:] == [("GET", ETCD_PATH + "nope", 404)]
    assert cached.fallbacks == 2


ISSUER = {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "ca", "namespace": "demo"},
          "spec": {"ca": {"secretName": "ca-keypair"}}}


async def test_issuers_come_from_their_cache_with_no_api_request(
    api: apiserver_server.APIServer, client: kube.Kube, cached: lookup_module.CachedEtcdLookup
) -> None:
    await client.create(copy.deepcopy(ISSUER))
    await polling.aeventually(lambda: cached.aissuer(constants.ISSUER_KIND, "demo", "ca"), timeout=10,
                              what="the new Issuer in the webhook's cache")
    before = len(reads(api))
    found = await cached.aissuer(constants.ISSUER_KIND, "demo", "ca")
    assert found is not None and found["spec"] == ISSUER["spec"]
    assert await cached.aissuer(constants.ISSUER_KIND, "other", "ca") is None
    assert await cached.aissuer(constants.CLUSTER_ISSUER_KIND, "demo", "ca") is None
    # a review naming a missing issuer: the warning, from the cache
    request = ops("etcd-cluster")
    request["spec"] = {"type": "ReconfigureTLS", "databaseRef": {"name": "etcd-cluster"},
                       "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "missing"}}}
    endpoint = admission.ENDPOINTS["/validate-etcdopsrequest"]
    verdict = await admission.decide(endpoint, admission.parse_review(
        json.dumps(conftest.review(request)).encode(), endpoint), cached)
    assert verdict.allowed, verdict
    assert any("Issuer demo/missing does not exist yet" in w for w in verdict.warnings), verdict
    assert reads(api)[before:] == []
    assert cached.fallbacks == 0


async def test_before_the_issuer_cache_syncs_an_issuer_is_one_get(
    api: apiserver_server.APIServer, client: kube.Kube
) -> None:
    look = lookup_module.CachedEtcdLookup(client)  # not started: nothing cached
    await client.create(copy.deepcopy(ISSUER))
    before = len(reads(api))
    assert await look.aissuer(constants.ISSUER_KIND, "demo", "ca") is not None
    assert reads(api)[before:] == [("GET", "/apis/cert-manager.io/v1/namespaces/demo/issuers/ca", 200)]
    assert look.fallbacks == 1


async def test_before_the_caches_sync_every_lookup_is_one_get(
    api: apiserver_server.APIServer, client: kube.Kube
) -> None:
    look = lookup_module.CachedEtcdLookup(client)  # not started: nothing cached
    assert not look.synced
    with pytest.raises(validation.NotCached, match="has not synced"):
        look.get_etcd("demo", "etcd-cluster")
    before = len(reads(api))
    assert (await look.aget_etcd("demo", "etcd-cluster"))["spec"]["tls"] == conftest.DB["spec"]["tls"]
    assert reads(api)[before:] == [("GET", ETCD_PATH + "etcd-cluster", 200)]


async def test_a_deleted_etcd_leaves_the_cache(
    api: apiserver_server.APIServer, client: kube.Kube, cached: lookup_module.CachedEtcdLookup
) -> None:
    assert cached.get_etcd("demo", "etcd-cluster") is not None
    await client.delete(constants.ETCD_API_VERSION, constants.ETCD_KIND, "demo", "etcd-cluster")

    def gone() -> bool:
        try:
            cached.get_etcd("demo", "etcd-cluster")
        except validation.NotCached:
            return True
        return False

    await polling.aeventually(gone, what="the deleted Etcd to leave the cache")
    assert await cached.aget_etcd("demo", "etcd-cluster") is None  # the one GET says 404


class Fetching:
    """A lookup that has nothing in memory and counts its fetches."""

    def __init__(self, objects: dict[tuple[str, str, str], dict[str, Any] | None] | None = None,
                 fail: bool = False) -> None:
        self.objects = objects or {}
        self.fail = fail
        self.fetched: list[tuple[str, str, str]] = []

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise validation.NotCached(constants.ETCD_KIND, namespace, name, "not in the cache")

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise validation.NotCached(constants.OPS_KIND, namespace, name, "not in the cache")

    async def afetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.fetched.append((kind, namespace, name))
        if self.fail:
            raise validation.EtcdLookupError("connection refused")
        return self.objects.get((kind, namespace, name))


async def test_the_driver_fetches_each_miss_once_and_reports_a_failed_fetch() -> None:
    endpoint = admission.ENDPOINTS["/validate-etcdopsrequest"]
    request = admission.parse_review(json.dumps(conftest.review(ops("etcd-cluster"))).encode(), endpoint)
    look = Fetching({(constants.ETCD_KIND, "demo", "etcd-cluster"): conftest.DB})
    assert (await admission.decide(endpoint, request, look)).allowed
    assert look.fetched == [(constants.ETCD_KIND, "demo", "etcd-cluster")]
    missing = Fetching()
    verdict = await admission.decide(endpoint, request, missing)
    assert not verdict.allowed and verdict.message.endswith("spec.databaseRef demo/etcd-cluster is invalid or not found")
    failing = Fetching(fail=True)
    verdict = await admission.decide(endpoint, request, failing)
    assert verdict.code == 503 and "looking up Etcd demo/etcd-cluster failed: connection refused" in verdict.message
    assert failing.fetched == [(constants.ETCD_KIND, "demo", "etcd-cluster")]


async def test_a_miss_with_no_way_to_fetch_is_a_bug() -> None:
    class NoFetch:
        def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
            raise validation.NotCached(constants.ETCD_KIND, namespace, name, "not in the cache")

        def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
            return None

    endpoint = admission.ENDPOINTS["/validate-etcdopsrequest"]
    request = admission.parse_review(json.dumps(conftest.review(ops("etcd-cluster"))).encode(), endpoint)
    with pytest.raises(validation.NotCached):
        await admission.decide(endpoint, request, NoFetch())
