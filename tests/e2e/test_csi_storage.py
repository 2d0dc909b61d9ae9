"""Real storage on real nodes: the sandbox's CSI driver (``csi-loop``: a loop device with XFS per volume) beside the
real external-provisioner and external-resizer, under a real kubelet (``opsmanager_sandbox.realnodes.csi``). One
node, as the tier's other modules (D34.4): the driver is registered per kubelet, and a volume is published on
whichever node its pod lands (three nodes ran the same module green).

We test these aspects:
- the driver is registered on every kubelet (each CSINode lists it, through the kubelet's plugin-registration
  socket), and the two StorageClasses name it, allow expansion and bind ``WaitForFirstConsumer``, ``standard`` the
  cluster's default;
- each sidecar runs as its own ServiceAccount with its release's RBAC: it may do its own work (the provisioner
  create volumes, the resizer patch a claim's status) and nothing else (no Secret, no pod deleted, not the other's
  work), as kube-apiserver's authorizer answers for its token;
- a claim on ``standard`` is provisioned by the external-provisioner (a PersistentVolume of the driver), mounted by
  a pod, and has a real file system of its size: the kubelet's stats summary and a statfs from inside the node's
  mount namespace agree;
- patching the claim grows it online, the pod running: the resizer grows the volume, the kubelet the file system
  (``status.capacity`` becomes the new size), and the stats summary reports the new capacity;
- deleting the claim deletes its volume and the backing file;
- a VolumeExpansion Online of a 3-member Etcd under the live writer grows every member's file system (the kubelet's
  stats summary), with 0 failed writes and every write read back;
- a StorageMigration (``oldPVReclaimPolicy: Retain``) moves a 3-member Etcd from ``standard`` to ``fast`` under
  the live writer: 0 failed writes, every write read back, HashKV agreeing, a linearizable history; every member's
  claim is on ``fast``, no claim of ``standard`` is left, and every old volume is kept (Released, Retain, its
  backing file there) until handed back to Delete, when it goes with its file;
- an Etcd whose database passes its autoscale usage threshold gets one VolumeExpansion filed by the operator itself
  (trigger ``storage-autoscale``), which grows every member's file system, and no second one over later scans;
- the operator runs as the bundle's ServiceAccount under the bundle's RBAC throughout, nothing it does is refused,
  and the two rules only these operations exercise (``nodes/proxy``, ``persistentvolumes``) are each needed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario, storagebench
from opsmanager.api import constants
from opsmanager.cluster import naming, volumes
from opsmanager_sandbox import node as node_agent
from opsmanager_sandbox.realnodes import csi, images
from tests.e2e import rbac
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

GI = 1 << 30


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("csi"), control_plane="kubernetes", nodes=1,
                                 storage="csi") as s:
        for res in (csi.CSI_NODES, csi.CSI_DRIVERS, node_agent.PERSISTENT_VOLUMES):
            s.k.resources.add(res)
        # The operator runs as the bundle's ServiceAccount with the bundle's RBAC: the storage operations below
        # are the traffic test_the_bundles_storage_rules_are_needed replays.
        await s.ensure_namespace(rbac.SYSTEM_NAMESPACE)
        for doc in rbac.bundle_docs("operator/rbac.yaml"):
            await s.sandbox.apply(doc)
        await s.run_operator_as(rbac.SYSTEM_NAMESPACE, "opsmanager-operator")
        yield s


async def test_the_driver_is_registered_on_every_kubelet_with_two_expandable_classes(sc: scenario.Scenario) -> None:
    nodes = await sc.k.list("storage.k8s.io/v1", "CSINode", None)
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(n.name for n in sc.sandbox.realnodes.nodes)
    for n in nodes:
        assert [d["name"] for d in n["spec"]["drivers"]] == [csi.DRIVER], n["spec"]
    classes = {c["metadata"]["name"]: c for c in await sc.k.list("storage.k8s.io/v1", "StorageClass", None)}
    for name in ("standard", "fast"):
        assert classes[name]["provisioner"] == csi.DRIVER and classes[name]["allowVolumeExpansion"] is True
    assert {c["volumeBindingMode"] for n, c in classes.items() if n in ("standard", "fast")} == {
        "WaitForFirstConsumer"}
    default = "storageclass.kubernetes.io/is-default-class"
    assert classes["standard"]["metadata"]["annotations"][default] == "true"
    assert classes["fast"]["metadata"]["annotations"][default] == "false"


def _can_i(kubeconfig: Path, *args: str) -> bool:
    done = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "auth", "can-i", *args], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.stdout.strip() in ("yes", "no"), (args, done.stdout, done.stderr)
    return done.stdout.strip() == "yes"


async def test_each_sidecar_has_only_the_rights_its_release_asks_for(sc: scenario.Scenario) -> None:
    kubeconfigs = sc.sandbox.realnodes.csi.kubeconfigs
    provisioner, resizer = kubeconfigs["csi-provisioner"], kubeconfigs["csi-resizer"]
    assert _can_i(provisioner, "create", "persistentvolumes") and _can_i(provisioner, "watch", "csinodes")
    assert _can_i(resizer, "patch", "persistentvolumeclaims", "--subresource=status")
    for kubeconfig in (provisioner, resizer):
        assert not _can_i(kubeconfig, "get", "secrets", "-n", sc.namespace)
        assert not _can_i(kubeconfig, "delete", "pods", "-n", sc.namespace)
        assert not _can_i(kubeconfig, "create", "clusterrolebindings")
    assert not _can_i(resizer, "create", "persistentvolumes")
    assert not _can_i(provisioner, "patch", "persistentvolumeclaims", "--subresource=status")


def _claim(name: str, size: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"storageClassName": "standard", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": size}}}}


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "holder", "image": images.pause_image().ref, "imagePullPolicy": "IfNotPresent",
                "volumeMounts": [{"name": naming.DATA_VOLUME, "mountPath": "/data"}]}],
                "volumes": [{"name": naming.DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim}}]}}


def _statfs_bytes(sc: scenario.Scenario, pod: dict[str, Any], pv: str) -> int:
    """The mounted file system's size as statfs in the node's mount namespace sees it (not what the API says)."""
    node = sc.sandbox.realnodes.node(pod["spec"]["nodeName"])
    mount = node.inside(f"/var/lib/kubelet/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~csi/{pv}/mount")
    st = os.statvfs(mount)
    return st.f_blocks * st.f_frsize


async def test_a_claim_is_provisioned_mounted_grown_online_and_deleted(sc: scenario.Scenario) -> None:
    ns = sc.namespace
    await sc.k.create({**_claim("grow", "1Gi"), "metadata": {"name": "grow", "namespace": ns}})
    await sc.k.create({**_pod("holder", "grow"), "metadata": {"name": "holder", "namespace": ns}})

    async def bound() -> dict[str, Any] | None:
        pvc = await sc.k.get("v1", "PersistentVolumeClaim", ns, "grow")
        return pvc if (pvc or {}).get("status", {}).get("phase") == "Bound" else None

    pvc = await sc.wait_for("the claim bound", bound, timeout=60)
    pv = await sc.k.get("v1", "PersistentVolume", None, pvc["spec"]["volumeName"])
    assert pv["spec"]["csi"]["driver"] == csi.DRIVER, pv["spec"]
    backing = sc.sandbox.realnodes.csi.volumes / f"{pv['spec']['csi']['volumeHandle']}.img"
    assert backing.stat().st_size == GI
    pod = await _running(sc, "holder")
    summary = await aeventually(lambda: volumes.filesystem_bytes(sc.k, ns, pod), timeout=60, interval=1.0)
    inside = _statfs_bytes(sc, pod, pv["metadata"]["name"])
    assert 0.9 * GI < inside <= GI and summary == inside, (summary, inside)

    await sc.k.patch("v1", "PersistentVolumeClaim", ns, "grow", {"spec": {"resources": {"requests": {
        "storage": "2Gi"}}}})

    async def grown() -> int | None:
        claim = await sc.k.get("v1", "PersistentVolumeClaim", ns, "grow")
        size = await volumes.filesystem_bytes(sc.k, ns, pod)
        done = ((claim or {}).get("status") or {}).get("capacity", {}).get("storage") == "2Gi"
        return size if done and size is not None and size > 1.8 * GI else None

    summary = await sc.wait_for("the file system grown online", grown, timeout=120)
    assert backing.stat().st_size == 2 * GI
    assert 1.8 * GI < _statfs_bytes(sc, pod, pv["metadata"]["name"]) == summary
    assert (await sc.k.get("v1", "Pod", ns, "holder"))["metadata"]["uid"] == pod["metadata"]["uid"], \
        "the pod ran on: online"

    await sc.k.delete("v1", "Pod", ns, "holder")
    await sc.wait_for("the pod gone", _gone(sc, "Pod", ns, "holder"), timeout=60)
    await sc.k.delete("v1", "PersistentVolumeClaim", ns, "grow")
    await sc.wait_for("the volume deleted", _gone(sc, "PersistentVolume", None, pv["metadata"]["name"]),
                      timeout=60)
    await sc.wait_for("the backing file deleted", _absent(backing), timeout=30)


async def _running(sc: scenario.Scenario, name: str) -> dict[str, Any]:
    async def running() -> dict[str, Any] | None:
        pod = await sc.k.get("v1", "Pod", sc.namespace, name)
        return pod if ((pod or {}).get("status") or {}).get("phase") == "Running" else None

    found: dict[str, Any] = await sc.wait_for(f"pod {name} running", running, timeout=90)
    return found


def _gone(sc: scenario.Scenario, kind: str, ns: str | None, name: str) -> Any:
    async def probe() -> bool:
        return await sc.k.get("v1", kind, ns, name) is None
    return probe


def _absent(path: Path) -> Any:
    async def probe() -> bool:
        return not path.exists()
    return probe


async def test_volume_expansion_online_grows_every_members_file_system_under_a_writer(
        sc: scenario.Scenario) -> None:
    db = "grown"
    await sc.fresh_etcd(db, extra=storagebench.storage_spec("1Gi"), timeout=180)
    before = await aeventually(lambda: _filesystems(sc, db), timeout=90, interval=2.0)
    assert all(b <= GI for b in before), before
    run = await sc.operate("grow", db, "VolumeExpansion", volumeExpansion={"etcd": "2Gi", "mode": "Online"},
                           timeout=300)
    assert run.phase == constants.PHASE_SUCCESSFUL, run.failure
    await sc.assert_no_loss(run, db=db)
    after = await _filesystems(sc, db)
    assert after and all(a > 1.8 * GI for a in after), (before, after)


async def _filesystems(sc: scenario.Scenario, db: str) -> list[int] | None:
    """Every member's data file system size as its kubelet reports it; None until all three are reported."""
    sizes = await storagebench.filesystems(sc, db)
    return list(sizes.values()) if len(sizes) == 3 else None


