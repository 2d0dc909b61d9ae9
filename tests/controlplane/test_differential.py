"""The same requests to the emulated API server and to kube-apiserver, and the same answers: status code, reason,
message and causes (issue 24). A difference found here is fixed in the emulator, or explained in docs/sandbox.md —
the emulator evaluates only ``self == oldSelf`` CEL rules, so the other rules are tested on the real API server
alone (tests/controlplane/test_kubernetes.py)."""

from __future__ import annotations

import contextlib
import copy
import json
import pathlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
import yaml

from opsmanager import kube
from opsmanager.api import constants
from opsmanager_sandbox import apiserver as sandbox_apiserver
from opsmanager_sandbox import realcp
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

REPO = pathlib.Path(__file__).resolve().parents[2]
CRDS = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml"))]
NS = "diff"
ETCD: dict[str, Any] = {"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                        "metadata": {"name": "x", "namespace": NS},
                        "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3, "storageType": "Durable",
                                 "deletionPolicy": "WipeOut"}}
HISTORY = 5
REQUEST: dict[str, Any] = {"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
                           "metadata": {"name": "r", "namespace": NS},
                           "spec": {"type": "Restart", "databaseRef": {"name": "x"}}}


async def established(k: kube.Kube) -> bool:
    for crd in CRDS:
        live = await k.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd["metadata"]["name"])
        if not any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in ((live or {}).get("status") or {}).get("conditions") or ()):
            return False
    return True


async def prepared(k: kube.Kube) -> kube.Kube:
    for crd in CRDS:
        k.resources.add_crd(crd)
        try:
            await k.create(copy.deepcopy(crd))
        except kube.AlreadyExists:
            pass
    await aeventually(lambda: established(k), timeout=60, what="the CRDs established")
    await k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    # no ServiceAccount controller beside this kube-apiserver: a pod's admission needs the default one (already
    # there when a create answered late was tried again, as on a loaded machine)
    with contextlib.suppress(kube.AlreadyExists):
        await k.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NS}})
    await k.create(copy.deepcopy(ETCD))
    await k.create(copy.deepcopy(REQUEST))
    return k


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def both(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[kube.Kube, kube.Kube]]:
    # a short watch history, so that resourceVersion 1 is compacted here as it is outside kube-apiserver's watch
    # cache (which starts at its own start or the CRD's establishment)
    emulated = sandbox_apiserver.APIServer(history_size=HISTORY)
    await emulated.start()
    real = realcp.KubernetesControlPlane(tmp_path_factory.mktemp("differential"), controllers=False)
    await real.start()
    ke = kube.Kube.for_url(emulated.url, token=emulated.admin_token,
                           ca_path=str(emulated.ca_file) if emulated.ca_file else None)
    kr = kube.Kube.for_url(real.url, token=real.admin_token, ca_path=str(real.ca_file))
    try:
        yield await prepared(ke), await prepared(kr)
    finally:
        await ke.close()
        await kr.close()
        await real.stop()
        await emulated.stop()


def answer(err: kube.KubeError | None) -> tuple[Any, ...]:
    """What both must agree on: code, reason, message, the causes (as a set: their order and key order may differ)."""
    if err is None:
        return ("ok",)
    body = err.body or {}
    causes = frozenset(json.dumps(c, sort_keys=True) for c in (body.get("details") or {}).get("causes") or ())
    return err.status, body.get("reason"), body.get("message"), causes


def stale(k: kube.Kube) -> Awaitable[Any]:
    async def go() -> Any:
        current = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, "x")
        assert current is not None
        return await k.replace(dict(current, metadata=dict(current["metadata"], resourceVersion="1")))
    return go()


CASES: list[tuple[str, Callable[[kube.Kube], Awaitable[Any]]]] = [
    ("get a missing object", lambda k: k.request("GET", k.path(constants.ETCD_API_VERSION, "Etcd", NS, "none"))),
    ("delete a missing object",
     lambda k: k.request("DELETE", k.path(constants.ETCD_API_VERSION, "Etcd", NS, "none"))),
    ("create an existing object", lambda k: k.create(copy.deepcopy(ETCD))),
    ("replace with a stale resourceVersion", stale),
    ("an immutable string field", lambda k: k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, "x",
                                                    {"spec": {"storageType": "Ephemeral"}})),
    ("an immutable object", lambda k: k.patch(constants.OPS_API_VERSION, constants.OPS_KIND, NS, "r",
                                              {"spec": {"type": "MoveLeader"}})),
    ("an enum value", lambda k: k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, "x",
                                        {"spec": {"deletionPolicy": "Sometimes"}})),
    ("a missing required field", lambda k: k.create({**copy.deepcopy(REQUEST), "metadata": {"name": "r2",
                                                                                            "namespace": NS},
                                                     "spec": {"type": "Restart"}})),
]


