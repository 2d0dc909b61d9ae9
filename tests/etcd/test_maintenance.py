"""Compaction, defragmentation, alarms and range deletes of the admin client, against a real 3-member etcd cluster
with mTLS (one cluster for the module).

We test these aspects: deleting a prefix answers how many keys went; a physical compaction at the current revision
makes older revisions unreadable and a compaction below it is refused; after a delete and a compaction, a
defragmentation of each member, one at a time, gives the space back (its database size shrinks to near its in-use
size) and every member's HashKV still agrees; a NOSPACE alarm raised on a member is listed, refuses writes, and
once disarmed writes go through again; a non-positive revision is refused before any request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from e2e import localcluster
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors, probes
from tests.polling import aeventually

pytestmark = pytest.mark.slow

Cluster = localcluster.LocalEtcdCluster
PREFIX = b"/maintenance/"
VALUE = b"x" * 4096


@pytest.fixture(scope="module")
def cluster(module_etcd_cluster_factory) -> Cluster:  # type: ignore[no-untyped-def]
    return module_etcd_cluster_factory(3, mode="mtls")


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[etcd_client.EtcdClient]:
    async with etcd_client.EtcdClient(cluster.endpoints(), tls=cluster.tls_identity(), timeout=10.0) as c:
        yield c


async def _sizes(c: etcd_client.EtcdClient) -> dict[str, tuple[int, int]]:
    views = await c.statuses()
    return {name: (v.db_size, v.db_size_in_use) for name, v in views.items()
            if isinstance(v, etcd_client.MemberStatus)}


async def test_delete_compact_and_defragment_give_the_space_back(client: etcd_client.EtcdClient) -> None:
    for i in range(2000):  # about 8 MB of values
        await client.put(PREFIX + f"{i:05d}".encode(), VALUE)
    grown = await _sizes(client)
    assert len(grown) == 3 and all(size >= 8_000_000 for size, _ in grown.values()), grown

    deleted, revision = await client.delete_prefix(PREFIX)
    assert deleted == 2000
    assert await client.get(PREFIX + b"00000") is None
    assert await client.compact(revision) >= revision
    with pytest.raises(errors.EtcdError, match="compacted"):
        await client.compact(revision - 1)

    leader = await client.leader()
    order = [n for n in grown if n != leader.endpoint.name] + [leader.endpoint.name]  # followers first
    for name in order:
        await client.defragment(name)
    shrunk = await _sizes(client)
    for name, (size, in_use) in shrunk.items():
        assert size < grown[name][0] / 4, f"{name}: {grown[name][0]} -> {size} bytes"
        assert size <= in_use * 2, f"{name}: {size} bytes on disk for {in_use} in use"
    # HashKV compares at the lowest revision a member reports, which must be above the compaction: a member that
    # has not applied this write yet would still report the compacted revision.
    after = await client.put(PREFIX + b"after", b"v")

    async def applied_everywhere() -> bool:
        views = await client.statuses()
        return all(isinstance(v, etcd_client.MemberStatus) and v.revision >= after for v in views.values())

    await aeventually(applied_everywhere, timeout=10, what="every member applied the write after the compaction")
    await client.check_consistency()


async def test_a_nospace_alarm_refuses_writes_until_it_is_disarmed(client: etcd_client.EtcdClient) -> None:
    assert await client.alarms() == []
    member = (await client.leader()).member_id
    raised = await client.set_alarm(member, "NOSPACE", raised=True)
    assert raised == [etcd_client.Alarm(member, "NOSPACE")]
    try:
        assert await client.alarms() == [etcd_client.Alarm(member, "NOSPACE")]
        with pytest.raises(errors.EtcdError, match="space exceeded"):
            await client.put(PREFIX + b"refused", b"v")
    finally:
        disarmed = await client.set_alarm(member, "NOSPACE", raised=False)
    assert disarmed == [etcd_client.Alarm(member, "NOSPACE")]
    assert await client.alarms() == []
    await client.put(PREFIX + b"accepted", b"v")
    assert await client.get(PREFIX + b"accepted") == b"v"


async def test_a_compaction_needs_a_positive_revision(client: etcd_client.EtcdClient) -> None:
    with pytest.raises(ValueError, match="revision must be positive"):
        await client.compact(0)


async def test_the_cluster_version_and_a_downgrade_etcd_3_5_refuses(client: etcd_client.EtcdClient) -> None:
    # etcd 3.5.1 (the embedded tier): the cluster version from each member's metrics; etcd validates one minor
    # down and refuses two, with a reason that is not worth retrying (the round trip 3.6 → 3.5 with the ENABLE is
    # tests/e2e/test_version.py).
    assert {await client.cluster_version(ep.name) for ep in client.endpoints} == {"3.5"}
    assert (await client.downgrade("VALIDATE", "3.4")).startswith("3.5")
    with pytest.raises(errors.EtcdError) as refused:
        await client.downgrade("VALIDATE", "3.3")
    assert not errors.is_transient(refused.value), refused.value
    assert "invalid downgrade target version" in str(refused.value), refused.value


def test_the_cluster_version_gauge_is_read_from_the_exposition() -> None:
    metrics = ('# HELP etcd_cluster_version Which version is running. 1 for \'cluster_version\' label\n'
               '# TYPE etcd_cluster_version gauge\netcd_cluster_version{cluster_version="3.6"} 1\n'
               'etcd_server_version{server_version="3.6.16"} 1\n')
    assert probes.cluster_version_of(metrics) == "3.6"
    assert probes.cluster_version_of('etcd_cluster_version{cluster_version="3.5"} 0\n') == ""
    assert probes.cluster_version_of("") == ""
