"""Zero-restart rotation in the fast world: the re-issued leaves are hot-reloaded, so nothing is restarted — unless
a member still serves its previous leaf after the delivery bound, and then that member alone, leader-aware.

The world's kubelet delivers a changed Secret to every running member one settle later, except to a pod annotated
``sandbox.opsmanager.dev/hold-volume-refresh: "true"`` (the sandbox kubelet's test-only knob), whose member keeps
serving the old serial. Between reconciles the tests move the engine's clock forward (``STEP`` seconds), so the
delivery bound (``World.delivery_timeout``, the engine's ``--certificate-delivery-timeout``) is crossed in a few
dozen reconciles.
"""

from __future__ import annotations

import base64
import json

import pytest

from opsmanager import pki
from opsmanager.api import conditions, constants, tlschange
from opsmanager.ops.steps import issue
from tests.ops import test_engine_operations as operations
from tests.ops import test_engine_resume as resume
from tests.ops import world as w

ROTATE = next(op for op in operations.OPERATIONS if op.name == "rotate")
ORDER_WITH_RESTART = ["Running", "IssueCertificatesSucceeded", "CertificateSynced", "ServedCertificatesVerified",
                      "RestartPods", "UpdateDatabase", "Successful"]
STEP = 5.0  # seconds of the engine's clock between two reconciles


async def tick(world: w.World) -> None:
    world.clock.advance(STEP)


async def secret_serials(world: w.World) -> dict[str, int]:
    out = {}
    for port, alias in constants.PORT_ALIAS.items():
        secret = await world.kube.get("v1", "Secret", w.NS, f"db-{alias}-cert")
        assert secret is not None
        out[port] = pki.cert_info(base64.b64decode(secret["data"]["tls.crt"])).serial
    return out


async def served_everywhere(world: w.World) -> bool:
    assert world.cluster is not None
    want = await secret_serials(world)
    return all(m.served[port].serial == serial for m in world.cluster.members.values()
               for port, serial in want.items())


async def rotate(world: w.World, *, stale: str | None = None, crash_points: set[str] | None = None) -> dict:
    await world.etcd("db", tls_issuer="ca-a")
    before = await secret_serials(world)
    if stale is not None:
        await world.hold_volume_refresh(stale)
    world.crash_points = crash_points or set()
    await world.request("rotate", "db", "ReconfigureTLS", tls={"rotateCertificates": True})
    req = await world.run("rotate", between=lambda _i: tick(world))
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    after = await secret_serials(world)
    assert all(after[p] != before[p] for p in before), "every leaf was re-issued"
    assert await served_everywhere(world), "every member serves the new leaf on the client and the peer port"
    assert not await world.is_paused("db")
    assert world.cluster is not None and world.cluster.open_admins == 0
    return req


def conds(req: dict) -> list[dict]:
    return list(req["status"]["conditions"])


async def test_normal_rotate_restarts_nothing_and_verifies_both_ports_of_every_member(world: w.World) -> None:
    req = await rotate(world)
    assert w.umbrella(req) == ROTATE.order  # no RestartPods, no UpdateStatefulSet
    assert world.record.creations == {} and world.record.evictions == []
    assert world.cluster is not None and world.cluster.history == []  # no MoveLeader, no election
    for pod in operations.PODS:
        assert conditions.is_true(conds(req), constants.per_pod_type(constants.STEP_VERIFY_SERVED_CERTIFICATE, pod))
        assert conditions.get_condition(conds(req), constants.per_pod_type(constants.STEP_EVICT_POD, pod)) is None
    # The baseline of each Certificate is the request's own record; no Certificate is annotated as memory.
    certs = await world.kube.list(w.CERT_API, "Certificate", w.NS)
    assert req["status"]["certificateRevisions"] == {c["metadata"]["name"]: int(c["status"]["revision"]) - 1 for c in certs}
    assert not any(issue.ANNOTATION_ROTATION in (c["metadata"].get("annotations") or {}) for c in certs)