@pytest.mark.parametrize(("case", "call"), CASES, ids=[c[0] for c in CASES])
async def test_the_emulator_answers_as_kube_apiserver(both: tuple[kube.Kube, kube.Kube], case: str,
                                                      call: Callable[[kube.Kube], Awaitable[Any]]) -> None:
    answers = []
    for k in both:
        try:
            await call(k)
            answers.append(answer(None))
        except kube.KubeError as err:
            answers.append(answer(err))
    emulated, real = answers
    assert real != ("ok",), f"{case}: kube-apiserver accepted it; the case tests nothing"
    assert emulated == real, f"{case}:\n  emulator:       {emulated}\n  kube-apiserver: {real}"


POD: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "guarded", "namespace": NS, "labels": {"app": "guarded"}},
                       "spec": {"containers": [{"name": "c", "image": "etcd"}]}}
BUDGET: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                          "metadata": {"name": "guard", "namespace": NS},
                          "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}
# What the disruption controller writes for one Ready pod under minAvailable 1 (kube-controller-manager does not
# run beside this kube-apiserver, so the test writes it there; the emulator's own controller computes it).
PROCESSED = {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
             "expectedPods": 1}


async def guarded_pod(k: kube.Kube, *, real: bool) -> None:
    if await k.get("v1", "Pod", NS, "guarded") is None:
        await k.create(copy.deepcopy(POD))
        await k.patch("v1", "Pod", NS, "guarded", {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
            subresource="status")
        await k.create(copy.deepcopy(BUDGET))
        if real:
            await k.patch("policy/v1", "PodDisruptionBudget", NS, "guard", {"status": PROCESSED},
                          subresource="status")

    async def processed() -> bool:
        status = ((await k.get("policy/v1", "PodDisruptionBudget", NS, "guard")) or {}).get("status") or {}
        return all(status.get(key) == value for key, value in PROCESSED.items())
    await aeventually(processed, timeout=20, what="the budget's status")


async def evicted(k: kube.Kube, pod: str) -> tuple[Any, ...]:
    try:
        await k.evict(NS, pod)
    except kube.KubeError as err:
        return answer(err)
    return answer(None)


async def test_eviction_is_answered_as_kube_apiserver_does(both: tuple[kube.Kube, kube.Kube]) -> None:
    """A missing pod, and a pod whose budget allows no disruption: the same code, reason, message, causes."""
    emulated, real = both
    for k, is_real in ((emulated, False), (real, True)):
        await guarded_pod(k, real=is_real)
    for pod in ("none", "guarded"):
        answers = [await evicted(k, pod) for k in both]
        assert answers[1] != ("ok",), f"kube-apiserver evicted {pod}; the case tests nothing"
        assert answers[0] == answers[1], f"evict {pod}:\n  emulator:       {answers[0]}\n  kube-apiserver: {answers[1]}"


async def watch_answer(k: kube.Kube, resource_version: str) -> tuple[Any, ...]:
    try:
        async for _event in k.watch(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS,
                                    resource_version=resource_version, timeout_seconds=2):
            pass
    except kube.KubeError as err:
        code, reason, message, _causes = answer(err)
        return code, reason, re.sub(r"\(\d+\)", "(N)", str(message))  # the oldest kept version differs
    return answer(None)


async def test_a_watch_from_a_compacted_resource_version_is_gone_on_both(both: tuple[kube.Kube, kube.Kube]) -> None:
    """resourceVersion 1 is older than what either keeps: an ERROR event with 410 Expired, worded alike."""
    emulated, real = [await watch_answer(k, "1") for k in both]
    assert real[:2] == (410, "Expired"), real
    assert emulated == real, f"emulator: {emulated}\nkube-apiserver: {real}"


async def test_a_delete_with_a_stale_uid_precondition_is_a_conflict_on_both(
        both: tuple[kube.Kube, kube.Kube]) -> None:
    answers = []
    for k in both:
        try:
            await k.request("DELETE", k.path(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, "x"),
                            body={"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "stale"}})
            answers.append(answer(None))
        except kube.KubeError as err:
            code, reason, message, _causes = answer(err)
            answers.append((code, reason, re.sub(r"in record \([^)]*\)", "in record (UID)", str(message))))
    assert answers[1][0] == 409, answers[1]
    assert answers[0] == answers[1], f"emulator: {answers[0]}\nkube-apiserver: {answers[1]}"


async def test_a_paged_list_continues_alike(both: tuple[kube.Kube, kube.Kube]) -> None:
    """limit=1 over two objects: one item and a continue token, then the other item and none."""
    pages = []
    for k in both:
        if await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, "y") is None:
            await k.create({**copy.deepcopy(ETCD), "metadata": {"name": "y", "namespace": NS}})
        path = k.path(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS)
        first = await k.request("GET", path, query={"limit": 1})
        second = await k.request("GET", path, query={"limit": 1, "continue": first["metadata"]["continue"]})
        pages.append(([i["metadata"]["name"] for i in first["items"]], bool(first["metadata"].get("continue")),
                      first["metadata"].get("remainingItemCount"),
                      [i["metadata"]["name"] for i in second["items"]], bool(second["metadata"].get("continue"))))
    assert pages[1] == (["x"], True, 1, ["y"], False), pages[1]
    assert pages[0] == pages[1], f"emulator: {pages[0]}\nkube-apiserver: {pages[1]}"
