"""Contract test: a kopf operator against the sandbox API server (the scenario of the kopf/kmock probe,
Exp 2), run in-process with ``KopfRunner`` and logged in through the sandbox's kubeconfig.

The operator has creation/update/field/deletion handlers (so kopf adds its finalizer with a JSON patch
guarded by a ``test`` of the resourceVersion), a handler raising ``TemporaryError`` until its third try, a
timer and a daemon patching status, status patches through the status subresource and a ``kopf.info``
event. We check every handler ran exactly as often as it should (no duplicate calls, which a server
without resourceVersions causes), the finalizer was added and released, and the operator exits 0.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any

import kopf
import kubernetes.client as k
import kubernetes.config.kube_config
import pytest
from kopf.testing import KopfRunner
from kubernetes.client.rest import ApiException

from tests.fixtures.sandbox import SandboxAPI
from tests.polling import eventually

pytestmark = pytest.mark.slow
G, V, P = "test.opsmanager.dev", "v1", "widgets"


def build_operator(calls: collections.Counter[str], lock: threading.Lock) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    def seen(what: str) -> None:
        with lock:
            calls[what] += 1

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)  # reads $KUBECONFIG: the sandbox's kubeconfig

    @kopf.on.create(G, V, P, id="create_main", registry=registry)
    def on_create(body: Any, patch: kopf.Patch, logger: Any, **_: Any) -> dict[str, Any]:
        seen(f"create:{body['metadata']['name']}")
        patch.status["phase"] = "Created"
        patch.metadata.labels["handled-by"] = "kopf"
        kopf.info(body, reason="Created", message="created by the test operator")
        return {"size": body["spec"]["size"]}

    @kopf.on.create(G, V, P, id="create_retry", registry=registry)
    def on_create_retry(retry: int, **_: Any) -> str:
        seen(f"create_retry:{retry}")
        if retry < 2:
            raise kopf.TemporaryError("not yet", delay=0.5)
        return "done"

    @kopf.on.update(G, V, P, registry=registry)
    def on_update(**_: Any) -> None:
        seen("update")

    @kopf.on.field(G, V, P, field="spec.size", registry=registry)
    def on_size(old: Any, new: Any, **_: Any) -> None:
        seen(f"field:{old}->{new}")

    @kopf.on.delete(G, V, P, registry=registry)
    def on_delete(**_: Any) -> None:
        seen("delete")

    @kopf.timer(G, V, P, interval=0.5, registry=registry)
    def tick(status: Any, patch: kopf.Patch, **_: Any) -> None:
        seen("tick")
        patch.status["ticks"] = int(status.get("ticks", 0)) + 1

    # Async, so it ends the moment it is asked to: kopf re-runs deletion handlers (on a real cluster too)
    # when a slowly exiting sync daemon still blocks the finalizer's release.
    @kopf.daemon(G, V, P, registry=registry)
    async def daemon(stopped: kopf.DaemonStopped, **_: Any) -> None:
        seen("daemon:start")
        await stopped.wait()
        seen("daemon:stop")

    return registry


@pytest.fixture
def kopf_default_registry() -> Iterator[None]:
    """kopf's CLI ``run`` makes the registry it is given the process-wide default (``kopf.set_default_registry``);
    put back the one there was, so that later tests in this process (a pytest-xdist worker runs many modules) find
    kopf's global registry as they left it (tests/provisioner/test_operator.py checks that it stays empty)."""
    previous = kopf.get_default_registry()
    yield
    kopf.set_default_registry(previous)


@pytest.mark.usefixtures("kopf_default_registry")
def test_kopf_operator_runs_without_duplicate_handler_calls(apiserver: SandboxAPI, widget_crd: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the process had started with KUBECONFIG set (the client reads it once, at import); the global
    # client configuration kopf's login loads into is put back afterwards.
    monkeypatch.setenv("KUBECONFIG", str(apiserver.kubeconfig))
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(apiserver.kubeconfig))
    monkeypatch.setattr(k.Configuration, "_default", k.Configuration._default)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    calls: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    registry = build_operator(calls, lock)
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 10
    settings.networking.error_backoffs = [0.2, 0.5]
    settings.scanning.disabled = True
    custom = k.CustomObjectsApi(apiserver.api_client)
    core = k.CoreV1Api(apiserver.api_client)

    with KopfRunner(["run", "--standalone", "--namespace=default", "--verbose"], registry=registry,
                    settings=settings, timeout=60) as runner:
        custom.create_namespaced_custom_object(G, V, "default", P, {
            "apiVersion": f"{G}/{V}", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}})

        def created() -> Any:
            w = custom.get_namespaced_custom_object(G, V, "default", P, "w1")
            status = w.get("status") or {}
            return w if status.get("create_retry") == "done" and status.get("ticks", 0) >= 2 else None

        w = eventually(created, timeout=30)
        assert w["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        assert w["metadata"]["labels"]["handled-by"] == "kopf"
        assert w["status"]["phase"] == "Created" and w["status"]["create_main"] == {"size": 1}
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=w1").items
        assert "Created" in [e.reason for e in events]

        custom.patch_namespaced_custom_object(G, V, "default", P, "w1", {"spec": {"size": 2}})
        eventually(lambda: calls["field:1->2"] == 1 and calls["update"] == 1, timeout=20)

        custom.delete_namespaced_custom_object(G, V, "default", P, "w1")

        def deleted() -> bool:
            try:
                custom.get_namespaced_custom_object(G, V, "default", P, "w1")
            except ApiException as e:
                return e.status == 404
            return False

        eventually(deleted, timeout=20)
        eventually(lambda: calls["daemon:stop"] == 1, timeout=10)

    assert runner.exit_code == 0, runner.output
    assert runner.exception is None
    with lock:
        assert calls["create:w1"] == 1
        assert [calls[f"create_retry:{i}"] for i in range(4)] == [1, 1, 1, 0]
        assert calls["update"] == 1 and calls["field:1->2"] == 1 and calls["field:None->1"] == 1
        assert calls["delete"] == 1
        assert calls["daemon:start"] == 1 and calls["daemon:stop"] == 1
        assert calls["tick"] >= 2
    assert "Throttling" not in runner.output
    assert " 500 " not in runner.output
