"""A write that races another, like kube-apiserver's GuaranteedUpdate: a PATCH without a resourceVersion is applied
again on the latest version; one that names a resourceVersion (and a PUT) gets 409 Conflict.

The race is made deterministic: the first admission of the PATCH under test lets another client write first (the
window kube-apiserver has between reading the object and committing it)."""

from __future__ import annotations

from typing import Any

import pytest

from opsmanager import kube
from opsmanager_sandbox import apiserver as sandbox_apiserver

NS = "default"


async def racing(server: sandbox_apiserver.APIServer, monkeypatch: pytest.MonkeyPatch) -> kube.Kube:
    other = kube.Kube.for_url(server.url)
    await other.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": NS},
                        "data": {"a": "1"}})
    admit = server.cluster._admit
    raced: list[bool] = []

    async def admit_after_another_write(*args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(True)
            await other.patch("v1", "ConfigMap", NS, "cm", {"data": {"b": "by another client"}})
        return await admit(*args, **kwargs)

    monkeypatch.setattr(server.cluster, "_admit", admit_after_another_write)
    return other


async def test_a_patch_without_a_resource_version_is_applied_on_the_latest(
        apiserver_async: sandbox_apiserver.APIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    other = await racing(apiserver_async, monkeypatch)
    client = kube.Kube.for_url(apiserver_async.url)
    try:
        result = await client.patch("v1", "ConfigMap", NS, "cm", {"data": {"c": "mine"}})
        assert result["data"] == {"a": "1", "b": "by another client", "c": "mine"}
    finally:
        await client.aclose()
        await other.aclose()


async def test_a_patch_naming_a_resource_version_conflicts(apiserver_async: sandbox_apiserver.APIServer,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    other = await racing(apiserver_async, monkeypatch)
    client = kube.Kube.for_url(apiserver_async.url)
    try:
        rv = (await client.get("v1", "ConfigMap", NS, "cm"))["metadata"]["resourceVersion"]
        with pytest.raises(kube.Conflict):
            await client.patch("v1", "ConfigMap", NS, "cm", {"metadata": {"resourceVersion": rv},
                                                             "data": {"c": "mine"}})
        assert "c" not in (await client.get("v1", "ConfigMap", NS, "cm"))["data"]
    finally:
        await client.aclose()
        await other.aclose()
