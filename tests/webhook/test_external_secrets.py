"""Bring-your-own Secrets (issue 12, part 2): ``spec.tls.externalSecrets``, pure.

We test these aspects: an Etcd on external Secrets is admitted; each misuse is refused with a message naming the
field and the fix (with ``issuerRef``, with ``certificates``, an alias missing, an empty or malformed name, neither
it nor ``issuerRef``), all errors at once; the EtcdOpsRequest side: ``rotateCertificates`` on an external-Secrets
Etcd is refused (the user rotates them), ``certificates`` without an issuer is refused naming the handover, and
``tls.issuerRef`` (the handover) and ``remove`` are allowed; the handover's desired TLS has the issuer and no
``externalSecrets``; while the handover holds the Etcd paused, exactly that write is admitted; the CRD carries the
same rules as CEL.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opsmanager.api import crdgen, etcd, opsrequest, pause, tlschange
from opsmanager.webhook import validation

NS = "demo"
ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}
EXTERNAL = {"server": "my-server-tls", "peer": "my-peer-tls", "client": "my-client-tls"}
BYO_DB = {
    "apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd",
    "metadata": {"name": "etcd-byo", "namespace": NS},
    "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete",
             "tls": {"externalSecrets": EXTERNAL}},
}
ETCD_PREFIX = 'Etcd.opsmanager.dev "etcd-byo" is invalid: '
OPS_PREFIX = 'EtcdOpsRequest.ops.opsmanager.dev "my-op" is invalid: '


def byo(tls: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BYO_DB)
    obj["spec"]["tls"] = tls
    return obj


def verdict_of(tls: Any) -> validation.Verdict:
    return validation.validate_etcd("CREATE", byo(tls), None, lookup=validation.InMemoryEtcdLookup())


def test_an_etcd_on_external_secrets_is_admitted() -> None:
    assert verdict_of({"externalSecrets": EXTERNAL}).allowed
    model = etcd.Etcd.model_validate(BYO_DB)
    assert model.spec.tls is not None and model.spec.tls.external_secrets is not None
    assert model.spec.tls.external_secrets.secret("peer") == "my-peer-tls"
    assert model.to_dict()["spec"]["tls"] == {"externalSecrets": EXTERNAL}


MUTUAL = ("spec.tls.externalSecrets: Forbidden: spec.tls.issuerRef and spec.tls.externalSecrets are mutually "
          "exclusive: use issuerRef for cert-manager, externalSecrets for your own Secrets")
WITH_CERTS = ("spec.tls.certificates: Forbidden: spec.tls.certificates cannot be used with spec.tls.externalSecrets: "
              "your own Secrets carry the certificates; remove spec.tls.certificates, or use spec.tls.issuerRef to "
              "have cert-manager issue them")


def missing(alias: str) -> str:
    return (f"spec.tls.externalSecrets.{alias}: Required value: name the Secret of the {alias} certificate (keys "
            "tls.crt, tls.key and ca.crt, in the Etcd's namespace); externalSecrets needs all three of server, peer "
            "and client")


@pytest.mark.parametrize(
    ("tls", "error"),
    [
        ({"issuerRef": ISSUER, "externalSecrets": EXTERNAL}, MUTUAL),
        ({"externalSecrets": EXTERNAL, "certificates": [{"alias": "server", "duration": "2m"}]}, WITH_CERTS),
        ({"externalSecrets": {"server": "s", "peer": "p"}}, missing("client")),
        ({"externalSecrets": {**EXTERNAL, "peer": ""}}, missing("peer")),
        ({"externalSecrets": {**EXTERNAL, "server": "My_Secret"}},
         'spec.tls.externalSecrets.server: Invalid value: "My_Secret": not a Secret name: use a lowercase RFC 1123 '
         "subdomain (letters, digits, '-' and '.'; at most 253 characters)"),
        ({}, "spec.tls.issuerRef: Required value: spec.tls.issuerRef is missing"),
    ],
)
def test_each_misuse_names_the_field_and_the_fix(tls: dict[str, Any], error: str) -> None:
    verdict = verdict_of(tls)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == ETCD_PREFIX + error


def test_every_error_is_reported_at_once() -> None:
    verdict = verdict_of({"issuerRef": ISSUER, "externalSecrets": {"server": "s"},
                          "certificates": [{"alias": "peer"}]})
    assert verdict.message == ETCD_PREFIX + f"[{MUTUAL}, {WITH_CERTS}, {missing('peer')}, {missing('client')}]"


# --- EtcdOpsRequest ---------------------------------------------------------------------------------------------


def tls_op(tls: Any, db: str = "etcd-byo") -> dict[str, Any]:
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": "my-op", "namespace": NS},
            "spec": {"type": "ReconfigureTLS", "databaseRef": {"name": db}, "tls": tls}}


def create(obj: dict[str, Any]) -> validation.Verdict:
    return validation.validate_opsrequest("CREATE", obj, None, namespace=NS,
                                          lookup=validation.InMemoryEtcdLookup([BYO_DB]))


def test_rotate_on_external_secrets_is_refused_the_user_rotates_them() -> None:
    verdict = create(tls_op({"rotateCertificates": True}))
    assert not verdict.allowed
    assert verdict.message == OPS_PREFIX + (
        'spec.tls: Invalid value: "my-op": rotateCertificates does not apply to Etcd etcd-byo: it runs on '
        "spec.tls.externalSecrets, which you rotate yourself by updating tls.crt and tls.key in your Secrets; to "
        "have cert-manager rotate them, hand the Etcd over with tls.issuerRef")


def test_certificates_without_an_issuer_name_the_handover() -> None:
    verdict = create(tls_op({"certificates": [{"alias": "server", "duration": "2m"}]}))
    assert not verdict.allowed
    assert verdict.message == OPS_PREFIX + (
        'spec.tls: Invalid value: "my-op": tls.issuerRef is required for Etcd ReconfigureTLS: Etcd etcd-byo runs on '
        "spec.tls.externalSecrets, whose certificates cert-manager does not issue; set tls.issuerRef to hand it over "
        "to cert-manager (tls.certificates may come with it)")


@pytest.mark.parametrize("tls", [
    {"issuerRef": ISSUER},
    {"issuerRef": ISSUER, "certificates": [{"alias": "server", "duration": "2m"}]},
    {"remove": True},
])
def test_the_handover_and_remove_are_allowed(tls: dict[str, Any]) -> None:
    assert create(tls_op(tls)).allowed


def test_the_handover_desires_the_issuer_and_drops_the_external_secrets() -> None:
    current = etcd.TLSConfig.model_validate({"externalSecrets": EXTERNAL})
    req = opsrequest.ReconfigureTLSSpec.model_validate(
        {"issuerRef": ISSUER, "certificates": [{"alias": "server", "duration": "2m"}]})
    desired = tlschange.desired_tls(current, req)
    assert desired is not None
    assert desired.to_dict() == {"issuerRef": ISSUER, "certificates": [{"alias": "server", "duration": "2m"}]}
    assert current.external_secrets is not None  # the recorded TLS is not changed in place
    assert tlschange.desired_tls(current, opsrequest.ReconfigureTLSSpec(remove=True)) is None


def test_while_the_handover_holds_the_etcd_only_its_write_is_admitted() -> None:
    request = tls_op({"issuerRef": ISSUER}) | {"status": {"phase": "Progressing"}}
    held = copy.deepcopy(BYO_DB) | {"status": pause.pause({}, "my-op")}
    lookup = validation.InMemoryEtcdLookup([request])
    handed_over = copy.deepcopy(held)
    handed_over["spec"]["tls"] = {"issuerRef": ISSUER}
    assert validation.validate_etcd("UPDATE", handed_over, held, lookup=lookup).allowed
    both = copy.deepcopy(held)
    both["spec"]["tls"] = {"issuerRef": ISSUER, "externalSecrets": EXTERNAL}
    assert not validation.validate_etcd("UPDATE", both, held, lookup=lookup).allowed


def test_the_crd_carries_the_same_rules() -> None:
    schema = crdgen.openapi_schema(etcd.Etcd)
    tls = schema["properties"]["spec"]["properties"]["tls"]
    rules = tls["x-kubernetes-validations"]
    assert {"rule": "has(self.issuerRef) || has(self.externalSecrets)",
            "message": validation.MSG_TLS_ISSUER_MISSING} in rules
    assert {"rule": "!(has(self.issuerRef) && has(self.externalSecrets))",
            "message": validation.MSG_TLS_ISSUER_AND_EXTERNAL} in rules
    assert {"rule": "!has(self.externalSecrets) || !has(self.certificates)",
            "message": validation.MSG_TLS_EXTERNAL_CERTIFICATES} in rules
    assert tls["properties"]["externalSecrets"]["required"] == ["client", "peer", "server"]
