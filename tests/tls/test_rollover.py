"""``tls.rollover``: which CAs count as renewed (pure) and the request it files.

We test these aspects: a CA already loaded, not a CA, expired or not yet valid is not renewed; duplicates count
once; the newest comes first; the request is a labelled, owned rotate named from the CA's fingerprint.
"""

from __future__ import annotations

import datetime

from opsmanager import pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.tls import rollover


def now() -> datetime.datetime:
    """The time of the call, not of the import: a suite that collects this module and runs it twenty minutes later
    makes its certificates then (backdated by pki's few minutes), so a module-level "now" would call them not yet
    valid."""
    return datetime.datetime.now(datetime.UTC)



def test_only_valid_cas_not_yet_loaded_are_renewed_newest_first_each_once() -> None:
    old, new = pki.make_ca("old"), pki.make_ca("new")
    leaf = pki.make_leaf(new, "leaf", usages=("client",))
    expired = pki.make_ca("expired", not_before=now() - datetime.timedelta(hours=2), duration=datetime.timedelta(hours=1))
    found = rollover.renewed_cas([(new.cert_pem + old.cert_pem, "Issuer x"), (new.cert_pem, "Secret y"),
                                  (leaf.cert_pem, "not a CA"), (expired.cert_pem, "expired"), (b"junk", "junk")],
                                 old.cert_pem, now())
    assert [(c.subject, c.why) for c in found] == [("CN=new", "Issuer x")]
    assert rollover.renewed_cas([(new.cert_pem, "Issuer x")], old.cert_pem + new.cert_pem, now()) == []


def test_the_request_is_a_labelled_owned_rotate_named_from_the_ca() -> None:
    db = etcd_api.Etcd.model_validate({"metadata": {"name": "db", "namespace": "ns", "uid": "u-1"},
                                       "spec": {"version": "3.5.1",
                                                "tls": {"issuerRef": {"name": "ca", "kind": "Issuer"}}}})
    ca = rollover.renewed_cas([(pki.make_ca("new").cert_pem, "Issuer ca")], b"", now())[0]
    body = rollover.request_body(db, ca)
    assert body["metadata"]["name"] == f"db-ca-rollover-{ca.fingerprint[:12]}"
    assert body["metadata"]["labels"] == {constants.LABEL_OPS_TRIGGER: constants.TRIGGER_CA_ROLLOVER}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert body["spec"] == {"type": "ReconfigureTLS", "databaseRef": {"name": "db"},
                            "tls": {"rotateCertificates": True}}
