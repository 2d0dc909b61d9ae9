"""cert-manager's pure decisions: issuer readiness, spec validation and defaults, when to (re-)issue, renewal
time, signing (chain and ca.crt), the Secret's annotations, condition bookkeeping."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest

from opsmanager import pki
from opsmanager_sandbox import certmanager as cm

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ca_secret(pair: pki.KeyPair) -> dict[str, Any]:
    return {"metadata": {"name": "ca", "namespace": "ns"},
            "data": {"tls.crt": b64(pair.cert_pem), "tls.key": b64(pair.key_pem)}}


def cert(**spec: Any) -> dict[str, Any]:
    base = {"secretName": "tls", "issuerRef": {"name": "ca", "kind": "Issuer"},
            "dnsNames": ["*.etcd.ns.svc", "*.etcd.ns.svc.cluster.local"], "usages": ["server auth", "client auth"]}
    base.update(spec)
    return {"metadata": {"name": "peer", "namespace": "ns", "uid": "u", "generation": 1}, "spec": base}


def issued(c: dict[str, Any], ca: pki.KeyPair) -> dict[str, Any]:
    want = cm.desired(c)
    pair, ca_pem = cm.sign(want, cm.issuer_state({"spec": {"ca": {"secretName": "ca"}}}, ca_secret(ca)))
    return cm.secret_body(c, want, pair, ca_pem, None)


def test_issuer_readiness() -> None:
    ca = pki.make_ca()
    spec = {"spec": {"ca": {"secretName": "ca"}}}
    assert cm.issuer_state({"spec": {"selfSigned": {}}}, None).ready
    missing = cm.issuer_state(spec, None)
    assert (missing.ready, missing.reason) == (False, "ErrGetKeyPair") and 'secrets "ca" not found' in missing.message
    leaf = pki.make_leaf(ca, "not-a-ca")
    assert cm.issuer_state(spec, ca_secret(leaf)).reason == "ErrInvalidKeyPair"
    mixed = ca_secret(ca)
    mixed["data"]["tls.key"] = b64(pki.make_ca().key_pem)
    assert cm.issuer_state(spec, mixed).reason == "ErrInvalidKeyPair"
    ok = cm.issuer_state(spec, ca_secret(ca))
    assert (ok.ready, ok.reason, ok.message) == (True, "KeyPairVerified", "Signing CA verified")
    assert cm.issuer_state({"spec": {"acme": {}}}, None).reason == "UnsupportedIssuer"


def test_spec_defaults_and_errors_name_the_field() -> None:
    want = cm.desired(cert())
    assert want.duration == datetime.timedelta(hours=2160) and want.key_algorithm == "ECDSA"
    assert want.key_encoding == "PKCS1" and want.issuer_group == "cert-manager.io"
    assert cm.desired(cert(usages=None)).usages == ("digital signature", "key encipherment")
    for bad, field in [({"secretName": ""}, "spec.secretName"), ({"usages": ["server"]}, "spec.usages"),
                       ({"ipAddresses": ["nope"]}, "spec.ipAddresses"), ({"duration": "10 minutes"}, "spec.duration"),
                       ({"privateKey": {"algorithm": "Ed25519"}}, "spec.privateKey.algorithm"),
                       ({"issuerRef": {"name": "x", "kind": "AWSPCAIssuer"}}, "spec.issuerRef"),
                       ({"dnsNames": None}, "at least one of")]:
        with pytest.raises(cm.SpecError, match=field.replace(".", r"\.")):
            cm.desired(cert(**bad))


def test_renewal_time_rules() -> None:
    nb = NOW
    na = NOW + datetime.timedelta(hours=90)
    assert cm.renewal_time(cm.desired(cert()), nb, na) == NOW + datetime.timedelta(hours=60)
    assert cm.renewal_time(cm.desired(cert(renewBefore="10h")), nb, na) == NOW + datetime.timedelta(hours=80)
    assert cm.renewal_time(cm.desired(cert(renewBeforePercentage=50)), nb, na) == NOW + datetime.timedelta(hours=45)


def test_ca_issued_secret_verifies_and_carries_cert_manager_annotations() -> None:
    ca = pki.make_ca("root")
    secret = issued(cert(commonName="peer", ipAddresses=["127.0.0.1"]), ca)
    crt, key, ca_crt = (base64.b64decode(secret["data"][k]) for k in ("tls.crt", "tls.key", "ca.crt"))
    assert pki.signed_by(crt, ca.cert_pem) and pki.key_matches_cert(crt, key) and ca_crt == pki.split_pem(ca.cert_pem)[0]
    assert len(pki.split_pem(crt)) == 1  # the self-signed root is not appended to tls.crt
    assert key.startswith(b"-----BEGIN EC PRIVATE KEY-----")  # PKCS1 (cert-manager's default encoding)
    assert secret["type"] == "kubernetes.io/tls"
    ann = secret["metadata"]["annotations"]
    assert ann["cert-manager.io/certificate-name"] == "peer" and ann["cert-manager.io/issuer-name"] == "ca"
    assert ann["cert-manager.io/issuer-kind"] == "Issuer" and ann["cert-manager.io/issuer-group"] == "cert-manager.io"
    assert ann["cert-manager.io/alt-names"] == "*.etcd.ns.svc,*.etcd.ns.svc.cluster.local"
    assert ann["cert-manager.io/ip-sans"] == "127.0.0.1" and ann["cert-manager.io/common-name"] == "peer"


def test_intermediate_chain_goes_into_tls_crt_and_root_into_ca_crt() -> None:
    root = pki.make_ca("root")
    inter = pki.make_leaf(root, "intermediate", is_ca=True, usages=())
    state = cm.issuer_state({"spec": {"ca": {"secretName": "ca"}}},
                            ca_secret(pki.KeyPair(inter.cert_pem + root.cert_pem, inter.key_pem)))
    pair, ca_pem = cm.sign(cm.desired(cert()), state)
    chain = pki.split_pem(pair.cert_pem)
    assert len(chain) == 2 and pki.cert_info(chain[1]).common_name == "intermediate"
    assert pki.cert_info(ca_pem).common_name == "root"


def test_key_encoding_algorithm_and_subject_are_honoured() -> None:
    ca = pki.make_ca()
    secret = issued(cert(privateKey={"algorithm": "RSA", "encoding": "PKCS8"},
                         subject={"organizations": ["acme"], "organizationalUnits": ["etcd"]}), ca)
    key = base64.b64decode(secret["data"]["tls.key"])
    assert key.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS8
    subject = pki.cert_info(base64.b64decode(secret["data"]["tls.crt"])).subject
    assert "O=acme" in subject and "OU=etcd" in subject


def test_self_signed_certificate_is_its_own_ca() -> None:
    pair, ca_pem = cm.sign(cm.desired(cert(isCA=True, commonName="my-ca", dnsNames=None)),
                           cm.issuer_state({"spec": {"selfSigned": {}}}, None))
    assert ca_pem == pair.cert_pem and pki.cert_info(pair.cert_pem).is_ca


def test_issuance_triggers() -> None:
    ca = pki.make_ca()
    c = cert()
    want = cm.desired(c)
    assert cm.issuance_trigger(c, None, want, NOW).reason == "DoesNotExist"
    secret = issued(c, ca)
    now = datetime.datetime.now(datetime.UTC)
    assert cm.issuance_trigger(c, secret, want, now) is None
    assert cm.issuance_trigger(c, secret, want, now, want.digest()) is None
    changed = cert(dnsNames=["etcd-0.etcd.ns.svc"])
    t = cm.issuance_trigger(changed, secret, cm.desired(changed), now)
    assert t is not None and t.reason == "SecretMismatch" and "dnsNames" in t.message
    other_issuer = cert(issuerRef={"name": "other"})
    assert cm.issuance_trigger(other_issuer, secret, cm.desired(other_issuer), now).reason == "IncorrectIssuer"
    longer = cert(duration="1000h")  # not visible in the SANs: caught by the recorded spec digest
    assert cm.issuance_trigger(longer, secret, cm.desired(longer), now, want.digest()).reason == "SecretMismatch"
    assert cm.issuance_trigger(c, secret, want, now + datetime.timedelta(days=61)).reason == "Renewing"
    assert cm.issuance_trigger(c, secret, want, now + datetime.timedelta(days=91)).reason == "Expired"
    broken = dict(secret, data=dict(secret["data"], **{"tls.key": b64(pki.make_ca().key_pem)}))
    assert cm.issuance_trigger(c, broken, want, now).reason == "InvalidKeyPair"
    rsa = cert(privateKey={"algorithm": "RSA"})
    assert "privateKey.algorithm" in cm.issuance_trigger(rsa, secret, cm.desired(rsa), now).message


def test_set_condition_keeps_transition_time_and_removes() -> None:
    conds = cm.set_condition([], "Ready", "False", "DoesNotExist", "m", 1, NOW)
    later = NOW + datetime.timedelta(minutes=1)
    same = cm.set_condition(conds, "Ready", "False", "Other", "m2", 2, later)
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z" and same[0]["observedGeneration"] == 2
    flipped = cm.set_condition(same, "Ready", "True", "Ready", "ok", 2, later)
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    both = cm.set_condition(flipped, "Issuing", "True", "ManuallyTriggered", "", 2, later)
    assert [c["type"] for c in both] == ["Ready", "Issuing"]
    assert [c["type"] for c in cm.set_condition(both, "Issuing", None)] == ["Ready"]
