"""The benchmark's pictures (``docs/benchmarks/``): every figure is the drawing of the JSON beside it, and the page
shows every figure its records name.

We test these aspects:
- each SVG under ``docs/benchmarks/`` is, byte for byte, what :func:`e2e.bench.render_figure` draws from the JSON
  of the same name (so no figure is edited by hand or left from older data), and each JSON has its SVG;
- every figure a record of ``docs/benchmarks.json`` names exists and ``docs/benchmarks.md`` shows it;
- :func:`e2e.bench.draw_figures` puts one operation's runs in one figure (taking their timelines out of the
  records) and draws the scale curve from the scale records; the page then shows both;
- the timeline's pure parts: the request's steps as bands, the members' downtime from polls; the poller loses a
  sample to a busy API server and fails the run on a refusal.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import time
from collections.abc import Callable

import pytest

from e2e import bench
from e2e import timeline as tl
from opsmanager import kube

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
FIGURES = DOCS / bench.FIGURES


def figure_files() -> list[pathlib.Path]:
    return sorted(FIGURES.glob("*.svg")) if FIGURES.is_dir() else []


def test_there_are_figures_and_each_json_has_its_drawing() -> None:
    svgs = figure_files()
    assert svgs, f"no figure under {FIGURES}: make bench draws them"
    assert {p.stem for p in FIGURES.glob("*.json")} == {p.stem for p in svgs}


@pytest.mark.slow  # matplotlib draws each figure again: about a second each
def test_every_figure_is_the_drawing_of_the_json_beside_it() -> None:
    svgs = figure_files()
    assert svgs
    for svg in svgs:
        doc = json.loads(svg.with_suffix(".json").read_text())
        assert bench.render_figure(doc) == svg.read_text(), f"{svg.name} is not drawn from {svg.stem}.json"


def test_the_page_shows_every_figure_its_records_name() -> None:
    records = json.loads((DOCS / "benchmarks.json").read_text())["runs"]
    named = {r["figure"] for r in records if r.get("figure")}
    assert named, "no record names a figure"
    page = (DOCS / "benchmarks.md").read_text()
    for path in named:
        assert (DOCS / path).is_file(), path
        assert f"]({path})" in page, path
    assert any(r.get("scenario") == "scale" and r.get("figure") for r in records), "the scale curve"


def _run(label: str, wall: float) -> dict[str, object]:
    return tl.Timeline(label, wall, writes=[(0.1 * i, 2.0 + i % 3) for i in range(int(wall * 10))],
                       failed=[1.0], down={"db-0": [(1.0, 2.5)]}, leader_changes=[2.0],
                       steps=[("CertificateSynced", 0.0, 0.5), ("RestartPods", 0.5, wall)]).to_json()


def _engine(strategy: str, wall: float) -> dict[str, object]:
    rec = bench.run_record(scenario_key="restart", operation="restart", strategy=strategy, outcome="Successful",
                           ok=True, healthy_after=True, writes_failed=0, writes_ok=100, max_stall=0.1, elections=1,
                           leader_moves=1, wall=wall, member_restarts=3, bare_restart_sum=3.0)
    rec[bench.CLIENT_TIMELINE] = _run(bench.STRATEGY_TEXT[strategy], wall)
    return rec


@pytest.mark.slow  # draws two figures
def test_an_operations_runs_become_one_figure_and_the_scale_records_a_curve(tmp_path: pathlib.Path) -> None:
    records = [_engine(bench.ENGINE, 4.0), _engine("naive-sigkill-ordinal", 3.0),
               {"scenario": "scale", "strategy": bench.ENGINE, "clusters": 10, "makespan_s": 50.0, "cpu_floor_s": 40.0,
                "single_wall_s": 10.0},
               {"scenario": "scale", "strategy": bench.ENGINE, "clusters": 20, "makespan_s": 110.0,
                "cpu_floor_s": 80.0, "single_wall_s": 10.0}]
    bench.draw_figures(records, tmp_path / bench.FIGURES)
    assert all(bench.CLIENT_TIMELINE not in r for r in records)
    assert [r["figure"] for r in records] == ["benchmarks/restart-embedded.svg"] * 2 + \
        ["benchmarks/scale-embedded.svg"] * 2
    doc = json.loads((tmp_path / bench.FIGURES / "restart-embedded.json").read_text())
    assert [r["label"] for r in doc["runs"]] == [bench.STRATEGY_TEXT[bench.ENGINE],
                                                  bench.STRATEGY_TEXT["naive-sigkill-ordinal"]]
    svg = (tmp_path / bench.FIGURES / "restart-embedded.svg").read_text()
    assert svg.startswith("<?xml") and svg == bench.render_figure(doc)
    scale = json.loads((tmp_path / bench.FIGURES / "scale-embedded.json").read_text())
    assert [p["clusters"] for p in scale["points"]] == [10, 20]
    page = "\n".join(bench.figure_lines(records))
    assert "](benchmarks/restart-embedded.svg)" in page and "](benchmarks/scale-embedded.svg)" in page
    assert "](benchmarks/restart-embedded.svg)" in bench.render_markdown({"runs": records[:2]})


def test_steps_are_bands_from_the_end_of_the_step_before() -> None:
    transitions = [(0.1, "Running", "True"), (1.0, "CertificateSynced", "False"), (1.5, "CertificateSynced", "True"),
                   (2.0, "EvictPod--db-1", "True"), (9.0, "RestartPods", "True"), (9.5, "Successful", "True")]
    assert tl.steps_from_transitions(transitions) == [("CertificateSynced", 0.0, 1.5), ("RestartPods", 1.5, 9.0)]


def test_downtime_comes_from_polls_and_a_member_still_down_at_the_end_is_cut_there() -> None:
    samples = [(0.0, {"db-0": True, "db-1": True}), (1.0, {"db-0": False, "db-1": True}),
               (2.0, {"db-0": True, "db-1": True}), (3.0, {"db-0": True, "db-1": False, "db-3": True})]
    assert tl.down_spans(samples, end=4.0) == {"db-0": [(1.0, 2.0)], "db-1": [(3.0, 4.0)], "db-3": []}


class _Pods:
    """Pod lists as an API server answers them: the errors given first (None: an answer), then answers."""

    def __init__(self, *errors: Exception | None) -> None:
        self.errors = list(errors)

    async def list(self, api_version: str, kind: str, namespace: str) -> list[dict[str, object]]:
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return [{"metadata": {"name": "db-0"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}]


async def _until(done: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)


async def test_the_downtime_tracker_loses_a_sample_to_a_busy_api_server_and_fails_on_a_refusal() -> None:
    busy = tl.DownTracker(_Pods(kube.Unavailable("503: the server is currently unable to handle the request")),
                          "ns", "db", interval=0.01)
    busy.start(time.monotonic())
    await _until(lambda: bool(busy.samples))
    assert await busy.stop(time.monotonic()) == {"db-0": []} and busy.missed == 1
    refused = tl.DownTracker(_Pods(kube.Forbidden("pods is forbidden")), "ns", "db", interval=0.01)
    refused.start(time.monotonic())
    await _until(lambda: refused._task is not None and refused._task.done())
    with pytest.raises(kube.Forbidden):
        await refused.stop(time.monotonic())
