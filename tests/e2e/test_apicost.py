"""The API-cost measurement's attribution (``e2e/apicost.py``): requests about another Etcd's objects are not
charged to the operation measured."""

from __future__ import annotations

import pytest

from e2e import apicost


@pytest.mark.parametrize(("path", "other"), [
    ("PATCH /apis/opsmanager.dev/v1alpha1/namespaces/cost/etcds/tls/status", True),
    ("GET /api/v1/namespaces/cost/persistentvolumeclaims/data-tls-0", True),
    ("GET /api/v1/namespaces/cost/secrets/tls-server-cert", True),
    ("POST /api/v1/namespaces/cost/pods/tls-1/eviction", True),
    ("PATCH /apis/ops.opsmanager.dev/v1alpha1/namespaces/cost/etcdopsrequests/plain-add-tls/status", False),
    ("GET /api/v1/namespaces/cost/secrets/plain-ca-bundle", False),
    ("POST /api/v1/namespaces/cost/events", False),
    ("GET /apis/opsmanager.dev/v1alpha1/etcds", False),
])
def test_a_request_about_another_etcd_is_told_apart(path: str, other: bool) -> None:
    assert apicost.names_another_etcd(path, ["tls"]) is other
    assert apicost.names_another_etcd(path, []) is False
