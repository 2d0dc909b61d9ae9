"""The API models: full objects parse and dump back, defaults, camelCase aliases, clear errors, durations.

We test these aspects: a KubeDB-style object round-trips (unknown metadata kept); defaults fill in (replicas 3,
Durable, Delete, timeout 10m, IfReady); bad input names the field; Go durations parse and reject garbage; the
ReconfigureTLS operation counting matches KubeDB's.
"""

from __future__ import annotations

import datetime
import json

import pydantic
import pytest

from opsmanager.api import common, constants, etcd, opsrequest

ETCD_OBJ = {
    "apiVersion": "opsmanager.dev/v1alpha1",
    "kind": "Etcd",
    "metadata": {
        "name": "etcd-cluster", "namespace": "demo", "uid": "1234", "generation": 2,
        "managedFields": [{"manager": "kubectl"}], "labels": {"app": "x"},
    },
    "spec": {
        "version": "3.5.1",
        "replicas": 3,
        "storageType": "Durable",
        "storage": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "tls": {
            "issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "etcd-ca-issuer"},
            "certificates": [
                {"alias": "server", "secretName": "etcd-cluster-server-cert",
                 "subject": {"organizations": ["kubedb"], "organizationalUnits": ["server"]},
                 "dnsNames": ["etcd.example"], "ipAddresses": ["127.0.0.1"], "duration": "2160h",
                 "privateKey": {"encoding": "PKCS8"}},
                {"alias": "peer"},
            ],
        },
        "podTemplate": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "b"}},
            "spec": {"resources": {"requests": {"cpu": "100m", "memory": 268435456}},
                     "terminationGracePeriodSeconds": 10},
        },
        "deletionPolicy": "WipeOut",
        "halted": False,
    },
    "status": {
        "phase": "Ready", "observedGeneration": 2,
        "conditions": [{"type": "Ready", "status": "True", "reason": "AllReplicasReady",
                        "lastTransitionTime": "2026-11-29T14:39:00Z"}],
    },
}

OPS_OBJ = {
    "apiVersion": "ops.opsmanager.dev/v1alpha1",
    "kind": "EtcdOpsRequest",
    "metadata": {"name": "add-tls", "namespace": "demo"},
    "spec": {
        "type": "ReconfigureTLS",
        "databaseRef": {"name": "etcd-cluster"},
        "tls": {
            "issuerRef": {"apiGroup": "cert-manager.io", "kind": "ClusterIssuer", "name": "ca"},
            "certificates": [{"alias": "server", "subject": {"organizations": ["acme-corp"]}}],
            "rotateCertificates": False,
            "remove": False,
        },
        "timeout": "15m",
        "apply": "Always",
    },
    "status": {
        "phase": "Progressing", "observedGeneration": 1,
        "conditions": [
            {"type": "Running", "status": "True", "reason": "Running", "message": "Etcd ops request is running",
             "observedGeneration": 1, "lastTransitionTime": "2026-11-29T14:39:00Z"},
            {"type": "EvictPod--etcd-cluster-1", "status": "False",
             "message": "evict pod; ConditionStatus:False; PodName:etcd-cluster-1",
             "lastTransitionTime": "2026-11-29T14:40:00Z"},
        ],
    },
}


def test_etcd_full_object_round_trips_unchanged() -> None:
    db = etcd.Etcd.model_validate(ETCD_OBJ)
    assert db.to_dict() == ETCD_OBJ
    assert common.to_dict(db) == ETCD_OBJ
    assert json.loads(db.model_dump_json(by_alias=True, exclude_none=True)) == ETCD_OBJ


def test_etcd_attributes_are_snake_case_and_helpers_work() -> None:
    db = etcd.Etcd.model_validate(ETCD_OBJ)
    assert db.metadata.name == "etcd-cluster"
    assert db.spec.tls is not None and db.tls_enabled
    server = db.spec.tls.certificate("server")
    assert server is not None and server.ip_addresses == ["127.0.0.1"]
    assert server.subject is not None and server.subject.organizational_units == ["server"]
    assert db.spec.tls.certificate("client") is None
    assert db.spec.pod_template is not None and db.spec.pod_template.spec is not None
    assert db.spec.pod_template.spec.termination_grace_period_seconds == 10
    assert etcd.default_secret_name("etcd-cluster", "peer") == "etcd-cluster-peer-cert"


