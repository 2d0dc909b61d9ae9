"""The end-to-end tier runs on the real control plane: kube-apiserver, kube-controller-manager and kube-scheduler
built from their Go modules (``make controlplane``, which ``make test`` runs first), the etcd members on the 3.5
build, and on a real node under it: the kubelet over containerd and runc, a pod network, kube-proxy and CoreDNS
(``opsmanager_sandbox.realnodes``). One node unless a module asks for more (``Scenario(nodes=N)``): what a test
here checks is what the operator does to etcd, and every node is a kubelet, a containerd and a kube-proxy more on
this machine's two cores; ``test_real_nodes.py`` is where members spread over three. A module that stays on the
node agent says why where it makes its ``Scenario(nodes=0)``.

``OPSMANAGER_CONTROL_PLANE=embedded`` runs the tier on the emulated API server and the node agent instead (a
machine without Go); ``OPSMANAGER_NODES=0`` keeps the real control plane over the node agent. The fast engine and
sandbox tests outside this directory keep the emulator."""

from __future__ import annotations

import os
from typing import Any

import pytest

from e2e import scenario

os.environ.setdefault(scenario.CONTROL_PLANE_ENV, "kubernetes")
os.environ.setdefault(scenario.NODES_ENV, "1")


@pytest.fixture(scope="module")
def object_store_host(sc: Any) -> str:
    """The S3 server where the module's pods reach it: on real nodes a member's ``restore`` init container runs in
    the pod network, where loopback is the pod's own."""
    return str(sc.sandbox.service_host)
