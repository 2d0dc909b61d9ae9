"""The VolumeExpansion request in the fast world (the in-process API server, the fake etcd, and the world's
resizer and kubelet, :class:`tests.ops.world.Volumes`).

We test these aspects: ``Online`` asks each member's claim for the new size one member at a time, restarts no one,
and is done only once each filesystem grew (the kubelet's statfs through the node proxy, not the claim); the
StatefulSet is recreated with the new claim templates and keeps its pods (same UIDs, nothing evicted); the Etcd's
``spec.storage`` is written last; ``Offline`` rolls every member once so each filesystem grows at its next mount;
an Etcd that ties its quota to the volume gets the raised ``--quota-backend-bytes`` on every member; a crash after
the StatefulSet's orphan delete is resumed; a request that is not larger is refused with KubeDB's words.
"""

from __future__ import annotations

from opsmanager.api import constants
from opsmanager.cluster import volumes
from tests.ops import world as w

PODS = ("db-0", "db-1", "db-2")
TWO_GI = 2 * 1024 ** 3


async def claims(world: w.World) -> dict[str, volumes.Claim]:
    return {p: c for p in PODS if (c := await volumes.claim(world.kube, w.NS, p)) is not None}


async def claim_template_size(world: w.World) -> str:
    sts = await world.kube.get("apps/v1", "StatefulSet", w.NS, "db")
    assert sts is not None
    return str(sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"])


async def uids(world: w.World) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in await world.kube.list("v1", "Pod", w.NS)}


async def test_online_grows_every_volume_and_filesystem_restarting_no_member(world: w.World) -> None:
    await world.volumes.storage_class("standard")
    await world.etcd("db", extra={"storage": {"storageClassName": "standard",
                                              "resources": {"requests": {"storage": "1Gi"}}}})
    before = await uids(world)
    await world.request("grow", "db", "VolumeExpansion", volumeExpansion={"etcd": "2Gi", "mode": "Online"})
    req = await world.run("grow")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == [constants.COND_RUNNING, constants.COND_UPDATE_NODE_PVCS, constants.COND_VOLUMES_VERIFIED,
                               constants.COND_CLAIM_TEMPLATES_UPDATED, constants.COND_UPDATE_DATABASE,
                               constants.COND_SUCCESSFUL]
    assert {p: c.capacity for p, c in (await claims(world)).items()} == dict.fromkeys(PODS, TWO_GI)
    assert all(size >= TWO_GI * 0.9 for size in world.volumes.filesystems.values())
    assert world.volumes.summaries >= len(PODS), "each filesystem was read from the kubelet's statfs"
    assert world.record.evictions == [] and await uids(world) == before, "no member restarted, the pods were kept"
    assert await claim_template_size(world) == "2Gi"
    db = await world.get_etcd("db")
    assert db["spec"]["storage"]["resources"]["requests"]["storage"] == "2Gi"
    assert db["spec"]["storage"]["storageClassName"] == "standard"
    per_pod = {c["type"] for c in req["status"]["conditions"]}
    for pod in PODS:
        assert constants.per_pod_type(constants.STEP_RESIZE_VOLUME, pod) in per_pod
        assert constants.per_pod_type(constants.STEP_VERIFY_VOLUME_SIZE, pod) in per_pod


async def test_offline_restarts_each_member_once_so_its_filesystem_grows_at_mount(world: w.World) -> None:
    world.volumes.offline_only = True
    await world.etcd("db")
    await world.request("grow", "db", "VolumeExpansion", volumeExpansion={"etcd": "3Gi", "mode": "Offline"})
    req = await world.run("grow")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == [constants.COND_RUNNING, constants.COND_UPDATE_NODE_PVCS,
                               constants.COND_UPDATE_STATEFULSET, constants.COND_RESTART_PODS,
                               constants.COND_VOLUMES_VERIFIED, constants.COND_CLAIM_TEMPLATES_UPDATED,
                               constants.COND_UPDATE_DATABASE, constants.COND_SUCCESSFUL]
    assert sorted(p for p, _ in world.record.evictions) == list(PODS), "each member restarted once"
    assert {p: c.capacity for p, c in (await claims(world)).items()} == dict.fromkeys(PODS, 3 * 1024 ** 3)
    assert await claim_template_size(world) == "3Gi"


async def test_a_quota_tied_to_the_volume_is_raised_on_every_member(world: w.World) -> None:
    await world.etcd("db", extra={"storageLifecycle": {"quotaVolumePercent": 50},
                                  "storage": {"resources": {"requests": {"storage": "4Gi"}}}})
    await world.request("grow", "db", "VolumeExpansion", volumeExpansion={"etcd": "12Gi", "mode": "Online"})
    req = await world.run("grow")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert constants.COND_CONFIGURATION_VERIFIED in w.umbrella(req)
    quota = 6 * 1024 ** 3
    assert world.cluster is not None
    for pod in PODS:
        assert f"--quota-backend-bytes={quota}" in world.cluster.member(pod).flags
    db = await world.get_etcd("db")
    assert db["spec"]["configuration"]["tuning"]["quotaBackendBytes"] == quota


async def test_a_crash_after_the_orphan_delete_creates_the_statefulset_again(world: w.World) -> None:
    await world.etcd("db")
    before = await uids(world)
    world.crash_points.add(f"in-flight {constants.COND_CLAIM_TEMPLATES_UPDATED}")
    await world.request("grow", "db", "VolumeExpansion", volumeExpansion={"etcd": "2Gi", "mode": "Online"})
    req = await world.run("grow")
    assert world.crashes == [f"in-flight {constants.COND_CLAIM_TEMPLATES_UPDATED}"]
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert await claim_template_size(world) == "2Gi" and await uids(world) == before


async def test_a_size_not_larger_fails_with_kubedbs_words(world: w.World) -> None:
    await world.etcd("db")
    await world.request("same", "db", "VolumeExpansion", volumeExpansion={"etcd": "1Gi", "mode": "Online"})
    req = await world.run("same")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = next(c for c in req["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    assert failed["message"] == "desired etcd storage size must be greater than current storage. Current storage: 1Gi"
