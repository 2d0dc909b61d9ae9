"""The admission rules, pure: every KubeDB rule with its exact message, in KubeDB's order.

We test these aspects: each EtcdOpsRequest rule (type, databaseRef, the five ReconfigureTLS checks) and each Etcd
rule (version, replicas, storageType, deletionPolicy, TLS issuer, aliases, duplicates, DoNotTerminate on delete,
storageType immutable) gives its message; each ``spec.tlsLifecycle`` rule (unparsable or non-positive duration,
duplicate ``alertBefore``) names the field and the fix, on create and update, and a valid policy passes, wrapped as ``<Kind>.<group> "<name>" is invalid: <field error>``; the
first two ops-request checks stop validation; schema errors name the field; spec immutability on update; the
defaulting patch and its errors; the Go formatting helpers the messages rely on.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from opsmanager.api import etcd
from opsmanager.webhook import validation

NS = "demo"
TLS_DB = {
    "apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd",
    "metadata": {"name": "etcd-tls", "namespace": NS},
    "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete",
             "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}}},
}
PLAIN_DB = {
    "apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd",
    "metadata": {"name": "etcd-plain", "namespace": NS},
    "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete"},
}


@pytest.fixture
def lookup() -> validation.InMemoryEtcdLookup:
    return validation.InMemoryEtcdLookup([TLS_DB, PLAIN_DB])


def ops(spec: dict[str, Any], name: str = "my-op") -> dict[str, Any]:
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def tls_op(db: str, tls: Any) -> dict[str, Any]:
    return ops({"type": "ReconfigureTLS", "databaseRef": {"name": db}, "tls": tls})


def create(obj: dict[str, Any], lookup: validation.EtcdLookup) -> validation.Verdict:
    return validation.validate_opsrequest("CREATE", obj, None, namespace=NS, lookup=lookup)


PREFIX = 'EtcdOpsRequest.ops.opsmanager.dev "my-op" is invalid: '

# --- EtcdOpsRequest: the rules in KubeDB's order -----------------------------------------------------------------


@pytest.mark.parametrize("bad_type", ["Upgrade", "restart", "", None, 7])
def test_unsupported_type_is_the_first_check(bad_type: Any, lookup: validation.InMemoryEtcdLookup) -> None:
    spec: dict[str, Any] = {"databaseRef": {"name": "missing"}}  # databaseRef is wrong too: type wins
    if bad_type is not None:
        spec["type"] = bad_type
    verdict = create(ops(spec), lookup)
    shown = {None: "", 7: "7"}.get(bad_type, bad_type)
    assert not verdict.allowed and verdict.code == 422 and verdict.reason == "Invalid"
    assert verdict.message == (
        PREFIX + f'spec.type: Invalid value: "my-op": defined OpsRequestType {shown} is not supported, '
        "supported types for Etcd are UpdateVersion, HorizontalScaling, VerticalScaling, VolumeExpansion, Restart, "
        "Reconfigure, "
        "ReconfigureTLS, RotateAuth, StorageMigration, MoveLeader, Compact, Defragment, RecoverFromQuorumLoss, "
        "Restore, Backup"
    )
    assert [e.field for e in verdict.errors] == ["spec.type"]


@pytest.mark.parametrize("ref", [{"name": "nope"}, {}, None, {"name": ""}, {"name": 5}])
def test_missing_database_is_the_second_check(ref: Any, lookup: validation.InMemoryEtcdLookup) -> None:
    spec: dict[str, Any] = {"type": "ReconfigureTLS", "tls": {"remove": True, "rotateCertificates": True}}
    if ref is not None:
        spec["databaseRef"] = ref
    verdict = create(ops(spec), lookup)
    shown = ref.get("name") if isinstance(ref, dict) and isinstance(ref.get("name"), str) else ""
    assert verdict.message == (
        PREFIX + f'spec.databaseRef: Invalid value: "my-op": spec.databaseRef demo/{shown} is invalid or not found'
    )


def test_database_in_another_namespace_is_not_found() -> None:
    other = copy.deepcopy(PLAIN_DB)
    other["metadata"]["namespace"] = "elsewhere"
    verdict = create(ops({"type": "Restart", "databaseRef": {"name": "etcd-plain"}}),
                     validation.InMemoryEtcdLookup([other]))
    assert verdict.message.endswith("spec.databaseRef demo/etcd-plain is invalid or not found")


@pytest.mark.parametrize(
    ("db", "tls", "message"),
    [
        ("etcd-tls", None, "spec.tls is nil, not supported in ReconfigureTLS type"),
        ("etcd-tls", {}, "at least one of Remove, RotateCertificates, IssuerRef, or Certificates must be specified"),
        ("etcd-tls", {"remove": False, "rotateCertificates": False, "certificates": []},
         "at least one of Remove, RotateCertificates, IssuerRef, or Certificates must be specified"),
        ("etcd-tls", {"remove": True, "rotateCertificates": True},
         "only one TLS reconfiguration operation is allowed at a time"),
        ("etcd-tls", {"remove": True, "issuerRef": {"name": "ca"}},
         "only one TLS reconfiguration operation is allowed at a time"),
        ("etcd-tls", {"rotateCertificates": True, "certificates": [{"alias": "server"}]},
         "only one TLS reconfiguration operation is allowed at a time"),
        ("etcd-plain", {"rotateCertificates": True},
         "rotateCertificates requires TLS to already be enabled with issuerRef on Etcd"),
        ("etcd-plain", {"certificates": [{"alias": "server", "subject": {"organizations": ["acme"]}}]},
         "tls.issuerRef is required for Etcd ReconfigureTLS"),
    ],
)
def test_reconfigure_tls_rules_and_messages(
    db: str, tls: Any, message: str, lookup: validation.InMemoryEtcdLookup
) -> None:
    obj = tls_op(db, tls)
    if tls is None:
        del obj["spec"]["tls"]
    verdict = create(obj, lookup)
    assert not verdict.allowed
    assert verdict.message == PREFIX + f'spec.tls: Invalid value: "my-op": {message}'
    assert verdict.status()["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec.tls", "message": f'Invalid value: "my-op": {message}'}
    ]


def test_explicit_null_tls_is_nil(lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = create(tls_op("etcd-tls", None), lookup)
    assert verdict.message.endswith("spec.tls is nil, not supported in ReconfigureTLS type")


@pytest.mark.parametrize(
    ("db", "tls"),
    [
        ("etcd-plain", {"remove": True}),  # remove: nothing more is checked (even on a plain cluster)
        ("etcd-tls", {"remove": True}),
        ("etcd-tls", {"rotateCertificates": True}),
        ("etcd-plain", {"issuerRef": {"name": "ca"}}),  # add TLS
        ("etcd-tls", {"issuerRef": {"name": "other", "kind": "ClusterIssuer"}}),  # change issuer
        ("etcd-tls", {"certificates": [{"alias": "server", "subject": {"organizations": ["acme-corp"]}}]}),
        ("etcd-plain", {"issuerRef": {"name": "ca"}, "certificates": [{"alias": "peer"}]}),
    ],
)
def test_valid_reconfigure_tls_requests_are_allowed(
    db: str, tls: dict[str, Any], lookup: validation.InMemoryEtcdLookup
) -> None:
    verdict = create(tls_op(db, tls), lookup)
    assert verdict.allowed, verdict.message


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "Restart", "databaseRef": {"name": "etcd-tls"}},
        {"type": "Restart", "databaseRef": {"name": "etcd-tls"}, "restart": {}, "timeout": "1h30m", "apply": "Always"},
        {"type": "MoveLeader", "databaseRef": {"name": "etcd-plain"}},
        {"type": "MoveLeader", "databaseRef": {"name": "etcd-plain"}, "moveLeader": {"newLeader": "etcd-plain-2"}},
        {"type": "Defragment", "databaseRef": {"name": "etcd-plain"}},
        {"type": "Defragment", "databaseRef": {"name": "etcd-tls"}, "defragment": {}},
        {"type": "Restart", "databaseRef": {"name": "etcd-tls"}, "tls": {"remove": True, "rotateCertificates": True}},
    ],
)
def test_restart_and_move_leader_need_nothing_more(spec: dict[str, Any], lookup: validation.InMemoryEtcdLookup) -> None:
    assert create(ops(spec), lookup).allowed


@pytest.mark.parametrize(("compact", "message"), [
    (None, "spec.compact is nil, not supported in Compact type"),
    ({"revision": -1}, "spec.compact.revision can not be negative"),
])
def test_compact_rules_and_messages(compact: Any, message: str, lookup: validation.InMemoryEtcdLookup) -> None:
    spec: dict[str, Any] = {"type": "Compact", "databaseRef": {"name": "etcd-plain"}}
    if compact is not None:
        spec["compact"] = compact
    verdict = create(ops(spec), lookup)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == PREFIX + f'spec.compact: Invalid value: "my-op": {message}'


# The types after ReconfigureTLS, table-driven: (spec fields beyond type and databaseRef, field, message); None: allowed.
TYPE_RULES: list[tuple[str, dict[str, Any], str | None, str | None]] = [
    ("UpdateVersion", {}, "spec.updateVersion", "spec.updateVersion is nil, not supported in UpdateVersion type"),
    ("UpdateVersion", {"updateVersion": {}}, "spec.updateVersion", "spec.updateVersion.targetVersion can not be empty"),
    ("UpdateVersion", {"updateVersion": {"targetVersion": "3.6.16"}}, None, None),
    ("HorizontalScaling", {}, "spec.horizontalScaling",
     "spec.horizontalScaling is nil, not supported in HorizontalScaling type"),
    ("HorizontalScaling", {"horizontalScaling": {}}, "spec.horizontalScaling",
     "spec.horizontalScaling.replicas can not be empty"),
    ("HorizontalScaling", {"horizontalScaling": {"replicas": 0}}, "spec.horizontalScaling",
     "spec.horizontalScaling.replicas must be at least 1"),
    ("HorizontalScaling", {"horizontalScaling": {"replicas": 5}}, None, None),
    ("VerticalScaling", {}, "spec.verticalScaling", "spec.verticalScaling is nil, not supported in VerticalScaling type"),
    ("VerticalScaling", {"verticalScaling": {"mode": "InPlace"}}, "spec.verticalScaling",
     "at least one of spec.verticalScaling.etcd or spec.verticalScaling.exporter must be specified"),
    ("VerticalScaling", {"verticalScaling": {"etcd": {"resources": {"requests": {"cpu": "1"}}}}}, None, None),
    ("Reconfigure", {}, "spec.configuration", "spec.configuration is nil, not supported in Reconfigure type"),
    ("Reconfigure", {"configuration": {"applyConfig": {"a": "b"}}}, "spec.configuration",
     "spec.configuration.tuning must be specified, since Etcd does not support a mounted custom config file "
     "(--config-file is mutually exclusive with etcd command-line flags)"),
    ("Reconfigure", {"configuration": {"tuning": {}, "configSecret": {"name": "x"}}}, "spec.configuration",
     "spec.configuration.applyConfig and spec.configuration.configSecret are not supported for Etcd, use "
     "spec.configuration.tuning instead"),
    ("Reconfigure", {"configuration": {"tuning": {"snapshotCount": 10000}}}, None, None),
]


@pytest.mark.parametrize(("type_", "fields", "field", "message"), TYPE_RULES,
                         ids=[f"{t}-{m or 'allowed'}"[:70] for t, _f, _p, m in TYPE_RULES])
def test_the_rules_of_the_other_types_in_kubedbs_words(type_: str, fields: dict[str, Any], field: str | None,
                                                       message: str | None,
                                                       lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = create(ops({"type": type_, "databaseRef": {"name": "etcd-plain"}, **fields}), lookup)
    if message is None:
        assert verdict.allowed, verdict.message
        return
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == PREFIX + f'{field}: Invalid value: "my-op": {message}'


def test_an_even_member_count_is_allowed_with_a_warning(lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = create(ops({"type": "HorizontalScaling", "databaseRef": {"name": "etcd-plain"},
                          "horizontalScaling": {"replicas": 4}}), lookup)
    assert verdict.allowed and len(verdict.warnings) == 1 and "is even (4)" in verdict.warnings[0]


@pytest.mark.parametrize(("tuning", "field", "fragment"), [
    ({"heartbeatInterval": 300}, "spec.configuration.tuning.electionTimeout", "at least 5 times the heartbeat"),
    ({"electionTimeout": 60000}, "spec.configuration.tuning.electionTimeout", "above 50000ms"),
    ({"quotaBackendBytes": 9 * 1024 ** 3}, "spec.configuration.tuning.quotaBackendBytes", "8 GiB"),
    ({"autoCompactionMode": "revision", "autoCompactionRetention": "1h"},
     "spec.configuration.tuning.autoCompactionRetention", "number of revisions"),
    ({"autoCompactionRetention": "one hour"}, "spec.configuration.tuning.autoCompactionRetention", "a duration"),
    ({"maxTxnOps": 0}, "spec.configuration.tuning.maxTxnOps", "at least 1"),
])
def test_etcds_own_rules_on_the_flags_name_the_field(tuning: dict[str, Any], field: str, fragment: str,
                                                     lookup: validation.InMemoryEtcdLookup) -> None:
    verdict = create(ops({"type": "Reconfigure", "databaseRef": {"name": "etcd-plain"},
                          "configuration": {"tuning": tuning}}), lookup)
    assert not verdict.allowed and f"{field}: Invalid value" in verdict.message and fragment in verdict.message, \
        verdict.message
    db = copy.deepcopy(PLAIN_DB)
    db["spec"]["configuration"] = {"tuning": tuning}
    errors, _warnings = validation.etcd_errors(db)
    assert any(e.field == field and fragment in e.detail for e in errors), errors


@pytest.mark.parametrize("compact", [{}, {"revision": 0}, {"revision": 12345}])
def test_a_compact_with_a_revision_or_none_is_allowed(compact: dict[str, Any],
                                                      lookup: validation.InMemoryEtcdLookup) -> None:
    assert create(ops({"type": "Compact", "databaseRef": {"name": "etcd-tls"}, "compact": compact}), lookup).allowed


@pytest.mark.parametrize(
    ("spec_patch", "error"),
    [
        ({"timeout": "10 minutes"}, 'spec.timeout: Invalid value: "10 minutes": invalid duration'),
        ({"timeout": "0s"}, 'spec.timeout: Invalid value: "0s": duration \'0s\' must be greater than zero'),
        ({"apply": "Sometimes"},
         'spec.apply: Unsupported value: "Sometimes": supported values: "IfReady", "Always"'),
        ({"tls": {"remove": "yes"}}, 'spec.tls.remove: Invalid value: "yes": Input should be a valid boolean'),
        ({"tls": {"certificates": [{"alias": "metrics-exporter"}]}},
         'spec.tls.certificates[0].alias: Unsupported value: "metrics-exporter": supported values: '
         '"server", "client", "peer"'),
        ({"tls": {"issuerref": {"name": "ca"}}}, "spec.tls.issuerref: Forbidden: unknown field"),
        ({"tls": {"issuerRef": {}}}, "spec.tls.issuerRef.name: Required value"),
        ({"restart": []}, "spec.restart: Invalid value: []: Input should be a valid dictionary"),
    ],
)
def test_schema_errors_name_the_field(
    spec_patch: dict[str, Any], error: str, lookup: validation.InMemoryEtcdLookup
) -> None:
    spec = {"type": "ReconfigureTLS", "databaseRef": {"name": "etcd-tls"}, "tls": {"rotateCertificates": True}}
    spec.update(spec_patch)
    verdict = create(ops(spec), lookup)
    assert not verdict.allowed and verdict.code == 422
    assert error in verdict.message, verdict.message


def test_several_errors_are_aggregated_in_brackets(lookup: validation.InMemoryEtcdLookup) -> None:
    spec = {"type": "Restart", "databaseRef": {"name": "etcd-tls"}, "timeout": "x", "apply": "y"}
    verdict = create(ops(spec), lookup)
    assert verdict.message.startswith(PREFIX + "[spec.timeout: Invalid value: \"x\": invalid duration")
    assert verdict.message.endswith('spec.apply: Unsupported value: "y": supported values: "IfReady", "Always"]')
    assert [e.field for e in verdict.errors] == ["spec.timeout", "spec.apply"]


class FailingLookup:
    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise validation.EtcdLookupError("connection refused")


def test_a_lookup_failure_is_not_reported_as_not_found() -> None:
    verdict = create(ops({"type": "Restart", "databaseRef": {"name": "etcd-tls"}}), FailingLookup())
    assert not verdict.allowed and verdict.code == 503 and verdict.reason == "ServiceUnavailable"
    assert "looking up Etcd demo/etcd-tls failed: connection refused" in verdict.message
    assert "invalid or not found" not in verdict.message


def test_spec_is_immutable_on_update(lookup: validation.InMemoryEtcdLookup) -> None:
    old = ops({"type": "Restart", "databaseRef": {"name": "etcd-tls"}, "timeout": "10m", "apply": "IfReady"})
    new = copy.deepcopy(old)
    new["spec"]["type"] = "MoveLeader"
    new["spec"]["timeout"] = "15m"
    verdict = validation.validate_opsrequest("UPDATE", new, old, namespace=NS, lookup=lookup)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == (
        PREFIX + 'spec: Invalid value: "my-op": precondition failed for: map[spec:map[timeout:15m type:MoveLeader]].'
        "At least one of the following was changed:\n\tapiVersion\n\tkind\n\tname\n\tnamespace\n\tspec"
    )


def test_update_of_status_and_labels_is_allowed_and_not_revalidated() -> None:
    old = ops({"type": "Restart", "databaseRef": {"name": "gone"}})  # its Etcd no longer exists: fine on update
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Progressing"}
    new["metadata"]["labels"] = {"x": "y"}
    verdict = validation.validate_opsrequest("UPDATE", new, old, namespace=NS,
                                             lookup=validation.InMemoryEtcdLookup())
    assert verdict.allowed


def test_delete_of_an_ops_request_is_allowed(lookup: validation.InMemoryEtcdLookup) -> None:
    old = ops({"type": "Restart", "databaseRef": {"name": "etcd-tls"}})
    assert validation.validate_opsrequest("DELETE", None, old, namespace=NS, lookup=lookup).allowed


# --- Etcd ---------------------------------------------------------------------------------------------------------

EPREFIX = 'Etcd.opsmanager.dev "etcd-tls" is invalid: '
NO_OBJECTS = validation.InMemoryEtcdLookup()  # the Etcd rules read an EtcdOpsRequest only for a held pause


def etcd_with(**spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(TLS_DB)
    for key, value in spec.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    return obj


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"version": None}, "spec.version: Required value: spec.version is missing"),
        ({"version": ""}, "spec.version: Required value: spec.version is missing"),
        ({"version": "3.4.0"}, 'spec.version: Invalid value: "3.4.0": etcdversions.catalog.opsmanager.dev "3.4.0" '
                               'not found (kubectl get etcdversions lists the versions)'),
        ({"replicas": None}, "spec.replicas: Required value: spec.replicas has to be defined"),
        ({"replicas": 0}, "spec.replicas: Invalid value: 0: number of replicas can not be less than 1"),
        ({"replicas": -3}, "spec.replicas: Invalid value: -3: number of replicas can not be less than 1"),
        ({"storageType": None}, "spec.storageType: Required value: spec.storageType can not be empty"),
        ({"storageType": "Durabel"},
         'spec.storageType: Invalid value: "Durabel": spec.storageType should be either Durable or Ephemeral'),
        ({"deletionPolicy": None}, "spec.deletionPolicy: Required value: spec.deletionPolicy is missing"),
        ({"tls": {"certificates": [{"alias": "server"}]}},
         "spec.tls.issuerRef: Required value: spec.tls.issuerRef is missing"),
        ({"tls": {"issuerRef": {"name": "ca"}, "certificates": [{"alias": "metrics-exporter"}]}},
         'spec.tls.certificates[0].alias: Invalid value: "metrics-exporter": '
         'supported aliases are "server", "client" and "peer"'),
        ({"tls": {"issuerRef": {"name": "ca"}, "certificates": [{"alias": "peer"}, {"alias": "peer"}]}},
         'spec.tls.certificates[1].alias: Duplicate value: "peer"'),
    ],
)
def test_etcd_rules_and_messages(spec: dict[str, Any], error: str) -> None:
    verdict = validation.validate_etcd("CREATE", etcd_with(**spec), None, lookup=NO_OBJECTS)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == EPREFIX + error


def test_etcd_errors_are_all_reported_in_kubedb_order() -> None:
    obj = etcd_with(version=None, replicas=0, storageType="x", deletionPolicy=None,
                    tls={"certificates": [{"alias": "server"}, {"alias": "bogus"}, {"alias": "server"}]})
    verdict = validation.validate_etcd("CREATE", obj, None, lookup=NO_OBJECTS)
    assert [e.field for e in verdict.errors] == [
        "spec.version", "spec.replicas", "spec.storageType", "spec.deletionPolicy", "spec.tls.issuerRef",
        "spec.tls.certificates[1].alias", "spec.tls.certificates[2].alias",
    ]
    assert verdict.message.startswith(EPREFIX + "[spec.version: Required value: spec.version is missing, ")


def test_even_replicas_are_allowed_with_a_warning() -> None:
    verdict = validation.validate_etcd("CREATE", etcd_with(replicas=4), None, lookup=NO_OBJECTS)
    assert verdict.allowed
    assert verdict.warnings == (validation.MSG_EVEN_REPLICAS,)


def test_etcd_schema_errors_follow_the_kubedb_rules() -> None:
    verdict = validation.validate_etcd("CREATE", etcd_with(replicas="3", halted="no"), None, lookup=NO_OBJECTS)
    assert verdict.message == EPREFIX + (
        '[spec.replicas: Invalid value: "3": Input should be a valid integer, '
        'spec.halted: Invalid value: "no": Input should be a valid boolean]'
    )


def test_storage_type_is_immutable_on_update() -> None:
    old = etcd_with()
    new = etcd_with(storageType="Ephemeral", replicas=5)
    verdict = validation.validate_etcd("UPDATE", new, old, lookup=NO_OBJECTS)
    assert verdict.message == EPREFIX + (
        'spec: Invalid value: "etcd-tls": precondition failed for: map[spec:map[replicas:5 storageType:Ephemeral]].'
        "At least one of the following was changed:\n\tapiVersion\n\tkind\n\tname\n\tnamespace\n\tspec.storageType"
    )
    assert validation.validate_etcd("UPDATE", etcd_with(replicas=5), old, lookup=NO_OBJECTS).allowed


def test_do_not_terminate_blocks_delete() -> None:
    old = etcd_with(deletionPolicy="DoNotTerminate")
    verdict = validation.validate_etcd("DELETE", None, old, lookup=NO_OBJECTS)
    assert verdict.message == EPREFIX + (
        'spec.deletionPolicy: Invalid value: "etcd-tls": can not delete as deletionPolicy is set to "DoNotTerminate"'
    )
    assert validation.validate_etcd("DELETE", None, etcd_with(deletionPolicy="WipeOut"), lookup=NO_OBJECTS).allowed


def test_an_etcd_being_deleted_is_not_validated() -> None:
    obj = etcd_with(replicas=0)
    obj["metadata"]["deletionTimestamp"] = "2026-11-29T14:39:00Z"
    assert validation.validate_etcd("UPDATE", obj, obj, lookup=NO_OBJECTS).allowed


def test_a_valid_etcd_is_allowed() -> None:
    assert validation.validate_etcd("CREATE", etcd_with(), None, lookup=NO_OBJECTS).allowed
    assert validation.validate_etcd("CREATE", PLAIN_DB, None, lookup=NO_OBJECTS).allowed


# --- spec.tlsLifecycle (issue 11) ------------------------------------------------------------------------------

_NOT_A_DURATION = (
    'not a duration: write a Go duration such as "90s", "10m", "1h30m" or "720h" (units ns, us, ms, s, m, h)'
)
_NOT_POSITIVE = 'must be greater than zero: write a positive Go duration such as "24h"'


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        ({"scanInterval": "5 minutes"}, f'spec.tlsLifecycle.scanInterval: Invalid value: "5 minutes": {_NOT_A_DURATION}'),
        ({"scanInterval": "0s"}, f'spec.tlsLifecycle.scanInterval: Invalid value: "0s": {_NOT_POSITIVE}'),
        ({"scanInterval": "-5m"}, f'spec.tlsLifecycle.scanInterval: Invalid value: "-5m": {_NOT_POSITIVE}'),
        ({"scanInterval": 300}, f"spec.tlsLifecycle.scanInterval: Invalid value: 300: {_NOT_A_DURATION}"),
        ({"alertBefore": ["720h", "30d"]}, f'spec.tlsLifecycle.alertBefore[1]: Invalid value: "30d": {_NOT_A_DURATION}'),
        ({"alertBefore": ["0"]}, f'spec.tlsLifecycle.alertBefore[0]: Invalid value: "0": {_NOT_POSITIVE}'),
        ({"alertBefore": ["24h", "168h", "1440m"]},
         'spec.tlsLifecycle.alertBefore[2]: Duplicate value: "1440m": the same duration as '
         'spec.tlsLifecycle.alertBefore[0] ("24h"); list each threshold once'),
        ({"alertBefore": ["9m", "9m"]},
         'spec.tlsLifecycle.alertBefore[1]: Duplicate value: "9m": the same duration as '
         'spec.tlsLifecycle.alertBefore[0] ("9m"); list each threshold once'),
        ({"autoRenew": {"before": "1w"}}, f'spec.tlsLifecycle.autoRenew.before: Invalid value: "1w": {_NOT_A_DURATION}'),
        ({"autoRenew": {"before": "-1h"}}, f'spec.tlsLifecycle.autoRenew.before: Invalid value: "-1h": {_NOT_POSITIVE}'),
        ({"autoRenew": {"retryAfterFailure": ""}},
         f'spec.tlsLifecycle.autoRenew.retryAfterFailure: Invalid value: "": {_NOT_A_DURATION}'),
        ({"autoRenew": {"retryAfterFailure": "0ms"}},
         f'spec.tlsLifecycle.autoRenew.retryAfterFailure: Invalid value: "0ms": {_NOT_POSITIVE}'),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_bad_tls_lifecycle_policies_are_denied(policy: dict[str, Any], error: str, operation: str) -> None:
    verdict = validation.validate_etcd(operation, etcd_with(tlsLifecycle=policy), etcd_with(), lookup=NO_OBJECTS)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == EPREFIX + error


def test_tls_lifecycle_errors_are_all_reported_in_field_order_after_kubedb_rules() -> None:
    policy = {"scanInterval": "x", "alertBefore": ["1h", "60m", "0"],
              "autoRenew": {"before": "0s", "retryAfterFailure": "1d"}}
    verdict = validation.validate_etcd("CREATE", etcd_with(replicas=0, tlsLifecycle=policy), None, lookup=NO_OBJECTS)
    assert [e.field for e in verdict.errors] == [
        "spec.replicas", "spec.tlsLifecycle.scanInterval", "spec.tlsLifecycle.alertBefore[1]",
        "spec.tlsLifecycle.alertBefore[2]", "spec.tlsLifecycle.autoRenew.before",
        "spec.tlsLifecycle.autoRenew.retryAfterFailure",
    ]
    assert [e.type for e in verdict.errors][2] == "FieldValueDuplicate"


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"scanInterval": "90s", "alertBefore": ["1440h", "720h", "168h"]},
        {"scanInterval": "1h30m", "alertBefore": ["9m"], "autoRenew": {"enabled": False, "before": "5m",
                                                                        "retryAfterFailure": "2.5h"}},
        {"alertBefore": [], "autoRenew": {"before": "500ms"}},
    ],
)
def test_valid_tls_lifecycle_policies_are_allowed(policy: dict[str, Any]) -> None:
    assert validation.validate_etcd("CREATE", etcd_with(tlsLifecycle=policy), None, lookup=NO_OBJECTS).allowed
    assert validation.validate_etcd("UPDATE", etcd_with(tlsLifecycle=policy), etcd_with(), lookup=NO_OBJECTS).allowed


def test_tls_lifecycle_wrong_shapes_fall_to_the_schema_check() -> None:
    verdict = validation.validate_etcd("CREATE", etcd_with(tlsLifecycle={"scanInteval": "5m"}), None, lookup=NO_OBJECTS)
    assert verdict.message == EPREFIX + (
        "spec.tlsLifecycle.scanInteval: Forbidden: unknown field; check its spelling (`kubectl explain`)"
    )
    verdict = validation.validate_etcd("CREATE", etcd_with(tlsLifecycle={"alertBefore": "24h"}), None, lookup=NO_OBJECTS)
    assert not verdict.allowed and verdict.errors[0].field == "spec.tlsLifecycle.alertBefore"


# --- mutating defaults -----------------------------------------------------------------------------------------


def test_defaults_are_a_json_patch() -> None:
    obj = {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "metadata": {"name": "e"},
           "spec": {"version": "3.5.1", "tls": {"issuerRef": {"name": "ca"},
                                                "certificates": [{"alias": "peer", "issuerRef": {"name": "p"}}]}}}
    verdict = validation.mutate_etcd("CREATE", obj)
    assert verdict.allowed
    patched = jsonpatch.apply_patch(obj, list(verdict.patch))
    assert patched["spec"]["replicas"] == 3
    assert patched["spec"]["storageType"] == "Durable"
    assert patched["spec"]["deletionPolicy"] == "Delete"
    assert patched["spec"]["halted"] is False
    assert patched["spec"]["tls"]["issuerRef"] == {"name": "ca", "apiGroup": "cert-manager.io", "kind": "Issuer"}
    assert patched["spec"]["tls"]["certificates"][0]["issuerRef"]["kind"] == "Issuer"
    assert validation.validate_etcd("CREATE", patched, None, lookup=NO_OBJECTS).allowed


def test_the_built_patch_is_the_diff_of_the_defaults_on_fuzzed_objects() -> None:
    """The patch is built as the defaults are filled in, not by diffing copies: on thousands of fuzzed objects it
    turns the object into its defaults (what a diff of the two would do), adds nothing when nothing is defaulted,
    and leaves the object as it was."""
    from e2e import webhook_load

    checked = 0
    for _, body in webhook_load.fuzz_reviews(4000, seed=5):
        try:
            obj = json.loads(body)["request"]["object"]
        except (ValueError, KeyError, TypeError):
            continue
        if not isinstance(obj, dict):
            continue
        before = copy.deepcopy(obj)
        try:
            defaulted = validation.etcd_defaults(obj)
        except validation.DefaultingError:
            continue
        verdict = validation.mutate_etcd("CREATE", obj)
        assert obj == before
        assert jsonpatch.apply_patch(before, list(verdict.patch)) == defaulted
        assert not verdict.patch or defaulted != before
        checked += 1
    assert checked > 500


@pytest.mark.parametrize("spec", [
    {"version": "3.5.1"},
    {"version": "3.5.1", "replicas": 5, "halted": True},
    {"version": "3.5.1", "storageType": "", "deletionPolicy": None,
     "tls": {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"},
             "certificates": [{"alias": "server", "issuerRef": {"name": "s"}}, {"alias": "peer"}]}},
])
def test_defaults_are_the_models_defaults(spec: dict[str, Any]) -> None:
    """The mutating webhook fills in exactly what the pydantic models default (it does not restate them)."""
    obj = {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "metadata": {"name": "e"}, "spec": spec}
    patched = jsonpatch.apply_patch(obj, list(validation.mutate_etcd("CREATE", obj).patch))
    given = {key: value for key, value in spec.items() if value not in (None, "")}
    assert patched["spec"] == etcd.EtcdSpec.model_validate(given).to_dict()


def test_defaults_follow_a_changed_model_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(etcd.EtcdSpec.model_fields["replicas"], "default", 5)
    obj = etcd_with(replicas=None)
    patched = jsonpatch.apply_patch(obj, list(validation.mutate_etcd("CREATE", obj).patch))
    assert patched["spec"]["replicas"] == 5


def test_defaults_keep_what_the_user_set() -> None:
    obj = etcd_with(replicas=5, storageType="Ephemeral", deletionPolicy="WipeOut", halted=False)
    verdict = validation.mutate_etcd("CREATE", obj)
    assert verdict.allowed and verdict.patch == ()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"version": None}, "'spec.version' is missing"),
        ({"halted": True, "deletionPolicy": "DoNotTerminate"}, "can't halt, since deletion policy is 'DoNotTerminate'"),
        ({"version": "3.6.0"}, 'failed to get EtcdVersion "3.6.0": etcdversions.catalog.opsmanager.dev "3.6.0" '
                               'not found (kubectl get etcdversions lists the versions)'),
    ],
)
def test_defaulting_errors_are_kubedb_messages(spec: dict[str, Any], message: str) -> None:
    verdict = validation.mutate_etcd("CREATE", etcd_with(**spec))
    assert not verdict.allowed and verdict.code == 422 and verdict.message == message


def test_delete_and_odd_shapes_are_not_mutated() -> None:
    assert validation.mutate_etcd("DELETE", None).allowed
    assert validation.mutate_etcd("CREATE", {"metadata": {"name": "e"}, "spec": "text"}).patch == ()


# --- the Go formatting the messages rely on ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [(3, "3"), (1.5, "1.5"), (1e6, "1e+06"), (123456, "123456"), (1234567, "1.234567e+06"), (0.0001, "0.0001"),
     (0.00001, "1e-05"), (-2.5e-7, "-2.5e-07"), (0, "0"), (None, "<nil>"), (True, "true"), ("s", "s"),
     ({"b": [1, None, False], "a": {"z": "x", "c": 2}}, "map[a:map[c:2 z:x] b:[1 <nil> false]]")],
)
def test_go_value_prints_like_go(value: Any, text: str) -> None:
    assert validation.go_value(value) == text


def test_field_error_text_matches_go() -> None:
    assert str(validation.invalid("spec.replicas", 0, "d")) == "spec.replicas: Invalid value: 0: d"
    assert str(validation.invalid("spec.x", "a\"b", "d")) == 'spec.x: Invalid value: "a\\"b": d'
    assert str(validation.required("spec.v", "d")) == "spec.v: Required value: d"
    assert str(validation.required("spec.v")) == "spec.v: Required value"
    assert str(validation.duplicate("spec.a", "peer")) == 'spec.a: Duplicate value: "peer"'
    assert str(validation.forbidden("spec.f", "d")) == "spec.f: Forbidden: d"
    assert str(validation.invalid("spec.o", None, "d")) == "spec.o: Invalid value: null: d"


def test_identical_errors_are_reported_once() -> None:
    err = validation.invalid("spec", "n", "m")
    assert validation.invalid_message("K", "g", "n", [err, err]) == 'K.g "n" is invalid: spec: Invalid value: "n": m'
    assert validation.invalid_message("K", "g", "n", []) == 'K.g "n" is invalid'


# --- a running Etcd's member count: only from an active HorizontalScaling --------------------------------------

RUNNING = {**PLAIN_DB, "status": {"conditions": [{"type": "Provisioned", "status": "True", "reason": "Provisioned",
                                                  "message": "", "lastTransitionTime": "2026-12-02T10:00:00Z"}]}}


def scaling(phase: str, db: str = "etcd-plain", type_: str = "HorizontalScaling") -> dict[str, Any]:
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": "grow", "namespace": NS},
            "spec": {"type": type_, "databaseRef": {"name": db}, "horizontalScaling": {"replicas": 5}},
            "status": {"phase": phase}}


def with_replicas(replicas: int, scaled_by: str | None = None, count: int | None = None, *,
                  legacy: bool = False) -> dict[str, Any]:
    """The Etcd with ``spec.replicas`` edited, its status naming ``scaled_by`` and ``count`` (``legacy``: in the
    annotation older operators wrote with the count instead)."""
    new = copy.deepcopy(RUNNING)
    new["spec"]["replicas"] = replicas
    if scaled_by and legacy:
        new["metadata"]["annotations"] = {"ops.opsmanager.dev/scaled-by": f"{scaled_by}/{count or replicas}"}
    elif scaled_by:
        new["status"]["scaledBy"] = {"request": scaled_by, "replicas": count or replicas}
    return new


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize(("new", "request_", "allowed"), [
    ((4, "grow"), scaling("Progressing"), True),
    ((2, "grow"), scaling("Progressing"), True),  # a shrink, one at a time
    ((4,), None, False),  # by hand
    ((5, "grow"), scaling("Progressing"), False),  # two at once
    ((4, "grow"), scaling("Successful"), False),  # a finished request holds nothing
    ((4, "grow"), scaling("Progressing", type_="Restart"), False),
    ((4, "grow"), scaling("Progressing", db="etcd-tls"), False),
    # the engine recorded 4: someone else's 2 while the request runs does not pass on it
    ((2, "grow", 4), scaling("Progressing"), False),
])
def test_a_running_etcds_member_count_changes_only_through_an_active_horizontal_scaling(
        new: tuple[Any, ...], request_: dict[str, Any] | None, allowed: bool, legacy: bool) -> None:
    lookup = validation.InMemoryEtcdLookup([RUNNING, *([request_] if request_ else [])])
    new = with_replicas(*new, legacy=legacy)
    verdict = validation.validate_etcd("UPDATE", new, RUNNING, lookup=lookup)
    assert verdict.allowed is allowed, verdict.message
    if not allowed:
        assert "spec.replicas: Forbidden: the member count of a running Etcd is changed by an EtcdOpsRequest of " \
               "type HorizontalScaling" in verdict.message, verdict.message


def test_the_status_names_the_writer_of_the_count_before_a_legacy_annotation() -> None:
    lookup = validation.InMemoryEtcdLookup([RUNNING, scaling("Progressing")])
    stale = with_replicas(4, "grow", count=5)
    stale["metadata"]["annotations"] = {"ops.opsmanager.dev/scaled-by": "grow/4"}
    assert not validation.validate_etcd("UPDATE", stale, RUNNING, lookup=lookup).allowed
    current = with_replicas(4, "grow")
    current["metadata"]["annotations"] = {"ops.opsmanager.dev/scaled-by": "other/7"}
    assert validation.validate_etcd("UPDATE", current, RUNNING, lookup=lookup).allowed


def test_before_it_runs_the_member_count_is_free_to_change() -> None:
    new = copy.deepcopy(PLAIN_DB)
    new["spec"]["replicas"] = 5
    assert validation.validate_etcd("UPDATE", new, PLAIN_DB, lookup=validation.InMemoryEtcdLookup([PLAIN_DB])).allowed


def test_a_quota_below_the_largest_database_of_the_last_scan_is_refused() -> None:
    db = copy.deepcopy(PLAIN_DB)
    db["status"] = {"storage": {"members": {"etcd-plain-0": {"dbSizeBytes": 100 * 1024 * 1024,
                                                             "dbSizeInUseBytes": 90 * 1024 * 1024}}}}
    lookup = validation.InMemoryEtcdLookup([db])
    low = create(ops({"type": "Reconfigure", "databaseRef": {"name": "etcd-plain"},
                      "configuration": {"tuning": {"quotaBackendBytes": 110 * 1024 * 1024}}}), lookup)
    assert not low.allowed and "spec.configuration.tuning.quotaBackendBytes: Invalid value" in low.message
    assert "NOSPACE" in low.message
    assert create(ops({"type": "Reconfigure", "databaseRef": {"name": "etcd-plain"},
                       "configuration": {"tuning": {"quotaBackendBytes": 200 * 1024 * 1024}}}), lookup).allowed


# --- RotateAuth: KubeDB's secretRef checks; spec.authSecret never removed, renamed only by the RotateAuth -------

@pytest.mark.parametrize(("authentication", "message"), [
    (None, None),  # a generated password
    ({}, None),
    ({"secretRef": {"name": "any"}}, None),  # the Secret itself is checked by the request's first step
    ({"secretRef": {}}, "spec.authentication.secretRef.name can not be empty"),
    ({"secretRef": {"name": ""}}, "spec.authentication.secretRef.name can not be empty"),
])
def test_rotate_auth_rules_and_messages(authentication: Any, message: str | None,
                                        lookup: validation.InMemoryEtcdLookup) -> None:
    spec: dict[str, Any] = {"type": "RotateAuth", "databaseRef": {"name": "etcd-plain"}}
    if authentication is not None:
        spec["authentication"] = authentication
    verdict = create(ops(spec), lookup)
    if message is None:
        assert verdict.allowed, verdict.message
        return
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == PREFIX + f'spec.authentication: Invalid value: "my-op": {message}'


def _with_auth(name: str | None) -> dict[str, Any]:
    db = copy.deepcopy(RUNNING)
    if name is not None:
        db["spec"]["authSecret"] = {"name": name}
    return db


def _holding(db: dict[str, Any], request: str) -> dict[str, Any]:
    held = copy.deepcopy(db)
    held["status"]["conditions"].append({"type": "Paused", "status": "True", "reason": request,
                                         "message": f"EtcdOpsRequest {request} is in process",
                                         "lastTransitionTime": "2026-12-02T10:00:00Z"})
    return held


def _rotate(secret: str | None, phase: str = "Progressing") -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "RotateAuth", "databaseRef": {"name": "etcd-plain"}}
    if secret:
        spec["authentication"] = {"secretRef": {"name": secret}}
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": "rot", "namespace": NS}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(("old", "new", "request_", "fragment"), [
    (None, "fresh", None, None),  # turning authentication on by an edit: the provisioner does it
    ("a", "a", None, None),
    ("a", None, None, "spec.authSecret: Forbidden: spec.authSecret can not be removed"),
    ("a", "b", None, "spec.authSecret.name: Forbidden: spec.authSecret.name can not be changed by an edit (a → b)"),
    ("a", "b", _rotate("b"), None),  # the RotateAuth holding the Etcd moved the password to b
    ("a", "b", _rotate("c"), "can not be changed by an edit"),
    ("a", "b", _rotate("b", phase="Successful"), "can not be changed by an edit"),
])
def test_spec_auth_secret_is_never_removed_and_renamed_only_by_the_rotate_auth_holding_the_etcd(
        old: str | None, new: str | None, request_: dict[str, Any] | None, fragment: str | None) -> None:
    before = _with_auth(old)
    if request_ is not None:
        before = _holding(before, request_["metadata"]["name"])
    lookup = validation.InMemoryEtcdLookup([before, *([request_] if request_ else [])])
    verdict = validation.validate_etcd("UPDATE", _with_auth(new), before, lookup=lookup)
    if fragment is None:
        assert verdict.allowed, verdict.message
    else:
        assert not verdict.allowed and fragment in verdict.message, verdict.message


# --- Backup and Restore: the Etcd's spec.backup, and a Restore's source and timeout ------------------------------

BACKED_UP = {**PLAIN_DB, "metadata": {"name": "etcd-backed", "namespace": NS},
             "spec": {**PLAIN_DB["spec"], "backup": {"schedule": "0 * * * *", "destination": {
                 "endpoint": "https://s3.example", "bucket": "backups", "credentialsSecret": {"name": "s3"}}}}}
NO_POLICY = "Etcd demo/etcd-plain has no spec.backup: set spec.backup.destination (endpoint, bucket, credentialsSecret)"


@pytest.mark.parametrize(("db", "fields", "expected"), [
    ("etcd-backed", {"type": "Backup"}, []),
    ("etcd-plain", {"type": "Backup"}, [("spec.backup", NO_POLICY)]),
    ("etcd-backed", {"type": "Restore", "restore": {"source": "latest"}, "timeout": "30m"}, []),
    ("etcd-backed", {"type": "Restore"}, [("spec.restore", "spec.restore is nil, not supported in Restore type")]),
    ("etcd-backed", {"type": "Restore", "restore": {}, "timeout": "30m"},
     [("spec.restore", "spec.restore.source can not be empty")]),
    ("etcd-backed", {"type": "Restore", "restore": {"source": "latest"}},
     [("spec.timeout", "spec.timeout is required for Restore ops request, adjust timeout according to the size of "
                       "your database")]),
    ("etcd-plain", {"type": "Restore", "restore": {"source": "latest"}, "timeout": "30m"},
     [("spec.restore", NO_POLICY)]),
])
def test_backup_and_restore_rules(db: str, fields: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    lookup = validation.InMemoryEtcdLookup([PLAIN_DB, BACKED_UP])
    verdict = create(ops({"databaseRef": {"name": db}, **fields}), lookup)
    if not expected:
        assert verdict.allowed, verdict.message
        return
    assert not verdict.allowed and verdict.code == 422
    for field, fragment in expected:
        assert f'{field}: Invalid value: "my-op": {fragment}' in verdict.message, verdict.message


@pytest.mark.parametrize(("schedule", "fragment"), [
    ("every hour", "is not a five-field cron expression"),
    ("61 * * * *", "is not a valid cron expression"),
])
def test_a_backup_schedule_that_is_not_cron_is_refused_naming_the_field(schedule: str, fragment: str) -> None:
    db = copy.deepcopy(BACKED_UP)
    db["spec"]["backup"]["schedule"] = schedule
    verdict = validation.validate_etcd("CREATE", db, None, lookup=validation.InMemoryEtcdLookup([]))
    assert not verdict.allowed and "spec.backup.schedule" in verdict.message and fragment in verdict.message



# --- RecoverFromQuorumLoss: only with QuorumLost=True, confirmMember naming the member that would be kept ---------

def _lost(lost: bool = True) -> dict[str, Any]:
    db = copy.deepcopy(RUNNING)
    db["status"]["conditions"].append({"type": "QuorumLost", "status": "True" if lost else "False",
                                       "reason": "QuorumLost", "message": "",
                                       "lastTransitionTime": "2026-12-02T10:00:00Z"})
    db["status"]["quorumLoss"] = {"since": "2026-12-02T09:59:00Z", "survivor": "etcd-plain-0",
                                  "answering": {"etcd-plain-0": 120, "etcd-plain-1": 100}}
    return db


@pytest.mark.parametrize(("db", "fields", "expected"), [
    (_lost(), {"recoverFromQuorumLoss": {"confirmMember": "etcd-plain-0"}, "timeout": "10m"}, []),
    (_lost(), {"recoverFromQuorumLoss": {"member": "etcd-plain-1", "confirmMember": "etcd-plain-1"},
               "timeout": "10m"}, []),  # a member that answers, chosen and confirmed by the user
    (_lost(), {"timeout": "10m"},
     [("spec.recoverFromQuorumLoss", "spec.recoverFromQuorumLoss is nil, not supported in RecoverFromQuorumLoss type")]),
    (_lost(), {"recoverFromQuorumLoss": {}, "timeout": "10m"},
     [("spec.recoverFromQuorumLoss", "spec.recoverFromQuorumLoss.confirmMember can not be empty")]),
    (_lost(), {"recoverFromQuorumLoss": {"confirmMember": "etcd-plain-0"}},
     [("spec.timeout", "spec.timeout is required for RecoverFromQuorumLoss ops request")]),
    (_lost(False), {"recoverFromQuorumLoss": {"confirmMember": "etcd-plain-0"}, "timeout": "10m"},
     [("spec.recoverFromQuorumLoss", "Etcd demo/etcd-plain does not report QuorumLost=True")]),
    (_lost(), {"recoverFromQuorumLoss": {"confirmMember": "etcd-plain-2"}, "timeout": "10m"},
     [("spec.recoverFromQuorumLoss", "confirmMember etcd-plain-2 is not the member that would be kept: etcd-plain-0 "
                                     "(the highest raft committed index of the members that answer); set "
                                     "confirmMember: etcd-plain-0")]),
    (_lost(), {"recoverFromQuorumLoss": {"member": "etcd-plain-2", "confirmMember": "etcd-plain-2"},
               "timeout": "10m"},
     [("spec.recoverFromQuorumLoss", "member etcd-plain-2 does not answer (answering: etcd-plain-0, etcd-plain-1)")]),
])
def test_recover_from_quorum_loss_rules(db: dict[str, Any], fields: dict[str, Any],
                                        expected: list[tuple[str, str]]) -> None:
    verdict = create(ops({"type": "RecoverFromQuorumLoss", "databaseRef": {"name": "etcd-plain"}, **fields}),
                     validation.InMemoryEtcdLookup([db]))
    if not expected:
        assert verdict.allowed, verdict.message
        return
    assert not verdict.allowed and verdict.code == 422
    for field, fragment in expected:
        assert f'{field}: Invalid value: "my-op": ' in verdict.message and fragment in verdict.message, verdict.message
