"""The Reconfigure request in the fast world (the in-process API server and the fake etcd).

We test these aspects: the request's flags over the Etcd's go into the template, the leader-aware roll restarts
every member once onto them, each member's own command line is read back (``VerifyConfiguration--<pod>``), and
``spec.configuration.tuning`` is written last; with ``restart: "false"`` nothing restarts, the template and the
Etcd carry the flags and the status says they are pending; flags that break etcd's rules fail the request at once.
"""

from __future__ import annotations

from opsmanager.api import conditions, constants
from tests.ops import world as w

PODS = ("db-0", "db-1", "db-2")


async def test_new_flags_are_rolled_out_and_read_back_from_every_member(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    await world.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, "db",
                           {"spec": {"configuration": {"tuning": {"snapshotCount": 5000}}}})
    await world.request("tune", "db", "Reconfigure",
                        configuration={"tuning": {"quotaBackendBytes": 4294967296, "heartbeatInterval": 200,
                                                  "electionTimeout": 2000}})
    req = await world.run("tune")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == [constants.COND_RUNNING, constants.COND_UPDATE_STATEFULSET, constants.COND_RESTART_PODS,
                               constants.COND_CONFIGURATION_VERIFIED, constants.COND_UPDATE_DATABASE,
                               constants.COND_SUCCESSFUL]
    for pod in PODS:
        flags = set(world.cluster.member(pod).flags)
        assert {"--quota-backend-bytes=4294967296", "--heartbeat-interval=200", "--election-timeout=2000",
                "--snapshot-count=5000"} <= flags, flags  # the Etcd's own flag kept
        assert conditions.is_true(req["status"]["conditions"],
                                  constants.per_pod_type(constants.STEP_VERIFY_CONFIGURATION, pod))
    assert sorted(p for p, _ in world.record.evictions) == list(PODS), "each member restarted once"
    assert world.record.restarted_while_leader == [] and world.cluster.elections == []
    tuning = (await world.get_etcd("db"))["spec"]["configuration"]["tuning"]
    assert tuning == {"quotaBackendBytes": 4294967296, "heartbeatInterval": 200, "electionTimeout": 2000,
                      "snapshotCount": 5000}
    assert not await world.is_paused("db")


async def test_restart_false_records_the_flags_as_pending_and_restarts_nothing(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None
    await world.request("later", "db", "Reconfigure",
                        configuration={"tuning": {"maxTxnOps": 256}, "restart": "false"})
    req = await world.run("later")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert world.record.evictions == []
    assert all("--max-txn-ops=256" not in world.cluster.member(p).flags for p in PODS)
    sts = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert sts is not None and "--max-txn-ops=256" in sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (await world.get_etcd("db"))["spec"]["configuration"]["tuning"] == {"maxTxnOps": 256}
    assert "next restart" in req["status"]["warnings"][0], req["status"]


async def test_flags_that_break_etcds_rules_fail_at_once_naming_the_field(world: w.World) -> None:
    await world.etcd("db")
    await world.request("bad", "db", "Reconfigure", configuration={"tuning": {"heartbeatInterval": 500}})
    req = await world.run("bad")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and "spec.configuration.tuning.electionTimeout" in failed["message"], failed
    assert "at least 5 times the heartbeat interval (500ms)" in failed["message"]
    assert world.record.evictions == []
