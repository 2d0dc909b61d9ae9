"""What the lifecycle remembers lives in ``status.lifecycle``, changed by typed changes; the old annotations are read
once.

We test these aspects: the scan's memory written by a scan reads back the same (announced keys, first sightings,
the recheck); a scan request keeps the earliest pending time after the last scan, inside the transaction; an Etcd an
older operator annotated keeps the scan's, auto-renew's and auto-defragment's memory until the first typed write,
which then wins (and auto-renew's and auto-defragment's legacy request becomes the filer's record); the storage
scan files one Defragment per episode through the filer, named from the episode, across a crash before the create.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from opsmanager.api import constants, lifecycle
from opsmanager.cluster import etcdstatus
from opsmanager.lifecycle import autorenew, metrics, scan, storage, verdict
from tests.cluster import test_filer

T0 = datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.UTC)
SEC = datetime.timedelta(seconds=1)


def etcd(status: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "db", "namespace": "ns", "annotations": annotations or {}},
            "spec": {"tls": {}}, "status": status or {}}


def recorded(*, recheck: datetime.datetime | None = None, pending: datetime.datetime | None = None,
             status: dict[str, Any] | None = None) -> dict[str, Any]:
    change = scan.ScanRecorded(
        {"lastScanTime": "2026-12-01T10:00:00Z"}, etcdstatus.SetCondition("CertificatesValid", "True", "Valid", "ok"),
        frozenset({"X:ab", "S:cd:60"}), {"ab": T0 - 60 * SEC}, T0, recheck, pending)
    return change.apply(status or {})


def test_a_scans_memory_reads_back_from_status() -> None:
    status = recorded(recheck=T0 + 10 * SEC)
    memory = scan.memory(etcd(status))
    assert memory == scan.Memory(frozenset({"X:ab", "S:cd:60"}), {"ab": T0 - 60 * SEC}, T0 + 10 * SEC)
    assert status["lifecycle"]["tlsScan"]["announced"] == ["S:cd:60", "X:ab"]
    assert status["tls"] == {"lastScanTime": "2026-12-01T10:00:00Z"}
    assert status["conditions"][0]["type"] == "CertificatesValid"


def test_a_scan_request_keeps_the_earliest_pending_time_after_the_last_scan() -> None:
    status = recorded()  # scanned at T0, nothing pending
    later = scan.RequestScan(T0 + 30 * SEC).apply(status)
    assert scan.scan_requested(etcd(later)) == T0 + 30 * SEC
    earlier = scan.RequestScan(T0 + 5 * SEC).apply(later)
    assert scan.scan_requested(etcd(earlier)) == T0 + 5 * SEC
    assert scan.RequestScan(T0 + 60 * SEC).apply(earlier) == earlier  # the pending one's scan covers it
    assert scan.RequestScan(T0 - 5 * SEC).apply(status) == status  # the last scan already covered it


def test_an_older_operators_scan_annotations_are_read_until_the_first_typed_write() -> None:
    annotations = {scan.ANNOTATION_EVENT_KEYS: "S:cd:60,X:ab",
                   scan.ANNOTATION_SECRET_SEEN: verdict.encode_seen({"ab": T0 - 60 * SEC}),
                   scan.ANNOTATION_SCAN_REQUESTED: "2026-12-01T10:00:05Z"}
    legacy = scan.memory(etcd(annotations=annotations))
    assert legacy == scan.Memory(frozenset({"X:ab", "S:cd:60"}), {"ab": T0 - 60 * SEC}, T0 + 5 * SEC)
    status = recorded(pending=legacy.requested)  # the first scan keeps what was pending
    assert scan.memory(etcd(status, annotations)).requested == T0 + 5 * SEC
    moved = recorded(status={"lifecycle": {"tlsScan": {"announced": ["X:ef"]}}})
    assert scan.memory(etcd(moved, annotations)).announced == {"X:ab", "S:cd:60"}  # typed wins over annotations


def test_an_older_operators_auto_renew_memory_becomes_typed_with_its_request_filed() -> None:
    state = verdict.AutoRenewState("db-auto-renew-1", T0 + 60 * SEC, T0, ("db-1",))
    old = etcd(annotations={autorenew.ANNOTATION_AUTO_RENEW: state.encode()})
    assert autorenew.memory(old) == state
    status = autorenew.Remembered(state).apply({})
    assert autorenew.memory(etcd(status, old["metadata"]["annotations"])) == state
    filed = lifecycle.LifecycleMemory.of(status).filed_by(constants.TRIGGER_AUTO_RENEW)
    assert filed is not None and filed.request == "db-auto-renew-1"


def test_an_older_operators_auto_defragment_episode_becomes_typed() -> None:
    annotation = json.dumps({"request": "db-auto-defragment-1", "since": "2026-12-01T10:00:00Z"})
    episode = storage.remembered(etcd(annotations={storage.ANNOTATION_AUTO_DEFRAGMENT: annotation}))
    assert episode == storage.Episode(T0, "db-auto-defragment-1")
    status = storage.ScanRecorded(lifecycle.StorageStatus(last_scan_time="2026-12-01T10:01:00Z"), frozenset(),
                                  episode).apply({})
    assert storage.remembered(etcd(status)) == episode
    assert storage.remembered(etcd(storage.ScanRecorded(
        lifecycle.StorageStatus(), frozenset(), storage.Episode()).apply(status))) == storage.Episode()


MiB = 1024 * 1024


async def test_auto_defragment_files_once_per_episode_under_the_episodes_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage scan through the filer: the episode is recorded with the scan, its request named from it, filed
    once; a crash before the create files the same name; the share dropping ends the episode, the next one files
    again."""
    sizes = {"db-0": lifecycle.MemberStorage(db_size_bytes=1000 * MiB, db_size_in_use_bytes=100 * MiB)}

    async def observe(k: Any, db: Any) -> tuple[dict[str, lifecycle.MemberStorage], set[str]]:
        return dict(sizes), {"3.5.1"}

    monkeypatch.setattr(storage, "observe", observe)
    try:
        await _files_once_per_episode(sizes)
    finally:
        metrics.forget_storage("ns", "db")  # the process's registry: other tests read it


