"""A short open-loop run against ``opsmanager webhook serve`` in its own process (``e2e.webhook_load``).

The webhook looks its Etcds, EtcdOpsRequests and Issuers up through its watch caches, fed by the sandbox's API
server or by a real kube-apiserver; this process sends 100 reviews/s for 3 s at fixed times over keep-alive HTTPS
connections, and every answer is parsed and checked against the answer written beside its review. We assert
correctness only — every review answered, each as expected, and no request but its watches at the API server (the
caches answered; on the real control plane kube-apiserver's audit log counts the webhook's own user) — never a
latency: speed claims live in the benchmark (``python -m e2e.bench --scenario webhook``).
"""

from __future__ import annotations

import pathlib

import pytest

from e2e import webhook_load
from opsmanager.api import catalog

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("control_plane", [webhook_load.EMBEDDED, webhook_load.KUBERNETES])
async def test_an_open_loop_run_is_answered_correctly_from_the_cache(tmp_path: pathlib.Path,
                                                                     control_plane: str) -> None:
    async with webhook_load.webhook_world(tmp_path, control_plane=control_plane) as world:
        assert f"caches have synced (3 Etcds, 1 EtcdOpsRequests, {len(catalog.objects())} EtcdVersions)" in \
            world.webhook.log()
        reads = world.api_reads()
        run = await webhook_load.open_loop(world.url, world.ssl_context, rate=100, seconds=3)
        assert run.errors == ()
        assert run.reviews == 300 and len(run.latencies_ms) == 300
        assert world.api_reads() == reads
        if control_plane == webhook_load.KUBERNETES:  # the audit log does see the webhook: its informers' lists
            assert reads > 0
        probes = webhook_load.open_loop_probes()
        assert {p.allowed for p in probes} == {True, False}  # the mix has allowed and denied answers to check


def test_a_wrong_answer_is_reported() -> None:
    probe = next(p for p in webhook_load.open_loop_probes() if not p.allowed)
    allowed = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u", "allowed": true}}'
    assert "allowed=True, expected False" in webhook_load.check_answer(probe, "u", 200, allowed)
    assert "uid" in webhook_load.check_answer(probe, "other", 200, allowed)
    assert webhook_load.check_answer(probe, "u", 500, b"") == f"{probe.name}: HTTP 500"