def test_etcd_defaults_fill_in() -> None:
    db = etcd.Etcd.model_validate({"metadata": {"name": "e"}, "spec": {"version": "3.5.1"}})
    assert db.api_version == constants.ETCD_API_VERSION and db.kind == "Etcd"
    assert db.spec.replicas == 3
    assert db.spec.storage_type == "Durable"
    assert db.spec.deletion_policy == "Delete"
    assert db.spec.halted is False
    assert db.spec.tls is None and not db.tls_enabled
    assert db.status is None


def test_models_accept_snake_case_names_too() -> None:
    spec = etcd.EtcdSpec(version="3.5.1", storage_type="Ephemeral", deletion_policy="DoNotTerminate")
    assert spec.to_dict()["storageType"] == "Ephemeral"
    assert spec.to_dict()["deletionPolicy"] == "DoNotTerminate"


@pytest.mark.parametrize(
    ("patch", "field", "fragment"),
    [
        ({"replicas": 0}, "spec.replicas", "number of replicas can not be less than 1"),
        ({"storageType": "Durabel"}, "spec.storageType", "'Durable' or 'Ephemeral'"),
        ({"deletionPolicy": "Halt"}, "spec.deletionPolicy", "'Delete', 'WipeOut' or 'DoNotTerminate'"),
        ({"tls": {"issuerRef": {"name": "x"}, "certificates": [{"alias": "metrics"}]}},
         "spec.tls.certificates.0.alias", "'server', 'client' or 'peer'"),
        ({"tls": {"issuerref": {"name": "x"}}}, "spec.tls.issuerref", "Extra inputs are not permitted"),
        ({"tls": {"issuerRef": {"name": "x", "kind": "Cluster"}}}, "spec.tls.issuerRef.kind", "'Issuer'"),
        ({"tls": {"issuerRef": {"name": ""}}}, "spec.tls.issuerRef.name", "at least 1 character"),
        ({"tls": {"issuerRef": {"name": "x"}, "certificates": [{"alias": "server", "duration": "90 days"}]}},
         "spec.tls.certificates.0.duration", "invalid duration '90 days'"),
    ],
)
def test_bad_etcd_spec_names_the_field(patch: dict, field: str, fragment: str) -> None:
    obj = {"metadata": {"name": "e"}, "spec": {"version": "3.5.1", **patch}}
    with pytest.raises(pydantic.ValidationError) as info:
        etcd.Etcd.model_validate(obj)
    errors = info.value.errors()
    assert any(".".join(str(p) for p in e["loc"]) == field and fragment in e["msg"] for e in errors), errors


def test_missing_version_is_an_error() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        etcd.Etcd.model_validate({"spec": {}})
    assert info.value.errors()[0]["loc"] == ("spec", "version")


def test_opsrequest_full_object_round_trips_unchanged() -> None:
    req = opsrequest.EtcdOpsRequest.model_validate(OPS_OBJ)
    assert req.to_dict() == OPS_OBJ
    assert req.spec.tls is not None and req.spec.tls.issuer_ref is not None
    assert req.spec.tls.issuer_ref.kind == "ClusterIssuer"
    assert req.spec.timeout_delta == datetime.timedelta(minutes=15)
    assert req.status is not None and req.status.conditions is not None
    assert req.status.conditions[1].reason is None