async def _member_claims(sc: scenario.Scenario, db: str) -> dict[str, dict[str, Any]]:
    """Each member's data claim, as its running pod mounts it."""
    out = {}
    for name in naming.pods(db, 3):
        pod = await sc.k.get("v1", "Pod", sc.namespace, name) or {}
        claim = next(v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                     if v["name"] == naming.DATA_VOLUME)
        out[name] = await sc.k.get("v1", "PersistentVolumeClaim", sc.namespace, claim) or {}
    return out


async def test_storage_migration_moves_every_member_to_the_other_class_under_a_writer(
        sc: scenario.Scenario) -> None:
    db = "moved"
    await sc.fresh_etcd(db, extra=storagebench.storage_spec("1Gi"), timeout=180)
    before = await _member_claims(sc, db)
    assert {c["spec"]["storageClassName"] for c in before.values()} == {"standard"}, before
    old_volumes = {c["spec"]["volumeName"] for c in before.values()}
    run = await sc.operate("move", db, "StorageMigration", timeout=600,
                           migration={"storageClassName": "fast", "oldPVReclaimPolicy": "Retain"})
    assert run.phase == constants.PHASE_SUCCESSFUL, run.failure
    await sc.assert_no_loss(run, db=db)
    after = await _member_claims(sc, db)
    assert {c["spec"]["storageClassName"] for c in after.values()} == {"fast"}, after
    assert all(c["status"]["phase"] == "Bound" for c in after.values()), after
    standard = [c["metadata"]["name"] for c in await sc.k.list("v1", "PersistentVolumeClaim", sc.namespace)
                if c["spec"].get("storageClassName") == "standard" and db in c["metadata"]["name"]]
    assert not standard, standard
    # Retain: every old volume outlives its claim, with its data; handed back to Delete, each goes with its file.
    for pv in old_volumes:
        kept = await sc.wait_for(f"the old volume {pv} released", _released(sc, pv), timeout=60)
        assert kept["spec"]["persistentVolumeReclaimPolicy"] == "Retain", kept["spec"]
        backing = sc.sandbox.realnodes.csi.volumes / f"{kept['spec']['csi']['volumeHandle']}.img"
        assert backing.exists(), backing
        await sc.k.patch("v1", "PersistentVolume", None, pv, {"spec": {"persistentVolumeReclaimPolicy": "Delete"}})
        await sc.wait_for(f"the old volume {pv} deleted", _gone(sc, "PersistentVolume", None, pv), timeout=60)
        await sc.wait_for(f"the backing file of {pv} deleted", _absent(backing), timeout=30)
    await sc.drop_etcd(db)


