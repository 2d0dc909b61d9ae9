"""Suite-wide fixtures and hygiene.

Fixture modules live in ``tests/fixtures/`` and are loaded as plugins, one per concern:
``etcd_cluster`` (real etcd members on loopback), ``sandbox`` (the local Kubernetes API server),
``sandbox_controllers`` (the whole sandbox: API server, StatefulSet controller, kubelet, cert-manager).
"""

from __future__ import annotations

pytest_plugins = [
    "tests.fixtures.etcd_cluster",
    "tests.fixtures.sandbox",
    "tests.fixtures.sandbox_controllers",
]
