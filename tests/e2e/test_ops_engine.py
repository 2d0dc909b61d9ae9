"""The ops engine end to end, on the sandbox with real etcd (issue 6's "done when").

One sandbox and one operator for the module; each test makes its own Etcd. What is claimed here is measured with
the live writer (put every 20 ms through every member, holding a client identity from each CA) and the leader
monitor: 0 failed writes and 0 elections that a MoveLeader did not cause; and two watchers, one over gRPC and one
through etcd's JSON gateway, lose, repeat and reorder no event. After the add TLS, the operator's
``/metrics`` and the request's Events say what it did (issue 15 part 5): one request Successful, six member
restarts, two leader moves (the elections the monitor saw), one observation per step; each step announced once
(an Event of its own, or named in the one Event of the steps a write records), one Event per restart and move.
The four operations run on the tier's etcd (3.5.35 on the real control plane) and the 3.7 build (the oldest and the
newest supported minor), each member reporting the version its Etcd asks for. Last, the whole module's traffic is scanned for secrets (issue 15
part 5): no private key, token or Secret value in any log, Event, status, annotation or metric.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from e2e import leaks, scenario
from opsmanager import pki
from opsmanager.api import conditions, constants
from opsmanager.ops.core import queue
from opsmanager_sandbox import realcp
from tests import operator_metrics
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TLS_ORDER = {
    "add-tls": ["Running", "CertificateSynced", "TLSListenersAdded", "PeerURLsUpdated", "UpdateStatefulSet",
                "RestartPods", "UpdateDatabase", "Successful"],
    "rotate": ["Running", "IssueCertificatesSucceeded", "CertificateSynced", "ServedCertificatesVerified",
               "UpdateDatabase", "Successful"],  # zero-restart: tests/e2e/test_zero_restart_rotate.py
    "change-issuer": ["Running", "TrustBundleWidened", "CertificateSynced", "UpdateStatefulSet", "RestartPods",
                      "TrustBundleNarrowed", "UpdateDatabase", "Successful"],
    "remove-tls": ["Running", "PlaintextListenersAdded", "PeerURLsUpdated", "UpdateStatefulSet", "RestartPods",
                   "UpdateDatabase", "Successful"],
}
ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer"}


@pytest.fixture(scope="module")
def seen() -> dict[str, bytes]:
    """Every secret value this module's sandbox held (by label), for the leak scan at its end: the CA keys, the
    kubeconfigs' credentials, and every Secret collected before and after each TLS operation (removing TLS deletes
    the Etcd's)."""
    return {}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory, seen: dict[str, bytes]) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("ops-engine"),
                                 # node agent still: on a real node, under load, the issuer change saw one raft
                                 # election more than the engine's MoveLeaders (two runs of three), and its write
                                 # stall reached 2.6 s on 3.6; not yet explained (the members' logs show a restarted
                                 # follower timing out on the leader while it was handing leadership over)
                                 nodes=0,
                                 # beside the gRPC watcher, one through etcd's JSON gateway, as HTTP clients watch:
                                 # every operation's watch check covers both ways
                                 gateway_watchers=1) as s:
        for name in ("ca-a", "ca-b"):
            seen[f"CA key of issuer {name}"] = (await s.ca_issuer(name)).key_pem
        for label, path in (("sandbox kubeconfig", s.sandbox.kubeconfig),
                            ("operator kubeconfig", s.sandbox.operator_kubeconfig)):
            seen.update(leaks.kubeconfig_secrets(yaml.safe_load(Path(path).read_text()), label))
        yield s


def umbrella(result: scenario.OpResult) -> list[str]:
    """The request's steps in order; a wait before it started (Pending) is no step, see :func:`waited_why`."""
    return [c for c in result.conditions if constants.PER_POD_SEPARATOR not in c and c != constants.COND_PENDING]


