"""The end-to-end tier runs on the real control plane: kube-apiserver, kube-controller-manager and kube-scheduler
built from their Go modules (``make controlplane``, which ``make test`` runs first), the etcd members on the 3.5
build. ``OPSMANAGER_CONTROL_PLANE=embedded`` runs it on the emulated API server instead (a machine without Go);
the fast engine and sandbox tests outside this directory keep the emulator."""

from __future__ import annotations

import os

from e2e import scenario

os.environ.setdefault(scenario.CONTROL_PLANE_ENV, "kubernetes")
