"""The storage lifecycle's decision, pure: when the operator files a Defragment by itself.

We test these aspects: the member with the most to give back decides; both the share and the byte floor must be
passed (a small database is never defragmented); disabled files nothing; once per episode (a request remembered is
not filed again, and the memory is dropped once the share falls below the threshold); never beside a request in
flight; the due rule from ``status.storage.lastScanTime``.
"""

from __future__ import annotations

import datetime

from opsmanager.api import lifecycle
from opsmanager.lifecycle import storage

MiB = 1024 * 1024
POLICY = lifecycle.AutoDefragment(reclaimable_percent=50, min_reclaimable_bytes=64 * MiB)


def sizes(*pairs: tuple[int, int]) -> dict[str, lifecycle.MemberStorage]:
    return {f"db-{i}": lifecycle.MemberStorage(db_size_bytes=size * MiB, db_size_in_use_bytes=used * MiB)
            for i, (size, used) in enumerate(pairs)}


def test_the_member_with_the_most_to_give_back_decides() -> None:
    assert storage.reclaimable(sizes((200, 150), (300, 100), (100, 90))) == ("db-1", 200 * MiB, 300 * MiB)
    assert storage.reclaimable({}) == (None, 0, 0)


def test_both_the_share_and_the_floor_must_be_passed() -> None:
    assert storage.decide(sizes((300, 100)), POLICY, None, []).file  # 67 %, 200 MiB
    assert not storage.decide(sizes((300, 200)), POLICY, None, []).file  # 33 %
    small = storage.decide(sizes((100, 10)), POLICY, None, [])  # 90 %, but only 90 MiB: above the floor...
    assert small.file
    assert not storage.decide(sizes((60, 5)), POLICY, None, []).file  # ...55 MiB is not


def test_disabled_files_nothing() -> None:
    off = lifecycle.AutoDefragment(enabled=False, reclaimable_percent=50, min_reclaimable_bytes=0)
    decision = storage.decide(sizes((300, 100)), off, None, [])
    assert not decision.file and "disabled" in decision.reason


def test_once_per_episode_and_never_beside_a_request_in_flight() -> None:
    again = storage.decide(sizes((300, 100)), POLICY, "db-auto-defragment-1", [])
    assert not again.file and not again.forget and "db-auto-defragment-1" in again.reason
    over = storage.decide(sizes((300, 120)), POLICY, "db-auto-defragment-1", [])
    assert not over.file and not over.forget
    ended = storage.decide(sizes((300, 290)), POLICY, "db-auto-defragment-1", [])
    assert not ended.file and ended.forget  # below the threshold: the next episode may file again
    busy = storage.decide(sizes((300, 100)), POLICY, None, ["db-restart"])
    assert not busy.file and "db-restart" in busy.reason


def test_a_scan_is_due_after_the_interval() -> None:
    now = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
    obj = {"metadata": {"name": "db", "namespace": "ns"},
           "spec": {"version": "3.5.1", "storageLifecycle": {"scanInterval": "30s"}},
           "status": {"storage": {"lastScanTime": "2026-12-02T11:59:40Z"}}}
    assert not storage.due(obj, now)
    assert storage.due(obj, now + datetime.timedelta(seconds=10))
    assert storage.due({**obj, "status": {}}, now)