async def waited_why(sc: scenario.Scenario, request: str) -> list[tuple[str, str]]:
    """The reasons and messages of the Events a request's wait before it started left (``[]``: it did not wait)."""
    return [(e.get("reason", ""), e.get("message", "")) for e in await sc.k.list("v1", "Event", sc.namespace)
            if (e.get("involvedObject") or {}).get("name") == request and e.get("reason") in queue.WAITING_REASONS]


async def server_serial(sc: scenario.Scenario, db: str) -> int:
    secret = await sc.k.get("v1", "Secret", sc.namespace, f"{db}-server-cert")
    assert secret is not None
    return pki.cert_info(base64.b64decode(secret["data"]["tls.crt"])).serial


# The tier's etcd (Scenario.etcd_version: the 3.5 build on the real control plane) and the 3.7 build: the oldest and
# the newest supported minor. 3.6 accepts 3.5's flags (opsmanager/api/versions.py), and a TLS cluster's members run
# it, restarted under the writer, in tests/e2e/test_version.py.
ETCD_37 = realcp.build_module().COMPONENTS["etcd-3.7"].version().removeprefix("v")


@pytest.mark.parametrize("version", [None, ETCD_37], ids=["tier-etcd", "etcd-3.7"])
async def test_all_four_tls_operations_lose_no_write_and_cause_no_unplanned_election(
        sc: scenario.Scenario, seen: dict[str, bytes], version: str | None) -> None:
    db = "four" if version is None else f"four-{version.replace('.', '-')}"
    await sc.fresh_etcd(db, version=version)
    served = await sc.served_version(db)
    assert served == {version or sc.etcd_version}, f"members run etcd {served}, the Etcd asks for {version}"
    steps = [
        ("add-tls", {"tls": {"issuerRef": {**ISSUER, "name": "ca-a"}}}),
        ("rotate", {"tls": {"rotateCertificates": True}}),
        ("change-issuer", {"tls": {"issuerRef": {**ISSUER, "name": "ca-b"}}}),
        ("remove-tls", {"tls": {"remove": True}}),
    ]
    serials: list[int] = []
    assert sc.operator is not None
    url = sc.operator.metrics_url
    before = await add_tls_metrics(url)
    for name, spec in steps:
        await collect(sc, seen)
        result = await sc.operate(f"{db}-{name}", db, "ReconfigureTLS", timeout=300, **spec)
        if name == "add-tls":
            await assert_add_tls_announced(sc, f"{db}-{name}", result, url, before)
        assert result.phase == constants.PHASE_SUCCESSFUL, result.failure
        assert umbrella(result) == TLS_ORDER[name]
        if constants.COND_PENDING in result.conditions:
            # A loaded machine can show the Etcd NotReady for a moment after the previous operation: the request
            # then waits, says so, and starts; anything else that held it is a failure.
            waits = await waited_why(sc, f"{db}-{name}")
            assert waits and all(r == queue.REASON_WAITING_FOR_READY for r, _ in waits), waits
        await sc.assert_no_loss(result)  # 0 failed writes, stall < 2 s, every write read back, HashKV agrees
        assert result.writes_ok > (20 if name == "rotate" else 100)  # rotate restarts nothing: done in ~1 s
        # Every raft election during the operation is one the engine asked for with MoveLeader.
        assert result.elections == result.leader_moves, f"{name}: {result.elections} elections, " \
                                                        f"{result.leader_moves} MoveLeader"
        if name != "remove-tls":
            want = await server_serial(sc, db)
            served = await sc.served_serials(db)
            assert set(served.values()) == {want}, f"{name}: members serve {served}, Secret has {want:x}"
            serials.append(want)
        assert not await sc.is_paused(db)
        await sc.wait_ready(db, timeout=60)
    await collect(sc, seen)
    assert len(set(serials)) == 3  # add, rotate and issuer change each put a new certificate in service
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    assert "tls" not in (obj or {})["spec"]
    assert await sc.k.get("v1", "Secret", sc.namespace, f"{db}-server-cert") is None  # removed with TLS
    await sc.drop_etcd(db)


ADD_TLS_STEPS = TLS_ORDER["add-tls"][:-1]


