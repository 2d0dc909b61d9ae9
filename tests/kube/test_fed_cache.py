"""A cache fed by another watch of the process (:class:`opsmanager.kube.informer.FedInformer`): the operator's
kopf watch of Etcds and EtcdOpsRequests feeds the client's caches of them, so each kind is watched once.

We test these aspects, against the sandbox's API server over real HTTP: the fed cache lists but opens no watch;
fed events (added, modified, deleted) are what reads answer, with no request; a list asked for by the feeding
watch's own listing drops an object deleted unseen; a list never brings back an object whose deletion was fed, nor
replaces a later fed version by the listed one, nor drops an object fed after the list was taken; a tombstone goes
once a list reflects the deletion; the operator registers a coroutine kopf event handler per fed kind.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest

from opsmanager import kube
from opsmanager.kube import informer
from opsmanager_sandbox import apiserver as sandbox_apiserver
from tests.kube.test_cache import Counter
from tests.polling import aeventually

NS = "default"


def configmap(name: str, value: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS},
            "data": {"a": value}}


@pytest.fixture
async def fed(apiserver_async: sandbox_apiserver.APIServer) -> AsyncIterator[tuple[kube.CachedKube, kube.Kube,
                                                                                    Counter]]:
    admin = kube.Kube.for_url(apiserver_async.url)
    await admin.create(configmap("listed"))
    client = kube.CachedKube(kube.Connection.for_url(apiserver_async.url))
    (source,) = client.cache("v1", "ConfigMap", namespaces=[NS], fed=True)
    assert isinstance(source, informer.FedInformer)
    await client.start()
    assert await client.wait_synced(10)
    try:
        yield client, admin, Counter(apiserver_async)
    finally:
        await client.stop()
        await client.close()
        await admin.close()


async def test_a_fed_cache_lists_once_and_opens_no_watch(apiserver_async: sandbox_apiserver.APIServer,
                                                         fed: tuple[kube.CachedKube, kube.Kube, Counter]) -> None:
    client, _admin, counter = fed
    watches = [p for _m, p, _ in apiserver_async.requests if "configmaps" in p and "watch=true" in p]
    assert watches == []
    counter.reset()
    assert (await client.get("v1", "ConfigMap", NS, "listed")) is not None
    assert counter.since() == []


async def test_fed_events_are_what_reads_answer(fed: tuple[kube.CachedKube, kube.Kube, Counter]) -> None:
    client, admin, counter = fed
    made = await admin.create(configmap("new"))
    counter.reset()
    assert client.feed("ADDED", made)
    assert (await client.get("v1", "ConfigMap", NS, "new"))["data"] == {"a": "1"}
    changed = await admin.patch("v1", "ConfigMap", NS, "new", {"data": {"a": "2"}})
    client.feed("MODIFIED", changed)
    assert (await client.get("v1", "ConfigMap", NS, "new"))["data"] == {"a": "2"}
    assert [o["metadata"]["name"] for o in await client.list("v1", "ConfigMap", NS)] == ["listed", "new"]
    await admin.delete("v1", "ConfigMap", NS, "new")
    client.feed("DELETED", changed)
    assert [o["metadata"]["name"] for o in await client.list("v1", "ConfigMap", NS)] == ["listed"]
    assert [m for m, _p in counter.since() if m == "GET"] == [], "reads came from the cache"
    assert not client.feed("ADDED", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})


async def test_the_feeding_watchs_listing_makes_the_cache_list_and_drop_what_was_deleted_unseen(
        fed: tuple[kube.CachedKube, kube.Kube, Counter]) -> None:
    client, admin, _counter = fed
    gone = await admin.create(configmap("gone"))
    client.feed("ADDED", gone)
    await admin.delete("v1", "ConfigMap", NS, "gone")  # its DELETED never reaches the feed (a restarted watch)
    listed = await admin.get("v1", "ConfigMap", NS, "listed")
    assert listed is not None
    client.feed(None, listed)  # the feeding watch lists again after its restart

    async def dropped() -> bool:
        return [o["metadata"]["name"] for o in await client.list("v1", "ConfigMap", NS)] == ["listed"]

    await aeventually(dropped, timeout=10, what="the object deleted unseen left the cache")


async def test_a_list_never_undoes_what_the_feed_said(fed: tuple[kube.CachedKube, kube.Kube, Counter]) -> None:
    client, admin, _counter = fed
    (source,) = [s for s in client.informers() if isinstance(s, informer.FedInformer)]
    stale = await admin.get("v1", "ConfigMap", NS, "listed")
    assert stale is not None
    later = await admin.patch("v1", "ConfigMap", NS, "listed", {"data": {"a": "later"}})
    client.feed("MODIFIED", later)
    doomed = await admin.create(configmap("doomed"))
    client.feed("ADDED", doomed)
    await admin.delete("v1", "ConfigMap", NS, "doomed")
    deleted = {**doomed, "metadata": {**doomed["metadata"],
                                      "resourceVersion": str(int(doomed["metadata"]["resourceVersion"]) + 1)}}
    client.feed("DELETED", deleted)

    born = await admin.create(configmap("born"))
    client.feed("ADDED", born)
    listed_at = stale["metadata"]["resourceVersion"]

    # a list taken before these events (what a slow list can return): the later version, the deletion and the
    # object created after it all win over the list
    async def old_list(*_a: Any, **_k: Any) -> tuple[list[dict[str, Any]], str]:
        return [stale, doomed], listed_at

    source.client.list_for_watch = old_list  # type: ignore[method-assign]
    await source._relist()
    assert source.get(NS, "listed")["data"] == {"a": "later"}
    assert source.get(NS, "doomed") is None
    assert source.get(NS, "born") is not None, "an object fed after the list was taken was dropped"
    # our own read of the deleted object (an older version) does not bring it back either
    assert not source.observe(dict(doomed)) and source.get(NS, "doomed") is None

    # a list taken after the deletion makes its tombstone unnecessary: it goes
    async def new_list(*_a: Any, **_k: Any) -> tuple[list[dict[str, Any]], str]:
        return [later, born], deleted["metadata"]["resourceVersion"]

    source.client.list_for_watch = new_list  # type: ignore[method-assign]
    await source._relist()
    assert source._tombstones == {}
    assert sorted(o["metadata"]["name"] for o in source.items(NS)) == ["born", "listed"]


def test_the_operator_feeds_its_caches_from_kopfs_watch() -> None:
    from opsmanager import operator
    from opsmanager.api import constants

    assert set(operator.FED_KINDS) == {(constants.ETCD_API_VERSION, constants.ETCD_KIND),
                                       (constants.OPS_API_VERSION, constants.OPS_KIND)}
    registry = operator.build_registry(None, kube.CachedKube(kube.Connection.for_url("http://127.0.0.1:1")),
                                       interval=60.0)
    assert isinstance(registry, kopf.OperatorRegistry)
    feeders = {h.id: h.fn for h in registry._watching.get_all_handlers() if h.id.startswith("opsmanager-cache-")}
    assert set(feeders) == {f"opsmanager-cache-{constants.ETCD_PLURAL}", f"opsmanager-cache-{constants.OPS_PLURAL}"}
    # a coroutine: kopf would run a plain function in a worker thread, off the loop the caches belong to
    assert all(inspect.iscoroutinefunction(fn) for fn in feeders.values())
