"""The TLS material the gate holds back is announced once per (source, reason), remembered in the Etcd's status.

We test these aspects, against the sandbox API server in-process (its CRD schemas come from the models, so a status
field the model lacks would be pruned) with the operator's ``kube.Kube`` client:
- a held source gets one Warning Event and a ``status.materialAnnounced`` entry, written with ``TLSMaterialReady``;
  the next report with the same problem posts nothing; once it passes the record is emptied, so the same failure
  coming back is announced again; ``SourceMissing`` is waiting, never announced;
- legacy: an Etcd carrying the annotation older operators kept the record in is understood (what it lists is not
  announced again), and the annotation is dropped in favour of the status field.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.provisioner import handlers
from opsmanager.tls import gate
from tests.ops import world as w

LOG = logging.getLogger(__name__)
UNTRUSTED = gate.Problem(gate.UNTRUSTED_CA, f"{w.NS}/db-server-issued", "db-server-issued: from a CA not loaded")
EXPIRED = gate.Problem(gate.EXPIRED, f"{w.NS}/db-peer-issued", "db-peer-issued: expired")
MISSING = gate.Problem(gate.SOURCE_MISSING, f"{w.NS}/db-client-issued", "db-client-issued: not written yet")


@pytest.fixture
async def k(tmp_path: Path) -> AsyncIterator[kube.Kube]:
    server, client = await w.start(tmp_path)
    try:
        yield client
    finally:
        client.close()
        await server.stop()


async def etcd(k: kube.Kube, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return await k.create({"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                           "metadata": {"name": "db", "namespace": w.NS, "annotations": annotations or {}},
                           "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3}})


async def report(k: kube.Kube, *held: gate.Problem) -> dict[str, Any]:
    """One report of the held sources on a fresh read of the Etcd (as the provisioner's pass makes it)."""
    body = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, "db")
    assert body is not None
    await handlers._report_held(k, body, held, LOG)
    fresh = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, "db")
    assert fresh is not None
    return fresh


async def warnings(k: kube.Kube) -> list[str]:
    return sorted(e["reason"] for e in await k.list("v1", "Event", w.NS) if e.get("type") == "Warning")


def recorded(db: dict[str, Any]) -> list[tuple[str, str]]:
    return [(x["secret"], x["reason"]) for x in (db.get("status") or {}).get("materialAnnounced") or []]


async def test_a_held_source_is_announced_once_and_again_after_it_passed(k: kube.Kube) -> None:
    await etcd(k)
    db = await report(k, UNTRUSTED, MISSING)
    assert recorded(db) == [(UNTRUSTED.secret, UNTRUSTED.code)], "SourceMissing is waiting, not announced"
    ready = conditions.get_condition(db["status"]["conditions"], constants.COND_TLS_MATERIAL_READY)
    assert ready is not None and (ready["status"], ready["reason"]) == (constants.FALSE, gate.UNTRUSTED_CA)
    assert await warnings(k) == [gate.UNTRUSTED_CA]

    db = await report(k, UNTRUSTED, EXPIRED)
    assert recorded(db) == [(EXPIRED.secret, EXPIRED.code), (UNTRUSTED.secret, UNTRUSTED.code)]
    assert await warnings(k) == [gate.EXPIRED, gate.UNTRUSTED_CA], "only the new pair is announced"

    db = await report(k)
    assert "materialAnnounced" not in db["status"]
    assert conditions.is_true(db["status"]["conditions"], constants.COND_TLS_MATERIAL_READY)
    await report(k, UNTRUSTED)
    assert await warnings(k) == [gate.EXPIRED, gate.UNTRUSTED_CA, gate.UNTRUSTED_CA], "back again: announced again"


async def test_an_etcd_with_the_legacy_annotation_is_understood_and_the_annotation_dropped(k: kube.Kube) -> None:
    legacy = json.dumps([[UNTRUSTED.secret, UNTRUSTED.code]])
    await etcd(k, {naming.ANNOTATION_MATERIAL_ANNOUNCED: legacy})
    db = await report(k, UNTRUSTED, EXPIRED)
    assert await warnings(k) == [gate.EXPIRED], "what the annotation lists was announced already"
    assert recorded(db) == [(EXPIRED.secret, EXPIRED.code), (UNTRUSTED.secret, UNTRUSTED.code)]
    assert naming.ANNOTATION_MATERIAL_ANNOUNCED not in (db["metadata"].get("annotations") or {})
    await report(k, UNTRUSTED, EXPIRED)
    assert await warnings(k) == [gate.EXPIRED]
