"""With 2 of 3 members gone, every probe reports "no quorum" within its deadline instead of hanging; when they come
back, the recovery gate opens. Plaintext cluster (the fixture's ``plain`` mode), members killed with SIGKILL.

We test: ``health`` over the metrics port and over gRPC (no metrics port) returns within its timeout and ends up
with ``no_quorum``; ``wait_recovered`` raises NoQuorum close to its deadline; ``members`` and ``leader`` raise
NoQuorum; after the members restart, ``wait_recovered`` passes for each of them.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors
from tests.fixtures.etcd_cluster import ClusterFactory
from tests.polling import aeventually
from tests.timing import abaseline, allowance

pytestmark = pytest.mark.slow


async def _no_quorum_verdict(c: etcd_client.EtcdClient, ep: object, *, within: float) -> etcd_client.Health:
    """Probe ``ep`` (budget 1 s) until it reports "no quorum"; every probe must return ``within`` seconds."""
    async def probe() -> etcd_client.Health | None:
        started = time.monotonic()
        health = await c.health(ep, timeout=1.0)  # type: ignore[arg-type]
        took = time.monotonic() - started
        assert took < within, f"health took {took:.2f}s (allowed {within:.2f}s): {health}"
        return health if health.no_quorum else None

    return await aeventually(probe, timeout=8, interval=0.1, what="a 'no quorum' verdict")


async def test_probes_report_no_quorum_in_time_and_recovery_follows(etcd_cluster_factory: ClusterFactory) -> None:
    cluster = etcd_cluster_factory(3, mode="plain")
    async with etcd_client.EtcdClient(cluster.endpoints(), timeout=1.0) as c:
        await c.kv.put("/test/before", "1")
        # Baseline: one probe of a healthy member, here and now. Each bound below is the call's own budget (the
        # point: it gives up then instead of hanging) plus the allowance of these (tests/timing.py).
        one_probe = await abaseline(lambda: c.health("m0", timeout=1.0))
        slack = allowance(one_probe)
        cluster.kill_member("m1")
        cluster.kill_member("m2")

        # health: its 1 s budget, plus up to 1 s for the Status that confirms the member is alive (its contract)
        via_http = await _no_quorum_verdict(c, "m0", within=1.0 + 1.0 + slack)
        assert not via_http.healthy and via_http.via == "http-metrics" and via_http.reachable
        grpc_only = dataclasses.replace(cluster.endpoint("m0"), metrics_port=None)
        via_grpc = await _no_quorum_verdict(c, grpc_only, within=1.0 + slack)  # one budget for Status and the read
        assert not via_grpc.healthy and via_grpc.via == "grpc-http"
        gone = await c.health("m1", timeout=1.0)
        assert not gone.healthy and not gone.reachable

        started = time.monotonic()
        with pytest.raises(errors.NoQuorum) as info:
            await c.wait_recovered("m0", expected_voters=3, timeout=2)
        took = time.monotonic() - started
        # at its deadline plus at most one poll's own bound (a 1 s health probe and its 1 s confirmation), not
        # after etcd's 7 s
        assert 2 <= took < 2 + 2 * 1.0 + slack, (took, one_probe)
        assert "m0" in str(info.value) and errors.is_transient(info.value)

        for call in (lambda: c.members(timeout=0.5), lambda: c.maintenance.leader(timeout=0.5),
                     lambda: c.kv.put("/test/during", "x", timeout=0.5)):
            started = time.monotonic()
            with pytest.raises(errors.NoQuorum):
                await call()
            took = time.monotonic() - started
            # its 0.5 s budget for each member it tries; without deadlines each call would hang
            assert took < 3 * 0.5 + slack, (took, one_probe)

        cluster.start_member("m1", wait=None)
        cluster.start_member("m2", wait=None)
        for name in ("m1", "m2"):
            recovery = await c.wait_recovered(name, expected_voters=3, timeout=20)
            assert recovery.voters == 3 and recovery.applied_index >= recovery.leader_commit_index
        # Read through m0, the member that was never killed. Once (of ~30 runs, under heavy CPU load) a linearizable
        # read through a SIGKILLed-and-restarted member returned nothing for this key; that matches etcd 3.5.0-3.5.2's
        # crash inconsistency (etcd-io/etcd#13766, fixed in 3.5.3) but was not reproduced. Not this test's subject.
        assert await c.kv.get("/test/before", endpoint="m0") == b"1"
        assert (await c.health("m0")).healthy
