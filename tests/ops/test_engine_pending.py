"""Why a request waits, and the rescue that starts with ``apply: IfReady`` (fast world, see conftest.py).

We test these aspects:
- a rotate (``apply`` left at IfReady) on an Etcd that is NotReady only because its certificates expired starts as
  the rescue: ``Pending=False/StartedAsRescue`` naming what expired, a Warning Event, then the rescue plan;
- the operator's CA-rollover request and a hand-filed rotate on an expired-CA Etcd: the newer one supersedes the
  older (both can start), the cluster is rescued once, nothing stays Pending;
- a rotate on an Etcd NotReady for another reason waits: ``Pending=True/WaitingForReady`` with the Etcd's own
  words, once per reason as an Event; it starts (``Pending=False/Started``) once the Etcd is Ready;
- a request that cannot rescue (Restart) waits on an expired Etcd; an Etcd paused by hand holds every request
  (``EtcdPaused``); a request behind another one says which (``WaitingForRequest``).
"""

from __future__ import annotations

from typing import Any

from opsmanager import pki
from opsmanager.api import conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.ops.core import queue
from opsmanager.tls import rollover
from tests.ops import test_engine_rescue as rescue
from tests.ops import world as w


async def set_etcd_status(world: w.World, phase: str, message: str, *, paused_by: str | None = None) -> None:
    def mutate(st: dict[str, Any]) -> dict[str, Any]:
        conds = conditions.set_condition(st.get("conditions"), constants.COND_READY,
                                         constants.TRUE if phase == "Ready" else constants.FALSE,
                                         reason="ReadinessCheckFailed", message=f"phase {phase}: {message}")
        if paused_by is not None:
            conds = conditions.set_condition(conds, constants.COND_PAUSED, constants.TRUE, reason=paused_by,
                                             message="paused for a backup")
        return {**st, "phase": phase, "conditions": conds}
    await world.kube.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, "db", mutate)


def pending(req: dict[str, Any]) -> dict[str, Any]:
    cond = conditions.get_condition((req.get("status") or {}).get("conditions"), constants.COND_PENDING)
    assert cond is not None, req.get("status")
    return cond


