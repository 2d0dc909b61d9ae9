"""The storage rows of ``make bench`` (:mod:`e2e.bench`): ``VolumeExpansion`` and ``StorageMigration`` on real
storage, each beside the naive way of the same change, measured in the same run by the same writer.

Scenarios (``--scenario``): ``volume-expansion``, ``storage-migration``, or ``storage-ops`` for both (``all``
includes them). They run in a sandbox of their own: the real control plane over one real node with the sandbox's
CSI driver (``storage="csi"``: a loop device with XFS per volume, the real external-provisioner and
external-resizer; ``tests/e2e/test_csi_storage.py`` proves these types there). Every run starts from a fresh
3-member Etcd on ``standard`` 1 GiB claims, filled with ``--data-mb`` 1 MB values (a member's data is what a
migration copies), and the live writer and leader monitor of :func:`e2e.bench.measure` run through it, with the
no-loss check after it.

- **volume-expansion**: ``opsmanager`` is ``VolumeExpansion`` Online to 2 GiB (each claim, the file systems
  verified by the kubelet's stats, the StatefulSet's claim template, the Etcd's ``spec.storage``);
  ``naive-patch-claims`` is what ``kubectl patch pvc`` by hand does: the three claims asked for 2 GiB at once, done
  when each file system reports it. The naive way leaves the StatefulSet's claim template at 1 GiB, so a member
  added later gets the old size (``template_size`` in the record says which).
- **storage-migration**: ``opsmanager`` is ``StorageMigration`` to ``fast`` (a new member per member, joined as a
  learner and promoted, the old one removed with leadership moved off first, the claim template replaced with the
  pods kept, the old claims deleted); ``naive-replace-claims`` is the runbook done by hand: per member in ordinal
  order, the claim and the pod deleted, a claim of the same name created on ``fast``, and the StatefulSet left to
  start the pod again on it, empty, under the same member name (the member's raft state and vote are gone with its
  data; etcd may or may not take it back). Bounded per member as every naive strategy (``naive.MEMBER_TIMEOUT``).
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Sequence
from typing import Any

from e2e import bench, databench, naive, scenario
from opsmanager import kube
from opsmanager.api import constants
from opsmanager.cluster import naming, volumes
from opsmanager.etcd import errors as etcd_errors

Record = dict[str, Any]
Printer = bench.Printer

EXPANSION, MIGRATION = "volume-expansion", "storage-migration"
STORAGE_SCENARIOS = (EXPANSION, MIGRATION)
GI = 1 << 30
SIZE, GROWN = "1Gi", "2Gi"
SOURCE_CLASS, TARGET_CLASS = "standard", "fast"
NAIVE_PATCH, NAIVE_REPLACE = "naive-patch-claims", "naive-replace-claims"
STRATEGY_TEXT = {
    NAIVE_PATCH: "naive: every claim patched at once (kubectl patch pvc)",
    NAIVE_REPLACE: "naive: per member, claim and pod deleted, the claim made again on the new class",
}
ORDER = (bench.ENGINE, NAIVE_PATCH, NAIVE_REPLACE)


def select(name: str) -> list[str]:
    """``--scenario`` → the storage scenarios it runs."""
    if name in ("all", "storage-ops"):
        return list(STORAGE_SCENARIOS)
    return [name] if name in STORAGE_SCENARIOS else []


def storage_spec(size: str = SIZE, storage_class: str = SOURCE_CLASS) -> dict[str, Any]:
    """An Etcd's ``spec.storage`` (as ``extra``): ``size`` on ``storage_class``."""
    return {"storage": {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": size}}}}


async def _claims(sc: scenario.Scenario, db: str) -> dict[str, volumes.Claim]:
    out = {}
    for pod in naming.pods(db, 3):
        claim = await volumes.claim(sc.k, sc.namespace, pod)
        if claim is not None:
            out[pod] = claim
    return out


async def filesystems(sc: scenario.Scenario, db: str) -> dict[str, int]:
    """Each member's data file system size as its kubelet reports it (members not reported left out)."""
    out = {}
    for name in naming.pods(db, 3):
        pod = await sc.k.get("v1", "Pod", sc.namespace, name)
        size = None if pod is None else await volumes.filesystem_bytes(sc.k, sc.namespace, pod)
        if size is not None:
            out[name] = size
    return out


async def _template_size(sc: scenario.Scenario, db: str) -> str | None:
    sts = await sc.k.get("apps/v1", "StatefulSet", sc.namespace, naming.statefulset(db)) or {}
    for template in (sts.get("spec") or {}).get("volumeClaimTemplates") or ():
        return str(template["spec"]["resources"]["requests"]["storage"])
    return None


async def _fresh(sc: scenario.Scenario, db: str, megabytes: int, say: Printer) -> float:
    await sc.fresh_etcd(db, extra=storage_spec(), timeout=240)
    fill = await databench.fill(sc, db, megabytes)
    say(f"   {db}: {megabytes} MB written in {fill:.1f}s")
    return fill


def _record(key: str, operation: str, strategy: str, m: bench.Measured, **fields: Any) -> Record:
    return {"scenario": key, "operation": operation, "strategy": strategy,
            "method": STRATEGY_TEXT.get(strategy, strategy), "measured_at": bench.now_text(),
            "writes_failed": m.writes_failed, "writes_total": m.writes_ok + m.writes_failed,
            "max_write_stall_s": round(m.max_stall, 3), "elections": m.elections, "wall_s": round(m.wall, 2),
            "writer_notes": list(m.writer_notes), **m.record(), **fields}


# --- VolumeExpansion ----------------------------------------------------------------------------------------


async def _engine_request(sc: scenario.Scenario, name: str, db: str, type_: str, **spec: Any) -> dict[str, Any]:
    await sc.submit(name, db, type_, **spec)
    return await sc.watch_request(name, timeout=900)


async def expansion_engine(sc: scenario.Scenario, say: Printer, megabytes: int) -> Record:
    db = "grow-ours"
    fill = await _fresh(sc, db, megabytes, say)
    m = await bench.measure(sc, db, lambda: _engine_request(
        sc, f"{db}-grow", db, constants.OPS_TYPE_VOLUME_EXPANSION, volumeExpansion={"etcd": GROWN, "mode": "Online"}))
    phase, failure = databench._outcome(m.value, m.error)
    sizes = await filesystems(sc, db)
    record = _record(EXPANSION, "VolumeExpansion", bench.ENGINE, m, outcome=phase, failure=failure,
                     ok=phase == constants.PHASE_SUCCESSFUL, fill_s=round(fill, 1), data_mb=megabytes,
                     filesystems_gib=sorted(round(s / GI, 2) for s in sizes.values()),
                     template_size=await _template_size(sc, db))
    await sc.drop_etcd(db)
    return record


async def _patch_claims(sc: scenario.Scenario, db: str) -> str:
    """The naive expansion: every claim asked for the new size at once, done when every file system has it."""
    await naive.set_paused(sc.k, sc.namespace, db, True)
    for pod in naming.pods(db, 3):
        await volumes.request_size(sc.k, sc.namespace, pod, GROWN)

    async def grown() -> bool:
        sizes = await filesystems(sc, db)
        return len(sizes) == 3 and all(s > 1.8 * GI for s in sizes.values())

    await sc.wait_for("every file system grown", grown, timeout=300, interval=0.5)
    return "completed"


async def expansion_naive(sc: scenario.Scenario, say: Printer, megabytes: int) -> Record:
    db = "grow-naive"
    fill = await _fresh(sc, db, megabytes, say)
    m = await bench.measure(sc, db, lambda: _patch_claims(sc, db))
    sizes = await filesystems(sc, db)
    record = _record(EXPANSION, "VolumeExpansion", NAIVE_PATCH, m, outcome=m.value or m.error,
                     ok=m.value == "completed", fill_s=round(fill, 1), data_mb=megabytes,
                     filesystems_gib=sorted(round(s / GI, 2) for s in sizes.values()),
                     template_size=await _template_size(sc, db))
    await sc.drop_etcd(db)
    return record


# --- StorageMigration ---------------------------------------------------------------------------------------


async def migration_engine(sc: scenario.Scenario, say: Printer, megabytes: int) -> Record:
    db = "move-ours"
    fill = await _fresh(sc, db, megabytes, say)
    m = await bench.measure(sc, db, lambda: _engine_request(
        sc, f"{db}-move", db, constants.OPS_TYPE_STORAGE_MIGRATION, migration={"storageClassName": TARGET_CLASS},
        timeout="15m"))
    phase, failure = databench._outcome(m.value, m.error)
    claims = await _claims(sc, db)
    record = _record(MIGRATION, "StorageMigration", bench.ENGINE, m, outcome=phase, failure=failure,
                     ok=phase == constants.PHASE_SUCCESSFUL, fill_s=round(fill, 1), data_mb=megabytes,
                     classes=sorted(str(c.storage_class) for c in claims.values()))
    await sc.drop_etcd(db)
    return record


async def _replace_claim(sc: scenario.Scenario, pod: str) -> naive.MemberStep:
    """One member by hand: its claim and pod deleted, the claim made again on the target class, the pod started
    again by the StatefulSet on it; bounded by the naive strategies' wait."""
    started = time.monotonic()
    old = await sc.k.get("v1", "PersistentVolumeClaim", sc.namespace, volumes.claim_name(pod)) or {}
    await sc.k.delete("v1", "PersistentVolumeClaim", sc.namespace, volumes.claim_name(pod))
    await sc.k.delete("v1", "Pod", sc.namespace, pod)

    async def claim_gone() -> bool:
        return await sc.k.get("v1", "PersistentVolumeClaim", sc.namespace, volumes.claim_name(pod)) is None

    await sc.wait_for(f"{pod}'s claim deleted", claim_gone, timeout=120, interval=0.2)
    spec = dict(old.get("spec") or {})
    await sc.k.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": volumes.claim_name(pod), "namespace": sc.namespace,
                                    "labels": (old.get("metadata") or {}).get("labels") or {}},
                       "spec": {"storageClassName": TARGET_CLASS, "accessModes": spec.get("accessModes"),
                                "resources": spec.get("resources")}})
    while time.monotonic() - started < naive.MEMBER_TIMEOUT + 120:
        if naive.pod_ready(await sc.k.get("v1", "Pod", sc.namespace, pod)):
            return naive.MemberStep(pod, "delete", time.monotonic() - started, True)
        await asyncio.sleep(0.1)  # the poll interval
    return naive.MemberStep(pod, "delete", time.monotonic() - started, False)


