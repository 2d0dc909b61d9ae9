"""Endpoint and TLSIdentity: validation says which field is wrong and how to fix it; keys never show (pure)."""

from __future__ import annotations

import base64

import pytest

from opsmanager import pki
from opsmanager.etcd import access


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.make_ca("t")


def test_endpoint_urls_and_labels() -> None:
    ep = access.Endpoint("etcd-0", "10.0.0.5", schemes=("https", "http"), server_name="etcd-0.etcd.ns.svc")
    assert ep.target == "10.0.0.5:2379"
    assert ep.url() == "https://10.0.0.5:2379" and ep.url("http") == "http://10.0.0.5:2379"
    assert ep.metrics_url == "http://10.0.0.5:2381"
    assert ep.label == "etcd-0 (10.0.0.5:2379)"
    assert access.Endpoint("v6", "::1").target == "[::1]:2379"
    assert access.Endpoint("x", "h", metrics_port=None).metrics_url is None


def test_endpoint_from_client_url() -> None:
    ep = access.Endpoint.from_url("m1", "https://etcd-1.etcd.ns.svc:32379")
    assert (ep.host, ep.client_port, ep.schemes) == ("etcd-1.etcd.ns.svc", 32379, ("https",))
    with pytest.raises(ValueError, match="not http"):
        access.Endpoint.from_url("m1", "unix:///var/run/etcd.sock")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "", "host": "h"}, "name is empty"),
    ({"name": "a", "host": ""}, "host is empty"),
    ({"name": "a", "host": "h", "client_port": 70000}, "client_port=70000"),
    ({"name": "a", "host": "h", "schemes": ("grpc",)}, "unknown scheme"),
    ({"name": "a", "host": "h", "schemes": "https"}, "non-empty tuple"),
])
def test_endpoint_rejects_bad_fields(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        access.Endpoint(**kwargs)  # type: ignore[arg-type]


def test_identity_validates_and_redacts(ca: pki.KeyPair) -> None:
    leaf = pki.make_leaf(ca, "opsmanager", usages=("client",))
    other = pki.make_leaf(ca, "other", usages=("client",))
    ident = access.TLSIdentity(ca.cert_pem, leaf.cert_pem, leaf.key_pem, name="idA")
    assert "PRIVATE" not in repr(ident) and "redacted" in repr(ident) and "opsmanager" in repr(ident)
    assert ident.fingerprint != access.TLSIdentity(ca.cert_pem, name="idA").fingerprint
    with pytest.raises(ValueError, match="ca_pem holds no PEM"):
        access.TLSIdentity(b"")
    with pytest.raises(ValueError, match="key_pem is missing"):
        access.TLSIdentity(ca.cert_pem, cert_pem=leaf.cert_pem)
    with pytest.raises(ValueError, match="not the private key of cert_pem"):
        access.TLSIdentity(ca.cert_pem, leaf.cert_pem, other.key_pem)


def test_identity_from_secret_data(ca: pki.KeyPair) -> None:
    leaf = pki.make_leaf(ca, "opsmanager", usages=("client",))
    b64 = {k: base64.b64encode(v).decode() for k, v in
           {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": ca.cert_pem}.items()}
    ident = access.TLSIdentity.from_secret_data(b64, name="s")
    assert ident.cert_pem == leaf.cert_pem and ident.ca_pem == ca.cert_pem
    bundle = {"ca.crt": pki.bundle(ca.cert_pem, pki.make_ca("new").cert_pem)}
    assert len(pki.split_pem(access.TLSIdentity.from_secret_data(b64, ca=bundle).ca_pem)) == 2
    with pytest.raises(ValueError, match="has no key 'ca.crt'"):
        access.TLSIdentity.from_secret_data({"tls.crt": b64["tls.crt"], "tls.key": b64["tls.key"]})