def _released(sc: scenario.Scenario, name: str) -> Any:
    async def probe() -> dict[str, Any] | None:
        pv = await sc.k.get("v1", "PersistentVolume", None, name)
        return pv if ((pv or {}).get("status") or {}).get("phase") == "Released" else None
    return probe


AUTOSCALE = {"scanInterval": "3s", "autoscale": {"trigger": "On", "usageThreshold": 3, "scalingThreshold": 200}}


async def _autoscaled(sc: scenario.Scenario, db: str) -> list[dict[str, Any]]:
    return await sc.filed_by_operator(db, constants.TRIGGER_STORAGE_AUTOSCALE)


async def test_a_database_past_the_usage_threshold_gets_one_volume_expansion_by_itself(
        sc: scenario.Scenario) -> None:
    db = "filling"
    # 3% of 1 GiB is about 32 MB: 48 values of 1 MiB put every member's database file past it; grown by 200% to
    # 3 GiB, the same file is below it again, so the episode ends with one request.
    await sc.fresh_etcd(db, extra={**storagebench.storage_spec("1Gi"), "storageLifecycle": AUTOSCALE}, timeout=180)
    async with await sc.plain_client(db) as client:
        for i in range(48):
            await client.kv.put(f"/fill/{i:03d}", os.urandom(1 << 20))
    async with sc.live(db) as (w, _mon):
        before = w.snapshot()
        filed = await aeventually(lambda: _autoscaled(sc, db), timeout=120, interval=0.5,
                                  what="a VolumeExpansion filed by the operator")
        assert len(filed) == 1, [r["metadata"]["name"] for r in filed]
        request = filed[0]
        assert request["spec"]["volumeExpansion"] == {"etcd": "3072Mi", "mode": "Online"}, request["spec"]
        assert request["metadata"]["ownerReferences"][0]["name"] == db
        done = await sc.watch_request(request["metadata"]["name"], timeout=300)
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    await sc.assert_no_loss(w, db=db, since=before)
    sizes = await aeventually(lambda: _filesystems(sc, db), timeout=60, interval=2.0)
    assert all(s > 2.7 * GI for s in sizes), sizes
    events = [e for e in await sc.k.list("v1", "Event", sc.namespace)
              if e.get("reason") == "StorageAutoscaleRequested" and (e.get("involvedObject") or {}).get("name") == db]
    assert events and request["metadata"]["name"] in events[0]["message"], events
    # Once: over later scans (which see the grown volumes) nothing more is filed.
    await sc.wait_storage_scans(db, 9, timeout=60)
    assert len(await _autoscaled(sc, db)) == 1
    await sc.drop_etcd(db)


