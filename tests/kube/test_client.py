"""The one client against the sandbox API server over real HTTP: verbs, status transactions, CRD kinds, informer.

We test these aspects: create/get/list (one namespace and all)/merge-patch/replace/delete (with a uid
precondition that protects a successor) and ``apply`` (create, then patch only what it owns, and only when that
changes something: :func:`opsmanager.kube.mergepatch.changes`); ``transact_status``
writes nothing for a no-op and drops keys a mutation removed; a kind from a CRD is usable once its CRD is added
to the client's table, an unknown kind is a ``ValueError``; the informer lists, then follows ADDED, MODIFIED and
DELETED; ``close()`` works from synchronous code after the loop that used the client has ended; a TLS error
before any answer is tried once more (not twice, and not a refused connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from opsmanager import kube
from opsmanager_sandbox import apiserver as sandbox_apiserver
from tests.polling import aeventually


@pytest.fixture
async def k(apiserver_async: sandbox_apiserver.APIServer) -> AsyncIterator[kube.Kube]:
    async with kube.Kube.for_url(apiserver_async.url) as client:
        await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
        yield client


def configmap(name: str, namespace: str = "default", **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": dict(data)}


async def test_verbs(k: kube.Kube) -> None:
    created = await k.create(configmap("a", x="1"))
    await k.create(configmap("b", namespace="other"))
    with pytest.raises(kube.AlreadyExists):
        await k.create(configmap("a"))
    assert (await k.get("v1", "ConfigMap", "default", "a") or {})["data"] == {"x": "1"}
    assert [o["metadata"]["name"] for o in await k.list("v1", "ConfigMap", "default")] == ["a"]
    everywhere = await k.list("v1", "ConfigMap", None)
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in everywhere} >= {("default", "a"),
                                                                                       ("other", "b")}
    assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in everywhere)
    patched = await k.patch("v1", "ConfigMap", "default", "a", {"data": {"y": "2"}})
    assert patched["data"] == {"x": "1", "y": "2"}
    stale = dict(created, data={"z": "3"})
    with pytest.raises(kube.Conflict):
        await k.replace(stale)  # its resourceVersion is the creation's
    applied = await k.apply(configmap("a", z="3"))
    assert applied["data"] == {"x": "1", "y": "2", "z": "3"}  # a merge patch of what apply owns
    again = await k.apply(configmap("a", z="3"))  # what apply owns is as wanted: no write
    assert again["metadata"]["resourceVersion"] == applied["metadata"]["resourceVersion"]
    with pytest.raises(kube.Conflict):
        await k.delete("v1", "ConfigMap", "default", "a", uid="not-its-uid")
    assert await k.delete("v1", "ConfigMap", "default", "a", uid=created["metadata"]["uid"]) is True
    assert await k.delete("v1", "ConfigMap", "default", "a") is False
    assert await k.get("v1", "ConfigMap", "default", "a") is None


async def test_transact_status(k: kube.Kube) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "etcd"}]}}
    await k.create(pod)
    first = await k.transact_status("v1", "Pod", "default", "p", lambda s: {**s, "message": "hello", "reason": "R"})
    assert first is not None and first["status"]["message"] == "hello"
    again = await k.transact_status("v1", "Pod", "default", "p", lambda s: s)
    assert again is not None and again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    dropped = await k.transact_status("v1", "Pod", "default", "p",
                                      lambda s: {key: v for key, v in s.items() if key != "reason"})
    assert dropped is not None and "reason" not in dropped["status"] and dropped["status"]["message"] == "hello"
    assert await k.transact_status("v1", "Pod", "default", "gone", lambda s: s) is None


async def test_crd_kinds_are_added_to_the_table(k: kube.Kube) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.test.opsmanager.dev"},
           "spec": {"group": "test.opsmanager.dev", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    widget = {"apiVersion": "test.opsmanager.dev/v1", "kind": "Widget",
              "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 1}}
    with pytest.raises(ValueError, match="unknown resource test.opsmanager.dev/v1 Widget"):
        await k.create(widget)
    await k.create(crd)
    res = k.resources.add_crd(crd)
    assert res.path("default", "w") == "/apis/test.opsmanager.dev/v1/namespaces/default/widgets/w"

    async def created() -> bool:
        try:
            await k.create(widget)
        except kube.NotFound:  # the CRD is being established
            return False
        return True

    await aeventually(created, what="a Widget created once its CRD is served")
    assert (await k.get("test.opsmanager.dev/v1", "Widget", "default", "w") or {})["spec"] == {"size": 1}


async def test_informer_follows_changes(k: kube.Kube) -> None:
    await k.create(configmap("before"))
    events: list[tuple[str, str]] = []
    informer = kube.Informer(k, "v1", "ConfigMap", namespace="default")
    informer.add_handler(lambda t, obj, old: events.append((t, obj["metadata"]["name"])))
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        assert events == [("ADDED", "before")]
        await k.create(configmap("after"))
        await k.patch("v1", "ConfigMap", "default", "before", {"data": {"k": "v"}})
        await k.delete("v1", "ConfigMap", "default", "after")
        await aeventually(lambda: ("DELETED", "after") in events, what="the informer saw the deletion")
        assert events == [("ADDED", "before"), ("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "after")]
        assert (informer.get("default", "before") or {}).get("data") == {"k": "v"}
        assert informer.get("default", "after") is None
    finally:
        await informer.stop()


def test_close_from_synchronous_code_after_the_loop_ended() -> None:
    async def use() -> kube.Kube:
        server = sandbox_apiserver.APIServer()
        await server.start()
        try:
            client = kube.Kube.for_url(server.url)
            assert await client.get("v1", "Namespace", None, "default") is not None
            return client
        finally:
            await server.stop()

    client = asyncio.run(use())
    closing = client.close()  # no loop is running: the session is detached, nothing to await
    assert client._sessions == {}

    async def await_it() -> None:
        await closing

    asyncio.run(await_it())


async def test_a_tls_error_before_an_answer_is_tried_once_more_and_a_second_one_raised(
        k: kube.Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    """An SSL error on the connection (an alert, or one OpenSSL left from another connection of the thread) before
    any answer: the call is made once more; a refused connection is not a TLS error and is not retried here."""
    import aiohttp

    session = k._session()
    real = session.request
    failures: list[Exception] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return real(*args, **kwargs)

    monkeypatch.setattr(session, "request", failing)
    alert = "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate expired (_ssl.c:2580)"
    failures[:] = [aiohttp.ClientOSError(1, alert)]
    await k.create(configmap("tls-once"))
    assert not failures and await k.get("v1", "ConfigMap", "default", "tls-once") is not None
    failures[:] = [aiohttp.ClientOSError(1, alert), aiohttp.ClientOSError(1, alert)]
    with pytest.raises(kube.Unavailable, match="CERTIFICATE_EXPIRED"):
        await k.get("v1", "ConfigMap", "default", "tls-once")
    failures[:] = [aiohttp.ClientOSError(111, "Connection refused")]
    with pytest.raises(kube.Unavailable, match="refused"):
        await k.get("v1", "ConfigMap", "default", "tls-once")
