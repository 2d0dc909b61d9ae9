"""Two ``opsmanager run --peering opsmanager`` processes against the sandbox API server, as the install bundle runs
them (deploy/base/operator/deployment.yaml; docs/decisions.md D15.1): the first creates its peering object and
acts; the second, younger, stays paused and handles nothing while the first lives; when the first exits, the
second takes over. With ``--namespace``, neither lists nor watches a namespaced kind outside that namespace (what
the single-namespace overlay's Roles allow). (The takeover in the middle of an operation, with real etcd: issue 15's
HA tests.)"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import processes
from opsmanager import kube
from opsmanager.api import constants
from opsmanager_sandbox.apiserver import threaded
from tests.polling import aeventually, eventually

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NS = "peers"
PEERING = f"/apis/kopf.dev/v1/namespaces/{NS}/kopfpeerings/opsmanager"
FINALIZER = "opsmanager.dev/finalizer"
# The namespaced kinds the operator reads: listed or watched across namespaces, a Role would refuse them.
NAMESPACED = {"etcds", "etcdopsrequests", "certificates", "issuers", "secrets", "pods", "statefulsets", "services",
              "poddisruptionbudgets", "persistentvolumeclaims", "events", "kopfpeerings"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[threaded.ThreadedAPIServer]:
    server = threaded.ThreadedAPIServer(bookmark_interval=0.5).start()
    try:
        crds = [yaml.safe_load(Path(f).read_text()) for f in sorted(glob.glob(str(REPO / "crds" / "*.yaml")))]
        peering = [d for d in yaml.safe_load_all((REPO / "deploy/base/peering/crds.yaml").read_text()) if d]
        server.call(server.server.apply_objects, [*crds, *peering, {"apiVersion": "v1", "kind": "Namespace",
                                                                     "metadata": {"name": NS}}])
        yield server
    finally:
        server.stop()


def start(api: threaded.ThreadedAPIServer, tmp_path: Path, pod: str) -> processes.OperatorProcess:
    kubeconfig = api.write_kubeconfig(tmp_path / f"{pod}.kubeconfig")
    return processes.OperatorProcess.start(
        kubeconfig, log_path=tmp_path / f"{pod}.log", namespaces=[NS], interval=0.5, standalone=False,
        with_ops=True, extra_args=["--peering", "opsmanager"], env={"POD_ID": pod})


def etcd(name: str) -> dict[str, Any]:
    return {"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
            "metadata": {"name": name, "namespace": NS},
            "spec": {"version": "3.5.1", "storageType": "Ephemeral"}}


async def finalized(k: kube.Kube, name: str) -> bool:
    obj = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, name) or {}
    return FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or [])


async def test_the_elder_acts_the_younger_waits_then_takes_over(api: threaded.ThreadedAPIServer,
                                                                tmp_path: Path) -> None:
    elder = start(api, tmp_path, "op-a")
    younger: processes.OperatorProcess | None = None
    try:
        async with kube.Kube.for_url(api.url) as k:
            peers = await aeventually(lambda: _peers(k), timeout=30, what="op-a's keep-alive in its KopfPeering")
            assert set(peers) == {"op-a"}
            younger = start(api, tmp_path, "op-b")
            peers = await aeventually(lambda: _peers(k, 2), timeout=30, what="both keep-alives")
            assert peers["op-a"]["priority"] > peers["op-b"]["priority"]  # seniority

            await k.create(etcd("first"))
            await aeventually(lambda: finalized(k, "first"), timeout=30, what="the active replica handles 'first'")
            eventually(lambda: "reconcile peers/first" in elder.log(), timeout=30, what="op-a reconciling 'first'")
            assert "reconcile peers/first" not in younger.log()

            # mandatory peering starts paused: the younger never resumed while the elder lived
            assert "Resuming operations" not in younger.log()
            assert elder.stop() == 0  # a clean exit withdraws its keep-alive: the younger resumes at once
            waiting = younger
            eventually(lambda: "Resuming operations" in waiting.log(), timeout=30, what="op-b resuming")
            await k.create(etcd("second"))
            await aeventually(lambda: finalized(k, "second"), timeout=30, what="op-b handles 'second'")
            eventually(lambda: "reconcile peers/second" in waiting.log(), timeout=30, what="op-b reconciling 'second'")
            assert set(await _peers(k)) == {"op-b"}
            outside = sorted({path for _method, path, _status in list(api.server.requests)
                              if path.split("?")[0].rsplit("/", 1)[-1] in NAMESPACED and f"/namespaces/{NS}/" not in path})
            assert not outside, f"calls outside --namespace {NS}: {outside}"
    finally:
        for op in (younger, elder):
            if op is not None:
                op.stop()


async def _peers(k: kube.Kube, at_least: int = 1) -> dict[str, Any]:
    try:
        obj = await k.request("GET", PEERING)
    except kube.NotFound:
        return {}
    live = {pid: info for pid, info in ((obj or {}).get("status") or {}).items() if info}
    return live if len(live) >= at_least else {}
