"""The same requests to the emulated API server and to kube-apiserver, and the same answers: status code, reason,
message and causes (issue 24). A difference found here is fixed in the emulator, or explained in docs/sandbox.md —
the emulator evaluates only ``self == oldSelf`` CEL rules, so the other rules are tested on the real API server
alone (tests/controlplane/test_kubernetes.py)."""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
import yaml

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.sandbox import apiserver as sandbox_apiserver
from opsmanager.sandbox import realcp
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

REPO = pathlib.Path(__file__).resolve().parents[2]
CRDS = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml"))]
NS = "diff"
ETCD: dict[str, Any] = {"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                        "metadata": {"name": "x", "namespace": NS},
                        "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3, "storageType": "Durable",
                                 "deletionPolicy": "WipeOut"}}
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
    await k.create(copy.deepcopy(ETCD))
    await k.create(copy.deepcopy(REQUEST))
    return k


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def both(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[kube.Kube, kube.Kube]]:
    emulated = sandbox_apiserver.APIServer()
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