async def test_a_member_still_serving_the_old_leaf_after_the_bound_is_restarted_alone(world: w.World) -> None:
    req = await rotate(world, stale="db-1")
    assert w.umbrella(req) == ORDER_WITH_RESTART
    assert world.record.creations == {"db-1": 1}, "only the stale member was restarted, once"
    [(pod, offset)] = world.record.evictions
    assert pod == "db-1" and offset >= world.delivery_timeout - STEP, "not before the delivery bound"
    assert world.cluster is not None and world.cluster.history == []  # a follower: no leader change at all
    restart = conditions.get_condition(conds(req), constants.COND_RESTART_PODS)
    assert restart is not None and restart["status"] == constants.TRUE
    assert restart["message"].startswith("Restarted 1 of 3 members that still served the previous certificate ")
    assert restart["message"].endswith("after it was issued: db-1")
    for check in (constants.STEP_EVICT_POD, constants.STEP_CHECK_POD_READY, constants.STEP_ETCD_CLUSTER_HEALTHY,
                  constants.STEP_VERIFY_SERVED_CERTIFICATE):
        assert conditions.is_true(conds(req), constants.per_pod_type(check, "db-1")), check


async def test_a_shorter_delivery_bound_restarts_sooner(world: w.World) -> None:
    world.delivery_timeout = 15.0
    await rotate(world, stale="db-2")
    [(pod, offset)] = world.record.evictions
    assert pod == "db-2" and world.delivery_timeout - STEP <= offset < 60


async def test_a_stale_leader_hands_leadership_over_before_its_restart(world: w.World) -> None:
    # (the leader of a fresh world is db-0)
    req = await rotate(world, stale="db-0")
    assert w.umbrella(req) == ORDER_WITH_RESTART
    assert world.record.creations == {"db-0": 1}
    assert world.record.restarted_while_leader == []
    assert world.cluster is not None
    assert [c.cause for c in world.cluster.history] == ["move"] and world.cluster.elections == []
    assert world.cluster.calls[0].startswith("move_leader ")
    assert conditions.is_true(conds(req), constants.per_pod_type(constants.STEP_MOVE_LEADER, "db-0"))


def _crash_points() -> set[str]:
    """Every step and per-member condition (in flight, done), before and after every eviction and MoveLeader."""
    return resume.crash_points(operations.Operation("rotate", True, "ReconfigureTLS", {}, ORDER_WITH_RESTART, 1,
                                                    True))


@pytest.mark.slow  # a crash at every point of a run: seconds, kept out of `make test-fast`
@pytest.mark.parametrize("stale", ["db-1", "db-0"])
async def test_killed_anywhere_during_the_restart_of_a_stale_member_it_restarts_it_once(
        world: w.World, stale: str) -> None:
    req = await rotate(world, stale=stale, crash_points=_crash_points())
    assert w.umbrella(req) == ORDER_WITH_RESTART
    assert world.record.creations == {stale: 1}, "no double restart"
    assert world.record.restarted_while_leader == []
    assert world.cluster is not None and world.cluster.elections == []
    crashed = set(world.crashes)
    assert {f"before evict {stale}", f"after evict {stale}", f"in-flight EvictPod--{stale}",
            "in-flight RestartPods", "done RestartPods",
            "in-flight ServedCertificatesVerified", "done ServedCertificatesVerified"} <= crashed
    if stale == "db-0":
        assert any(p.startswith("after move_leader") for p in crashed)
        assert [c.cause for c in world.cluster.history] == ["move"]


async def test_a_rotation_whose_issuer_changed_ca_releases_nothing_and_times_out(world: w.World) -> None:
    """The CA behind the issuer changed before the rotation: the re-issued sources chain to a CA no member has
    loaded, so ``CertificateSynced`` holds them back (the gate) — nothing reaches a member — until ``spec.timeout``."""
    await world.etcd("db", tls_issuer="ca-a")
    before = await secret_serials(world)
    world.cas["ca-a"] = pki.make_ca("ca-a-renewed")  # the Issuer's CA Secret replaced
    await world.request("rotate", "db", "ReconfigureTLS", tls={"rotateCertificates": True}, timeout="60s")
    req = await world.run("rotate", between=lambda _i: tick(world))
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    synced = conditions.get_condition(req["status"]["conditions"], constants.COND_CERTIFICATE_SYNCED)
    assert synced is not None and synced["status"] == constants.FALSE
    assert "not every member has loaded" in synced["message"] and "db-server-issued" in synced["message"]
    assert await secret_serials(world) == before, "a leaf from an unloaded CA was mounted"
    assert await served_everywhere(world)
    assert world.record.creations == {}, "nothing restarted"


