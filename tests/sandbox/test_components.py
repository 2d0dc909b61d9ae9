"""`opsmanager sandbox up`'s default components: the real admission webhook and the operator, in the sandbox."""

from __future__ import annotations

import pytest

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.sandbox import cluster, components
from tests.fixtures.sandbox_controllers import wait_until

pytestmark = pytest.mark.slow


async def test_webhook_denies_and_operator_provisions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with cluster.Sandbox(dir=tmp_path / "sb", components=list(components.DEFAULTS)) as sb:
        k = kube.Kube.from_kubeconfig(str(sb.kubeconfig))
        try:
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

            await wait_until(ready, 60, message="Etcd db Ready through the operator started by the sandbox")
        finally:
            k.close()
