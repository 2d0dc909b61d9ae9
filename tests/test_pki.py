"""opsmanager.pki: certificates made with the right names and usages, keys matched, bundles de-duplicated."""

from __future__ import annotations

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from opsmanager import pki


def test_leaf_carries_sans_usages_and_is_signed_by_its_ca() -> None:
    ca = pki.make_ca("test-ca")
    leaf = pki.make_leaf(ca, "etcd-0", dns_names=["a.svc", "*.b.svc"], ip_addresses=["127.0.0.1"])
    info = pki.cert_info(leaf.cert_pem)
    assert info.common_name == "etcd-0"
    assert info.dns_names == ("a.svc", "*.b.svc")
    assert info.ip_addresses == ("127.0.0.1",)
    assert not info.is_ca and pki.cert_info(ca.cert_pem).is_ca
    eku = x509.load_pem_x509_certificate(leaf.cert_pem).extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert set(eku.value) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert pki.signed_by(leaf.cert_pem, ca.cert_pem)
    assert not pki.signed_by(leaf.cert_pem, pki.make_ca("other").cert_pem)


def test_key_match_detects_a_foreign_key_and_garbage() -> None:
    ca = pki.make_ca()
    a, b = pki.make_leaf(ca, "a"), pki.make_leaf(ca, "b")
    assert pki.key_matches_cert(a.cert_pem, a.key_pem)
    assert not pki.key_matches_cert(a.cert_pem, b.key_pem)
    assert not pki.key_matches_cert(b"not a cert", a.key_pem)
    assert not pki.key_matches_cert(a.cert_pem, b"")


def test_bundle_keeps_order_and_drops_duplicates() -> None:
    one, two = pki.make_ca("one"), pki.make_ca("two")
    b = pki.bundle(one.cert_pem, two.cert_pem, one.cert_pem)
    parts = pki.split_pem(b)
    assert len(parts) == 2
    assert pki.cert_info(parts[0]).common_name == "one"
    assert pki.cert_info(parts[1]).common_name == "two"
    assert pki.signed_by(pki.make_leaf(two, "x").cert_pem, b)


def test_keypair_repr_never_shows_the_key() -> None:
    kp = pki.make_ca("secretive")
    assert "PRIVATE" not in repr(kp) and "redacted" in repr(kp)


def test_self_signed_leaf_and_ca_verify_against_themselves() -> None:
    leaf = pki.make_self_signed("web", dns_names=["a.example", "*.b.example"], ip_addresses=["127.0.0.1"],
                                usages=("server auth",), key_encoding="PKCS1")
    info = pki.cert_info(leaf.cert_pem)
    assert info.issuer == info.subject and not info.is_ca
    assert info.dns_names == ("a.example", "*.b.example") and info.ip_addresses == ("127.0.0.1",)
    assert pki.signed_by(leaf.cert_pem, leaf.cert_pem) and pki.key_matches_cert(leaf.cert_pem, leaf.key_pem)
    assert leaf.key_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----")  # PKCS1 = SEC1 for EC keys
    ca = pki.make_self_signed("root", is_ca=True, usages=())
    assert pki.cert_info(ca.cert_pem).is_ca
    assert pki.signed_by(pki.make_leaf(ca, "child").cert_pem, ca.cert_pem)


def test_an_rsa_leaf_allows_key_encipherment_whatever_the_case_of_the_algorithm_name() -> None:
    ca = pki.make_ca("case-ca")
    for name in ("RSA", "rsa"):
        leaf = pki.make_leaf(ca, "leaf", key_algorithm=name)
        usage = x509.load_pem_x509_certificate(leaf.cert_pem).extensions.get_extension_for_class(x509.KeyUsage).value
        assert usage.key_encipherment, name


def test_key_matches_cert_is_remembered_by_digest_and_keeps_no_key_material() -> None:
    ca = pki.make_ca("memo-ca")
    a = pki.make_leaf(ca, "a", dns_names=["a"], usages=["server"])
    b = pki.make_leaf(ca, "b", dns_names=["b"], usages=["server"])
    for _ in range(2):  # the second round answers from the memo: the same answers
        assert pki.key_matches_cert(a.cert_pem, a.key_pem)
        assert not pki.key_matches_cert(a.cert_pem, b.key_pem)
        assert not pki.key_matches_cert(b"not a certificate", a.key_pem)
    remembered = dict(pki._KEY_MATCHES)
    assert remembered and all(isinstance(k, bytes) and len(k) == 32 for k in remembered)
    assert all(isinstance(v, bool) for v in remembered.values())
    assert not any(a.key_pem in k or b.key_pem in k for k in remembered)
    assert pki.cert_info(a.cert_pem) is pki.cert_info(a.cert_pem)  # parsed once
