"""Automatic CA rollover in the fast world (issue 12, part 4): the provisioner files the request, the engine rolls.

We test these aspects:
- the CA behind the Issuer renewed and cert-manager issued leaves from it: the gate holds them (UntrustedCA); the
  provisioner's :func:`~opsmanager.tls.rollover.file_if_renewed` files one ``ReconfigureTLS`` request
  (``rotateCertificates``, trigger label ``ca-rollover``, owned by the Etcd, named from the new CA) and an Event;
  called again (a restarted operator) it files nothing;
- the engine observes the variant once (``status.origin.plan: CARollover``) and runs widen → re-issue →
  release → verify served → narrow: Successful, each member restarted once per pass (two), one at a time, never
  while leading; at the end the bundle holds the new CA only, every mounted leaf and every served one chains to it;
- killed after every step, before every action, around every eviction and MoveLeader: Successful all the same,
  each member restarted exactly once per pass;
- a same-CA rotate still restarts nothing (``status.origin.plan: Rotate``);
- a source failing the gate for another reason (SAN) is never mounted during the rollover.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from opsmanager import pki
from opsmanager.api import conditions, constants, tlschange
from opsmanager.api import etcd as etcd_api
from opsmanager.ops.operations.reconfigure_tls import plans as tls_plans
from opsmanager.tls import gate, release, rollover
from tests.ops import test_engine_operations as operations
from tests.ops import test_engine_resume as resume
from tests.ops import world as w

ORDER = ["Running", "TrustBundleWidened", "IssueCertificatesSucceeded", "CertificateSynced",
         "ServedCertificatesVerified", "TrustBundleNarrowed", "UpdateDatabase", "Successful"]
ROLLOVER = operations.Operation("ca-rollover", True, "ReconfigureTLS", {"tls": {"rotateCertificates": True}},
                                ORDER, 2, True)


async def renew_ca(world: w.World) -> pki.KeyPair:
    """cert-manager renewed the CA behind Issuer ca-a and re-issued every source from it."""
    new = world.cas["ca-a"] = pki.make_ca("ca-a-renewed")

    def issuing(st: dict[str, Any]) -> dict[str, Any]:
        return {**st, "conditions": conditions.set_condition(st.get("conditions"), "Issuing", constants.TRUE,
                                                             reason="Renewing", message="renewal")}

    for cert in await world.kube.list(w.CERT_API, "Certificate", w.NS):
        await world.kube.transact_status(w.CERT_API, "Certificate", w.NS, cert["metadata"]["name"], issuing)
    await world.settle()
    return new


async def provisioner_pass(world: w.World) -> tuple[list[gate.Problem], str | None]:
    """What the provisioner does with the sources: release through the gate (loaded CAs), file a rollover."""
    obj = await world.get_etcd("db")
    db = etcd_api.Etcd.model_validate(obj)
    assert db.spec.tls is not None
    held: list[gate.Problem] = []
    for alias in constants.CERT_ALIASES:
        result = await release.release(world.kube, db, db.spec.tls, alias, allowed=await release.loaded(world.kube, db))
        held += result.verdict.problems
    return held, await rollover.file_if_renewed(world.kube, obj, held)


async def bundle_cas(world: w.World) -> list[str]:
    secret = await world.kube.get("v1", "Secret", w.NS, "db-ca-bundle")
    assert secret is not None
    return [pki.cert_info(c).common_name for c in pki.split_pem(base64.b64decode(secret["data"]["ca.crt"]))]


async def mounted_chain_to(world: w.World, ca: pki.KeyPair) -> bool:
    for alias in constants.CERT_ALIASES:
        secret = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-cert")
        assert secret is not None
        if not pki.signed_by(base64.b64decode(secret["data"]["tls.crt"]), ca.cert_pem):
            return False
    return True


async def filed(world: w.World) -> str:
    await world.etcd("db", tls_issuer="ca-a")
    new = await renew_ca(world)
    held, name = await provisioner_pass(world)
    assert {p.code for p in held} == {gate.UNTRUSTED_CA}, held
    assert name == f"db-ca-rollover-{pki.cert_info(new.cert_pem).fingerprint_sha256[:12]}"
    return name


async def test_a_renewed_ca_is_filed_once_as_a_labelled_owned_rotate_request(world: w.World) -> None:
    name = await filed(world)
    req = await world.get_request(name)
    assert req["metadata"]["labels"][constants.LABEL_OPS_TRIGGER] == constants.TRIGGER_CA_ROLLOVER
    assert req["metadata"]["ownerReferences"][0]["kind"] == constants.ETCD_KIND
    assert req["spec"]["tls"]["rotateCertificates"] is True
    assert (await provisioner_pass(world))[1] is None, "filed twice"
    events = [e for e in await world.kube.list("v1", "Event", w.NS)
              if e.get("reason") == constants.EVENT_CA_ROLLOVER_REQUESTED]
    assert len(events) == 1 and name in events[0]["message"]


async def test_the_rollover_widens_releases_verifies_and_narrows_restarting_each_member_once_per_pass(
        world: w.World) -> None:
    name = await filed(world)
    before = await bundle_cas(world)
    req = await world.run(name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert tlschange.recorded_plan(req) == tls_plans.RotateVariant.CA_ROLLOVER.value
    assert w.umbrella(req) == ORDER
    await operations.assert_rolled_safely(world, ROLLOVER)
    assert before == ["ca-a-ca"] and await bundle_cas(world) == ["ca-a-renewed"]
    assert await mounted_chain_to(world, world.cas["ca-a"])
    held, again = await provisioner_pass(world)
    assert held == [] and again is None


@pytest.mark.slow  # a crash at every point of a run: seconds, kept out of `make test-fast`
async def test_killed_anywhere_during_a_rollover_it_resumes_to_successful_restarting_each_member_once_per_pass(
        world: w.World) -> None:
    name = await filed(world)
    req, crashed = await resume.run_killed_everywhere(world, name, ROLLOVER)
    for pod in operations.PODS:
        assert {f"before evict {pod}", f"after evict {pod}", f"in-flight EvictPod--{pod}"} <= crashed, pod
    assert await bundle_cas(world) == ["ca-a-renewed"]


async def test_a_same_ca_rotate_is_observed_as_such_and_restarts_nothing(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await world.request("rotate", "db", "ReconfigureTLS", tls={"rotateCertificates": True})
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert tlschange.recorded_plan(req) == tls_plans.RotateVariant.HOT_RELOAD.value
    assert world.record.creations == {}


async def test_a_source_failing_the_gate_for_another_reason_is_never_mounted(world: w.World) -> None:
    """A server source of the new CA whose SANs miss the members (written over the source while the widen pass
    runs): held on SANMismatch by every release; the re-issue replaces it and the rollover still succeeds."""
    name = await filed(world)
    bad = pki.make_leaf(world.cas["ca-a"], "db-server", dns_names=["elsewhere"], usages=("server", "client"))
    data = {"tls.crt": bad.cert_pem, "tls.key": bad.key_pem, "ca.crt": world.cas["ca-a"].cert_pem}
    await world.kube.patch("v1", "Secret", w.NS, "db-server-issued",
                           {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
    bad_serial = pki.cert_info(bad.cert_pem).serial
    assert any(p.code == gate.SAN_MISMATCH for p in (await provisioner_pass(world))[0])

    async def never_mounted(_i: int) -> None:
        mounted = await world.kube.get("v1", "Secret", w.NS, "db-server-cert")
        assert mounted is not None
        assert pki.cert_info(base64.b64decode(mounted["data"]["tls.crt"])).serial != bad_serial, "mounted"

    req = await world.run(name, between=never_mounted)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert await mounted_chain_to(world, world.cas["ca-a"])


async def test_an_etcd_being_set_up_files_no_rollover(world: w.World) -> None:
    """No member has loaded a bundle yet (there is none): the Issuer's CA is the one the cluster starts with, not a
    renewal. (Seen once the provisioner reacted to its Certificates' creation before the bundle existed.)"""
    ca = pki.make_ca("fresh-ca")
    await world.kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fresh-ca", "namespace": w.NS},
                             "data": {"ca.crt": base64.b64encode(ca.cert_pem).decode()}})
    await world.kube.create({"apiVersion": w.CERT_API, "kind": "Issuer", "metadata": {"name": "fresh-ca",
                                                                                       "namespace": w.NS},
                             "spec": {"ca": {"secretName": "fresh-ca"}}})
    obj = await world.kube.create({"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                                   "metadata": {"name": "fresh", "namespace": w.NS},
                                   "spec": {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3,
                                            "tls": {"issuerRef": {**w.ISSUER, "name": "fresh-ca"}}}})
    assert await rollover.file_if_renewed(world.kube, obj, []) is None
    assert not [r for r in await world.kube.list(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS)
                if r["metadata"]["name"].startswith("fresh-ca-rollover-")]
