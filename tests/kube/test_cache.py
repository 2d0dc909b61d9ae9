"""The watch-fed client (:class:`opsmanager.kube.CachedKube`) against the sandbox's API server over real HTTP.

Each test counts the requests the server answered (``APIServer.requests``), so "read from the cache" means "no
request reached the server", not "the code took a branch".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from opsmanager import kube
from opsmanager_sandbox import apiserver as sandbox_apiserver
from tests.polling import aeventually

NS = "default"
MANAGED = "app.kubernetes.io/managed-by=opsmanager"


def secret(name: str, *, managed: bool = True, value: str = "YQ==") -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "opsmanager"} if managed else {"team": "a"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "data": {"k": value}}


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": {"a": "1"}}


class Counter:
    """Requests the API server answered since the last :meth:`reset`, watches excluded (they stay open)."""

    def __init__(self, server: sandbox_apiserver.APIServer) -> None:
        self.server = server
        self.mark = len(server.requests)

    def reset(self) -> None:
        self.mark = len(self.server.requests)

    def since(self) -> list[tuple[str, str]]:
        answered = list(self.server.requests)  # a bounded deque (20,000): far more than a test makes
        return [(m, p) for m, p, _ in answered[self.mark:] if "watch=true" not in p]


@pytest.fixture
async def cached(apiserver_async: sandbox_apiserver.APIServer) -> AsyncIterator[tuple[kube.CachedKube, Counter]]:
    admin = kube.Kube.for_url(apiserver_async.url)
    await admin.create(secret("ours"))
    await admin.create(secret("users", managed=False))
    await admin.create(configmap("cm"))
    client = kube.CachedKube(kube.Connection.for_url(apiserver_async.url))
    client.cache("v1", "Secret", label_selector=MANAGED)
    client.cache("v1", "ConfigMap", namespaces=[NS])
    client.track_by_name("v1", "Secret")
    await client.start()
    assert await client.wait_synced(10)
    try:
        yield client, Counter(apiserver_async)
    finally:
        await client.stop()
        await client.aclose()
        await admin.aclose()


async def test_reads_of_cached_objects_reach_no_server(cached: tuple[kube.CachedKube, Counter]) -> None:
    client, counter = cached
    counter.reset()
    for _ in range(20):
        assert (await client.get("v1", "Secret", NS, "ours"))["data"] == {"k": "YQ=="}
        assert (await client.get("v1", "ConfigMap", NS, "cm"))["data"] == {"a": "1"}
        assert [o["metadata"]["name"] for o in await client.list("v1", "Secret", NS, label_selector=MANAGED)] == [
            "ours"]
    assert counter.since() == []


async def test_callers_get_copies(cached: tuple[kube.CachedKube, Counter]) -> None:
    client, _ = cached
    obj = await client.get("v1", "ConfigMap", NS, "cm")
    obj["data"]["a"] = "changed by the caller"
    assert (await client.get("v1", "ConfigMap", NS, "cm"))["data"] == {"a": "1"}


async def test_a_write_is_read_back_at_once(cached: tuple[kube.CachedKube, Counter]) -> None:
    client, counter = cached
    for informer in client.informers():
        await informer.stop()  # no watch event can bring the change: only the write's own answer
    await client.patch("v1", "ConfigMap", NS, "cm", {"data": {"a": "2"}})
    counter.reset()
    assert (await client.get("v1", "ConfigMap", NS, "cm"))["data"] == {"a": "2"}
    created = await client.create(configmap("new"))
    assert (await client.get("v1", "ConfigMap", NS, "new"))["metadata"]["uid"] == created["metadata"]["uid"]
    assert counter.since() == [("POST", "/api/v1/namespaces/default/configmaps")]


async def test_changes_by_others_arrive_through_the_watch(cached: tuple[kube.CachedKube, Counter],
                                                          apiserver_async: sandbox_apiserver.APIServer) -> None:
    client, _ = cached
    other = kube.Kube.for_url(apiserver_async.url)
    try:
        await other.patch("v1", "Secret", NS, "ours", {"data": {"k": "Yg=="}})

        async def changed() -> bool:
            return (await client.get("v1", "Secret", NS, "ours"))["data"]["k"] == "Yg=="
        await aeventually(changed, timeout=5)
        await other.delete("v1", "ConfigMap", NS, "cm")

        async def gone() -> bool:
            return not [o for o in await client.list("v1", "ConfigMap", NS) if o["metadata"]["name"] == "cm"]
        await aeventually(gone, timeout=5)
    finally:
        await other.aclose()


async def test_an_object_outside_the_selection_is_asked_once_then_watched_by_name(
        cached: tuple[kube.CachedKube, Counter], apiserver_async: sandbox_apiserver.APIServer) -> None:
    client, counter = cached
    counter.reset()
    assert (await client.get("v1", "Secret", NS, "users"))["metadata"]["labels"] == {"team": "a"}
    assert counter.since() == [("GET", "/api/v1/namespaces/default/secrets/users")]

    async def watched() -> bool:
        counter.reset()
        await client.get("v1", "Secret", NS, "users")
        return counter.since() == []
    await aeventually(watched, timeout=5)
    other = kube.Kube.for_url(apiserver_async.url)
    try:
        await other.patch("v1", "Secret", NS, "users", {"data": {"k": "Yw=="}})

        async def changed() -> bool:
            return (await client.get("v1", "Secret", NS, "users"))["data"]["k"] == "Yw=="
        await aeventually(changed, timeout=5)
        await other.delete("v1", "Secret", NS, "users")

        async def absent() -> bool:
            return await client.get("v1", "Secret", NS, "users") is None
        await aeventually(absent, timeout=5)
        counter.reset()
        assert await client.get("v1", "Secret", NS, "users") is None  # the named watch answers "absent" too
        assert counter.since() == []
    finally:
        await other.aclose()


async def test_a_miss_of_a_label_selected_kind_asks_the_server(cached: tuple[kube.CachedKube, Counter]) -> None:
    client, counter = cached
    counter.reset()
    assert await client.get("v1", "Secret", NS, "not-there") is None
    assert counter.since() == [("GET", "/api/v1/namespaces/default/secrets/not-there")]


async def test_a_list_the_cache_cannot_answer_goes_to_the_server(cached: tuple[kube.CachedKube, Counter]) -> None:
    client, counter = cached
    counter.reset()
    names = sorted(o["metadata"]["name"] for o in await client.list("v1", "Secret", NS))  # wider than the cache
    assert names == ["ours", "users"]
    await client.list("v1", "Secret", NS, label_selector="team!=b")  # not an equality selector
    assert len(counter.since()) == 2


async def test_a_conflict_makes_the_next_read_fresh(cached: tuple[kube.CachedKube, Counter],
                                                    apiserver_async: sandbox_apiserver.APIServer) -> None:
    client, counter = cached
    for informer in client.informers():
        await informer.stop()  # freeze the cache: what the watch would bring later is not there
    other = kube.Kube.for_url(apiserver_async.url)
    try:
        await other.patch("v1", "ConfigMap", NS, "cm", {"data": {"a": "by another writer"}})
    finally:
        await other.aclose()

    def mutate(status: dict[str, Any]) -> dict[str, Any]:
        return status

    stale = await client.get("v1", "ConfigMap", NS, "cm")
    assert stale["data"] == {"a": "1"}
    with pytest.raises(kube.Conflict):
        await client.patch("v1", "ConfigMap", NS, "cm", {"metadata": {
            "resourceVersion": stale["metadata"]["resourceVersion"]}, "data": {"a": "lost update"}})
    counter.reset()
    fresh = await client.get("v1", "ConfigMap", NS, "cm")
    assert fresh["data"] == {"a": "by another writer"}
    assert counter.since() == [("GET", "/api/v1/namespaces/default/configmaps/cm")]
    await client.patch("v1", "ConfigMap", NS, "cm", {"metadata": {
        "resourceVersion": fresh["metadata"]["resourceVersion"]}, "data": {"a": "3"}})
    assert (await client.get("v1", "ConfigMap", NS, "cm"))["data"] == {"a": "3"}


def test_equality_selectors_only() -> None:
    # which selectors are equalities: tests/kube/test_selectors.py
    with pytest.raises(ValueError, match="equality label selectors"):
        kube.CachedKube(kube.Connection.for_url("http://127.0.0.1:1")).cache("v1", "Secret", label_selector="a!=b")


async def test_a_change_wakes_the_subscribers_of_its_owner(cached: tuple[kube.CachedKube, Counter],
                                                          apiserver_async: sandbox_apiserver.APIServer) -> None:
    from opsmanager.kube import cache

    client, _ = cached
    wakeups = client.use_wakeups(lambda obj: (obj["metadata"].get("namespace") or "",
                                              obj["metadata"]["name"].split("-")[0]))
    only_data_a = lambda _e, obj, _old: (obj.get("data") or {}).get("a") == "woken"  # noqa: E731
    other = kube.Kube.for_url(apiserver_async.url)
    try:
        with wakeups.subscribe(NS, "cm") as cm_changed, wakeups.subscribe(NS, "ours") as ours_changed, \
                wakeups.subscribe(NS, "cm", only_data_a) as filtered:
            await other.patch("v1", "ConfigMap", NS, "cm", {"data": {"a": "2"}})
            assert await cache.wait(cm_changed, 5.0)
            assert not ours_changed.is_set() and not filtered.is_set()
            cm_changed.clear()
            await other.patch("v1", "ConfigMap", NS, "cm", {"data": {"a": "woken"}})
            assert await cache.wait(filtered, 5.0) and cm_changed.is_set()
            assert not await cache.wait(ours_changed, 0.2)
        assert wakeups._subscribers == {}, "subscriptions end with their block"
    finally:
        await other.aclose()


async def test_absent_is_believed_briefly_and_a_collision_forgets_it(
        cached: tuple[kube.CachedKube, Counter], apiserver_async: sandbox_apiserver.APIServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from opsmanager.kube import cache

    client, counter = cached
    counter.reset()
    assert await client.get("v1", "Secret", NS, "later") is None
    assert await client.get("v1", "Secret", NS, "later") is None  # believed: no second request
    assert len(counter.since()) == 1
    other = kube.Kube.for_url(apiserver_async.url)
    try:
        await other.create(secret("later", managed=False))  # created by someone else, without our label
    finally:
        await other.aclose()
    with pytest.raises(kube.AlreadyExists):
        await client.create(secret("later"))
    counter.reset()
    assert (await client.get("v1", "Secret", NS, "later"))["metadata"]["labels"] == {"team": "a"}
    assert len(counter.since()) == 1, "the collision sent the next read to the server"
    monkeypatch.setattr(cache, "ABSENT_TTL", 0.0)
    counter.reset()
    assert await client.get("v1", "Secret", NS, "gone-for-good") is None
    assert await client.get("v1", "Secret", NS, "gone-for-good") is None
    asked = [p for _m, p in counter.since() if p.endswith("/gone-for-good")]
    assert len(asked) == 2, "past the TTL, absent is asked again"


def test_copy_json_is_a_deep_independent_copy_and_falls_back_for_other_types() -> None:
    import datetime

    from opsmanager.kube.cache import copy_json

    obj = {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"args": ["--a", 1, 2.5, True, None]},
           "status": {"conditions": [{"type": "Ready"}]}}
    copied = copy_json(obj)
    assert copied == obj
    copied["metadata"]["labels"]["x"] = "2"
    copied["spec"]["args"].append("--b")
    copied["status"]["conditions"][0]["type"] = "Gone"
    assert obj == {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"args": ["--a", 1, 2.5, True, None]},
                   "status": {"conditions": [{"type": "Ready"}]}}
    when = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)  # marshal cannot write it: deepcopy does
    odd = {"at": when, "nested": [{"at": when}]}
    odd_copy = copy_json(odd)
    assert odd_copy == odd and odd_copy["nested"] is not odd["nested"]


async def test_a_list_by_label_follows_label_changes_and_deletions(cached: tuple[kube.CachedKube, Counter],
                                                                   apiserver_async: sandbox_apiserver.APIServer) -> None:
    """The informer's label index (a list by selector looks only at the objects with one of its labels) answers
    as a scan of every object would, through relabels, deletions and relists."""
    client, counter = cached
    other = kube.Kube.for_url(apiserver_async.url)

    async def names(selector: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in await client.list("v1", "ConfigMap", NS,
                                                                         label_selector=selector))
    try:
        for name, db in (("a-0", "a"), ("a-1", "a"), ("b-0", "b")):
            cm = configmap(name)
            cm["metadata"]["labels"] = {"app": "etcd", "instance": db}
            await other.create(cm)

        async def listed() -> bool:
            return await names("app=etcd") == ["a-0", "a-1", "b-0"]
        await aeventually(listed, timeout=5)
        assert await names("app=etcd,instance=a") == ["a-0", "a-1"] and await names("instance=b") == ["b-0"]
        await other.patch("v1", "ConfigMap", NS, "a-1", {"metadata": {"labels": {"instance": "b"}}})
        await other.delete("v1", "ConfigMap", NS, "b-0")

        async def moved() -> bool:
            return await names("instance=b") == ["a-1"] and await names("instance=a") == ["a-0"]
        await aeventually(moved, timeout=5)
        assert await names("app=etcd,instance=b") == ["a-1"] and await names("instance=c") == []
        informer = client.informer("v1", "ConfigMap", NS)
        assert informer is not None
        await informer._relist()  # the index is rebuilt with the cache
        counter.reset()
        assert await names("instance=b") == ["a-1"] and await names("app=etcd") == ["a-0", "a-1"]
        assert counter.since() == [], "a list by label went to the server"
    finally:
        await other.aclose()
