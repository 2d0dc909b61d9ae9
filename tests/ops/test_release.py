"""``tls.release`` against the in-process API server (the fast world): the one writer of mounted Secrets.

We test these aspects:
- a source that passes is copied (owned by the Etcd, labelled, no cert-manager annotation); a second call with
  nothing changed writes nothing (same resourceVersion);
- a source that fails the gate is never copied, and the mounted Secret keeps what it had;
- a legacy mounted Secret (written by our Certificate) is taken over, cert-manager's annotations stripped;
- a mounted Secret someone else controls is never written (blocked, naming it);
- the bundle's record: a CA added later is stamped then; the loaded rule reads the pods' container starts.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from opsmanager import pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming
from opsmanager.tls import gate, release
from tests.ops import world as w

SOURCE, MOUNTED = "db-server-issued", "db-server-cert"


async def setup(world: w.World) -> etcd_api.Etcd:
    await world.etcd("db", tls_issuer="ca-a")
    return etcd_api.Etcd.model_validate(await world.get_etcd("db"))


async def put_source(world: w.World, pair: pki.KeyPair, ca: bytes, **annotations: str) -> None:
    data = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": ca}
    await world.kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                            "metadata": {"name": SOURCE, "namespace": w.NS, "annotations": annotations},
                            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})


async def mounted(world: w.World) -> dict[str, Any]:
    obj = await world.kube.get("v1", "Secret", w.NS, MOUNTED)
    assert obj is not None
    return obj


async def test_release_copies_a_passing_source_once_and_holds_a_failing_one(world: w.World) -> None:
    db = await setup(world)
    assert db.spec.tls is not None
    ca = world.ca("ca-a")
    loaded = await release.loaded(world.kube, db)
    assert loaded == ca.cert_pem
    good = pki.make_leaf(ca, "db", dns_names=[f"*.db-pods.{w.NS}.svc"])
    await put_source(world, good, ca.cert_pem)
    first = await release.release(world.kube, db, db.spec.tls, "server", allowed=loaded)
    assert first.changed and first.verdict.passed
    m = await mounted(world)
    assert base64.b64decode(m["data"]["tls.crt"]) == good.cert_pem
    assert m["metadata"]["ownerReferences"][0]["uid"] == db.metadata.uid
    assert m["metadata"]["labels"][naming.LABEL_COMPONENT] == "server"
    assert not any(a.startswith("cert-manager.io/") for a in m["metadata"]["annotations"])
    again = await release.release(world.kube, db, db.spec.tls, "server", allowed=loaded)
    assert not again.changed and (await mounted(world))["metadata"]["resourceVersion"] == \
        m["metadata"]["resourceVersion"]

    other = pki.make_ca("other")
    await put_source(world, pki.make_leaf(other, "db", dns_names=[f"*.db-pods.{w.NS}.svc"]), other.cert_pem)
    held = await release.release(world.kube, db, db.spec.tls, "server", allowed=loaded)
    assert not held.changed and [p.code for p in held.verdict.problems] == [gate.UNTRUSTED_CA]
    assert (await mounted(world))["data"] == m["data"]
    narrow = pki.make_leaf(ca, "db", dns_names=["localhost"])
    await put_source(world, narrow, ca.cert_pem)
    held = await release.release(world.kube, db, db.spec.tls, "server", allowed=loaded)
    assert [p.code for p in held.verdict.problems] == [gate.SAN_MISMATCH]
    assert (await mounted(world))["data"] == m["data"]


async def test_legacy_mounted_secrets_are_taken_over_and_foreign_ones_never_written(world: w.World) -> None:
    db = await setup(world)
    assert db.spec.tls is not None
    await world.kube.patch("v1", "Secret", w.NS, MOUNTED, {"metadata": {
        "ownerReferences": None, "annotations": {"cert-manager.io/certificate-name": "db-server",
                                                 "cert-manager.io/issuer-name": "ca-a",
                                                 naming.ANNOTATION_RELEASED_FROM: None}}})
    ca = world.ca("ca-a")
    fresh = pki.make_leaf(ca, "db", dns_names=[f"*.db-pods.{w.NS}.svc"])
    await put_source(world, fresh, ca.cert_pem)
    took = await release.release(world.kube, db, db.spec.tls, "server", allowed=ca.cert_pem)
    assert took.changed
    meta = (await mounted(world))["metadata"]
    assert not any(a.startswith("cert-manager.io/") for a in meta["annotations"]), meta["annotations"]
    assert meta["ownerReferences"][0]["kind"] == constants.ETCD_KIND

    owner = await world.kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "someone", "namespace": w.NS}})
    await world.kube.patch("v1", "Secret", w.NS, MOUNTED, {"metadata": {"ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "someone", "uid": owner["metadata"]["uid"],
        "controller": True}]}})
    blocked = await release.release(world.kube, db, db.spec.tls, "server", allowed=ca.cert_pem)
    assert blocked.blocked and "ConfigMap someone" in blocked.blocked and not blocked.changed
    # nor deleted: only the source our Certificate wrote goes
    assert await release.delete_released(world.kube, db, db.spec.tls, "server") == [f"Secret {SOURCE}"]
    assert await world.kube.get("v1", "Secret", w.NS, MOUNTED) is not None


async def test_the_bundle_record_and_the_loaded_rule(world: w.World) -> None:
    db = await setup(world)
    ca, new = world.ca("ca-a"), pki.make_ca("new")
    _live, bundle = await release.read_bundle(world.kube, db)
    assert bundle == ca.cert_pem
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    assert await release.write_bundle(world.kube, db, pki.bundle(ca.cert_pem, new.cert_pem), now=later)
    assert not await release.write_bundle(world.kube, db, pki.bundle(ca.cert_pem, new.cert_pem), now=later)
    live, _ = await release.read_bundle(world.kube, db)
    assert live is not None
    record = gate.decode_record(live["metadata"]["annotations"][naming.ANNOTATION_CA_ENTERED])
    assert record == {gate.fingerprint(ca.cert_pem): gate.EPOCH, gate.fingerprint(new.cert_pem): gate.stamp(later)}
    # the fast world's pods report no container start: nothing constrains, both count as loaded...
    assert await release.loaded(world.kube, db) == pki.bundle(ca.cert_pem, new.cert_pem)
    # ...until a member reports a start before the new CA entered
    def running(st: dict[str, Any]) -> dict[str, Any]:
        return {**st, "containerStatuses": [{"name": "etcd", "state": {"running": {
            "startedAt": gate.stamp(later - datetime.timedelta(minutes=1))}}}]}
    await world.kube.transact_status("v1", "Pod", w.NS, "db-1", running)
    assert await release.loaded(world.kube, db) == ca.cert_pem