async def _replace_claims(sc: scenario.Scenario, db: str) -> naive.NaiveOutcome:
    await naive.set_paused(sc.k, sc.namespace, db, True)
    return naive.NaiveOutcome(NAIVE_REPLACE, tuple([await _replace_claim(sc, pod) for pod in naming.pods(db, 3)]))


async def migration_naive(sc: scenario.Scenario, say: Printer, megabytes: int) -> Record:
    db = "move-naive"
    fill = await _fresh(sc, db, megabytes, say)
    m = await bench.measure(sc, db, lambda: _replace_claims(sc, db))
    outcome: naive.NaiveOutcome | None = m.value
    healthy = await naive.cluster_healthy(sc, db)
    claims = await _claims(sc, db)
    record = _record(MIGRATION, "StorageMigration", NAIVE_REPLACE, m,
                     outcome=(outcome.summary if outcome is not None else m.error) + ("" if healthy
                                                                                     else "; cluster unhealthy"),
                     ok=outcome is not None and outcome.completed and healthy, fill_s=round(fill, 1),
                     data_mb=megabytes, classes=sorted(str(c.storage_class) for c in claims.values()),
                     steps=[s.describe() for s in outcome.steps] if outcome is not None else [])
    await sc.drop_etcd(db)
    return record


# --- the sandbox, the bar, the page -------------------------------------------------------------------------


