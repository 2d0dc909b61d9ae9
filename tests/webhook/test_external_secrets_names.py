"""Ours (issue 12): user-provided Secrets may not carry a name the operator writes, and the paused-TLS rule admits
exactly the handover's ``UpdateDatabase`` write.

We test these aspects:
- ``spec.tls.externalSecrets`` naming ``<db>-<alias>-cert``, ``<db>-<alias>-issued`` or ``<db>-ca-bundle`` is
  denied for that alias (the operator would otherwise write the user's Secret); other names pass;
- the handover's write (issuerRef set, externalSecrets gone) is what ``engine_tls_write`` computes.
"""

from __future__ import annotations

from typing import Any

import pytest

from opsmanager.api import constants
from opsmanager.webhook import validation

EXT = {"server": "u-server", "peer": "u-peer", "client": "u-client"}
ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}


def etcd(tls: dict[str, Any], name: str = "db") -> dict[str, Any]:
    return {"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3, "storageType": "Durable",
                     "deletionPolicy": "Delete", "tls": tls}}


def messages(obj: dict[str, Any]) -> list[str]:
    errors, _ = validation.etcd_errors(obj)
    return [str(e) for e in errors]


def test_other_names_pass() -> None:
    assert messages(etcd({"externalSecrets": EXT})) == []


@pytest.mark.parametrize("bad", ["db-server-cert", "db-client-cert", "db-peer-issued", "db-ca-bundle"])
def test_a_name_the_operator_writes_is_refused(bad: str) -> None:
    got = messages(etcd({"externalSecrets": {**EXT, "peer": bad}}))
    assert len(got) == 1, got
    assert "spec.tls.externalSecrets.peer" in got[0] and bad in got[0], got
    assert validation.MSG_TLS_EXTERNAL_OPERATOR_NAME in got[0]
    assert messages(etcd({"externalSecrets": {**EXT, "peer": bad}}, name="other")) == []


def test_the_handover_write_is_what_the_engine_writes() -> None:
    old = etcd({"externalSecrets": EXT})
    request = {"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
               "metadata": {"name": "handover", "namespace": "ns"},
               "spec": {"type": "ReconfigureTLS", "databaseRef": {"name": "db"}, "tls": {"issuerRef": ISSUER}}}
    assert validation.engine_tls_write(old, request) == {"issuerRef": ISSUER}
