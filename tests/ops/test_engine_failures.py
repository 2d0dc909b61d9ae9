"""How requests fail, wait and give way — in the fast world, on the engine's fake clock.

We test these aspects:
- a step that makes no progress fails the request after ``spec.timeout``, naming the step; a member that never
  comes back fails it naming the member; either way the Etcd is resumed;
- two requests on one Etcd run one after the other (never two Progressing), a Pending request with a newer one
  of the same type is Skipped;
- a request deleted mid-flight releases its pause;
- a Certificate owned by someone else fails the request naming it, before the StatefulSet is touched.
"""

from __future__ import annotations

from typing import Any

from opsmanager.api import conditions, constants
from tests.ops import world as w

ADD_TLS = {"tls": {"issuerRef": {**w.ISSUER, "name": "ca-a"}}}


def failed_message(req: dict[str, Any]) -> str:
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    cond = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert cond is not None
    return str(cond["message"])


def advance_once_when_in_flight(world: w.World, request: str, condition: str, seconds: float) -> Any:
    """A ``between`` hook: the first time ``condition`` is in flight, move the engine's clock ``seconds`` on."""
    moved: list[bool] = []

    async def hook(_: int) -> None:
        if moved:
            return
        req = await world.get_request(request)
        if conditions.is_false((req.get("status") or {}).get("conditions"), condition):
            world.clock.advance(seconds)
            moved.append(True)

    return hook


async def test_a_step_without_progress_times_out_naming_the_step_and_resumes_the_etcd(world: w.World) -> None:
    await world.etcd("db")
    world.cert_manager_running = False  # the Certificates are never issued
    await world.request("add", "db", "ReconfigureTLS", timeout="2m", **ADD_TLS)
    req = await world.run("add", between=advance_once_when_in_flight(
        world, "add", constants.COND_CERTIFICATE_SYNCED, 121))
    message = failed_message(req)
    assert message.startswith("step CertificateSynced timed out after 120s"), message
    assert "Certificate db-server is not Ready" in message  # what it was waiting for
    assert not await world.is_paused("db")
    assert world.record.creations == {}  # no member was touched


async def test_a_step_within_its_timeout_does_not_fail(world: w.World) -> None:
    await world.etcd("db")
    await world.request("add", "db", "ReconfigureTLS", timeout="2m", **ADD_TLS)
    req = await world.run("add", between=advance_once_when_in_flight(
        world, "add", constants.COND_CERTIFICATE_SYNCED, 110))
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL


async def test_a_member_that_never_comes_back_times_out_naming_it(world: w.World) -> None:
    await world.etcd("db")
    world.held = {"db-1"}  # its pod is not recreated after the eviction
    await world.request("restart", "db", "Restart", timeout="2m")
    req = await world.run("restart", between=advance_once_when_in_flight(
        world, "restart", constants.per_pod_type(constants.STEP_CHECK_POD_READY, "db-1"), 121))
    message = failed_message(req)
    assert message.startswith("step RestartPods timed out after 120s at CheckPodReady of db-1"), message
    assert not await world.is_paused("db")
    assert world.record.creations == {}  # db-1 was the first and only member restarted
    assert world.cluster is not None and world.cluster.has_quorum()


async def test_two_requests_on_one_etcd_run_one_after_the_other(world: w.World) -> None:
    await world.etcd("db")
    await world.request("a-restart", "db", "Restart")
    await world.request("b-add-tls", "db", "ReconfigureTLS", **ADD_TLS)
    overlaps: list[int] = []

    async def never_both_progressing(i: int) -> None:
        phases = [((await world.get_request(n)).get("status") or {}).get("phase") for n in ("a-restart", "b-add-tls")]
        if phases.count(constants.PHASE_PROGRESSING) > 1:
            overlaps.append(i)

    reqs = await world.run_all(["a-restart", "b-add-tls"], between=never_both_progressing)
    assert [r["status"]["phase"] for r in reqs.values()] == [constants.PHASE_SUCCESSFUL] * 2
    assert overlaps == []
    first_done = conditions.get_condition(reqs["a-restart"]["status"]["conditions"], constants.COND_SUCCESSFUL)
    second_started = conditions.get_condition(reqs["b-add-tls"]["status"]["conditions"], constants.COND_RUNNING)
    assert first_done and second_started
    assert first_done["lastTransitionTime"] <= second_started["lastTransitionTime"]
    assert world.record.creations == {p: 3 for p in ("db-0", "db-1", "db-2")}  # 1 + 2 passes


async def test_an_older_pending_request_of_the_same_type_is_skipped(world: w.World) -> None:
    await world.etcd("db")
    await world.request("restart-a", "db", "Restart")
    await world.request("restart-b", "db", "Restart")  # same second: the name orders them
    reqs = await world.run_all(["restart-a", "restart-b"])
    assert reqs["restart-a"]["status"]["phase"] == constants.PHASE_SKIPPED
    skipped = conditions.get_condition(reqs["restart-a"]["status"]["conditions"], constants.COND_SKIPPED)
    assert skipped is not None and "restart-b" in skipped["message"]
    assert reqs["restart-b"]["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert world.record.creations == {p: 1 for p in ("db-0", "db-1", "db-2")}  # the cluster restarted once


async def test_a_request_deleted_mid_flight_releases_its_pause(world: w.World) -> None:
    await world.etcd("db")
    await world.request("restart", "db", "Restart")
    evicting = constants.per_pod_type(constants.STEP_EVICT_POD, "db-1")
    for _ in range(50):
        await world.engine().reconcile(w.NS, "restart")
        await world.settle()
        req = await world.get_request("restart")
        if conditions.get_condition(req["status"].get("conditions"), evicting):
            break
    assert await world.is_paused("db")
    await world.kube.delete(constants.OPS_API_VERSION, constants.OPS_KIND, w.NS, "restart")
    outcome = await world.engine().reconcile(w.NS, "restart")
    assert outcome.finished
    assert not await world.is_paused("db")


async def test_a_foreign_certificate_fails_the_request_naming_it_and_leaves_the_statefulset(world: w.World) -> None:
    await world.etcd("db")
    owner = await world.kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "someone-else", "namespace": w.NS}})
    await world.kube.create({
        "apiVersion": w.CERT_API, "kind": "Certificate",
        "metadata": {"name": "db-server", "namespace": w.NS, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "someone-else", "uid": owner["metadata"]["uid"],
            "controller": True}]},
        "spec": {"secretName": "someone-elses-secret", "issuerRef": {"name": "ca-a", "kind": "Issuer"}}})
    sts_before = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    await world.request("add", "db", "ReconfigureTLS", **ADD_TLS)
    req = await world.run("add")
    message = failed_message(req)
    assert "Certificate" in message and "db-server" in message and "someone-else" in message, message
    sts_after = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert sts_before is not None and sts_after is not None
    assert sts_after["metadata"]["resourceVersion"] == sts_before["metadata"]["resourceVersion"]
    assert not await world.is_paused("db")
    assert world.record.creations == {}