async def test_killed_between_the_baseline_record_and_the_issuing_trigger_it_triggers_again(world: w.World) -> None:
    """The operator died after recording each Certificate's baseline revision in the request's status but before
    setting ``Issuing=True``: the resumed step sees a recorded Certificate at its baseline that is not issuing, and
    triggers it again (once: the revision it waits to pass is the recorded one)."""
    await world.etcd("db", tls_issuer="ca-a")
    await world.request("rotate", "db", "ReconfigureTLS", tls={"rotateCertificates": True})
    baselines = {cert["metadata"]["name"]: int((cert.get("status") or {}).get("revision") or 0)
                 for cert in await world.kube.list(w.CERT_API, "Certificate", w.NS)}
    await world.kube.patch(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "rotate",
                           {"status": {"certificateRevisions": baselines}}, subresource="status")
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert req["status"]["certificateRevisions"] == baselines
    for cert in await world.kube.list(w.CERT_API, "Certificate", w.NS):
        assert int(cert["status"]["revision"]) == baselines[cert["metadata"]["name"]] + 1, "issued exactly once"
        assert issue.ANNOTATION_ROTATION not in (cert["metadata"].get("annotations") or {})
    assert world.record.creations == {}


async def test_a_certificate_an_older_operator_marked_for_the_rotation_is_understood(world: w.World) -> None:
    """Legacy: an older operator kept the baseline on the Certificate (``ops.opsmanager.dev/rotation:
    <request uid>/<revision>``) and died before setting ``Issuing=True``: the step reads the mark as the baseline,
    triggers the issuance once, and records nothing new for it."""
    await world.etcd("db", tls_issuer="ca-a")
    created = await world.request("rotate", "db", "ReconfigureTLS", tls={"rotateCertificates": True})
    uid = created["metadata"]["uid"]
    baselines = {}
    for cert in await world.kube.list(w.CERT_API, "Certificate", w.NS):
        revision = baselines[cert["metadata"]["name"]] = int((cert.get("status") or {}).get("revision") or 0)
        await world.kube.patch(w.CERT_API, "Certificate", w.NS, cert["metadata"]["name"],
                               {"metadata": {"annotations": {issue.ANNOTATION_ROTATION: f"{uid}/{revision}"}}})
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert "certificateRevisions" not in req["status"], "the older operator's marks are read where they are"
    for cert in await world.kube.list(w.CERT_API, "Certificate", w.NS):
        assert int(cert["status"]["revision"]) == baselines[cert["metadata"]["name"]] + 1, "issued exactly once"
    assert world.record.creations == {}


async def test_a_rotate_an_older_engine_started_finishes_from_its_annotations(world: w.World) -> None:
    # An older engine kept its record as annotations on the request: the TLS it started from, the plan, and a
    # member it had already evicted (by UID). The engine reads them and finishes, recording nothing new in status.
    await world.etcd("db", tls_issuer="ca-a")
    db = await world.get_etcd("db")
    await world.hold_volume_refresh("db-1")
    created = await world.request("rotate", "db", "ReconfigureTLS", tls={"rotateCertificates": True})
    await world.kube.patch(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "rotate", {"metadata": {
        "annotations": {constants.LEGACY_TLS_BEFORE: json.dumps(db["spec"]["tls"], sort_keys=True),
                        constants.LEGACY_PLAN: "Rotate",
                        constants.LEGACY_STALE_MEMBERS: json.dumps({"db-1": {"uid": "gone-before", "after": 7}})}}})
    assert created["metadata"]["name"] == "rotate"
    req = await world.run("rotate", between=lambda _i: tick(world))
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert "origin" not in req["status"], "an older engine's record is kept as it is"
    assert tlschange.recorded_plan(req) == "Rotate"
    # The older record is read (converted to status.restarts); db-1, still stale after the bound, is restarted and
    # its entry replaced by the UID of the pod this engine evicted.
    stale = req["status"]["restarts"]["staleMembers"]
    assert set(stale) == {"db-1"} and stale["db-1"]["uid"] != "gone-before"


async def test_an_older_engines_tls_record_without_a_plan_carries_over_into_status(world: w.World) -> None:
    # The older engine recorded where the request started (tls-before) and stopped before it chose the plan: the
    # engine chooses it now and records it with that TLS, which a later pass must still read.
    await world.etcd("db", tls_issuer="ca-a")
    db = await world.get_etcd("db")
    await world.request("rotate", "db", "ReconfigureTLS", tls={"rotateCertificates": True})
    await world.kube.patch(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "rotate", {"metadata": {
        "annotations": {constants.LEGACY_TLS_BEFORE: json.dumps(db["spec"]["tls"], sort_keys=True)}}})
    req = await world.run("rotate", between=lambda _i: tick(world))
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert tlschange.recorded_tls(req) == (True, db["spec"]["tls"])
    assert tlschange.recorded_plan(req) == "Rotate"
