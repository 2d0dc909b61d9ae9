"""The real admin factory (:func:`opsmanager.etcd.admin.connect`)."""

from __future__ import annotations

import pytest

from opsmanager.etcd import access, admin, errors


def test_no_endpoint_is_a_transient_unreachable_error() -> None:
    with pytest.raises(errors.MemberUnreachable, match="no etcd member has an address") as info:
        admin.connect([], None)
    assert info.value.transient


def test_endpoints_make_a_client_over_them() -> None:
    ep = access.Endpoint(name="db-0", host="127.0.0.1", client_port=2379, peer_port=2380, schemes=("http",))
    made = admin.connect([ep], None)
    assert made.endpoints == (ep,)