async def add_tls_metrics(url: str) -> dict[str, float]:
    got = {
        "successful": await operator_metrics.sample(url, "opsmanager_opsrequests_total", type="ReconfigureTLS",
                                                    phase="Successful"),
        "restarts": await operator_metrics.sample(url, "opsmanager_member_restarts_total"),
        "moves": await operator_metrics.sample(url, "opsmanager_leader_moves_total"),
        "duration": await operator_metrics.sample(url, "opsmanager_opsrequest_duration_seconds_count",
                                                  type="ReconfigureTLS"),
    }
    for step in ADD_TLS_STEPS:
        got[step] = await operator_metrics.sample(url, "opsmanager_step_duration_seconds_count", step=step)
    return got


async def assert_add_tls_announced(sc: scenario.Scenario, request: str, result: scenario.OpResult, url: str,
                                   before: dict[str, float]) -> None:
    """The metrics moved by exactly one add TLS on 3 members (two passes: six restarts, a leader move each, as many
    as the monitor saw elections), and its Events are one per step, restart and leader move. Polled: the terminal
    Event and count come just after the terminal write the request was watched for."""
    want = {"successful": 1, "restarts": 6, "moves": 2, "duration": 1, **{step: 1 for step in ADD_TLS_STEPS}}
    assert result.elections == 2, result

    async def counted() -> dict[str, float] | None:
        after = await add_tls_metrics(url)
        delta = {k: after[k] - before[k] for k in after}
        return delta if delta == want else None

    await aeventually(counted, timeout=10, interval=0.2, what=f"the operator's /metrics to count {want}")
    steps = [c for c in ADD_TLS_STEPS if c != "Running"]  # Running's Event is the Etcd's Paused

    async def announced() -> list[dict[str, Any]] | None:
        found = [e for e in await sc.k.list("v1", "Event", sc.namespace)
                 if e["involvedObject"].get("name") == request]
        return found if any(e["reason"] == "Successful" for e in found) else None

    found = await aeventually(announced, timeout=10, interval=0.2, what=f"the Successful Event of {request}")
    reasons = collections.Counter(e["reason"] for e in found)
    assert (reasons["EvictPod"], reasons["MoveLeader"], reasons["Successful"]) == (6, 2, 1), reasons
    named = collections.Counter(c for e in found for c in steps if e["reason"] == c or f"{c}: " in e["message"])
    assert named == {c: 1 for c in steps}, (named, reasons)
    assert len(found) <= 16, reasons  # the Events' share of issue 14's budget (fast world: 13 on the request)


async def test_operator_killed_during_restart_pods_resumes_without_restarting_a_member_twice(
        sc: scenario.Scenario) -> None:
    db = "crash"
    await sc.fresh_etcd(db)
    async with scenario.PodTracker(sc, db) as tracker:
        await sc.submit("crash-restart", db, "Restart")

        async def one_member_restarted() -> bool:
            req = await sc.request("crash-restart") or {}
            conds = (req.get("status") or {}).get("conditions")
            return any(conditions.is_true(conds, constants.per_pod_type(constants.STEP_EVICT_POD, p))
                       for p in tracker.names)

        await aeventually(one_member_restarted, timeout=60, what="a member restarted")
        await sc.kill_operator()
        await asyncio.sleep(0)  # the operator is dead; the request must wait for it
        await sc.start_operator()
        # Beyond the two minutes a PodDisruptionBudget may count a recreated member as disrupted (docs/operations.md)
        req = await sc.watch_request("crash-restart", timeout=300)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert tracker.restarts() == {n: 1 for n in tracker.names}, tracker.uids
    assert not await sc.is_paused(db)
    await sc.drop_etcd(db)


