"""An Etcd's status has one writer: :func:`opsmanager.cluster.etcdstatus.write`, applying typed changes."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Callable
from typing import Any

from opsmanager.api import constants
from opsmanager.cluster import etcdstatus

ROOT = pathlib.Path(__file__).resolve().parents[2] / "opsmanager"
WRITER = ROOT / "cluster" / "etcdstatus.py"


def _status_writes_of_etcd(path: pathlib.Path) -> list[int]:
    """Lines of ``path`` that call ``transact_status`` (or patch a ``status`` subresource) on the Etcd kind."""
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        subresource = any(kw.arg == "subresource" for kw in node.keywords)
        if "ETCD_KIND" in names and (node.func.attr == "transact_status"
                                     or (node.func.attr == "patch" and subresource)):
            out.append(node.lineno)
    return out


def test_only_the_writer_writes_an_etcd_status() -> None:
    found = {str(p.relative_to(ROOT.parent)): lines for p in sorted(ROOT.rglob("*.py"))
             if p != WRITER and (lines := _status_writes_of_etcd(p))}
    assert found == {}, f"write an Etcd's status through opsmanager.cluster.etcdstatus.write: {found}"


class StatusStore:
    """What the writer needs of the Kubernetes client: ``transact_status`` over objects in memory, counting the
    transactions (the real one's re-read, no-op skip and optimistic lock are tested with the client)."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects
        self.transactions = 0

    async def transact_status(self, api_version: str, kind: str, namespace: str, name: str,
                              *mutations: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any] | None:
        assert (api_version, kind) == (constants.ETCD_API_VERSION, constants.ETCD_KIND)
        self.transactions += 1
        obj = self.objects.get((namespace, name))
        if obj is None:
            return None
        status = obj.get("status") or {}
        for mutate in mutations:
            status = mutate(status)
        obj["status"] = status
        return obj


async def test_changes_apply_in_order_in_one_write() -> None:
    k = StatusStore({("ns", "e"): {"metadata": {"name": "e", "namespace": "ns"}, "spec": {}}})
    first = etcdstatus.SetCondition("Ready", "False", "Down", "no member answers")
    second = etcdstatus.SetCondition("Ready", "True", "Up", "every member answers")
    written = await etcdstatus.write(k,  # type: ignore[arg-type]
                                     "ns", "e", first, second)
    assert written is not None
    (ready,) = written["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Up")
    assert k.transactions == 1
    assert await etcdstatus.write(k, "ns", "gone", first) is None  # type: ignore[arg-type]
