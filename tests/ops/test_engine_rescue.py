"""Rescue (issue 13) in the fast world: a rotate on a cluster whose certificates have already expired.

We test these aspects:
- served leaves expired, CA valid and loaded: the observation persists ``RescueLeaves`` and why (member, port,
  notAfter), ``RescuePlanChosen`` is the second condition, every leaf is re-issued and released, the members serve
  the new leaves, and NO member is restarted;
- the loaded CA expired and the issuer signs with a new CA: ``RescueCA``; the bundle is rewritten to the new CA,
  every member is deleted together exactly once (no eviction, no rolling), quorum comes back, Successful;
- killed at every step and around every pod deletion: Successful all the same, each member deleted exactly once;
- an issuer that cannot issue: ``Failed`` naming cert-manager's reason, nothing restarted (neither rescue);
- a valid cluster with every member down takes the ordinary plan (reachability never chooses a rescue).
"""

from __future__ import annotations

import base64
import datetime

import pytest

from opsmanager import pki
from opsmanager.api import conditions, constants, tlschange
from opsmanager.ops.operations.reconfigure_tls import plans as tls_plans
from tests.ops import test_engine_operations as operations
from tests.ops import test_engine_resume as resume
from tests.ops import world as w

LEAVES_ORDER = ["Running", "RescuePlanChosen", "IssueCertificatesSucceeded", "CertificateSynced",
                "ServedCertificatesVerified", "UpdateDatabase", "Successful"]
CA_ORDER = ["Running", "RescuePlanChosen", "IssueCertificatesSucceeded", "CertificateSynced", "RestartPods",
            "ServedCertificatesVerified", "UpdateDatabase", "Successful"]
PAST = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2)


