"""Storage autoscaling: when the storage scan files a VolumeExpansion by itself (KubeDB's EtcdAutoscaler storage
policy, ``spec.storageLifecycle.autoscale``).

We test these aspects, the decision pure: the member whose database takes the largest share of its volume decides;
below ``usageThreshold`` nothing; ``trigger: Off`` nothing; the new size is ``scalingThreshold`` % more in whole MiB,
at most ``upperBound``, and nothing once at the bound; never beside a request in flight; and, through the one filer
(over the filer tests' in-memory store), the request is filed once per episode — the volumes at one size — under the
name derived from it, with the policy's mode, and again once the size changed.
"""

from __future__ import annotations

import datetime
from typing import Any

from opsmanager.api import constants, lifecycle
from opsmanager.api import etcd as etcd_api
from opsmanager.lifecycle import autoscale
from tests.cluster.test_filer import Store

MiB = 1024 * 1024
GiB = 1024 * MiB
T0 = datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.UTC)
ON = lifecycle.StorageAutoscale(trigger="On", usage_threshold=80, scaling_threshold=50)


def sizes(*pairs: tuple[int, int]) -> dict[str, lifecycle.MemberStorage]:
    """(database MiB, volume MiB) per member."""
    return {f"db-{i}": lifecycle.MemberStorage(db_size_bytes=db * MiB, db_size_in_use_bytes=db * MiB,
                                               volume_capacity_bytes=volume * MiB)
            for i, (db, volume) in enumerate(pairs)}


def test_the_fullest_member_decides_and_the_volumes_grow_by_the_scaling_threshold() -> None:
    decision = autoscale.decide(sizes((100, 1024), (850, 1024), (200, 1024)), ON, GiB, None, [])
    assert decision.file and decision.size == "1536Mi"
    assert "db-1's database takes 83% of its data volume" in decision.reason


def test_below_the_threshold_or_off_files_nothing() -> None:
    assert not autoscale.decide(sizes((800, 1024)), ON, GiB, None, []).file  # 78%
    off = ON.model_copy(update={"trigger": "Off"})
    assert not autoscale.decide(sizes((900, 1024)), off, GiB, None, []).file


def test_the_upper_bound_caps_the_size_and_stops_at_it() -> None:
    bounded = ON.model_copy(update={"upper_bound": "1200Mi"})
    assert autoscale.decide(sizes((900, 1024)), bounded, GiB, None, []).size == "1200Mi"
    at = autoscale.decide(sizes((1000, 1200)), bounded, 1200 * MiB, None, [])
    assert not at.file and "upper bound" in at.reason


def test_once_per_episode_and_never_beside_a_request_in_flight() -> None:
    full = sizes((900, 1024))
    assert not autoscale.decide(full, ON, GiB, "db-storage-autoscale-1073741824", []).file
    assert not autoscale.decide(full, ON, GiB, None, ["db-restart"]).file


def etcd(store: Store, size: str) -> tuple[dict[str, Any], etcd_api.Etcd]:
    obj = store.etcd()
    obj["spec"] = {"version": constants.DEFAULT_ETCD_VERSION, "replicas": 3, "storageType": "Durable",
                   "deletionPolicy": "WipeOut", "storage": {"resources": {"requests": {"storage": size}}},
                   "storageLifecycle": {"autoscale": {"trigger": "On", "expansionMode": "Offline"}}}
    return obj, etcd_api.Etcd.model_validate(obj)


async def test_filed_once_per_size_through_the_filer() -> None:
    store = Store()
    obj, db = etcd(store, "1Gi")
    full = sizes((900, 1024))
    assert (await autoscale.maybe_file(store, obj, db, full, [], now=T0)).file  # type: ignore[arg-type, union-attr]
    obj = {**obj, "status": store.etcd().get("status")}
    await autoscale.maybe_file(store, obj, db, full, [], now=T0)  # type: ignore[arg-type]
    assert store.requests() == ["db-storage-autoscale-1073741824"] and store.creates == 1
    body = store.objects[(constants.OPS_KIND, "ns", "db-storage-autoscale-1073741824")]
    assert body["spec"]["volumeExpansion"] == {"etcd": "1536Mi", "mode": "Offline"}
    assert body["metadata"]["labels"][constants.LABEL_OPS_TRIGGER] == constants.TRIGGER_STORAGE_AUTOSCALE
    assert store.events == [autoscale.EVENT_AUTOSCALE]
    grown_obj, grown = etcd(store, "1536Mi")  # the expansion succeeded: a new episode
    grown_obj["status"] = store.etcd().get("status")
    await autoscale.maybe_file(store, grown_obj, grown, sizes((1400, 1536)), [], now=T0)  # type: ignore[arg-type]
    assert store.requests() == ["db-storage-autoscale-1073741824", "db-storage-autoscale-1610612736"]
