"""The certificate-lifecycle API: ``spec.tlsLifecycle`` (policy and its timedelta helpers) and ``status.tls``.

We test these aspects: the defaults (5m, 1440h/720h/168h, auto-renew on, 24h retry) and the helpers' timedeltas;
the auto-renew window (explicit, a quarter of the lifetime, capped at 720h); bad durations and duplicate thresholds
are model errors naming the field; an Etcd whose status carries ``tls`` as the issue's YAML parses and dumps back
unchanged (so existing status writers keep it), and a status patch without ``tls`` still parses; the CRD has both.
"""

from __future__ import annotations

import copy
import datetime

import pydantic
import pytest

from opsmanager.api import constants, crdgen, etcd, lifecycle

td = datetime.timedelta

DB = {
    "apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd",
    "metadata": {"name": "db", "namespace": "demo"},
    "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete",
             "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}}},
}
LEAF = {"serial": "1f2e3d", "notBefore": "2026-11-01T00:00:00Z", "notAfter": "2026-12-01T00:00:00Z",
        "issuer": "CN=etcd-ca", "matchesSecret": True}
STATUS_TLS = {
    "lastScanTime": "2026-11-30T12:00:00Z",
    "members": [
        {"name": "db-0", "client": LEAF, "peer": {**LEAF, "serial": "abc", "matchesSecret": False}},
        {"name": "db-1", "client": {"error": "connection refused"}, "peer": {"error": "handshake timed out"}},
    ],
    "nextExpiry": {"notAfter": "2026-12-01T00:00:00Z", "member": "db-0", "port": "peer"},
    "caNotAfter": "2036-11-01T00:00:00Z",
}


def test_defaults_and_helpers() -> None:
    policy = etcd.Etcd.model_validate(DB).tls_lifecycle
    assert policy == lifecycle.TLSLifecycle()
    assert policy.scan_interval == "5m" and policy.scan_interval_delta == td(minutes=5)
    assert policy.alert_before == ["1440h", "720h", "168h"]
    assert policy.alert_thresholds() == [td(days=60), td(days=30), td(days=7)]
    assert policy.smallest_alert_threshold() == td(days=7)
    assert policy.auto_renew.enabled is True and policy.auto_renew.before is None
    assert policy.retry_after_failure_delta == td(hours=24)
    assert policy.to_dict() == {
        "scanInterval": "5m", "alertBefore": ["1440h", "720h", "168h"],
        "autoRenew": {"enabled": True, "retryAfterFailure": "24h"},
    }


def test_a_policy_from_the_api() -> None:
    obj = copy.deepcopy(DB)
    obj["spec"]["tlsLifecycle"] = {"scanInterval": "90s", "alertBefore": ["9m", "1h30m", "500ms"],
                                   "autoRenew": {"enabled": False, "before": "5m", "retryAfterFailure": "2.5h"}}
    db = etcd.Etcd.model_validate(obj)
    policy = db.tls_lifecycle
    assert policy is db.spec.tls_lifecycle
    assert policy.scan_interval_delta == td(seconds=90)
    assert policy.alert_thresholds() == [td(minutes=90), td(minutes=9), td(milliseconds=500)]
    assert policy.auto_renew_before(td(days=90)) == td(minutes=5)
    assert policy.retry_after_failure_delta == td(hours=2, minutes=30)
    assert db.to_dict()["spec"]["tlsLifecycle"] == obj["spec"]["tlsLifecycle"]
    assert lifecycle.TLSLifecycle(alert_before=[]).smallest_alert_threshold() == td(0)


@pytest.mark.parametrize(
    ("lifetime", "before"),
    [(td(days=90), td(hours=540)), (td(minutes=6), td(seconds=90)), (td(days=365), td(hours=720)),
     (td(days=120), td(hours=720))],
)
def test_default_auto_renew_window_is_a_quarter_capped_at_720h(lifetime: td, before: td) -> None:
    assert lifecycle.TLSLifecycle().auto_renew_before(lifetime) == before


@pytest.mark.parametrize(
    ("policy", "field", "text"),
    [
        ({"scanInterval": "5 m"}, "scanInterval", "invalid duration '5 m'"),
        ({"scanInterval": "0s"}, "scanInterval", "must be greater than zero"),
        ({"alertBefore": ["24h", "x"]}, "alertBefore.1", "invalid duration 'x'"),
        ({"alertBefore": ["24h", "1440m"]}, "alertBefore", "'1440m' duplicates '24h'"),
        ({"autoRenew": {"before": "-1h"}}, "autoRenew.before", "must be greater than zero"),
        ({"autoRenew": {"retryAfterFailure": "1d"}}, "autoRenew.retryAfterFailure", "invalid duration '1d'"),
    ],
)
def test_bad_policies_are_model_errors_naming_the_field(policy: dict[str, object], field: str, text: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        lifecycle.TLSLifecycle.model_validate(policy)
    (error,) = info.value.errors()
    assert ".".join(map(str, error["loc"])) == field
    assert text in error["msg"]


def test_status_tls_round_trips_and_helpers() -> None:
    obj = copy.deepcopy(DB)
    obj["status"] = {"phase": "Ready", "conditions": [], "tls": STATUS_TLS}
    db = etcd.Etcd.model_validate(obj)
    assert db.to_dict()["status"] == obj["status"]
    assert db.status is not None and db.status.tls is not None
    tls = db.status.tls
    member = tls.member("db-0")
    assert member is not None and member.port(constants.PORT_PEER) == member.peer
    assert member.peer is not None and member.peer.matches_secret is False and member.peer.serial == "abc"
    broken = tls.member("db-1")
    assert broken is not None and broken.port(constants.PORT_CLIENT) is not None
    assert broken.port(constants.PORT_CLIENT).error == "connection refused"  # type: ignore[union-attr]
    assert tls.member("db-9") is None
    assert tls.next_expiry is not None and tls.next_expiry.port == "peer"
    # A status writer that only sets the phase keeps working; one that sets tls from models dumps camelCase.
    assert etcd.EtcdStatus.model_validate({"phase": "Ready"}).to_dict() == {"phase": "Ready"}
    written = etcd.EtcdStatus(tls=lifecycle.TLSStatus(
        last_scan_time="t", next_expiry=lifecycle.NextExpiry(not_after="n", member="db-0", port="client"),
    )).to_dict()
    assert written == {"tls": {"lastScanTime": "t", "nextExpiry": {"notAfter": "n", "member": "db-0", "port": "client"}}}


@pytest.mark.parametrize("serial", ["1F2E", "1f:2e", ""])
def test_serials_are_lowercase_hex(serial: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        lifecycle.ServedCertificate(serial=serial)


def test_the_crd_carries_policy_and_status() -> None:
    schema = crdgen.openapi_schema(etcd.Etcd)["properties"]
    policy = schema["spec"]["properties"]["tlsLifecycle"]["properties"]
    assert policy["scanInterval"]["default"] == "5m"
    assert policy["alertBefore"]["default"] == ["1440h", "720h", "168h"]
    assert policy["autoRenew"]["properties"]["retryAfterFailure"]["default"] == "24h"
    members = schema["status"]["properties"]["tls"]["properties"]["members"]
    assert members["x-kubernetes-list-map-keys"] == ["name"]
    assert set(members["items"]["properties"]["client"]["properties"]) == {
        "serial", "notBefore", "notAfter", "issuer", "matchesSecret", "error",
    }
