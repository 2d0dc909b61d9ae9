"""Contract tests: watches through the official ``kubernetes`` client's ``watch.Watch`` and raw HTTP.

We test these aspects: initial ADDED events, MODIFIED/DELETED, resuming from a resourceVersion without
loss or duplicates, ``timeoutSeconds`` closing the stream, BOOKMARK events, 410 Gone (an ERROR event
carrying a Status) for a version older than the history, namespace scoping, and label-selector watches
turning objects that start or stop matching into ADDED and DELETED.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import kubernetes.client as k
import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from opsmanager_sandbox.apiserver import ThreadedAPIServer
from tests.fixtures.sandbox import SandboxAPI, make_api_client
from tests.polling import eventually
from tests.timing import allowance, baseline

pytestmark = pytest.mark.slow


class Collector:
    """Runs one ``watch.Watch().stream(...)`` in a thread and collects (type, name, resourceVersion)."""

    def __init__(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.watch = watch.Watch()

        def run() -> None:
            try:
                for event in self.watch.stream(fn, *args, **kwargs):
                    obj = event["object"]
                    meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata
                    name = meta.get("name") if isinstance(meta, dict) else meta.name
                    rv = meta.get("resourceVersion") if isinstance(meta, dict) else meta.resource_version
                    self.events.append((event["type"], name or "", rv or ""))
            except BaseException as e:  # reported to the test
                self.error = e
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.watch.stop()


@pytest.fixture
def collect() -> Iterator[Any]:
    started: list[Collector] = []

    def start(fn: Any, *args: Any, **kwargs: Any) -> Collector:
        c = Collector(fn, *args, **kwargs)
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


def test_watch_sends_initial_state_then_changes(apiserver: SandboxAPI, collect: Any) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "before"}})
    c = collect(core.list_namespaced_config_map, "default", timeout_seconds=30)
    eventually(lambda: c.events)
    core.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
    core.patch_namespaced_config_map("after", "default", {"data": {"a": "1"}})
    core.delete_namespaced_config_map("before", "default")
    eventually(lambda: len(c.events) >= 4)
    assert [(t, n) for t, n, _ in c.events] == [("ADDED", "before"), ("ADDED", "after"), ("MODIFIED", "after"),
                                                ("DELETED", "before")]
    versions = [int(rv) for _, _, rv in c.events[1:]]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_watch_resumes_from_a_resource_version(apiserver: SandboxAPI, collect: Any) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    core.delete_namespaced_config_map("a", "default")
    c = collect(core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=30)
    eventually(lambda: len(c.events) >= 2)
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    eventually(lambda: len(c.events) >= 3)
    assert [(t, n) for t, n, _ in c.events] == [("ADDED", "b"), ("DELETED", "a"), ("ADDED", "c")]


def test_timeout_seconds_ends_the_stream(apiserver: SandboxAPI) -> None:
    def read(query: str) -> None:
        with urllib.request.urlopen(f"{apiserver.url}/api/v1/namespaces/default/configmaps{query}",
                                    timeout=10) as response:
            response.read()

    one_list = baseline(lambda: read(""), runs=5)  # the same path, answered at once
    started = time.monotonic()
    read("?watch=true&timeoutSeconds=1")
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 1 + allowance(one_list), (elapsed, one_list)


def test_bookmarks_are_sent_when_allowed(apiserver: SandboxAPI) -> None:
    lines: list[dict[str, Any]] = []
    with urllib.request.urlopen(f"{apiserver.url}/api/v1/namespaces/default/configmaps?watch=true"
                                f"&allowWatchBookmarks=true&timeoutSeconds=2", timeout=10) as response:
        for line in response:
            lines.append(json.loads(line))
    bookmarks = [e for e in lines if e["type"] == "BOOKMARK"]
    assert bookmarks, lines
    assert bookmarks[0]["object"]["kind"] == "ConfigMap" and bookmarks[0]["object"]["metadata"]["resourceVersion"]
    with urllib.request.urlopen(f"{apiserver.url}/api/v1/namespaces/default/configmaps?watch=true"
                                f"&timeoutSeconds=1", timeout=10) as response:
        assert all(json.loads(line)["type"] != "BOOKMARK" for line in response)


def test_send_initial_events_ends_with_a_marked_bookmark(apiserver: SandboxAPI) -> None:
    k.CoreV1Api(apiserver.api_client).create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    with urllib.request.urlopen(f"{apiserver.url}/api/v1/namespaces/default/configmaps?watch=true"
                                f"&sendInitialEvents=true&allowWatchBookmarks=true"
                                f"&resourceVersionMatch=NotOlderThan&timeoutSeconds=1", timeout=10) as response:
        events = [json.loads(line) for line in response]
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_expired_resource_version_is_410_gone() -> None:
    with ThreadedAPIServer(history_size=3, cert_manager=False) as threaded:
        client = make_api_client(threaded.url)
        core = k.CoreV1Api(client)
        first = core.create_namespaced_config_map("default", {"metadata": {"name": "c0"}}).metadata.resource_version
        for i in range(1, 6):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        with urllib.request.urlopen(f"{threaded.url}/api/v1/namespaces/default/configmaps?watch=true"
                                    f"&resourceVersion={first}", timeout=10) as response:
            events = [json.loads(line) for line in response]
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
        assert status["message"].startswith(f"too old resource version: {first}")
        with pytest.raises(ApiException) as info:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=first,
                                          timeout_seconds=5):
                pass
        assert info.value.status == 410
        page = core.list_namespaced_config_map("default", limit=1)
        for i in range(6, 10):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as info:
            core.list_namespaced_config_map("default", limit=1, _continue=page.metadata._continue)
        assert info.value.status == 410
        client.close()


def test_namespaced_watch_sees_only_its_namespace(apiserver: SandboxAPI, collect: Any) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespace({"metadata": {"name": "other"}})
    c = collect(core.list_namespaced_secret, "other", timeout_seconds=30)
    everywhere = collect(core.list_secret_for_all_namespaces, timeout_seconds=30)
    core.create_namespaced_secret("default", {"metadata": {"name": "here"}})
    core.create_namespaced_secret("other", {"metadata": {"name": "there"}})
    eventually(lambda: len(everywhere.events) >= 2)
    eventually(lambda: c.events)
    assert [n for _, n, _ in c.events] == ["there"]


def test_label_selector_watch_reports_objects_entering_and_leaving(apiserver: SandboxAPI, collect: Any) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    c = collect(core.list_namespaced_config_map, "default", label_selector="app=x", resource_version=rv,
                timeout_seconds=30)
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"labels": {"app": "x"}}})
    core.patch_namespaced_config_map("cm", "default", {"data": {"k": "v"}})
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"labels": {"app": "y"}}})
    eventually(lambda: len(c.events) >= 3)
    assert [t for t, _, _ in c.events] == ["ADDED", "MODIFIED", "DELETED"]
