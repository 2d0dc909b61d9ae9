"""What a ReconfigureTLS request makes of ``spec.tls`` (``opsmanager.api.tlschange``), the engine's and the
webhook's one rule; the fold itself is tested with the plans (``tests/ops/test_plan.py``).

We test these aspects: the TLS the engine recorded on a request is read back from its annotation; not recorded,
recorded as none (TLS was off) and unreadable all mean "fold into the Etcd's TLS as it is now" (None); aliases
sort in ``CERT_ALIASES`` order, unknown ones last.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from opsmanager.api import constants, tlschange

TLS = {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}}


def request(annotation: Any = ...) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "op"}
    if annotation is not ...:
        meta["annotations"] = {tlschange.ANNOTATION_TLS_BEFORE: annotation}
    return {"metadata": meta}


def test_the_recorded_tls_is_read_back() -> None:
    assert tlschange.tls_before(request(json.dumps(TLS, sort_keys=True))) == TLS


@pytest.mark.parametrize("annotation", [..., "null", "{not json", 7, json.dumps(["a"])])
def test_no_usable_record_means_the_current_tls(annotation: Any) -> None:
    assert tlschange.tls_before(request(annotation)) is None


def test_aliases_sort_in_the_api_order_unknown_last() -> None:
    aliases = ["bogus", *reversed(constants.CERT_ALIASES)]
    assert sorted(aliases, key=tlschange.alias_order) == [*constants.CERT_ALIASES, "bogus"]