def _b64(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


async def expire_leaves(world: w.World) -> None:
    """Every mounted (and source) leaf replaced by one of the same CA that expired yesterday; members serve them."""
    ca = world.ca("ca-a")
    for alias in constants.CERT_ALIASES:
        mounted = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-cert")
        assert mounted is not None
        old = pki.cert_info(base64.b64decode(mounted["data"]["tls.crt"]))
        leaf = pki.make_leaf(ca, old.common_name, dns_names=old.dns_names, not_before=PAST,
                             not_after=PAST + datetime.timedelta(days=1))
        data = _b64({"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": ca.cert_pem})
        for name in (f"db-{alias}-cert", f"db-{alias}-issued"):
            await world.kube.patch("v1", "Secret", w.NS, name, {"data": data})
    await world.settle()


async def expired_ca_cluster(world: w.World) -> pki.KeyPair:
    """A cluster whose CA (and so the CA every member loaded) expired yesterday; the Issuer now signs with a new CA
    (the CA Secret replaced)."""
    world.cas["ca-a"] = pki.make_ca("ca-a-old", not_before=PAST - datetime.timedelta(days=1),
                                    not_after=PAST + datetime.timedelta(days=1))
    await world.etcd("db", tls_issuer="ca-a")
    new = world.cas["ca-a"] = pki.make_ca("ca-a-new")
    return new


async def rotate(world: w.World, name: str = "rotate") -> None:
    await world.request(name, "db", "ReconfigureTLS", tls={"rotateCertificates": True})


async def served_valid(world: w.World) -> bool:
    assert world.cluster is not None
    now = datetime.datetime.now(datetime.UTC)
    return all(c.not_after > now for m in world.cluster.members.values() for c in m.served.values())


def rescue_message(req: dict[str, object]) -> str:
    cond = conditions.get_condition((req.get("status") or {}).get("conditions"),  # type: ignore[union-attr]
                                    constants.COND_RESCUE_PLAN_CHOSEN)
    assert cond is not None and cond["status"] == constants.TRUE
    return str(cond["message"])


async def test_expired_leaves_are_rescued_at_once_without_restarting_any_member(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await expire_leaves(world)
    assert not await served_valid(world)
    await rotate(world)
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert tlschange.recorded_plan(req) == tls_plans.RotateVariant.RESCUE_LEAVES.value
    assert w.umbrella(req) == LEAVES_ORDER
    message = rescue_message(req)
    assert "db-0 client notAfter" in message and "RescueLeaves" in message, message
    assert world.record.creations == {} and world.record.evictions == [] and world.record.deletions == []
    assert await served_valid(world) and await operations.served_as_in_secrets(world)
    assert not await world.is_paused("db")


async def test_an_expired_ca_is_rescued_by_restarting_every_member_together_once(world: w.World) -> None:
    new = await expired_ca_cluster(world)
    await rotate(world)
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert tlschange.recorded_plan(req) == tls_plans.RotateVariant.RESCUE_CA.value
    assert w.umbrella(req) == CA_ORDER
    assert "the CA every member loaded has expired" in rescue_message(req)
    assert sorted(world.record.deletions) == operations.PODS and world.record.evictions == []
    assert world.record.creations == {p: 1 for p in operations.PODS}
    bundle = await world.kube.get("v1", "Secret", w.NS, "db-ca-bundle")
    assert bundle is not None
    assert [pki.cert_info(c).common_name for c in pki.split_pem(base64.b64decode(bundle["data"]["ca.crt"]))] == [
        pki.cert_info(new.cert_pem).common_name]
    assert await operations.served_as_in_secrets(world)
    restart = conditions.get_condition(req["status"]["conditions"], constants.COND_RESTART_PODS)
    assert restart is not None and "3 members restarted together once, quorum back" in restart["message"]


@pytest.mark.slow  # a crash at every point of a run: seconds, kept out of `make test-fast`
async def test_killed_anywhere_in_a_ca_rescue_it_resumes_and_restarts_each_member_exactly_once(
        world: w.World) -> None:
    await expired_ca_cluster(world)
    await rotate(world)
    points = {f"{when} {c}" for c in CA_ORDER for when in ("in-flight", "done")}
    points |= {f"{when} delete {p}" for p in operations.PODS for when in ("before", "after")}
    world.crash_points = set(points)
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == CA_ORDER
    assert sorted(world.record.deletions) == operations.PODS, world.record.deletions
    assert world.record.creations == {p: 1 for p in operations.PODS}
    # Each step killed right after it ended; the restart of every member also between its record and the deletions.
    resume.assert_interrupted(set(world.crashes), CA_ORDER, restarts=True)
    assert {p for p in points if "delete" in p} <= set(world.crashes)


async def test_killed_anywhere_in_a_leaves_rescue_it_resumes_and_restarts_nothing(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await expire_leaves(world)
    await rotate(world)
    world.crash_points = {f"{when} {c}" for c in LEAVES_ORDER for when in ("in-flight", "done")}
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == LEAVES_ORDER
    assert world.record.creations == {} and world.record.deletions == []
    resume.assert_interrupted(set(world.crashes), LEAVES_ORDER, restarts=False)


async def test_an_issuer_that_cannot_issue_fails_the_rescue_with_its_reason_and_restarts_nothing(
        world: w.World) -> None:
    await expired_ca_cluster(world)
    world.issuer_fails = "the signed certificate expired before it could be stored"
    await rotate(world)
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and failed["reason"] == "IssuanceFailed"
    assert "the signed certificate expired before it could be stored" in failed["message"]
    assert world.record.deletions == [] and world.record.creations == {} and world.record.evictions == []
    assert not await world.is_paused("db")


async def test_a_valid_cluster_with_every_member_down_is_never_rescued(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    assert world.cluster is not None
    for name in operations.PODS:
        world.cluster.stop(name)  # unreachable: no handshake answers; status.tls (none yet) says nothing expired
    await rotate(world)
    await world.engine().reconcile(w.NS, "rotate")  # New -> Progressing: observes the variant
    req = await world.get_request("rotate")
    assert tlschange.recorded_plan(req) == tls_plans.RotateVariant.HOT_RELOAD.value
    assert tlschange.rescue_reason(req) is None


async def _down_with_an_expired_scan(world: w.World, *, scanned: datetime.datetime,
                                     other_ended: datetime.datetime) -> str:
    """Every member down; the last scan (at ``scanned``) saw expired leaves; another request ended at
    ``other_ended``. Returns the plan the next rotate chooses."""
    await world.etcd("db", tls_issuer="ca-a")
    assert world.cluster is not None
    for name in operations.PODS:
        world.cluster.stop(name)
    past = conditions.rfc3339(scanned - datetime.timedelta(days=1))
    members = [{"name": p, "client": {"notAfter": past}, "peer": {"notAfter": past}} for p in operations.PODS]
    await world.kube.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, "db", lambda st: {
        **st, "tls": {"lastScanTime": conditions.rfc3339(scanned), "members": members}})
    await world.request("earlier", "db", "Restart")
    await world.kube.transact_status(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "earlier", lambda st: {
        **st, "phase": constants.PHASE_SUCCESSFUL, "conditions": conditions.set_condition(
            None, constants.COND_SUCCESSFUL, constants.TRUE, reason="Successful", message="done", now=other_ended)})
    await rotate(world)
    await world.engine().reconcile(w.NS, "rotate")
    req = await world.get_request("rotate")
    return str(tlschange.recorded_plan(req))


async def test_a_scan_from_before_the_last_request_does_not_choose_a_rescue(world: w.World) -> None:
    """A rescue just finished: its members may still be starting, and the scan that saw them expired predates it."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    chosen = await _down_with_an_expired_scan(world, scanned=now - datetime.timedelta(seconds=30),
                                              other_ended=now - datetime.timedelta(seconds=5))
    assert chosen == tls_plans.RotateVariant.HOT_RELOAD.value


async def test_a_scan_after_the_last_request_still_judges_members_that_do_not_answer(world: w.World) -> None:
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    chosen = await _down_with_an_expired_scan(world, scanned=now - datetime.timedelta(seconds=5),
                                              other_ended=now - datetime.timedelta(seconds=30))
    assert chosen != tls_plans.RotateVariant.HOT_RELOAD.value