async def _files_once_per_episode(sizes: dict[str, lifecycle.MemberStorage]) -> None:
    store = test_filer.Store()
    db = store.objects[(constants.ETCD_KIND, "ns", "db")]
    db["spec"] = {"version": "3.5.1"}
    db["status"] = {"conditions": [{"type": constants.COND_PROVISIONED, "status": "True", "reason": "Up", "message": "",
                                    "lastTransitionTime": "2026-12-01T09:00:00Z"}]}
    create = store.create

    async def crash(body: dict[str, Any]) -> dict[str, Any]:
        raise test_filer.Crash()

    store.create = crash  # type: ignore[method-assign]

    async def scan_at(seconds: int) -> bool:
        decision = await storage.scan_once(store, store.etcd(), now=T0 + seconds * SEC)  # type: ignore[arg-type]
        assert decision is not None
        return decision.file

    with pytest.raises(test_filer.Crash):
        await scan_at(0)
    store.create = create  # type: ignore[method-assign]
    assert await scan_at(60) and not await scan_at(120)
    first = f"db-auto-defragment-{int(T0.timestamp())}"  # named from when the episode's request was first due
    assert store.requests() == [first] and store.events == ["AutoDefragmentRequested"]
    store.objects[(constants.OPS_KIND, "ns", first)]["status"] = {"phase": "Successful"}
    sizes["db-0"] = lifecycle.MemberStorage(db_size_bytes=1000 * MiB, db_size_in_use_bytes=900 * MiB)
    assert not await scan_at(180)  # below the policy: the episode is over
    sizes["db-0"] = lifecycle.MemberStorage(db_size_bytes=1000 * MiB, db_size_in_use_bytes=100 * MiB)
    assert await scan_at(240)
    assert store.requests() == [first, f"db-auto-defragment-{int(T0.timestamp()) + 240}"]