def test_opsrequest_defaults_fill_in() -> None:
    req = opsrequest.EtcdOpsRequest.model_validate(
        {"metadata": {"name": "r"}, "spec": {"type": "Restart", "databaseRef": {"name": "e"}, "restart": {}}}
    )
    assert req.spec.timeout == "10m" and req.spec.timeout_delta == datetime.timedelta(minutes=10)
    assert req.spec.apply == "IfReady"
    assert req.to_dict()["spec"] == {
        "databaseRef": {"name": "e"}, "type": "Restart", "restart": {}, "timeout": "10m", "apply": "IfReady",
    }


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        ({"type": "Upgrade", "databaseRef": {"name": "e"}}, "spec.type",
         "'RotateAuth', 'StorageMigration', 'MoveLeader', 'Defragment', 'Compact', 'RecoverFromQuorumLoss', "
         "'Restore' or 'Backup'"),
        ({"type": "Restart"}, "spec.databaseRef", "Field required"),
        ({"type": "Restart", "databaseRef": {"name": "e"}, "timeout": "0s"}, "spec.timeout", "greater than zero"),
        ({"type": "Restart", "databaseRef": {"name": "e"}, "timeout": "ten"}, "spec.timeout", "invalid duration"),
        ({"type": "Restart", "databaseRef": {"name": "e"}, "apply": "Now"}, "spec.apply", "'IfReady' or 'Always'"),
        ({"type": "Restart", "databaseRef": {"name": "e"}, "restart": {"force": True}}, "spec.restart.force",
         "Extra inputs"),
    ],
)
def test_bad_opsrequest_spec_names_the_field(spec: dict, field: str, fragment: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        opsrequest.EtcdOpsRequest.model_validate({"metadata": {"name": "r"}, "spec": spec})
    errors = info.value.errors()
    assert any(".".join(str(p) for p in e["loc"]) == field and fragment in e["msg"] for e in errors), errors


@pytest.mark.parametrize(
    ("tls", "ops"),
    [
        ({}, []),
        ({"remove": True}, ["remove"]),
        ({"rotateCertificates": True}, ["rotate"]),
        ({"issuerRef": {"name": "ca"}}, ["update"]),
        ({"certificates": [{"alias": "peer"}]}, ["update"]),
        ({"certificates": []}, []),
        ({"remove": True, "rotateCertificates": True, "issuerRef": {"name": "ca"}}, ["remove", "rotate", "update"]),
    ],
)
def test_reconfigure_tls_operations_are_counted_like_kubedb(tls: dict, ops: list[str]) -> None:
    spec = opsrequest.ReconfigureTLSSpec.model_validate(tls)
    assert spec.operations() == ops
    assert spec.operation == (ops[0] if len(ops) == 1 else None)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10m", 600), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400), ("250ms", 0.25), ("2h0m0s", 7200),
     ("0", 0), ("1us", 1e-6), ("1µs", 1e-6), ("3000ns", 3e-6)],
)
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert common.parse_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "10 m", "-1s", "+1s", "1d", "m", "1h 30m", "1.h", ".5h", "10M"])
def test_bad_go_durations_are_rejected_with_the_accepted_form(text: str) -> None:
    with pytest.raises(ValueError, match="use a Go duration such as"):
        common.parse_duration(text)


def test_format_duration_prints_like_go() -> None:
    assert common.format_duration(datetime.timedelta(minutes=10)) == "10m0s"
    assert common.format_duration(datetime.timedelta(hours=1, minutes=30)) == "1h30m0s"
    assert common.format_duration(datetime.timedelta(seconds=45)) == "45s"
    for text in ("10m", "1h30m", "45s", "3h"):
        assert common.parse_duration(common.format_duration(common.parse_duration(text))) == common.parse_duration(text)


def test_per_pod_condition_type_is_kubedb_style() -> None:
    assert constants.per_pod_type(constants.STEP_EVICT_POD, "etcd-0") == "EvictPod--etcd-0"


def test_api_version_constants_match_group_and_version() -> None:
    assert constants.ETCD_API_VERSION == f"{constants.ETCD_GROUP}/{constants.ETCD_VERSION}"
    assert constants.OPS_API_VERSION == f"{constants.OPS_GROUP}/{constants.OPS_VERSION}"
