"""The "is the Secret complete?" gate: every way a Secret can be incomplete is named, none leaks data."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from opsmanager import pki
from opsmanager.tls import material


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.make_ca("test-ca")


@pytest.fixture(scope="module")
def leaf(ca: pki.KeyPair) -> pki.KeyPair:
    return pki.make_leaf(ca, "db", dns_names=["db"])


def secret(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}, "data": data}


def full(ca: pki.KeyPair, leaf: pki.KeyPair) -> dict[str, str]:
    return {"tls.crt": b64(leaf.cert_pem), "tls.key": b64(leaf.key_pem), "ca.crt": b64(ca.cert_pem)}


def test_complete_secret_passes_and_carries_its_ca(ca: pki.KeyPair, leaf: pki.KeyPair) -> None:
    m = material.check_secret(secret(full(ca, leaf)), "ns/s")
    assert m.complete and m.problem == ""
    assert m.ca_pem == ca.cert_pem
    assert m.cert is not None and m.cert.common_name == "db"


def test_missing_secret_is_not_complete() -> None:
    m = material.check_secret(None, "ns/s")
    assert not m.complete and "ns/s does not exist" in m.problem


@pytest.mark.parametrize("key", ["tls.crt", "tls.key", "ca.crt"])
def test_each_missing_key_is_named(ca: pki.KeyPair, leaf: pki.KeyPair, key: str) -> None:
    data = full(ca, leaf)
    del data[key]
    m = material.check_secret(secret(data), "ns/s")
    assert not m.complete and f"no {key}" in m.problem


BROKEN_PEM = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize(("override", "problem"), [
    ({"tls.key": ""}, "no tls.key"),  # an empty value counts as missing
    ({"tls.crt": b64(b"not a certificate")}, "tls.crt holds no PEM certificate"),
    ({"ca.crt": b64(BROKEN_PEM)}, "ca.crt is not a parseable certificate"),
    ({"tls.key": "%%%not-base64"}, "tls.key is not valid base64"),
])
def test_a_bad_value_is_refused_and_named(ca: pki.KeyPair, leaf: pki.KeyPair, override: dict[str, str],
                                          problem: str) -> None:
    m = material.check_secret(secret(full(ca, leaf) | override), "ns/s")
    assert not m.complete and problem in m.problem


def test_key_of_another_certificate_is_refused_without_showing_either(ca: pki.KeyPair, leaf: pki.KeyPair) -> None:
    other = pki.make_leaf(ca, "other")
    m = material.check_secret(secret(full(ca, leaf) | {"tls.key": b64(other.key_pem)}), "ns/s")
    assert not m.complete and "not the private key of tls.crt" in m.problem
    text = m.problem + repr(m)  # no Secret data in any problem or repr
    assert "PRIVATE KEY" not in text and b64(other.key_pem)[:40] not in text
    ok = material.check_secret(secret(full(ca, leaf)), "ns/s")
    assert "BEGIN" not in repr(ok)


def test_union_of_cas_deduplicates_and_keeps_order(ca: pki.KeyPair, leaf: pki.KeyPair) -> None:
    ca2 = pki.make_ca("second-ca")
    leaf2 = pki.make_leaf(ca2, "db")
    a = material.check_secret(secret(full(ca, leaf)), "ns/a")
    b = material.check_secret(secret(full(ca, leaf)), "ns/b")
    c = material.check_secret(secret(full(ca2, leaf2)), "ns/c")
    union = material.union_of_cas([a, b, c])
    assert pki.split_pem(union) == [ca.cert_pem.strip() + b"\n", ca2.cert_pem.strip() + b"\n"]


def test_union_refuses_incomplete_material(ca: pki.KeyPair, leaf: pki.KeyPair) -> None:
    good = material.check_secret(secret(full(ca, leaf)), "ns/a")
    bad = material.check_secret(None, "ns/b")
    with pytest.raises(ValueError, match="incomplete Secret"):
        material.union_of_cas([good, bad])
    with pytest.raises(ValueError, match="empty trust bundle"):
        material.union_of_cas([])
    assert material.first_problem([good, bad]) is bad
    assert material.first_problem([good]) is None