async def test_a_member_that_never_becomes_ready_fails_the_request_naming_it(sc: scenario.Scenario) -> None:
    db = "stuck"
    await sc.fresh_etcd(db)
    # The data volume of stuck-2 is being deleted: its pod can start again only when the claim is gone, which a
    # protected claim in use never is — the member will not come back after its restart.
    await sc.k.delete("v1", "PersistentVolumeClaim", sc.namespace, "data-stuck-2")
    await sc.submit("stuck-restart", db, "Restart", timeout="15s")
    req = await sc.watch_request("stuck-restart", timeout=180)
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and "stuck-2" in failed["message"], failed
    assert not await sc.is_paused(db)
    eps = await sc.endpoints(db)
    async with scenario.etcd_client.EtcdClient([e.with_schemes("http") for e in eps]) as client:  # quorum kept
        leader = await client.maintenance.leader(timeout=5)
        assert leader.endpoint.name in ("stuck-0", "stuck-1")
    await sc.drop_etcd(db)


async def test_a_foreign_owned_certificate_stops_the_request_before_anything_is_repointed(
        sc: scenario.Scenario) -> None:
    db = "foreign"
    await sc.fresh_etcd(db)
    await sc.foreign_certificate(f"{db}-server", owner="someone-else", issuer="ca-a")
    sts_before = await sc.k.get("apps/v1", "StatefulSet", sc.namespace, db)
    await sc.submit("foreign-add", db, "ReconfigureTLS", tls={"issuerRef": {**ISSUER, "name": "ca-a"}})
    req = await sc.watch_request("foreign-add", timeout=60)
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED)
    assert failed is not None and f"Certificate {sc.namespace}/{db}-server" in failed["message"]
    assert "controlled by ConfigMap someone-else" in failed["message"]
    sts_after = await sc.k.get("apps/v1", "StatefulSet", sc.namespace, db)
    assert sts_before is not None and sts_after is not None
    assert sts_after["spec"]["template"] == sts_before["spec"]["template"]
    assert not await sc.is_paused(db)
    await sc.drop_etcd(db)


async def test_two_requests_run_one_after_the_other_and_a_deleted_one_leaves_no_pause(
        sc: scenario.Scenario) -> None:
    db = "queue"
    await sc.fresh_etcd(db)
    await sc.submit("queue-first", db, "Restart")
    await sc.submit("queue-second", db, "MoveLeader")
    saw_both_progressing = False

    async def second_done() -> tuple[Any, Any, Any, Any] | None:
        nonlocal saw_both_progressing
        first, second = await sc.request("queue-first"), await sc.request("queue-second")
        p1 = ((first or {}).get("status") or {}).get("phase")
        p2 = ((second or {}).get("status") or {}).get("phase")
        if p1 == constants.PHASE_PROGRESSING and p2 == constants.PHASE_PROGRESSING:
            saw_both_progressing = True
        return (first, second, p1, p2) if p2 in constants.TERMINAL_OPS_PHASES else None

    first, second, p1, p2 = await aeventually(second_done, timeout=240, interval=0.1,
                                              what="the second request finished")
    assert not saw_both_progressing
    assert p1 == constants.PHASE_SUCCESSFUL and p2 == constants.PHASE_SUCCESSFUL
    assert second is not None and first is not None
    first_done = conditions.get_condition(first["status"]["conditions"], constants.COND_SUCCESSFUL)
    second_moved = conditions.get_condition(second["status"]["conditions"], constants.COND_ETCD_LEADER_MOVED)
    assert first_done is not None and second_moved is not None
    assert second_moved["lastTransitionTime"] >= first_done["lastTransitionTime"]

    await sc.submit("queue-deleted", db, "Restart")

    await aeventually(lambda: sc.is_paused(db), timeout=60, what="the Etcd paused by queue-deleted")
    await sc.k.delete(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace, "queue-deleted")

    async def resumed() -> bool:
        return not await sc.is_paused(db)

    await aeventually(resumed, timeout=30, interval=0.2, what="the pause released after the request was deleted")
    await sc.drop_etcd(db)


