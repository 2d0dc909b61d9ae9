"""Bring-your-own Secrets and the handover to cert-manager, in the fast world (in-process API server, fake etcd).

We test these aspects:
- the provisioner on an Etcd with ``spec.tls.externalSecrets`` creates no Certificate, releases the user's Secrets
  into the mounted ones and the bundle, and never writes the user's Secrets (same resourceVersion); a bad user
  Secret is held (its problem names it) and never mounted; a user's renewed leaf (same CA) is released with no
  restart; WipeOut's Secret deletion leaves the user's Secrets alone;
- the handover to an issuer with a different CA: widen, release, verify, narrow — each member restarted twice,
  never while leading, no election; the bundle ends with the issuer's CA only; ``spec.tls`` has the issuer and no
  externalSecrets; the user's Secrets byte-for-byte untouched;
- the handover to an issuer with the user's CA: no restart at all, the bundle unchanged;
- a foreign Certificate of a wanted name: Failed, naming it and its owner, before any restart;
- the operator killed at every step and around every action of a handover resumes to Successful, each member
  restarted once per pass.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest

from opsmanager import pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming
from opsmanager.provisioner import applying
from opsmanager.tls import gate, release, rollover
from tests.ops import test_engine_operations as operations
from tests.ops import test_engine_resume as resume
from tests.ops import world as w

HANDOVER_ORDER = ["Running", "TrustBundleWidened", "CertificateSynced", "ServedCertificatesVerified",
                  "TrustBundleNarrowed", "UpdateDatabase", "Successful"]
HANDOVER = operations.Operation("handover", True, "ReconfigureTLS", {"tls": {"issuerRef": operations.ISSUER_B}},
                                HANDOVER_ORDER, 2, True)
USER = [f"user-{a}" for a in constants.CERT_ALIASES]


async def user_snapshot(world: w.World) -> dict[str, tuple[str, Any, Any]]:
    out = {}
    for name in USER:
        s = await world.kube.get("v1", "Secret", w.NS, name)
        assert s is not None, f"user Secret {name} is gone"
        out[name] = (s["metadata"]["resourceVersion"], s["data"], s["metadata"])
    return out


async def bundle_cas(world: w.World) -> set[bytes]:
    s = await world.kube.get("v1", "Secret", w.NS, naming.trust_bundle_secret("db"))
    assert s is not None
    return {c.strip() for c in pki.split_pem(base64.b64decode(s["data"][naming.TRUST_BUNDLE_KEY]))}


async def test_handover_to_a_different_ca_runs_three_phases_and_leaves_the_user_secrets_alone(
        world: w.World) -> None:
    await world.etcd("db", external_ca="user-ca")
    assert await world.kube.list(w.CERT_API, "Certificate", w.NS) == []
    before = await user_snapshot(world)
    await world.request("handover", "db", "ReconfigureTLS", tls={"issuerRef": operations.ISSUER_B})
    req = await world.run("handover")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == HANDOVER_ORDER
    await operations.assert_rolled_safely(world, HANDOVER)
    assert await bundle_cas(world) == {world.ca("ca-b").cert_pem.strip()}
    tls = (await world.get_etcd("db"))["spec"]["tls"]
    assert tls["issuerRef"]["name"] == "ca-b" and "externalSecrets" not in tls
    assert await user_snapshot(world) == before
    for alias in constants.CERT_ALIASES:
        mounted = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-cert")
        source = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-issued")
        assert mounted is not None and source is not None and mounted["data"] == source["data"]


async def test_handover_to_the_users_own_ca_restarts_nothing(world: w.World) -> None:
    await world.etcd("db", external_ca="ca-a")  # the issuer ca-a signs with the very CA of the user's Secrets
    cas = await bundle_cas(world)
    before = await user_snapshot(world)
    await world.request("handover", "db", "ReconfigureTLS", tls={"issuerRef": operations.ISSUER_A})
    req = await world.run("handover")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == HANDOVER_ORDER
    assert world.record.creations == {} and world.record.evictions == []
    assert world.cluster is not None and world.cluster.history == []
    assert await bundle_cas(world) == cas
    assert await operations.served_as_in_secrets(world)
    assert await user_snapshot(world) == before


async def test_a_foreign_certificate_fails_the_handover_before_any_restart(world: w.World) -> None:
    await world.etcd("db", external_ca="user-ca")
    await world.kube.apply({"apiVersion": w.CERT_API, "kind": "Certificate", "metadata": {
        "name": "db-server", "namespace": w.NS, "ownerReferences": [{
            "apiVersion": "example.com/v1", "kind": "Tenant", "name": "acme", "uid": "u-acme", "controller": True}]},
        "spec": {"secretName": "elsewhere", "issuerRef": {"name": "ca-x"}}})
    await world.request("handover", "db", "ReconfigureTLS", tls={"issuerRef": operations.ISSUER_B})
    req = await world.run("handover")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = next(c for c in req["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    assert "db-server" in failed["message"] and "Tenant acme" in failed["message"], failed["message"]
    assert world.record.creations == {} and world.record.evictions == []
    assert "externalSecrets" in (await world.get_etcd("db"))["spec"]["tls"]


@pytest.mark.slow  # a crash at every point of a run: seconds, kept out of `make test-fast`
@pytest.mark.parametrize("same_ca", [False, True], ids=["different-ca", "same-ca"])
async def test_killed_anywhere_in_a_handover_it_resumes_restarting_each_member_once_per_pass(
        world: w.World, same_ca: bool) -> None:
    op = HANDOVER if not same_ca else operations.Operation(
        "handover", True, "ReconfigureTLS", {"tls": {"issuerRef": operations.ISSUER_A}}, HANDOVER_ORDER, 0, True)
    await world.etcd("db", external_ca="ca-a" if same_ca else "user-ca")
    before = await user_snapshot(world)
    await world.request("handover", "db", "ReconfigureTLS", **op.spec)
    req, crashed = await resume.run_killed_everywhere(world, "handover", op, max_reconciles=800)
    if op.passes:
        for pod in operations.PODS:
            assert {f"before evict {pod}", f"after evict {pod}"} <= crashed, pod
    assert await user_snapshot(world) == before


# --- the provisioner on user-provided Secrets -----------------------------------------------------------------


async def byo_etcd(world: w.World, names: dict[str, str]) -> dict[str, Any]:
    return await world.kube.create({
        "apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
        "metadata": {"name": "db", "namespace": w.NS},
        "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3, "storageType": "Durable",
                 "deletionPolicy": "WipeOut", "tls": {"externalSecrets": names}}})


async def test_the_provisioner_releases_user_secrets_creates_no_certificate_and_writes_none_of_them(
        world: w.World) -> None:
    names = await world.user_secrets("db", "user-ca")
    obj = await byo_etcd(world, names)
    before = await user_snapshot(world)
    outcome = await applying.reconcile(world.kube, obj)
    assert outcome.state == applying.DONE, outcome
    assert await world.kube.list(w.CERT_API, "Certificate", w.NS) == []
    assert await bundle_cas(world) == {world.ca("user-ca").cert_pem.strip()}
    for alias in constants.CERT_ALIASES:
        mounted = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-cert")
        assert mounted is not None
        assert mounted["data"] == before[names[alias]][1]
        assert mounted["metadata"]["annotations"][naming.ANNOTATION_RELEASED_FROM] == names[alias]
    assert await user_snapshot(world) == before
    # WipeOut's Secret deletion: the mounted Secrets go, the user's stay — even one that looks like what our own
    # Certificate would have written (the user made it with a cert-manager Certificate of that name).
    await world.kube.patch("v1", "Secret", w.NS, names["server"], {"metadata": {"annotations": {
        "cert-manager.io/certificate-name": "db-server"}}})
    before = await user_snapshot(world)
    db = etcd_api.Etcd.model_validate(obj)
    for alias in constants.CERT_ALIASES:
        deleted = await release.delete_released(world.kube, db, db.spec.tls, alias)
        assert deleted == [f"Secret db-{alias}-cert"]
    assert await user_snapshot(world) == before


async def test_a_renewed_user_leaf_is_released_and_a_new_user_ca_is_held(world: w.World) -> None:
    names = await world.user_secrets("db", "user-ca")
    obj = await byo_etcd(world, names)
    assert (await applying.reconcile(world.kube, obj)).state == applying.DONE
    db = etcd_api.Etcd.model_validate(obj)
    assert db.spec.tls is not None
    allowed = world.ca("user-ca").cert_pem
    renewed = await world.user_secrets("db", "user-ca")  # fresh leaves, same CA, same names
    assert renewed == names
    result = await release.release(world.kube, db, db.spec.tls, "server", allowed=allowed)
    assert result.changed and result.verdict.passed
    await world.user_secrets("db", "another-ca")
    held = await release.release(world.kube, db, db.spec.tls, "server", allowed=allowed)
    assert not held.changed and [p.code for p in held.verdict.problems] == [gate.UNTRUSTED_CA]
    assert "user-server" in held.verdict.problems[0].message
    # No automatic CA rollover for user Secrets (the webhook refuses a rotate of them): held and reported only.
    assert await rollover.file_if_renewed(world.kube, obj, held.verdict.problems) is None
    assert await world.kube.list(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS) == []


@pytest.mark.parametrize("fault", ["missing-key", "key-mismatch", "san", "expired"])
async def test_a_bad_user_secret_is_reported_and_never_mounted(world: w.World, fault: str) -> None:
    names = await world.user_secrets("db", "user-ca")
    ca = world.ca("user-ca")
    good = pki.make_leaf(ca, "db", dns_names=[f"*.db-pods.{w.NS}.svc"])
    data = {"tls.crt": good.cert_pem, "tls.key": good.key_pem, "ca.crt": ca.cert_pem}
    if fault == "missing-key":
        del data["tls.key"]
    elif fault == "key-mismatch":
        data["tls.key"] = pki.make_leaf(ca, "db", dns_names=[f"*.db-pods.{w.NS}.svc"]).key_pem
    elif fault == "san":
        other = pki.make_leaf(ca, "db", dns_names=["localhost"])
        data["tls.crt"], data["tls.key"] = other.cert_pem, other.key_pem
    else:
        start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2)
        old = pki.make_leaf(ca, "db", dns_names=[f"*.db-pods.{w.NS}.svc"], not_before=start,
                            duration=datetime.timedelta(hours=1))
        data["tls.crt"], data["tls.key"] = old.cert_pem, old.key_pem
    await world.kube.delete("v1", "Secret", w.NS, "user-server")
    await world.kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "user-server",
                            "namespace": w.NS}, "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
    obj = await byo_etcd(world, names)
    outcome = await applying.reconcile(world.kube, obj)
    assert outcome.state == applying.WAITING, outcome
    want = {"missing-key": gate.MISSING_KEY, "key-mismatch": gate.KEY_MISMATCH, "san": gate.SAN_MISMATCH,
            "expired": gate.EXPIRED}[fault]
    assert want in [p.code for p in outcome.held], outcome.held
    assert any(f"{w.NS}/user-server" in p.message for p in outcome.held)
    assert await world.kube.get("v1", "Secret", w.NS, "db-server-cert") is None
    assert await world.kube.get("apps/v1", "StatefulSet", w.NS, "db") is None
