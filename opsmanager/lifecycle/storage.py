"""The storage lifecycle of one Etcd, as auto-renew is for certificates: every member's database size, in-use size
and quota (and the etcd version each runs, for ``status.version``), read from the members (``Status``, and the quota from each member's metrics) every
``spec.storageLifecycle.scanInterval``, written to ``status.storage``, published as metrics (the quota alert fires
before ``NOSPACE``), and, when the policy says so, a Defragment request filed by the operator itself — or a
VolumeExpansion, when a database fills its data volume (:mod:`opsmanager.lifecycle.autoscale`).

Why: etcd never gives space back by itself. A compaction (etcd's ``--auto-compaction-*``, or a Compact request)
frees pages inside the file; only a defragmentation returns them, and a file that keeps its high-water mark walks
into the quota (``NOSPACE``: no writes at all). The decision (:func:`decide`) is pure:

- **reclaimable**: on the member where it is largest, the file's size minus what is in use;
- **over**: that is at least ``autoDefragment.reclaimablePercent`` of the file and at least
  ``minReclaimableBytes`` — a small database is never defragmented for nothing;
- **once per episode**: the episode (when its request was first due, ``status.lifecycle.autoDefragment``) and the
  request filed in it (the filer's ``status.lifecycle.filed``) are remembered on the Etcd until the share drops
  below the threshold again — a defragmentation that failed is not retried in a loop (its Failed condition says
  why; a person files the next one);
- **never beside another request**: while any request of this Etcd is not finished, nothing is filed (the queue
  would hold it anyway, and the member sizes are in motion).

The request: ``<etcd>-auto-defragment-<unix time the episode's request was first due>``, ``Defragment``, labelled
``ops.opsmanager.dev/trigger: auto-defragment``, owned by the Etcd, filed by :mod:`opsmanager.cluster.filer`. The
episode is written (with the scan's ``status.storage``) before the request is created, and the filing after it, so
a crash anywhere in between files the same name again and gets AlreadyExists: one request per episode.
The scan stands aside while a request holds the Etcd paused, while it is halted, and before it was ever Ready.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opsmanager import kube
from opsmanager.api import conditions, constants, lifecycle, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import credentials, etcdstatus, filer, members, naming, volumes
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.lifecycle import autoscale, metrics
from opsmanager.tls import identity as tls_identity

# Legacy: where an older operator kept the episode, now status.lifecycle. Read only by legacy_remembered(), never
# written; removal note: delete it with that function.
ANNOTATION_AUTO_DEFRAGMENT: Final = "opsmanager.dev/auto-defragment"  # {"request": name, "since": RFC 3339}
EVENT_AUTO_DEFRAGMENT: Final = "AutoDefragmentRequested"
TIMEOUT: Final = 3.0


@dataclasses.dataclass(frozen=True)
class Decision:
    file: bool
    reason: str
    forget: bool = False  # the episode is over: drop the memory of the request filed in it
    over: bool = False  # the reclaimable share is over the policy: an episode is under way


def reclaimable(sizes: Mapping[str, lifecycle.MemberStorage]) -> tuple[str | None, int, int]:
    """(member, reclaimable bytes, its file size) where a defragmentation would give back the most."""
    best: tuple[str | None, int, int] = (None, 0, 0)
    for name, size in sizes.items():
        free = max(0, size.db_size_bytes - size.db_size_in_use_bytes)
        if free > best[1]:
            best = (name, free, size.db_size_bytes)
    return best


def decide(sizes: Mapping[str, lifecycle.MemberStorage], policy: lifecycle.AutoDefragment,
           remembered: str | None, in_flight: Sequence[str]) -> Decision:
    """Whether to file a Defragment now (pure; see the module doc)."""
    member, free, size = reclaimable(sizes)
    share = free * 100 / size if size else 0.0
    over = member is not None and share >= policy.reclaimable_percent and free >= policy.min_reclaimable_bytes
    what = (f"{member} could give back {free} of {size} bytes ({share:.0f}%)" if member is not None
            else "nothing to give back")
    if not over:
        return Decision(False, f"{what}: below the policy ({policy.reclaimable_percent}% and "
                               f"{policy.min_reclaimable_bytes} bytes)", forget=remembered is not None)
    if not policy.enabled:
        return Decision(False, f"{what}, but autoDefragment is disabled", over=True)
    if remembered is not None:
        return Decision(False, f"{what}; {remembered} was filed for this episode already", over=True)
    if in_flight:
        return Decision(False, f"{what}; waiting for {', '.join(in_flight)} to finish", over=True)
    return Decision(True, what, over=True)


def due(obj: Mapping[str, Any], now: datetime.datetime) -> bool:
    """Has ``scanInterval`` passed since ``status.storage.lastScanTime`` (or was there never a scan)?"""
    db = etcd_api.Etcd.model_validate(obj)
    last = ((obj.get("status") or {}).get("storage") or {}).get("lastScanTime")
    if not last:
        return True
    return now - conditions.parse_rfc3339(last) >= db.storage_lifecycle.scan_interval_delta


async def observe(k: kube.Kube, db: etcd_api.Etcd) -> tuple[dict[str, lifecycle.MemberStorage], set[str]]:
    """Every member's sizes and quota, from the members themselves (a member that does not answer is left out),
    and the etcd versions they report."""
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    pods = await members.pods(k, ns, name)
    identity = None
    if db.spec.tls is not None:
        identity, _ = await tls_identity.client_identity(k, ns, name, [db.spec.tls])
    schemes = ("https",) if identity is not None else ("http",)
    eps = members.endpoints(name, ns, pods, naming.pods(name, db.spec.replicas), schemes=schemes,
                            peer_scheme=schemes[0], metrics=True)
    if not eps:
        return {}, set()
    capacities = await volumes.capacities(k, ns, naming.pods(name, db.spec.replicas))
    out: dict[str, lifecycle.MemberStorage] = {}
    versions: set[str] = set()
    async with etcd_client.EtcdClient(eps, tls=identity, timeout=TIMEOUT,
                                      credentials=await credentials.for_etcd(k, db)) as client:
        for ep_name, status in (await client.statuses(timeout=TIMEOUT)).items():
            if not isinstance(status, etcd_client.MemberStatus):
                continue
            try:
                quota = await client.quota_bytes(ep_name, timeout=TIMEOUT)
            except etcd_errors.EtcdError:
                quota = None
            out[ep_name] = lifecycle.MemberStorage(db_size_bytes=status.db_size,
                                                   db_size_in_use_bytes=status.db_size_in_use, quota_bytes=quota,
                                                   volume_capacity_bytes=capacities.get(ep_name))
            versions.add(status.version)
    return out, versions


def request_body(db: etcd_api.Etcd, since: datetime.datetime) -> dict[str, Any]:
    """The Defragment request of the episode that began at ``since``, named from it."""
    name = db.metadata.name or ""
    return ops_api.filed_request(etcd=name, namespace=db.metadata.namespace, etcd_uid=db.metadata.uid,
                                 name=f"{name}-auto-defragment-{int(since.timestamp())}",
                                 trigger=constants.TRIGGER_AUTO_DEFRAGMENT,
                                 spec={"type": constants.OPS_TYPE_DEFRAGMENT, "defragment": {}})


@dataclasses.dataclass(frozen=True)
class Episode:
    """Auto-defragment's memory: when the current episode's request was first due, and the request filed in it."""

    since: datetime.datetime | None = None
    request: str | None = None


def remembered(obj: Mapping[str, Any]) -> Episode:
    """The episode ``status.lifecycle`` records (``autoDefragment`` and the filer's ``filed``), else what an older
    operator annotated (:func:`legacy_remembered`)."""
    status = obj.get("status") or {}
    memory = lifecycle.LifecycleMemory.of(status).auto_defragment
    if memory is None:
        return legacy_remembered((obj.get("metadata") or {}).get("annotations") or {})
    if not memory.episode_since:
        return Episode()
    since = conditions.parse_rfc3339(memory.episode_since)
    return Episode(since, filer.filed_for(status, constants.TRIGGER_AUTO_DEFRAGMENT, memory.episode_since))


def legacy_remembered(annotations: Mapping[str, Any]) -> Episode:
    """The episode an older operator kept in the annotation :data:`ANNOTATION_AUTO_DEFRAGMENT`, read until the
    scan first writes ``status.lifecycle.autoDefragment``. Removal note: delete with that constant once no supported
    upgrade starts from an operator that wrote it."""
    try:
        value = json.loads(annotations.get(ANNOTATION_AUTO_DEFRAGMENT) or "null")
        since = conditions.parse_rfc3339(str(value["since"]))
    except (ValueError, TypeError, KeyError):
        return Episode()
    return Episode(since, str(value["request"])) if value.get("request") else Episode()


@dataclasses.dataclass(frozen=True)
class ScanRecorded:
    """One storage scan: ``status.storage``, ``status.version`` (when any member answered) and the episode of
    ``status.lifecycle.autoDefragment`` (with, for an older operator's episode, the request it filed)."""

    record: lifecycle.StorageStatus
    versions: frozenset[str]
    episode: Episode

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        out = {**status, "storage": self.record.to_dict()}
        if self.versions:
            out["version"] = ",".join(sorted(self.versions))
        since = conditions.rfc3339(self.episode.since) if self.episode.since is not None else None
        if since is not None and self.episode.request is not None:
            out = filer.Remember(lifecycle.FiledRequest(trigger=constants.TRIGGER_AUTO_DEFRAGMENT, episode=since,
                                                        request=self.episode.request)).apply(out)
        memory = lifecycle.LifecycleMemory.of(out)
        return memory.model_copy(update={
            "auto_defragment": lifecycle.AutoDefragmentMemory(episode_since=since)}).into(out)


async def scan_once(k: kube.Kube, obj: Mapping[str, Any], *, now: datetime.datetime) -> Decision | None:
    """Scan one Etcd: ``status.storage``, the metrics, and the auto-defragment decision carried out. None when it
    stands aside (paused, halted, never Ready)."""
    status = obj.get("status") or {}
    if pause.is_paused(status) or not conditions.is_true(status.get("conditions"), constants.COND_PROVISIONED):
        return None
    db = etcd_api.Etcd.model_validate(obj)
    if db.spec.halted:
        return None
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    sizes, versions = await observe(k, db)
    member, free, _size = reclaimable(sizes)
    record = lifecycle.StorageStatus(last_scan_time=conditions.rfc3339(now), members=sizes,
                                     reclaimable_bytes=free if member is not None else 0)
    episode = remembered(obj)
    requests = await k.list(constants.OPS_API_VERSION, constants.OPS_KIND, ns)
    in_flight = [r["metadata"]["name"] for r in requests
                 if ((r.get("spec") or {}).get("databaseRef") or {}).get("name") == name
                 and (r.get("status") or {}).get("phase") not in constants.TERMINAL_OPS_PHASES]
    decision = decide(sizes, db.storage_lifecycle.auto_defragment, episode.request, in_flight)
    if decision.forget or not decision.over:
        episode = Episode()  # over: the next episode may file again
    elif decision.file and episode.since is None:
        episode = Episode(now.replace(microsecond=0))  # recorded before the create: the name is derived from it
    # One write: the scan, and the episode before its request is filed (a crash between them re-files the same name).
    await etcdstatus.write(k, ns, name, ScanRecorded(record, frozenset(versions), episode))
    metrics.publish_storage(ns, name, sizes)
    if decision.file and episode.since is not None:
        body = request_body(db, episode.since)
        filing = filer.Filing(constants.TRIGGER_AUTO_DEFRAGMENT, conditions.rfc3339(episode.since), body)
        if await filer.file(k, obj, filing, now=now):
            await k.event(dict(obj), reason=EVENT_AUTO_DEFRAGMENT,
                          message=f"Filed EtcdOpsRequest {filing.name} (Defragment): "
                                  f"{decision.reason}")
            return decision  # one request per scan: the autoscaler waits for this one to finish
    await autoscale.maybe_file(k, obj, db, sizes, in_flight, now=now)
    return decision
