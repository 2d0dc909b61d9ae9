"""What the benchmark found in code it does not own, each as a test that fails until it is fixed.

Each was marked ``xfail(strict=True)`` until fixed; the fixed ones stay as regression tests.

- The scale benchmark counted **23.5 StatefulSet PUTs per add-TLS request** (235 for ten), where the request changes
  the pod template twice. ``opsmanager.ops.restart.apply_template`` compares the rendered template with the
  live one, which the API server has defaulted (``imagePullPolicy``, ``terminationMessagePath``, probe
  ``successThreshold``…), so they never compare equal and every reconcile of a ``ROLL_PASS`` step PUTs the
  StatefulSet again. The write is a no-op on the server (same content after defaulting), but each one is an API
  request (and an admission call on a real cluster) per reconcile, per cluster.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import render
from opsmanager.ops import context, plan, restart

pytestmark = pytest.mark.slow


def _puts(server: Any) -> int:
    return sum(1 for method, path, _status in list(server.requests)
               if method == "PUT" and "/statefulsets/" in path)


async def test_a_pass_does_not_rewrite_a_statefulset_whose_template_is_already_in_place(apiserver: Any) -> None:
    db_obj = {"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
              "metadata": {"name": "finding", "namespace": "default"},
              "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3, "storageType": "Durable",
                       "deletionPolicy": "WipeOut"}}
    k = kube.Kube.from_kubeconfig(str(apiserver.kubeconfig))
    try:
        await k.create(render.render_statefulset(etcd_api.Etcd.model_validate(db_obj)))
        request = {"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
                   "metadata": {"name": "finding-restart", "namespace": "default", "generation": 1},
                   "spec": {"type": "Restart", "databaseRef": {"name": "finding"}}}
        ctx = context.OpsContext(k, request, db_obj, plan.Plan(constants.OPS_TYPE_RESTART, None, None, ()),
                                 datetime.datetime.now(datetime.UTC))
        step = plan.RollPass(constants.COND_RESTART_PODS, "restart", wiring=render.Wiring.steady(None), tls=None)
        await restart.apply_template(ctx, step)  # the pass's template (new restartedAt): one PUT
        first = _puts(apiserver.server)
        assert first == 1
        for _ in range(3):  # the next reconciles of the same pass: the template is already there
            await restart.apply_template(ctx, step)
        assert _puts(apiserver.server) == first, "the unchanged StatefulSet was written again"
    finally:
        await k.close()
