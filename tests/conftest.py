"""Suite-wide fixtures and hygiene.

Fixture modules live in ``tests/fixtures/`` and are loaded as plugins, one per concern:
``etcd_cluster`` (real etcd members on loopback), ``sandbox`` (the local Kubernetes API and controllers).
"""

from __future__ import annotations

pytest_plugins = [
    "tests.fixtures.etcd_cluster",
    "tests.fixtures.sandbox",
]
