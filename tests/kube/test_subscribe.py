"""Subscribers to the watch-fed client's caches (:meth:`opsmanager.kube.CachedKube.subscribe`), against the sandbox's
API server over real HTTP.

We test these aspects: a subscriber to a cached kind opens no watch and sees the cache's events — the client's own
writes included — narrowed to its namespace and labels; where no cache holds what it asked for, one watch is
opened for all subscribers of that selection, and reads still go to the API server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from opsmanager import kube
from opsmanager.kube import informer
from opsmanager_sandbox import apiserver as sandbox_apiserver
from tests.kube.test_cache import MANAGED, NS, Counter, configmap, secret
from tests.polling import aeventually

Seen = list[tuple[str, str]]


def recorder(seen: Seen) -> informer.EventHandler:
    def handler(etype: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        seen.append((etype, obj["metadata"]["name"]))

    return handler


def watches(server: sandbox_apiserver.APIServer, resource: str) -> list[str]:
    return [r.namespace for r in server.audit.records() if r.verb == "watch" and r.resource == resource]


@pytest.fixture
async def admin(apiserver_async: sandbox_apiserver.APIServer) -> AsyncIterator[kube.Kube]:
    client = kube.Kube.for_url(apiserver_async.url)
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_subscriber_to_a_cached_kind_opens_no_watch_and_sees_what_it_asked_for(
        apiserver_async: sandbox_apiserver.APIServer, admin: kube.Kube) -> None:
    client = kube.CachedKube(kube.Connection.for_url(apiserver_async.url))
    client.cache("v1", "Secret", label_selector=MANAGED)  # every namespace
    seen: Seen = []
    [source] = client.subscribe("v1", "Secret", recorder(seen), namespaces=[NS],
                                label_selector=f"{MANAGED},app.kubernetes.io/component=server")
    assert source is client.informer("v1", "Secret", NS)
    try:
        await client.start()
        assert await client.wait_synced(10)
        elsewhere = secret("elsewhere")
        elsewhere["metadata"]["namespace"] = "other"
        await admin.create(elsewhere)  # another namespace: the cache holds it, the subscriber did not ask for it
        await admin.create(secret("unlabelled"))  # the cache holds it, without the subscriber's label
        server = secret("server")
        server["metadata"]["labels"]["app.kubernetes.io/component"] = "server"
        await admin.create(server)
        # one watch stream delivers them in order: once "server" is seen, the others were passed over
        await aeventually(lambda: ("ADDED", "server") in seen, what="the watch's event")
        assert {name for _etype, name in seen} == {"server"}
        before = len(seen)
        await client.patch("v1", "Secret", NS, "server", {"data": {"k": "Yg=="}})
        assert seen[before:] == [("MODIFIED", "server")], "the client's own write is seen when it returns"
        assert watches(apiserver_async, "secrets") == [""], "one watch of Secrets: the cache's"
    finally:
        await client.stop()
        await client.aclose()


async def test_where_no_cache_holds_the_kind_subscribers_share_one_watch_and_reads_still_ask(
        apiserver_async: sandbox_apiserver.APIServer, admin: kube.Kube) -> None:
    client = kube.CachedKube(kube.Connection.for_url(apiserver_async.url))  # --no-watch-cache: nothing cached
    first: Seen = []
    second: Seen = []
    [a] = client.subscribe("v1", "ConfigMap", recorder(first), namespaces=[NS])
    [b] = client.subscribe("v1", "ConfigMap", recorder(second), namespaces=[NS])
    assert a is b and client.informer("v1", "ConfigMap", NS) is None
    try:
        await client.start()
        assert await client.wait_synced(10)
        await admin.create(configmap("cm"))
        await aeventually(lambda: first == second == [("ADDED", "cm")], what="both subscribers saw it")
        assert watches(apiserver_async, "configmaps") == [NS]
        counter = Counter(apiserver_async)
        assert await client.get("v1", "ConfigMap", NS, "cm") is not None
        asked = counter.since()
        assert [m for m, _p in asked] == ["GET"] and "configmaps/cm" in asked[0][1], \
            "a subscribers' watch is never read from"
    finally:
        await client.stop()
        await client.aclose()
