"""The storage lifecycle of one Etcd, as auto-renew is for certificates: every member's database size, in-use size
and quota (and the etcd version each runs, for ``status.version``), read from the members (``Status``, and the quota from each member's metrics) every
``spec.storageLifecycle.scanInterval``, written to ``status.storage``, published as metrics (the quota alert fires
before ``NOSPACE``), and, when the policy says so, a Defragment request filed by the operator itself.

Why: etcd never gives space back by itself. A compaction (etcd's ``--auto-compaction-*``, or a Compact request)
frees pages inside the file; only a defragmentation returns them, and a file that keeps its high-water mark walks
into the quota (``NOSPACE``: no writes at all). The decision (:func:`decide`) is pure:

- **reclaimable**: on the member where it is largest, the file's size minus what is in use;
- **over**: that is at least ``autoDefragment.reclaimablePercent`` of the file and at least
  ``minReclaimableBytes`` — a small database is never defragmented for nothing;
- **once per episode**: the request filed is remembered on the Etcd (annotation
  ``opsmanager.dev/auto-defragment``) until the share drops below the threshold again — a defragmentation that
  failed is not retried in a loop (its Failed condition says why; a person files the next one);
- **never beside another request**: while any request of this Etcd is not finished, nothing is filed (the queue
  would hold it anyway, and the member sizes are in motion).

The request: ``<etcd>-auto-defragment-<unix time>``, ``Defragment``, labelled ``ops.opsmanager.dev/trigger:
auto-defragment``, owned by the Etcd; created first and remembered second (a crash in between files it again
under another name at worst — the queue runs them one after the other and the second finds nothing to give back).
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
from opsmanager.cluster import credentials, members, naming
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.lifecycle import metrics
from opsmanager.tls import identity as tls_identity

ANNOTATION_AUTO_DEFRAGMENT: Final = "opsmanager.dev/auto-defragment"  # {"request": name, "since": RFC 3339}
EVENT_AUTO_DEFRAGMENT: Final = "AutoDefragmentRequested"
TIMEOUT: Final = 3.0


@dataclasses.dataclass(frozen=True)
class Decision:
    file: bool
    reason: str
    forget: bool = False  # the episode is over: drop the memory of the request filed in it


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
        return Decision(False, f"{what}, but autoDefragment is disabled")
    if remembered is not None:
        return Decision(False, f"{what}; {remembered} was filed for this episode already")
    if in_flight:
        return Decision(False, f"{what}; waiting for {', '.join(in_flight)} to finish")
    return Decision(True, what)


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
                                                   db_size_in_use_bytes=status.db_size_in_use, quota_bytes=quota)
            versions.add(status.version)
    return out, versions


def request_body(db: etcd_api.Etcd, now: datetime.datetime) -> dict[str, Any]:
    name = db.metadata.name or ""
    return ops_api.filed_request(etcd=name, namespace=db.metadata.namespace, etcd_uid=db.metadata.uid,
                                 name=f"{name}-auto-defragment-{int(now.timestamp())}",
                                 trigger=constants.TRIGGER_AUTO_DEFRAGMENT,
                                 spec={"type": constants.OPS_TYPE_DEFRAGMENT, "defragment": {}})


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

    def mutate(st: dict[str, Any]) -> dict[str, Any]:
        out = {**st, "storage": record.model_dump(by_alias=True, exclude_none=True, mode="json")}
        if versions:
            out["version"] = ",".join(sorted(versions))
        return out

    await k.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns, name, mutate)
    metrics.publish_storage(ns, name, sizes)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    remembered = _remembered(annotations.get(ANNOTATION_AUTO_DEFRAGMENT))
    requests = await k.list(constants.OPS_API_VERSION, constants.OPS_KIND, ns)
    in_flight = [r["metadata"]["name"] for r in requests
                 if ((r.get("spec") or {}).get("databaseRef") or {}).get("name") == name
                 and (r.get("status") or {}).get("phase") not in constants.TERMINAL_OPS_PHASES]
    decision = decide(sizes, db.storage_lifecycle.auto_defragment, remembered, in_flight)
    if decision.forget:
        await _remember(k, ns, name, None)
    if decision.file:
        body = request_body(db, now)
        try:
            await k.create(body)
        except kube.AlreadyExists:
            pass
        request = body["metadata"]["name"]
        await _remember(k, ns, name, json.dumps({"request": request, "since": conditions.rfc3339(now)}))
        await k.event(dict(obj), reason=EVENT_AUTO_DEFRAGMENT,
                      message=f"Filed EtcdOpsRequest {request} (Defragment): {decision.reason}")
    return decision


def _remembered(raw: str | None) -> str | None:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return str(value.get("request")) if isinstance(value, dict) and value.get("request") else None


async def _remember(k: kube.Kube, ns: str, name: str, value: str | None) -> None:
    await k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns, name,
                  {"metadata": {"annotations": {ANNOTATION_AUTO_DEFRAGMENT: value}}})