async def bench_storage(workdir: pathlib.Path, keys: Sequence[str], say: Printer, *, megabytes: int = 50) -> list[Record]:
    """The storage scenarios in ``keys``, in one sandbox: the real control plane, one real node, CSI storage."""
    records: list[Record] = []
    started = time.monotonic()
    parts = {EXPANSION: (("VolumeExpansion", expansion_engine), ("VolumeExpansion", expansion_naive)),
             MIGRATION: (("StorageMigration", migration_engine), ("StorageMigration", migration_naive))}
    async with scenario.Scenario(workdir / "storage", printer=lambda _line: None, namespace="bench",
                                 control_plane=bench.KUBERNETES, nodes=1, storage="csi",
                                 etcd_version=scenario.BUILT_ETCD_VERSION) as sc:
        for key in keys:
            for operation, part in parts[key]:
                say(f"\n-- {operation}: {part.__name__}")
                try:
                    record = await part(sc, say, megabytes)
                except (RuntimeError, TimeoutError, kube.KubeError, etcd_errors.EtcdError, OSError) as err:
                    record = {"scenario": key, "operation": operation, "strategy": part.__name__,
                              "outcome": f"{type(err).__name__}: {err}"[:500], "ok": False}
                say(f"   -> {record.get('method', record['strategy'])}: {record['outcome']}; wall "
                    f"{record.get('wall_s')}s; writes failed {record.get('writes_failed')}/"
                    f"{record.get('writes_total')}; max stall {record.get('max_write_stall_s')}s; read back "
                    f"{record.get('read_back_ok')}; HashKV {record.get('hashkv_agree')}")
                records.append(record)
    for record in records:
        record.update(control_plane=bench.KUBERNETES, nodes=1, storage="csi",
                      etcd_version=scenario.BUILT_ETCD_VERSION, scenario_elapsed_s=round(time.monotonic() - started))
    return records


