"""The one filer of the operator's own requests: once per episode, named from the episode, restart-safe.

We test these aspects: a second call for the same episode files nothing (and creates nothing); the name is the one
the caller derived from the episode, so a decision taken again after a restart names the same request; a second
episode files again and replaces the record; a crash between the create and the record leaves no record, and the
next call gets AlreadyExists, records it and says it did not file; a recorded episode whose request was deleted is
re-filed only when the filing asks for it (CA rollover); the record keeps its first ``filedAt``; the caller's own
status changes are written with the record, and written when nothing is filed too.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from opsmanager import kube
from opsmanager.api import constants, lifecycle
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import etcdstatus, filer

T0 = datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.UTC)
Obj = dict[str, Any]


class Crash(Exception):
    """The operator died here."""


class Store:
    """What the filer needs of the Kubernetes client, over objects in memory: ``create`` (AlreadyExists on a name
    that exists), ``get``, ``list``, ``event`` and ``transact_status``; ``crash_on_status`` makes the next status write die."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {
            (constants.ETCD_KIND, "ns", "db"): {"metadata": {"name": "db", "namespace": "ns", "uid": "u-1"},
                                                "spec": {}}}
        self.creates = 0
        self.crash_on_status = False
        self.events: list[str] = []

    async def create(self, body: Obj) -> Obj:
        key = (body["kind"], body["metadata"]["namespace"], body["metadata"]["name"])
        self.creates += 1
        if key in self.objects:
            raise kube.AlreadyExists(f"{key} exists", status=409, reason="AlreadyExists")
        self.objects[key] = copy.deepcopy(body)
        return body

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    async def transact_status(self, api_version: str, kind: str, namespace: str, name: str,
                              *mutations: Callable[[Obj], Obj]) -> Obj | None:
        if self.crash_on_status:
            self.crash_on_status = False
            raise Crash()
        obj = self.objects[(kind, namespace, name)]
        status = copy.deepcopy(obj.get("status") or {})
        for mutate in mutations:
            status = mutate(status)
        obj["status"] = status
        return copy.deepcopy(obj)

    async def list(self, api_version: str, kind: str, namespace: str) -> list[Obj]:
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items() if (k, ns) == (kind, namespace)]

    async def event(self, involved: Obj, *, reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append(reason)

    def etcd(self) -> Obj:
        return copy.deepcopy(self.objects[(constants.ETCD_KIND, "ns", "db")])

    def requests(self) -> list[str]:
        return sorted(name for kind, _, name in self.objects if kind == constants.OPS_KIND)


def filing(slot: str, *, refile: bool = False) -> filer.Filing:
    """A scheduled backup's filing for ``slot``: the name is derived from the episode, as every trigger does."""
    body = ops_api.filed_request(etcd="db", namespace="ns", etcd_uid="u-1", name=f"db-backup-{slot}",
                                 trigger=constants.TRIGGER_SCHEDULED_BACKUP, spec={"type": "Backup", "backup": {}})
    return filer.Filing(constants.TRIGGER_SCHEDULED_BACKUP, slot, body, refile_if_deleted=refile)


async def file(store: Store, slot: str, *also: etcdstatus.Change, refile: bool = False,
               at: datetime.datetime = T0) -> bool:
    return await filer.file(store, store.etcd(), filing(slot, refile=refile),  # type: ignore[arg-type]
                            *also, now=at)


def record(store: Store) -> lifecycle.FiledRequest | None:
    return lifecycle.LifecycleMemory.of(store.etcd().get("status")).filed_by(constants.TRIGGER_SCHEDULED_BACKUP)


async def test_an_episode_is_filed_once_under_the_name_derived_from_it() -> None:
    store = Store()
    assert await file(store, "202612011000")
    assert store.requests() == ["db-backup-202612011000"]
    request = store.objects[(constants.OPS_KIND, "ns", "db-backup-202612011000")]
    assert request["metadata"]["labels"] == {constants.LABEL_OPS_TRIGGER: constants.TRIGGER_SCHEDULED_BACKUP}
    assert record(store) == lifecycle.FiledRequest(trigger="scheduled-backup", episode="202612011000",
                                                   request="db-backup-202612011000", filed_at="2026-12-01T10:00:00Z")
    assert not await file(store, "202612011000", at=T0 + datetime.timedelta(minutes=1))
    assert store.creates == 1, "the recorded episode needs no second create"
    assert record(store) is not None and record(store).filed_at == "2026-12-01T10:00:00Z"  # type: ignore[union-attr]


async def test_a_second_episode_files_again_and_replaces_the_record() -> None:
    store = Store()
    assert await file(store, "202612011000")
    assert await file(store, "202612011010")
    assert store.requests() == ["db-backup-202612011000", "db-backup-202612011010"]
    memory = lifecycle.LifecycleMemory.of(store.etcd().get("status"))
    assert [(f.trigger, f.episode) for f in memory.filed or ()] == [("scheduled-backup", "202612011010")]


async def test_a_crash_between_create_and_record_files_nothing_twice() -> None:
    store = Store()
    store.crash_on_status = True
    with pytest.raises(Crash):
        await file(store, "202612011000")
    assert store.requests() == ["db-backup-202612011000"] and record(store) is None
    # The restarted operator decides again: the same episode, so the same name.
    assert not await file(store, "202612011000"), "AlreadyExists is 'filed already', not a new filing"
    assert store.requests() == ["db-backup-202612011000"]
    assert record(store) is not None and record(store).request == "db-backup-202612011000"  # type: ignore[union-attr]


async def test_a_deleted_request_is_filed_again_only_when_the_filing_asks() -> None:
    store = Store()
    assert await file(store, "202612011000")
    del store.objects[(constants.OPS_KIND, "ns", "db-backup-202612011000")]
    assert not await file(store, "202612011000")
    assert store.requests() == []
    assert await file(store, "202612011000", refile=True)  # CA rollover: deleting a failed request retries it
    assert store.requests() == ["db-backup-202612011000"]
    assert not await file(store, "202612011000", refile=True)
    assert store.creates == 2


async def test_the_callers_changes_are_written_with_the_record_and_without_a_filing() -> None:
    store = Store()
    ready = etcdstatus.SetCondition("BackupUpToDate", "True", "BackupUpToDate", "fine")
    assert await file(store, "202612011000", ready)
    status = store.etcd()["status"]
    assert status["conditions"][0]["type"] == "BackupUpToDate" and record(store) is not None
    late = etcdstatus.SetCondition("BackupUpToDate", "False", "BackupTooOld", "old")
    assert not await file(store, "202612011000", late)
    assert store.etcd()["status"]["conditions"][0]["reason"] == "BackupTooOld"
