"""Storage autoscaling: a VolumeExpansion filed by the operator itself when a member's database fills its data
volume — KubeDB's ``EtcdAutoscaler`` storage policy, kept on the Etcd as ``spec.storageLifecycle.autoscale``
(docs/decisions.md D37.3).

The storage scan (:mod:`opsmanager.lifecycle.storage`) reads every member's database size and its data volume's
capacity; the decision (:func:`decide`) is pure:

- **use**: on the member where it is largest, the database file's size over its volume's capacity (the file is
  what grows without bound in an etcd data directory; the WAL and snapshots are bounded by etcd's own retention);
- **over**: at least ``usageThreshold`` %;
- **the new size**: the volumes' size now (the Etcd's ``spec.storage``) grown by ``scalingThreshold`` %, in whole
  MiB, at most ``upperBound`` — a volume already at the bound is left alone (the alert stays);
- **once per episode**: the episode is the volume at its size now; its request is named from it
  (``<etcd>-storage-autoscale-<bytes>``) and recorded by the one filer (:mod:`opsmanager.cluster.filer`), so a request that
  failed is not filed again until the size changed (its Failed condition says why; a person files the next one);
- **never beside another request**: while any request of this Etcd is not finished, nothing is filed.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opsmanager import kube
from opsmanager.api import common, constants, lifecycle, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import filer

EVENT_AUTOSCALE: Final = "StorageAutoscaleRequested"
MIB: Final = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Decision:
    file: bool
    reason: str
    size: str | None = None  # the size to grow to, when filing


def usage(sizes: Mapping[str, lifecycle.MemberStorage]) -> tuple[str | None, float]:
    """(member, share of its volume its database file takes, in %) where it is largest."""
    best: tuple[str | None, float] = (None, 0.0)
    for name, size in sizes.items():
        if size.volume_capacity_bytes:
            share = size.db_size_bytes * 100 / size.volume_capacity_bytes
            if share > best[1]:
                best = (name, share)
    return best


def next_size(current: int, policy: lifecycle.StorageAutoscale) -> int | None:
    """The size to grow to from ``current`` bytes (whole MiB), bounded; None when already at the bound."""
    want = math.ceil(current * (100 + policy.scaling_threshold) / 100 / MIB) * MIB
    if policy.upper_bound is not None:
        bound = int(common.quantity_value(policy.upper_bound))
        if current >= bound:
            return None
        want = min(want, bound)
    return want


def decide(sizes: Mapping[str, lifecycle.MemberStorage], policy: lifecycle.StorageAutoscale, current: int,
           filed: str | None, in_flight: Sequence[str]) -> Decision:
    """Whether to file a VolumeExpansion now (pure; see the module doc). ``current``: the volumes' size in bytes;
    ``filed``: the request filed for this episode (this size), if any."""
    member, share = usage(sizes)
    what = (f"{member}'s database takes {share:.0f}% of its data volume" if member is not None
            else "no member's volume capacity is known")
    if member is None or share < policy.usage_threshold:
        return Decision(False, f"{what}: below the usage threshold ({policy.usage_threshold}%)")
    if policy.trigger != "On":
        return Decision(False, f"{what}, but autoscale's trigger is Off")
    grown = next_size(current, policy)
    if grown is None:
        return Decision(False, f"{what}, but the volumes are at the upper bound ({policy.upper_bound})")
    if filed is not None:
        return Decision(False, f"{what}; {filed} was filed for this size already")
    if in_flight:
        return Decision(False, f"{what}; waiting for {', '.join(in_flight)} to finish")
    return Decision(True, what, f"{grown // MIB}Mi")


def request_body(db: etcd_api.Etcd, current: int, size: str, mode: str) -> dict[str, Any]:
    """The VolumeExpansion of the episode at ``current`` bytes, named from it."""
    name = db.metadata.name or ""
    return ops_api.filed_request(etcd=name, namespace=db.metadata.namespace, etcd_uid=db.metadata.uid,
                                 name=f"{name}-storage-autoscale-{current}",
                                 trigger=constants.TRIGGER_STORAGE_AUTOSCALE,
                                 spec={"type": constants.OPS_TYPE_VOLUME_EXPANSION,
                                       "volumeExpansion": {"etcd": size, "mode": mode}})


async def maybe_file(k: kube.Kube, obj: Mapping[str, Any], db: etcd_api.Etcd,
                     sizes: Mapping[str, lifecycle.MemberStorage], in_flight: Sequence[str], *,
                     now: datetime.datetime) -> Decision | None:
    """Decide and, when due, file the VolumeExpansion through the filer (and its Event). None for an Etcd with
    no data volumes."""
    if db.spec.storage_type != constants.STORAGE_DURABLE:
        return None
    policy = db.storage_lifecycle.autoscale
    current = int(common.quantity_value(rules.storage_size(db.spec.storage)))
    episode = str(current)
    decision = decide(sizes, policy, current, filer.filed_for(obj.get("status"), constants.TRIGGER_STORAGE_AUTOSCALE,
                                                              episode), in_flight)
    if decision.file and decision.size is not None:
        filing = filer.Filing(constants.TRIGGER_STORAGE_AUTOSCALE, episode,
                              request_body(db, current, decision.size, policy.expansion_mode))
        if await filer.file(k, obj, filing, now=now):
            await k.event(dict(obj), reason=EVENT_AUTOSCALE,
                          message=f"Filed EtcdOpsRequest {filing.name} (VolumeExpansion to {decision.size}): "
                                  f"{decision.reason}")
    return decision