async def events(world: w.World, name: str) -> list[tuple[str, str, str]]:
    return [(e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            for e in await world.kube.list("v1", "Event", w.NS)
            if (e.get("involvedObject") or {}).get("name") == name]


async def reconcile(world: w.World, name: str, times: int = 3) -> dict[str, Any]:
    for _ in range(times):
        await world.engine().reconcile(w.NS, name)
        await world.settle()
    return await world.get_request(name)


async def test_an_if_ready_rotate_on_an_etcd_not_ready_only_because_it_expired_starts_as_the_rescue(
        world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await rescue.expire_leaves(world)
    await set_etcd_status(world, "NotReady", "0/3 members healthy; db-0: TLSHandshakeFailed")
    await rescue.rotate(world)
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == ["Pending", *rescue.LEAVES_ORDER]
    cond = pending(req)
    assert (cond["status"], cond["reason"]) == (constants.FALSE, queue.REASON_STARTED_AS_RESCUE)
    assert "NotReady only because its certificates expired" in cond["message"]
    assert "db-0 client notAfter" in cond["message"]
    assert [e for e in await events(world, "rotate") if e[1] == constants.EVENT_STARTED_AS_RESCUE][0][0] == "Warning"
    assert await rescue.served_valid(world)


async def test_the_operators_rollover_and_a_hand_filed_rotate_on_an_expired_ca_rescue_once(world: w.World) -> None:
    new = await rescue.expired_ca_cluster(world)
    await set_etcd_status(world, "NotReady", "0/3 members healthy")
    obj = await world.get_etcd("db")
    info = pki.cert_info(new.cert_pem)
    body = rollover.request_body(etcd_api.Etcd.model_validate(obj),
                                 rollover.RenewedCA(new.cert_pem, info.fingerprint_sha256, info.subject, "test"))
    await world.kube.create(body)
    mine = body["metadata"]["name"]
    await world.engine().reconcile(w.NS, mine)  # the operator's request is seen first, then the user's arrives
    await rescue.rotate(world, "by-hand")

    async def provisioner(_round: int) -> None:
        """The provisioner's status pass (the world has none): Ready once the rescue is over and every member
        serves valid certificates. Whether the user's rotate was judged a rescue before that depends on when its
        turn came; either way it must not wait for good."""
        ours = await world.get_request(mine)
        if (ours.get("status") or {}).get("phase") in constants.TERMINAL_OPS_PHASES \
                and await rescue.served_valid(world):
            await set_etcd_status(world, "Ready", "3/3 members healthy")

    done = await world.run_all([mine, "by-hand"], between=provisioner)
    phases = sorted(r["status"]["phase"] for r in done.values())
    assert phases == [constants.PHASE_SKIPPED, constants.PHASE_SUCCESSFUL] or \
        phases == [constants.PHASE_SUCCESSFUL, constants.PHASE_SUCCESSFUL], phases
    assert world.record.creations == {p: 1 for p in rescue.operations.PODS}, "restarted more than once"
    assert await rescue.operations.served_as_in_secrets(world)


async def test_a_rotate_on_an_etcd_not_ready_for_another_reason_waits_saying_why_then_starts(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await set_etcd_status(world, "NotReady", "0/3 members healthy; db-0: no quorum")
    await rescue.rotate(world)
    req = await reconcile(world, "rotate")
    assert req["status"]["phase"] == constants.PHASE_PENDING
    cond = pending(req)
    assert (cond["status"], cond["reason"]) == (constants.TRUE, queue.REASON_WAITING_FOR_READY)
    assert "apply is IfReady and the Etcd is NotReady: 0/3 members healthy; db-0: no quorum" in cond["message"]
    assert "apply: Always" in cond["message"]
    waited = [e for e in await events(world, "rotate") if e[1] == queue.REASON_WAITING_FOR_READY]
    assert len(waited) == 1, waited  # once per reason, not once per pass
    await set_etcd_status(world, "Ready", "3/3 members healthy")
    req = await world.run("rotate")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    cond = pending(req)
    assert (cond["status"], cond["reason"], cond["message"]) == (constants.FALSE, queue.REASON_STARTED,
                                                                 "first in line")
    assert w.umbrella(req)[:2] == ["Pending", "Running"]


async def test_a_request_that_cannot_rescue_waits_on_an_expired_etcd(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await rescue.expire_leaves(world)
    await set_etcd_status(world, "NotReady", "0/3 members healthy")
    await world.request("restart", "db", "Restart")
    req = await reconcile(world, "restart")
    assert req["status"]["phase"] == constants.PHASE_PENDING
    assert pending(req)["reason"] == queue.REASON_WAITING_FOR_READY
    assert world.record.deletions == []


async def test_paused_by_hand_and_queued_behind_another_request_each_say_so(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await set_etcd_status(world, "Ready", "3/3 members healthy", paused_by="backup-tool")
    await world.request("first", "db", "Restart")
    await world.request("second", "db", "MoveLeader")
    first = await reconcile(world, "first", 1)
    assert pending(first)["reason"] == queue.REASON_ETCD_PAUSED and "backup-tool" in pending(first)["message"]
    second = await reconcile(world, "second", 1)
    assert pending(second)["reason"] == queue.REASON_WAITING_FOR_REQUEST
    assert "waiting for the older request first (Restart)" in pending(second)["message"]


async def test_expired_but_a_member_missing_is_not_only_expiry_and_the_rotate_waits(world: w.World) -> None:
    await world.etcd("db", tls_issuer="ca-a")
    await rescue.expire_leaves(world)
    await set_etcd_status(world, "NotReady", "0/3 members healthy; db-2: pod does not exist")
    await rescue.rotate(world)
    await world.kube.delete("v1", "Pod", w.NS, "db-2")  # gone until the next settle
    await world.engine().reconcile(w.NS, "rotate")
    req = await world.get_request("rotate")
    assert req["status"]["phase"] == constants.PHASE_PENDING, req["status"]
    assert pending(req)["reason"] == queue.REASON_WAITING_FOR_READY
    assert "db-2: pod does not exist" in pending(req)["message"]
