"""The VerticalScaling request in the fast world (the in-process API server and the fake etcd).

We test these aspects: ``Restart`` mode puts the new resources into the template and rolls every member once onto
them; ``InPlace`` resizes each running pod through ``pods/resize``, one at a time, restarting none, each member's
``RequestInPlaceResize--<pod>`` and ``CheckInPlaceResizeSettled--<pod>`` True only once the kubelet reports the
new resources; both write ``spec.podTemplate.spec.resources`` last; a resize the kubelet calls Infeasible fails the
request naming the member.
"""

from __future__ import annotations

from opsmanager.api import conditions, constants
from tests.ops import world as w

PODS = ("db-0", "db-1", "db-2")
RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}


def etcd_resources(obj: w.Obj) -> w.Obj:
    return dict(obj["spec"]["containers"][0].get("resources") or {})


async def test_restart_mode_rolls_every_member_once_onto_the_new_resources(world: w.World) -> None:
    await world.etcd("db")
    await world.request("bigger", "db", "VerticalScaling", verticalScaling={"etcd": {"resources": RESOURCES}})
    req = await world.run("bigger")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == [constants.COND_RUNNING, constants.COND_UPDATE_STATEFULSET, constants.COND_RESTART_PODS,
                               constants.COND_UPDATE_DATABASE, constants.COND_SUCCESSFUL]
    assert sorted(p for p, _ in world.record.evictions) == list(PODS)
    for pod in await world.kube.list("v1", "Pod", w.NS):
        assert etcd_resources(pod) == RESOURCES
    db = await world.get_etcd("db")
    assert db["spec"]["podTemplate"]["spec"]["resources"] == RESOURCES


MORE = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


async def burstable(world: w.World) -> None:
    """Members with resources (a pod's QoS class may not change in place: BestEffort cannot be resized)."""
    await world.etcd("db")
    await world.request("first", "db", "VerticalScaling", verticalScaling={"etcd": {"resources": RESOURCES}})
    assert (await world.run("first"))["status"]["phase"] == constants.PHASE_SUCCESSFUL
    world.record = w.Record()


async def test_in_place_resizes_every_pod_restarting_none(world: w.World) -> None:
    await burstable(world)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await world.kube.list("v1", "Pod", w.NS)}
    await world.request("live", "db", "VerticalScaling",
                        verticalScaling={"etcd": {"resources": MORE}, "mode": "InPlace"})
    req = await world.run("live")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == [constants.COND_RUNNING, constants.COND_UPDATE_STATEFULSET,
                               constants.COND_IN_PLACE_RESIZED, constants.COND_UPDATE_DATABASE,
                               constants.COND_SUCCESSFUL]
    assert world.record.evictions == [] and world.record.resized == list(PODS)
    pods = {p["metadata"]["name"]: p for p in await world.kube.list("v1", "Pod", w.NS)}
    assert {n: p["metadata"]["uid"] for n, p in pods.items()} == uids, "no pod was recreated"
    for name, pod in pods.items():
        assert etcd_resources(pod) == MORE
        for step in (constants.STEP_REQUEST_IN_PLACE_RESIZE, constants.STEP_CHECK_IN_PLACE_RESIZE_SETTLED):
            assert conditions.is_true(req["status"]["conditions"], constants.per_pod_type(step, name))
    sts = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert sts is not None and sts["spec"]["template"]["spec"]["containers"][0]["resources"] == MORE
    assert (await world.get_etcd("db"))["spec"]["podTemplate"]["spec"]["resources"] == MORE


async def test_a_resize_that_would_change_the_qos_class_fails_saying_to_restart(world: w.World) -> None:
    await world.etcd("db")  # BestEffort members
    await world.request("live", "db", "VerticalScaling",
                        verticalScaling={"etcd": {"resources": RESOURCES}, "mode": "InPlace"})
    req = await world.run("live")
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and "refused to resize db-0" in failed["message"], failed
    assert "QOS Class may not change" in failed["message"] and "mode: Restart" in failed["message"]
    assert world.record.evictions == [] and not await world.is_paused("db")


async def test_an_infeasible_resize_fails_the_request_naming_the_member(world: w.World) -> None:
    await burstable(world)
    world.resize_infeasible.add("db-1")
    await world.request("huge", "db", "VerticalScaling",
                        verticalScaling={"etcd": {"resources": MORE}, "mode": "InPlace"})
    req = await world.run("huge")
    assert req["status"]["phase"] == constants.PHASE_FAILED, req["status"]
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and "cannot resize db-1" in failed["message"], failed
    assert "enough capacity" in failed["message"]
    assert world.record.resized == ["db-0"] and not await world.is_paused("db")


async def test_a_limit_the_new_resources_leave_out_is_removed_not_kept(world: w.World) -> None:
    await burstable(world)  # requests and limits
    only_requests = {"requests": {"cpu": "300m", "memory": "300Mi"}}
    await world.request("live", "db", "VerticalScaling",
                        verticalScaling={"etcd": {"resources": only_requests}, "mode": "InPlace"})
    req = await world.run("live")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    for pod in await world.kube.list("v1", "Pod", w.NS):
        assert etcd_resources(pod) == only_requests