async def test_a_request_waits_while_the_etcd_is_paused_by_hand_and_leaves_that_pause_alone(
        sc: scenario.Scenario) -> None:
    db = "manual"
    await sc.fresh_etcd(db)

    def pause(st: dict[str, Any]) -> dict[str, Any]:
        return {**st, "conditions": conditions.set_condition(
            st.get("conditions"), constants.COND_PAUSED, constants.TRUE, reason="Maintenance",
            message="paused by hand for a backup")}

    await sc.k.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db, pause)
    await sc.submit("manual-restart", db, "Restart")

    async def pending() -> bool:
        req = await sc.request("manual-restart") or {}
        return (req.get("status") or {}).get("phase") == constants.PHASE_PENDING

    await aeventually(pending, timeout=30, interval=0.2, what="the request queued")
    # Watch it for longer than the pause-heal period (3 s): it must stay queued, and the hand-made pause must stay.
    watch_until = asyncio.get_running_loop().time() + 4.0
    while asyncio.get_running_loop().time() < watch_until:
        assert await pending(), "the request started while the Etcd was paused by hand"
        assert await sc.is_paused(db), "the operator removed a pause it did not set"
        await asyncio.sleep(0.2)

    def unpause(st: dict[str, Any]) -> dict[str, Any]:
        return {**st, "conditions": conditions.remove_condition(st.get("conditions"), constants.COND_PAUSED)}

    await sc.k.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db, unpause)
    req = await sc.watch_request("manual-restart", timeout=120)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL
    assert not await sc.is_paused(db)
    await sc.drop_etcd(db)


async def test_a_compact_under_the_writer_loses_no_write_and_pauses_nothing(sc: scenario.Scenario) -> None:
    # Compact: the history below the current revision goes, through consensus, physically, under live writes.
    db = "compact"
    await sc.fresh_etcd(db)
    result = await sc.operate(f"{db}-now", db, "Compact", timeout=120, compact={})
    assert result.phase == constants.PHASE_SUCCESSFUL, result.failure
    assert umbrella(result) == [constants.COND_ETCD_COMPACTED, constants.COND_SUCCESSFUL]
    await sc.assert_no_loss(result)  # 0 failed writes, stall bounded, every write read back, HashKV agrees
    assert result.elections == 0 and result.writes_ok > 0
    req = await sc.k.get(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace, f"{db}-now")
    assert req is not None
    done = next(c for c in req["status"]["conditions"] if c["type"] == constants.COND_ETCD_COMPACTED)
    assert done["message"].startswith("Compacted the history below revision "), done
    assert not await sc.is_paused(db)
    await sc.drop_etcd(db)


async def test_compact_then_defragment_give_the_space_back_under_the_writer(sc: scenario.Scenario) -> None:
    # 100 MB written and deleted, then Compact and Defragment as requests, each under the live writer: every
    # member's file shrinks, one member at a time, the leader last after MoveLeader, with no write lost.
    db = "defrag"
    await sc.fresh_etcd(db)
    async with await sc.plain_client(db) as client:  # a cluster without TLS
        for i in range(1600):
            await client.kv.put(f"/bulk/{i:05d}", b"x" * 65536)
        deleted, _ = await client.kv.delete_prefix("/bulk/")
    assert deleted == 1600
    compacted = await sc.operate(f"{db}-compact", db, "Compact", timeout=120, compact={})
    assert compacted.phase == constants.PHASE_SUCCESSFUL, compacted.failure
    await sc.assert_no_loss(compacted)
    result = await sc.operate(f"{db}-all", db, "Defragment", timeout=300, defragment={})
    assert result.phase == constants.PHASE_SUCCESSFUL, result.failure
    assert umbrella(result) == [constants.COND_ETCD_DEFRAGMENTED, constants.COND_ETCD_ALARM_CLEARED,
                                constants.COND_SUCCESSFUL]
    await sc.assert_no_loss(result)  # 0 failed writes, stall bounded, every write read back, HashKV agrees
    assert result.elections == result.leader_moves == 1, "leadership moved once, off the last member"
    req = await sc.k.get(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace, f"{db}-all")
    assert req is not None
    sizes = req["status"]["databaseSizes"]
    assert set(sizes) == {f"{db}-0", f"{db}-1", f"{db}-2"}
    for name, size in sizes.items():
        assert size["beforeBytes"] >= 100_000_000 and size["afterBytes"] < size["beforeBytes"] / 4, (name, size)
    assert not await sc.is_paused(db)
    await sc.drop_etcd(db)


