"""With 2 of 3 members gone, every probe reports "no quorum" within its deadline instead of hanging; when they come
back, the recovery gate opens. Plaintext cluster (the fixture's ``plain`` mode), members killed with SIGKILL.

We test: ``health`` over the metrics port and over gRPC (no metrics port) returns within its timeout and ends up
with ``no_quorum``; ``wait_recovered`` raises NoQuorum close to its deadline; ``members`` and ``leader`` raise
NoQuorum; after the members restart, ``wait_recovered`` passes for each of them.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors
from tests.fixtures.etcd_cluster import ClusterFactory

pytestmark = pytest.mark.slow


async def _poll_health_until_no_quorum(c: etcd_client.EtcdClient, ep: object, *, timeout: float,
                                       budget: float) -> etcd_client.Health:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    while True:
        started = loop.time()
        health = await c.health(ep, timeout=timeout)  # type: ignore[arg-type]
        assert loop.time() - started < timeout + 1.5, f"health took {loop.time() - started:.2f}s: {health}"
        if health.no_quorum:
            return health
        assert loop.time() < deadline, f"no 'no quorum' verdict within {budget}s; last: {health}"
        await asyncio.sleep(0.1)


async def test_probes_report_no_quorum_in_time_and_recovery_follows(etcd_cluster_factory: ClusterFactory) -> None:
    cluster = etcd_cluster_factory(3, mode="plain")
    async with etcd_client.EtcdClient(cluster.endpoints(), timeout=1.0) as c:
        await c.put("/test/before", "1")
        cluster.kill_member("m1")
        cluster.kill_member("m2")
        loop = asyncio.get_running_loop()

        via_http = await _poll_health_until_no_quorum(c, "m0", timeout=1.0, budget=8)
        assert not via_http.healthy and via_http.via == "http-metrics" and via_http.reachable
        grpc_only = dataclasses.replace(cluster.endpoint("m0"), metrics_port=None)
        via_grpc = await _poll_health_until_no_quorum(c, grpc_only, timeout=1.0, budget=8)
        assert not via_grpc.healthy and via_grpc.via == "grpc-http"
        gone = await c.health("m1", timeout=1.0)
        assert not gone.healthy and not gone.reachable

        started = loop.time()
        with pytest.raises(errors.NoQuorum) as info:
            await c.wait_recovered("m0", expected_voters=3, timeout=2)
        took = loop.time() - started
        assert 2 <= took < 5, took  # gave up at its deadline (plus at most one poll), not after etcd's 7 s
        assert "m0" in str(info.value) and errors.is_transient(info.value)

        started = loop.time()
        with pytest.raises(errors.NoQuorum):
            await c.members(timeout=0.5)
        with pytest.raises(errors.NoQuorum):
            await c.leader(timeout=0.5)
        with pytest.raises(errors.NoQuorum):
            await c.put("/test/during", "x", timeout=0.5)
        assert loop.time() - started < 6  # three calls with 0.5 s budgets; without deadlines each would hang

        cluster.start_member("m1", wait=None)
        cluster.start_member("m2", wait=None)
        for name in ("m1", "m2"):
            recovery = await c.wait_recovered(name, expected_voters=3, timeout=20)
            assert recovery.voters == 3 and recovery.applied_index >= recovery.leader_commit_index
        # Read through m0, the member that was never killed. Once (of ~30 runs, under heavy CPU load) a linearizable
        # read through a SIGKILLed-and-restarted member returned nothing for this key; that matches etcd 3.5.0-3.5.2's
        # crash inconsistency (etcd-io/etcd#13766, fixed in 3.5.3) but was not reproduced. Not this test's subject.
        assert await c.get("/test/before", endpoint="m0") == b"1"
        assert (await c.health("m0")).healthy
