"""A recorded history on a real 3-member etcd (the 3.6 build, mTLS on loopback), with a member killed and started again
in the middle: the history is linearizable and the watch stream whole.

We test these aspects:
* clients spread over every member, and some operations end with an unknown outcome while the member is down;
* the checker accepts the history (and so models the unknown outcomes, which it may not drop);
* the watcher, which sat on the member that was killed, reconnects on another from the next revision and misses,
  repeats and reorders nothing, up to the last write;
* a watch from below a compaction ends with a clear error (``compacted``), as docs/testing.md says;
* a watcher through etcd's JSON gateway reads like a gRPC one: across a kill of the member it watches on, it
  reconnects and delivers the very events the gRPC watcher delivered, and a compaction ends it with the same error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib

import aiohttp
import pytest

from e2e import gateway, history, lincheck, localcluster, watchcheck, writer
from opsmanager import pki
from opsmanager.etcd import access, errors
from opsmanager.etcd import client as etcd_client
from opsmanager_sandbox import realcp
from tests.fixtures.etcd_cluster import ClusterFactory

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(etcd_cluster_factory: ClusterFactory) -> localcluster.LocalEtcdCluster:
    made = etcd_cluster_factory(3, mode="mtls", start=False)
    made.binary = realcp.binary("etcd-3.6", "etcd")
    return made.start()


async def test_a_history_across_a_member_restart_is_linearizable_and_the_watch_whole(
        cluster: localcluster.LocalEtcdCluster, tmp_path: pathlib.Path, lincheck_binary: pathlib.Path) -> None:
    targets = writer.targets_for(cluster.endpoints(), identities=[cluster.tls_identity()])
    recording = history.Recording(history.Recorder(targets, clients=4, keys=3, seed=36))
    rec = recording.recorder
    watched = recording.watcher.targets.order(0, None)[0].endpoint.name  # where the watch starts: the member to kill
    async with recording:
        await rec.wait_operations(150, timeout=30)
        await asyncio.to_thread(cluster.kill_member, watched)
        down = rec.operations
        await rec.wait_operations(60, timeout=30)  # while the member is down
        await asyncio.to_thread(cluster.start_member, watched)
        await rec.wait_operations(150, timeout=30)
    assert recording.result is not None
    recorded, log, last = recording.result.history, recording.result.watch_log, recording.result.last_revision

    served = {op.member.split("/")[0] for op in recorded.operations if op.outcome == "ok"}
    assert served == {m.name for m in cluster.members}, served
    unknown = [op for op in recorded.operations if op.outcome == "unknown"]
    # the killed member's clients lose the calls in flight (unknown) and then find no connection to it: those tries
    # never reached it and went on to the next target, unrecorded (history.never_sent)
    assert rec.not_sent > 0 or any(op.member.startswith(watched) for op in unknown), recorded.counts()
    assert any(op.kind == "txn" and op.succeeded for op in recorded.operations), recorded.counts()
    assert any(op.kind == "txn" and not op.succeeded for op in recorded.operations), recorded.counts()

    verdict = await lincheck.check(recorded, tmp_path / "lincheck")
    verdict.raise_for_problems()
    assert verdict.operations == len(recorded.operations) > down
    assert verdict.unknown == len(unknown)
    # The same history with one read turned stale is refused: on real histories too, the check is not vacuous.
    refused = await lincheck.check(made_stale(recorded), tmp_path / "stale")
    assert refused.verdict == "not linearizable" and refused.visualization is not None

    assert recording.result.watch_problems() == []
    counts = watchcheck.summary(log)
    assert counts["connects"] >= 2 and counts.get("transient", 0) >= 1, counts
    delivered = {e.revision for entry in log if isinstance(entry, watchcheck.Delivered) for e in entry.events}
    assert last in delivered


def made_stale(h: history.History) -> history.History:
    """``h`` with one read answering the value its key held before a write that had returned before the read began."""
    done: dict[str, list[history.Operation]] = {}  # acknowledged writes by key, in return order
    ops = sorted(h.operations, key=lambda op: op.call)
    for i, op in enumerate(ops):
        if op.kind == "get" and op.outcome == "ok" and op.found:
            writes = sorted((w for w in done.get(op.key, ()) if w.return_ is not None and w.return_ < op.call),
                            key=lambda w: w.revision)
            if len(writes) >= 2 and writes[-1].revision == op.mod_revision:
                older = writes[-2]
                ops[i] = dataclasses.replace(op, read_value=older.value, mod_revision=older.revision)
                return dataclasses.replace(h, operations=tuple(ops))
        if op.outcome == "ok" and (op.kind == "put" or (op.kind == "txn" and op.succeeded)):
            done.setdefault(op.key, []).append(op)
    raise AssertionError("no read to make stale: every read overlapped the write it saw")


async def test_a_watch_from_below_a_compaction_ends_with_a_clear_error(cluster: localcluster.LocalEtcdCluster) -> None:
    async with etcd_client.EtcdClient(cluster.endpoints(), tls=cluster.tls_identity()) as c:
        first = await c.kv.put("/compaction/a", "1")
        second = await c.kv.put("/compaction/a", "2")
        await c.compact(second)
        with pytest.raises(errors.Compacted) as caught:
            async for _batch in c.kv.watch("/compaction/", start_revision=first, endpoint=cluster.members[0].name):
                pass
        assert caught.value.compact_revision == second
        async for batch in c.kv.watch("/compaction/", start_revision=second, endpoint=cluster.members[1].name):
            if batch.events:  # from the compaction's own revision on, the watch works
                assert [(e.value, e.mod_revision) for e in batch.events] == [(b"2", second)]
                break


async def test_a_gateway_watch_across_a_member_kill_delivers_what_the_grpc_watch_delivers(
        cluster: localcluster.LocalEtcdCluster) -> None:
    targets = writer.targets_for(cluster.endpoints(), identities=[cluster.tls_identity()])
    recording = history.Recording(history.Recorder(targets, clients=2, keys=3, seed=38), watchers=1, gateway=1)
    rec, through_gateway = recording.recorder, recording.watchers[1]
    watched = through_gateway.targets.order(through_gateway.home, None)[0].endpoint.name
    async with recording:
        await rec.wait_operations(100, timeout=30)
        await asyncio.to_thread(cluster.kill_member, watched)
        await rec.wait_operations(40, timeout=30)
        await asyncio.to_thread(cluster.start_member, watched)
        await rec.wait_operations(100, timeout=30)
    result = recording.result
    assert result is not None and result.vias == ("grpc", "gateway")
    assert result.count("gateway") == 1 and result.count("grpc") == 1
    assert result.watch_problems() == []
    log = result.other_watch_logs[0]
    counts = watchcheck.summary(log)
    assert counts["connects"] >= 2 and counts.get("transient", 0) >= 1, counts
    assert all(e.member.endswith("(gateway)") for e in log if isinstance(e, watchcheck.Connected))

    def events(entries: tuple[watchcheck.Entry, ...]) -> list[tuple[str, str, str, int]]:
        return [(e.kind, e.key, e.value, e.revision) for entry in entries if isinstance(entry, watchcheck.Delivered)
                for e in entry.events]

    assert events(log) == events(result.watch_log) and events(log)[-1][3] == result.last_revision


async def test_a_gateway_watch_from_below_a_compaction_ends_with_the_compacted_error(
        cluster: localcluster.LocalEtcdCluster) -> None:
    async with etcd_client.EtcdClient(cluster.endpoints(), tls=cluster.tls_identity()) as c:
        first = await c.kv.put("/gw-compaction/a", "1")
        second = await c.kv.put("/gw-compaction/a", "2")
        await c.compact(second)
    target = writer.targets_for(cluster.endpoints()[:1], identities=[cluster.tls_identity()])[0]
    async with aiohttp.ClientSession() as session:
        with pytest.raises(errors.Compacted) as caught:
            async for _batch in gateway.watch(session, target, "/gw-compaction/", start_revision=first, timeout=5):
                pass
        assert caught.value.compact_revision == second
        async for batch in gateway.watch(session, target, "/gw-compaction/", start_revision=second, timeout=5):
            if batch.events:
                assert [(e.value, e.mod_revision) for e in batch.events] == [(b"2", second)]
                assert batch.cluster_id and batch.revision >= second
                break


async def test_a_recorder_beside_the_live_writer_follows_its_targets(cluster: localcluster.LocalEtcdCluster,
                                                                    tmp_path: pathlib.Path,
                                                                    lincheck_binary: pathlib.Path) -> None:
    first = cluster.tls_identity(name="first")
    assert first is not None
    leaf = pki.make_leaf(cluster.ca, "second-client", usages=("client",))
    second = access.TLSIdentity(ca_pem=cluster.ca.cert_pem, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem,
                                name="second")
    async with writer.Writer(writer.targets_for(cluster.endpoints(), identities=[first])) as w:
        await w.wait_ok(5)
        recording = history.Recording(history.Recorder.following(w, clients=2))
        async with recording:
            await recording.recorder.wait_operations(40)
            switched = recording.recorder.operations
            w.set_targets(writer.targets_for(cluster.endpoints(), identities=[second]))  # a new client certificate
            await recording.recorder.wait_operations(40)
    assert recording.result is not None
    ops = recording.result.history.operations
    later = sorted(ops, key=lambda op: op.call)[switched + 2:]  # the two clients' operations in flight may be old
    assert {op.member.rsplit("/", 1)[1] for op in later} == {"second"}
    assert {op.member.rsplit("/", 1)[1] for op in ops} == {"first", "second"}
    (await lincheck.check(recording.result.history, tmp_path)).raise_for_problems()
    assert recording.result.watch_problems() == []