# --- No secret anywhere it must not be -----------------------------------------------------------------------------

LEAK_KINDS = [(constants.ETCD_API_VERSION, constants.ETCD_KIND), (constants.OPS_API_VERSION, constants.OPS_KIND),
              ("cert-manager.io/v1", "Certificate"), ("v1", "Pod"), ("apps/v1", "StatefulSet")]


async def collect(sc: scenario.Scenario, into: dict[str, bytes]) -> None:
    """Every Secret value that exists now (in every namespace), added to ``into``."""
    into.update(leaks.secret_data(await sc.k.list("v1", "Secret", None)))


async def haystacks(sc: scenario.Scenario) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for path in sorted(Path(sc.dir).rglob("*.log")):
        # A real node's /var/log/containers holds links into /var/log/pods as its own mount namespace sees it;
        # the files themselves are read where the node's /var/log/pods lives in the sandbox directory.
        if path.is_symlink():
            continue
        found[f"file {path.relative_to(sc.dir)}"] = path.read_bytes()
    for event in await sc.k.list("v1", "Event", None):
        meta, obj = event["metadata"], event.get("involvedObject") or {}
        found[f"Event {meta.get('namespace')}/{meta['name']} ({event.get('reason')} on {obj.get('kind')} "
              f"{obj.get('name')})"] = json.dumps(event)
    for api_version, kind in LEAK_KINDS:
        for obj in await sc.k.list(api_version, kind, None):
            meta = obj["metadata"]
            where = f"{kind} {meta.get('namespace')}/{meta['name']}"
            found[f"{where} status"] = json.dumps(obj.get("status") or {})
            found[f"{where} metadata.annotations"] = json.dumps(meta.get("annotations") or {})
    assert sc.operator is not None
    async with aiohttp.ClientSession() as session, session.get(sc.operator.metrics_url) as resp:
        found["operator /metrics"] = await resp.text()
    return found


async def test_no_secret_appears_in_logs_events_statuses_annotations_or_metrics(
        sc: scenario.Scenario, seen: dict[str, bytes]) -> None:
    """Last in the module, so its whole traffic is the haystack: the four TLS operations on two etcd versions,
    the kills, failures and waits above, and an Etcd created with TLS here. Every form of every secret value seen
    (:mod:`e2e.leaks`: raw, base64, PEM body lines; values under 16 bytes ignored) is looked for in every ``*.log``
    under the sandbox directory (etcd members, the webhook, the sandbox, the operator), every Event, ``status`` and
    ``metadata.annotations`` of every Etcd, EtcdOpsRequest, Certificate, Pod and StatefulSet, and the operator's
    ``/metrics``. A failure names where and which secret, never the value; tests/e2e/test_leak_scanner.py shows the
    scanner finds a planted key (so this test can fail)."""
    await sc.create_etcd("born-tls", issuer="ca-a")
    await sc.wait_ready("born-tls", timeout=120)
    await collect(sc, seen)
    found = await haystacks(sc)
    # Not vacuous: the keys of Etcds taken to TLS and of one created with it were collected, logs and Events read.
    keys = [label for label in seen if label.endswith(" tls.key")]
    assert any("/four-" in k for k in keys) and any("/born-tls-" in k for k in keys), sorted(seen)
    assert len([w for w in found if w.startswith("file ")]) >= 6, sorted(found)
    assert "file operator.log" in found and len(found["file operator.log"]) > 1000
    assert sum(1 for w in found if w.startswith("Event ")) >= 20
    leaked = leaks.scan(found, seen)
    assert leaked == [], "secrets found:\n" + "\n".join(str(f) for f in leaked)
    await sc.drop_etcd("born-tls")

