"""The storage rows of the benchmark (``e2e.storagebench``), their pure parts: what ``--scenario`` runs, the bar
our rows are held to, and the page section drawn from the records."""

from __future__ import annotations

from typing import Any

from e2e import bench, storagebench


def test_select_scenarios() -> None:
    assert storagebench.select("all") == ["volume-expansion", "storage-migration"]
    assert storagebench.select("storage-ops") == ["volume-expansion", "storage-migration"]
    assert storagebench.select("storage-migration") == ["storage-migration"]
    assert storagebench.select("rotate") == []
    assert set(storagebench.STORAGE_SCENARIOS) | {"storage-ops"} <= set(bench.SCENARIOS)


def _ours(key: str, **fields: Any) -> dict[str, Any]:
    base = {"scenario": key, "strategy": bench.ENGINE, "operation": key, "method": bench.ENGINE,
            "outcome": "Successful", "ok": True, "writes_failed": 0, "writes_total": 100, "read_back_ok": True,
            "hashkv_agree": True, "wall_s": 30.0, "max_write_stall_s": 0.2, "elections": 0}
    extra = ({"filesystems_gib": [1.99, 1.99, 1.99], "template_size": "2Gi"} if key == storagebench.EXPANSION
             else {"classes": ["fast", "fast", "fast"]})
    return {**base, **extra, **fields}


def test_our_rows_are_held_to_the_bar() -> None:
    good = [_ours(storagebench.EXPANSION), _ours(storagebench.MIGRATION)]
    assert storagebench.problems(good) == []
    bad = [_ours(storagebench.EXPANSION, template_size="1Gi"), _ours(storagebench.MIGRATION, writes_failed=1),
           _ours(storagebench.MIGRATION, classes=["fast", "fast", "standard"]),
           _ours(storagebench.EXPANSION, read_back_ok=False)]
    assert len(storagebench.problems(bad)) == 4
    naive_broken = {**_ours(storagebench.MIGRATION), "strategy": storagebench.NAIVE_REPLACE, "ok": False}
    assert storagebench.problems([naive_broken]) == []  # a naive row may break its cluster


def test_the_page_section_has_every_row_in_order() -> None:
    naive_row = {**_ours(storagebench.EXPANSION), "strategy": storagebench.NAIVE_PATCH,
                 "method": storagebench.STRATEGY_TEXT[storagebench.NAIVE_PATCH], "template_size": "1Gi"}
    lines = storagebench.markdown_lines([naive_row, _ours(storagebench.MIGRATION), _ours(storagebench.EXPANSION)])
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[1] for r in rows] == [bench.ENGINE, naive_row["method"], bench.ENGINE]
    assert "template 1Gi" in rows[1] and "template 2Gi" in rows[0]
    assert "Not measured yet" in storagebench.markdown_lines([])[2]
