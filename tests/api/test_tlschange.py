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


def request(annotation: Any = ..., origin: Any = ...) -> dict[str, Any]:
    """A request with the record an older engine kept (``annotation``) and/or the one in status (``origin``)."""
    meta: dict[str, Any] = {"name": "op"}
    if annotation is not ...:
        meta["annotations"] = {constants.LEGACY_TLS_BEFORE: annotation, constants.LEGACY_PLAN: "CARollover",
                               constants.LEGACY_RESCUE_REASON: "legacy"}
    out: dict[str, Any] = {"metadata": meta}
    if origin is not ...:
        out["status"] = {"origin": origin}
    return out


def test_the_tls_recorded_in_status_is_read_back() -> None:
    recorded = request(origin={"observedAt": "2026-12-02T10:00:00Z", "tls": TLS, "plan": "RescueCA",
                               "rescueReason": "expired"})
    assert tlschange.recorded_tls(recorded) == (True, TLS)
    assert tlschange.tls_before(recorded) == TLS
    assert tlschange.recorded_plan(recorded) == "RescueCA"
    assert tlschange.rescue_reason(recorded) == "expired"


def test_a_status_record_without_tls_means_tls_was_off() -> None:
    assert tlschange.recorded_tls(request(origin={"observedAt": "2026-12-02T10:00:00Z"})) == (True, None)


def test_the_status_record_wins_over_an_older_engines_annotation() -> None:
    both = request(json.dumps({"issuerRef": {"name": "old"}}), origin={"tls": TLS})
    assert tlschange.tls_before(both) == TLS
    assert tlschange.recorded_plan(both) is None and tlschange.rescue_reason(both) is None


def test_an_older_engines_annotations_are_still_read() -> None:
    legacy = request(json.dumps(TLS, sort_keys=True))
    assert tlschange.recorded_tls(legacy) == (True, TLS)
    assert tlschange.recorded_plan(legacy) == "CARollover"
    assert tlschange.rescue_reason(legacy) == "legacy"


@pytest.mark.parametrize("annotation", [..., "null", "{not json", 7, json.dumps(["a"])])
def test_no_usable_record_means_the_current_tls(annotation: Any) -> None:
    assert tlschange.tls_before(request(annotation)) is None
    assert tlschange.recorded_tls(request(annotation))[0] is (annotation is not ... and isinstance(annotation, str))


def test_aliases_sort_in_the_api_order_unknown_last() -> None:
    aliases = ["bogus", *reversed(constants.CERT_ALIASES)]
    assert sorted(aliases, key=tlschange.alias_order) == [*constants.CERT_ALIASES, "bogus"]
