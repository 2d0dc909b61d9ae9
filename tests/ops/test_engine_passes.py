"""What a pass of the engine costs (issue 14, scale): the work a reconcile skips when nothing it would do can have
changed — and that it still does it when something did.

- A pass that waits for a restarted member's pod to come back decides from the watch cache alone: no etcd client.
- With watch wakeups, a wait for something the caches see asks only for a long bound (the event wakes the pass);
  without them, the step's own short delay, as before.
- ``OpsContext.db`` / ``spec`` are parsed once per object, and again when the object is replaced.
- ``apply_statefulset`` renders and compares once per (inputs, live resourceVersion): a second apply of the same
  render against the same live object renders nothing; an edit of the live object, or a new restart token, is
  rendered and applied again.
- The engine's etcd clients of an Etcd are closed when its request ends; other users' stay.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render, statefulset
from opsmanager.etcd import access, pool
from opsmanager.ops import context, engine
from tests.ops import world as w


def _conditions(req: dict[str, Any]) -> list[dict[str, Any]]:
    return list((req.get("status") or {}).get("conditions") or [])


async def test_a_pass_waiting_for_a_recreated_pod_asks_etcd_nothing(world: w.World) -> None:
    await world.etcd("db")
    await world.request("r", "db", constants.OPS_TYPE_RESTART)
    world.held = set(naming.pods("db", 3))  # the kubelet recreates no pod: the first one evicted stays away
    made: list[int] = []
    real_admin = world.admin

    def counting(endpoints: Any, tls: access.TLSIdentity | None) -> w.CrashingAdmin:
        made.append(1)
        return real_admin(endpoints, tls)

    world.admin = counting  # type: ignore[method-assign]
    evicted: list[str] = []
    for _ in range(60):
        await world.engine().reconcile(w.NS, "r")
        await world.settle()
        evicted = [c["type"] for c in _conditions(await world.get_request("r"))
                   if c["type"].startswith(constants.STEP_EVICT_POD) and c["status"] == constants.TRUE]
        if evicted:
            break
    assert evicted, "no member was evicted"
    assert made, "the passes before the eviction asked etcd (leader, health)"
    made.clear()
    outcome = await world.engine().reconcile(w.NS, "r")
    assert made == [], "a pass that only waits for the pod leased an etcd client"
    assert not outcome.finished and outcome.delay == 0.3, "without watch wakeups the short poll stays"
    restart = next(c for c in _conditions(await world.get_request("r")) if c["type"] == constants.COND_RESTART_PODS)
    pod = evicted[0].split(constants.PER_POD_SEPARATOR, 1)[1]
    assert restart["message"] == f"restarted {pod}; waiting for it to be recreated and Ready"
    world.held.clear()  # the pod comes back: the roll goes on (etcd asked again) and ends Successful
    done = await world.run("r")
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert made, "the post-restart health checks asked etcd"


def test_a_watched_wait_asks_only_for_the_long_bound() -> None:
    ctx = context.OpsContext(kube=None, request={"metadata": {"name": "r", "namespace": "ns"}},  # type: ignore[arg-type]
                             db_obj={"metadata": {"name": "db"}}, plan=None, now=None)  # type: ignore[arg-type]
    assert ctx.until_watched(0.3) == 0.3
    ctx.watched = True
    assert ctx.until_watched(0.3) == context.WATCHED_BOUND > 0.3


async def test_the_engine_is_watched_only_with_cache_wakeups(world: w.World, tmp_path: pathlib.Path) -> None:
    assert not world.engine().watched  # a plain client: every wait lasts its delay
    cached = kube.CachedKube.from_kubeconfig(world.server.write_kubeconfig(tmp_path / "cached-kubeconfig"))
    assert isinstance(cached, kube.CachedKube)
    try:
        assert not engine.Engine(cached).watched
        cached.use_wakeups(naming.owner_of)
        assert engine.Engine(cached).watched
    finally:
        await cached.close()


async def test_db_and_spec_are_parsed_once_per_object(world: w.World) -> None:
    obj = await world.etcd("db", tls_issuer="ca-a")
    req = await world.request("r", "db", constants.OPS_TYPE_RESTART)
    ctx = context.OpsContext(world.kube, req, obj, None, None, tls_before=obj["spec"]["tls"])  # type: ignore[arg-type]
    assert ctx.db is ctx.db and ctx.spec is ctx.spec and ctx.db.spec.tls is not None
    first_db, first_spec = ctx.db, ctx.spec
    ctx.tls_before = None  # the request started before TLS: db renders without it
    assert ctx.db is not first_db and ctx.db.spec.tls is None
    ctx.db_obj = {**obj, "spec": {**obj["spec"], "replicas": 5}}  # a newer Etcd
    assert ctx.db.spec.replicas == 5
    ctx.request = {**req, "spec": {**req["spec"], "timeout": "7m"}}
    assert ctx.spec is not first_spec and ctx.spec.timeout == "7m"


async def test_apply_statefulset_renders_again_only_when_an_input_or_the_live_object_changed(
        world: w.World, monkeypatch: Any) -> None:
    await world.etcd("db")
    db = etcd_api.Etcd.model_validate(await world.get_etcd("db"))
    renders: list[int] = []
    real = render.render_statefulset

    def counting(*args: Any, **kwargs: Any) -> Any:
        renders.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(render, "render_statefulset", counting)
    statefulset._IN_SYNC.clear()
    live = await statefulset.apply_statefulset(world.kube, db)
    again = await statefulset.apply_statefulset(world.kube, db)
    assert len(renders) == 1, "the same render against the same live object was rendered twice"
    assert again["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]

    # Someone edits the live StatefulSet: a new resourceVersion, so it is rendered and the drift reverted.
    edited = copy.deepcopy(again)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "example.invalid/etcd:edited"
    await world.kube.replace(edited)
    fixed = await statefulset.apply_statefulset(world.kube, db)
    assert len(renders) == 2
    assert fixed["spec"]["template"]["spec"]["containers"][0]["image"] == f"quay.io/coreos/etcd:v{db.spec.version}"

    # A new restart token is a new input: rendered, and written (a new revision for the engine's pass).
    bumped = await statefulset.apply_statefulset(world.kube, db, restarted_at="r/RestartPods")
    assert len(renders) == 3
    assert statefulset.live_restarted_at(bumped) == "r/RestartPods"
    await statefulset.apply_statefulset(world.kube, db, restarted_at="r/RestartPods")
    assert len(renders) == 4, "the write's answer is not remembered as in sync (only a compare that found it so is)"
    await statefulset.apply_statefulset(world.kube, db, restarted_at="r/RestartPods")
    assert len(renders) == 4


async def test_forget_closes_only_the_named_users_clients() -> None:
    p = pool.ClientPool()
    eps = [access.Endpoint(name="db-0", host="10.0.0.1", schemes=("http",))]
    engine_client = await p.lease("ns", "db", eps, None, timeout=2.0, user=context.ENGINE_USER)
    engine_client.transport.conn(engine_client.endpoint("db-0"), "http")
    status_client = await p.lease("ns", "db", eps, None, timeout=2.0, user="status")
    await p.forget("ns", "db", user=context.ENGINE_USER)
    assert len(p) == 1 and engine_client.transport._conns == {}
    assert await p.lease("ns", "db", eps, None, timeout=2.0, user="status") is status_client
    await p.close()