async def test_the_bundles_storage_rules_are_needed(sc: scenario.Scenario) -> None:
    """The operator ran this module as the bundle's ServiceAccount: its VolumeExpansions read the kubelet's stats
    (``nodes/proxy``), its StorageMigration set the old volumes to Retain (``persistentvolumes``), and nothing it
    did was refused. Each of those two rules removed from the live ClusterRole, the same calls are refused (403):
    the install module, whose hostPath volumes neither grow nor migrate, cannot show these two."""
    refused = [(r.verb, r.resource, r.name) for r in sc.sandbox.audit.records(user=rbac.OPERATOR_USER)
               if r.code == 403]
    assert not refused, refused
    roles = rbac.bundle_roles()
    made = rbac.calls_made(sc.sandbox, rbac.OPERATOR_USER)
    client = await rbac.service_account_client(sc, rbac.OPERATOR_USER)
    try:
        for role_name, resource in sorted(rbac.CSI_ONLY):
            (index, rule), = [(i, r) for i, r in enumerate(roles[role_name]["rules"]) if resource in r["resources"]]
            calls = {c for c in made if rbac.granted_by(rule, c)}
            assert calls, f"the operator never used {role_name}'s {resource} rule"
            await rbac.refused_without(sc, client, rbac.OPERATOR_USER, role_name, index, calls)
    finally:
        await client.close()