def problems(records: Sequence[Record]) -> list[str]:
    """Our rows held to the bar: Successful, 0 failed writes, every acknowledged write read back, HashKV agreeing;
    the expansion's file systems at the new size and its claim template too; the migration's claims all on the
    target class."""
    out = []
    for r in records:
        if r.get("strategy") != bench.ENGINE or r.get("scenario") not in STORAGE_SCENARIOS:
            continue
        bad = (not r.get("ok") or r.get("writes_failed") or r.get("read_back_ok") is not True
               or r.get("hashkv_agree") is not True)
        if r["scenario"] == EXPANSION:
            bad = bad or r.get("template_size") != GROWN or any(s < 1.8 for s in r.get("filesystems_gib") or [0])
        else:
            bad = bad or r.get("classes") != [TARGET_CLASS] * 3
        if bad:
            out.append(f"{r['operation']}: {r.get('outcome')} {r.get('failure', '')}, {r.get('writes_failed')} failed "
                       f"writes, read back {r.get('read_back_ok')}, HashKV {r.get('hashkv_agree')}, "
                       f"file systems {r.get('filesystems_gib', '–')} GiB, template {r.get('template_size', '–')}, "
                       f"classes {r.get('classes', '–')}")
    return out


TEXT = """
`e2e/storagebench.py` (`--scenario storage-ops`, or `volume-expansion` / `storage-migration`): the real control
plane over one real node with the sandbox's CSI driver (a loop device with XFS per volume; the real
external-provisioner and external-resizer), etcd {etcd}. Every run starts from a fresh 3-member Etcd on `standard`
1 GiB claims filled with {mb} values of 1 MB, and the live writer, the leader monitor and the no-loss check of the
table above run through it. The naive rows pause the Etcd first, as every naive strategy does.

- *VolumeExpansion*, ours: `VolumeExpansion` Online to 2 GiB. Naive: the three claims patched at once, as
  `kubectl patch pvc` by hand, until each file system reports 2 GiB. *template* is the StatefulSet's claim size
  after: the naive way leaves it at 1 GiB, so the next member added gets the old size.
- *StorageMigration*, ours: `StorageMigration` to `fast`. Naive: the runbook by hand: per member in ordinal order,
  its claim and pod deleted and the claim made again on `fast`; the StatefulSet starts the pod on the new, empty
  claim under the same member name (its raft log and vote gone), bounded per member as every naive strategy.

What the numbers say (one run): our VolumeExpansion takes longer than patching the claims, because it grows one
member at a time and checks each file system from the kubelet's statfs (which the kubelets refresh every 10 s),
then writes the claim template and the Etcd's `spec.storage`; the naive way is done when the file systems are, and
leaves the template at 1 GiB. The naive migration does not get past its first member: the StatefulSet controller
starts the deleted pod again at once, on the claim still being deleted, and the claim's protection finalizer then
keeps that claim for as long as a pod uses it, so the member stays down (HashKV cannot agree with one member not
serving) until someone scales the StatefulSet down or deletes it, which is what our migration's claim-template
replacement does with the pods kept.
"""


def markdown_lines(records: Sequence[Record]) -> list[str]:
    """The section of ``docs/benchmarks.md`` for the storage rows."""
    rows = sorted((r for r in records if r.get("scenario") in STORAGE_SCENARIOS),
                  key=lambda r: (STORAGE_SCENARIOS.index(r["scenario"]),
                                 ORDER.index(r["strategy"]) if r.get("strategy") in ORDER else len(ORDER)))
    out = ["## Storage operations: VolumeExpansion and StorageMigration on CSI volumes", ""]
    if not rows:
        return [*out, "Not measured yet (`python -m e2e.bench --scenario storage-ops --json docs/benchmarks.json`).",
                ""]
    first = rows[0]
    out += TEXT.strip("\n").format(etcd=first.get("etcd_version", "–"), mb=first.get("data_mb", "–")).splitlines()
    out += ["", "| operation | strategy | outcome | wall s | writes failed/total | max write stall s | elections | "
                "all writes read back | HashKV agrees | after |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        after = (f"file systems {r.get('filesystems_gib')} GiB, template {r.get('template_size')}"
                 if r["scenario"] == EXPANSION else f"classes {r.get('classes')}")
        out.append(f"| {r['operation']} | {r.get('method', r['strategy'])} | {r['outcome']} | {r.get('wall_s', '–')} "
                   f"| {r.get('writes_failed', '–')}/{r.get('writes_total', '–')} | {r.get('max_write_stall_s', '–')} "
                   f"| {r.get('elections', '–')} | {r.get('read_back_ok', '–')} | {r.get('hashkv_agree', '–')} "
                   f"| {after} |")
    steps = [f"- {r['method']}: " + "; ".join(r["steps"]) for r in rows if r.get("steps")]
    return [*out, "", *steps, ""] if steps else [*out, ""]
