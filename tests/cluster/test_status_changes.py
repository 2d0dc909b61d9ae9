"""The typed changes of an Etcd's status that live outside the provisioner (theirs: tests/provisioner/test_status.py).

We test these aspects: each sets what it names and nothing else, leaves its argument as it was (the writer may
apply it again on a conflict), and applying it twice changes nothing more (the writer skips a no-op write).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opsmanager.api import auth, backup, pause
from opsmanager.cluster import etcdstatus, render
from opsmanager.ops.operations import update_version

SNAPSHOT = backup.SnapshotRecord(key="etcd/ns/db/20260101T000000Z-rev42.db", sha256="ab" * 32, revision=42,
                                 size_bytes=4096, taken_at="2026-01-01T00:00:00Z")
RESTORE = backup.RestoreRecord(key=SNAPSHOT.key, revision=42, request="restore", at="2026-01-02T00:00:00Z")
BEFORE: dict[str, Any] = {"phase": "Ready", "backup": {"lastFailure": "bucket gone", "lastFailureTime": "t",
                                                       "lastScheduled": "s"},
                          "conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "m",
                                          "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


@pytest.mark.parametrize("change, expected", [
    (auth.AuthEnabled(), {"authEnabled": True}),
    (update_version.VersionVerified("3.5.2"), {"version": "3.5.2"}),
    (render.JoinExisting(), {"initialClusterState": "existing"}),
    (backup.BackupSucceeded(SNAPSHOT, 3), {"backup": {"lastScheduled": "s", "snapshots": 3, "lastSuccess": {
        "key": SNAPSHOT.key, "sha256": "ab" * 32, "revision": 42, "sizeBytes": 4096,
        "takenAt": "2026-01-01T00:00:00Z"}}}),
    (backup.Restored(RESTORE), {"backup": {**BEFORE["backup"], "lastRestore": {
        "key": SNAPSHOT.key, "revision": 42, "request": "restore", "at": "2026-01-02T00:00:00Z"}}}),
], ids=lambda v: type(v).__name__ if not isinstance(v, dict) else "")
def test_a_change_sets_its_field_only_and_leaves_its_argument_alone(change: etcdstatus.Change,
                                                                   expected: dict[str, Any]) -> None:
    before = copy.deepcopy(BEFORE)
    after = change.apply(before)
    assert before == BEFORE
    assert after == {**BEFORE, **expected}
    assert change.apply(copy.deepcopy(after)) == after


def test_the_pause_changes_are_the_contracts_functions() -> None:
    held = pause.Pause("rotate").apply(BEFORE)
    assert pause.held_by_request(held) == "rotate" and pause.held_by_request(BEFORE) is None
    assert pause.Release("someone-else").apply(held) == held
    assert pause.Release("rotate").apply(held) == BEFORE
