"""RecoverFromQuorumLoss end to end on the real control plane.

What is claimed, measured from outside: two of three members stopped and their data deleted (their pods crash on
start) make the Etcd report ``QuorumLost=True`` naming the survivor with the highest committed index; a request
confirming another member is refused at admission naming the right one; the request confirming the survivor
restarts it with ``--force-new-cluster`` and re-adds the others as learners, promoted; at the end every write
acknowledged before the loss reads back, HashKV agrees on all three members, new writes go through, and no
MoveLeader was needed (the survivor led throughout). The same with etcd's authentication on (a login needs a
quorum: the operator must see and recover the survivor all the same).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from typing import Any

import pytest
import pytest_asyncio

from e2e import databench, scenario, writer
from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.etcd import client as etcd_client

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LOSS_AFTER = 5  # seconds without a quorum before QuorumLost turns True (the default is 60)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("quorum"),
                                 operator_args=["--quorum-loss-after", str(LOSS_AFTER)]) as s:
        yield s


async def break_member(sc: scenario.Scenario, db: str, pod: str) -> None:
    """Stop ``pod``'s etcd for good: its data dir replaced by a file (etcd exits at start), then the process
    killed — the kubelet restarts it into a crash loop."""
    pvc = await sc.k.get("v1", "PersistentVolumeClaim", sc.namespace, f"{naming.DATA_VOLUME}-{pod}")
    assert pvc is not None
    data = sc.sandbox.claim_dir(pvc) / "data"
    shutil.rmtree(data)
    data.write_text("this member's data is gone\n")
    pid = await sc.sandbox.container_pid(sc.namespace, pod, naming.CONTAINER_NAME)
    if pid:
        os.kill(pid, signal.SIGKILL)


async def quorum_lost(sc: scenario.Scenario, db: str) -> dict[str, Any] | None:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db) or {}
    status = obj.get("status") or {}
    return status if conditions.is_true(status.get("conditions"), constants.COND_QUORUM_LOST) else None


@pytest.mark.parametrize("with_auth", [False, True], ids=["open", "authentication"])
async def test_two_of_three_lost_recovered_from_the_survivor(sc: scenario.Scenario, with_auth: bool) -> None:
    db = "quorum-auth" if with_auth else "quorum"
    login: writer.SecretLogin | None = None
    if with_auth:
        await sc.fresh_etcd(db, extra={"authSecret": {"name": f"{db}-auth"}})

        async def enabled() -> bool:
            obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
            return bool(((obj or {}).get("status") or {}).get("authEnabled"))
        await sc.wait_for("authentication on", enabled, timeout=60)
        login = writer.SecretLogin(sc.k, sc.namespace, f"{db}-auth")
    else:
        await sc.fresh_etcd(db)
    async with sc.live(db, login=login) as (w, _mon):
        await w.wait_ok(100, timeout=60)
    acknowledged = w.acknowledged
    assert len(acknowledged) >= 100
    checked = await sc.consistency(db, w)
    assert not checked.problems(), checked.problems()

    for pod in (f"{db}-1", f"{db}-2"):
        await break_member(sc, db, pod)
    status = await sc.wait_for("QuorumLost=True", lambda: quorum_lost(sc, db), timeout=120, interval=1.0)
    survivor = status["quorumLoss"]["survivor"]
    assert survivor == f"{db}-0"
    message = conditions.get_condition(status["conditions"], constants.COND_QUORUM_LOST)["message"]
    assert f"confirmMember: {survivor}" in message, message

    # a wrong confirmation is refused at admission, naming the member that would be kept
    with pytest.raises(kube.KubeError) as refused:
        await sc.submit(f"{db}-wrong", db, constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS,
                        recoverFromQuorumLoss={"confirmMember": f"{db}-2"}, timeout="5m")
    assert f"set confirmMember: {survivor}" in str(refused.value), str(refused.value)

    started = time.monotonic()
    await sc.submit(f"{db}-recover", db, constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS,
                    recoverFromQuorumLoss={"confirmMember": survivor}, timeout="5m")
    req = await sc.watch_request(f"{db}-recover", timeout=180)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    took = time.monotonic() - started
    assert [c["type"] for c in req["status"]["conditions"] if "--" not in c["type"] and c["type"] != "Pending"] == [
        "Running", "QuorumLossConfirmed", "SurvivorForcedNewCluster", "MembersRejoined", "UpdateDatabase",
        "Successful"]
    assert await sc.leader_moves(f"{db}-recover") == 0
    await sc.wait_ready(db, timeout=120)

    # every write acknowledged before the loss is there; the three members agree; new writes go through
    after = writer.Writer(writer.targets_for(await sc.endpoints(db), identities=[None]), prefix=w.prefix + b"-after",
                          login=login)
    async with after:
        await after.wait_ok(20, timeout=30)
    for ep in await sc.endpoints(db):  # the two rejoined members are new pods: on real nodes, new addresses
        w.move_endpoint(ep.name, ep.host)
    read = await w.read_back(check=False)
    assert read.ok and read.stored >= len(acknowledged), read.describe()
    again = await sc.consistency(db, after)
    assert not again.problems(), again.problems()
    async with await databench.client_for(sc, db, await login.read() if login is not None else None) as c:
        listed = await c.members()
        views = await c.statuses(timeout=2.0)
    assert sorted(m.name for m in listed) == naming.pods(db, 3) and not any(m.is_learner for m in listed)
    leaders = {v.leader_id for v in views.values() if isinstance(v, etcd_client.MemberStatus)}
    assert len(leaders) == 1
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert obj is not None and not conditions.is_true(obj["status"].get("conditions"), constants.COND_QUORUM_LOST)
    sc.print(f"    recovered in {took:.1f}s")
