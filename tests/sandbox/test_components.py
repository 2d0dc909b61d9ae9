"""`opsmanager sandbox up`'s default components: the real admission webhook and the operator, in the sandbox.

We test: both run as child processes of the product CLI (other PIDs than the test's, their own log files), the
webhook denies invalid requests through the API server (registered as a Service with a caBundle), the operator
provisions an Etcd to Ready, the operator's metrics URL is in ``<dir>/endpoints.json`` and answers, and leaving the sandbox stops both children.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from opsmanager import kube
from opsmanager.api import constants
from opsmanager_sandbox import children, cluster, components
from tests.polling import aeventually

pytestmark = pytest.mark.slow


@contextlib.asynccontextmanager
async def _recorded(component: contextlib.AbstractAsyncContextManager[Any],
                    started: list[children.Child]) -> AsyncIterator[Any]:
    async with component as child:
        started.append(child)
        yield child


async def test_webhook_denies_and_operator_provisions(tmp_path: Path) -> None:
    started: list[children.Child] = []

    def recording(component: cluster.Component) -> cluster.Component:
        return lambda sb: _recorded(component(sb), started)

    async with cluster.Sandbox(dir=tmp_path / "sb", components=[recording(c) for c in components.DEFAULTS]) as sb:
        assert [c.name for c in started] == ["the admission webhook", "the operator"]
        assert all(c.pid != os.getpid() and c.process.returncode is None for c in started)
        async with kube.Kube.from_kubeconfig(sb.kubeconfig) as k:
            async def submit(db: str) -> None:
                await k.create({
                    "apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
                    "metadata": {"name": "two-at-once", "namespace": "default"},
                    "spec": {"type": "ReconfigureTLS", "databaseRef": {"name": db},
                             "tls": {"remove": True, "rotateCertificates": True}},
                })

            with pytest.raises(kube.Invalid) as denied:
                await submit("missing")
            assert "spec.databaseRef default/missing is invalid or not found" in str(denied.value)
            await k.create({"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                            "metadata": {"name": "db", "namespace": "default"},
                            "spec": {"version": "3.5.1", "replicas": 3}})
            with pytest.raises(kube.Invalid) as denied:
                await submit("db")
            assert "only one TLS reconfiguration operation is allowed at a time" in str(denied.value)

            async def ready() -> bool:
                obj = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, "default", "db")
                return ((obj or {}).get("status") or {}).get("phase") == constants.DB_PHASE_READY

            await aeventually(ready, timeout=60, what="Etcd db Ready through the operator started by the sandbox")
        endpoints = json.loads((sb.dir / "endpoints.json").read_text())
        assert endpoints["operatorMetrics"].startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as session, session.get(endpoints["operatorMetrics"]) as response:
            assert response.status == 200
            exposition = await response.text()
        for name in ("opsmanager_etcd_certificate_not_after_timestamp_seconds",
                     "opsmanager_etcd_certificate_matches_secret", "opsmanager_etcd_ca_not_after_timestamp_seconds",
                     "opsmanager_etcd_tls_last_scan_timestamp_seconds"):
            assert f"# TYPE {name} gauge" in exposition
        assert "\nopsmanager_etcd_tls_scan_errors_total 0.0\n" in exposition
        assert (sb.dir / "logs" / "webhook.log").stat().st_size > 0
        assert (sb.dir / "logs" / "operator.log").stat().st_size > 0
    assert all(c.process.returncode is not None for c in started)
    assert "operatorMetrics" not in json.loads((tmp_path / "sb" / "endpoints.json").read_text())
