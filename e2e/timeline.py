"""Pictures of what an operation does to its clients: one timeline per run, drawn from data only.

A :class:`Timeline` is what a benchmark run observed, in seconds since the action started: the latency of every
acknowledged write, every failed write, when each member was down (its pod missing, terminating or not Ready),
every leader change, and the request's steps (each from the end of the one before to its own end). A figure puts
the runs of one operation (ours and the naive strategies) one above the other on the same time scale.
:func:`draw_scale` draws the scale curve: makespan against the number of clusters, with the CPU floor.

Everything here is pure and deterministic: the same JSON gives the same SVG, byte for byte (matplotlib with a fixed
hash salt and no date), so a test can redraw every figure under ``docs/benchmarks/`` from the JSON beside it.
:class:`DownTracker` (the only I/O) polls the pods while a run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import re
from collections.abc import Mapping, Sequence
from typing import Any, Self

from opsmanager import kube

# Points per run: a 20 ms writer over a minute is 3,000 writes; more than this are thinned evenly (every failed write
# is kept), so a figure stays a few hundred kB.
MAX_POINTS = 4000


@dataclasses.dataclass
class Timeline:
    """One run, in seconds since its action started."""

    label: str  # the strategy, as the figure names it
    wall: float
    writes: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # (start, latency ms), acknowledged
    failed: list[float] = dataclasses.field(default_factory=list)  # when each failed write started
    down: dict[str, list[tuple[float, float]]] = dataclasses.field(default_factory=dict)  # member -> intervals
    leader_changes: list[float] = dataclasses.field(default_factory=list)
    steps: list[tuple[str, float, float]] = dataclasses.field(default_factory=list)  # (condition, start, end)

    def to_json(self) -> dict[str, Any]:
        writes = self.writes
        if len(writes) > MAX_POINTS:
            stride = len(writes) / MAX_POINTS
            writes = [writes[int(i * stride)] for i in range(MAX_POINTS)]
        return {"label": self.label, "wall_s": round(self.wall, 3),
                "writes": [[round(t, 3), round(ms, 2)] for t, ms in writes],
                "failed": [round(t, 3) for t in self.failed],
                "down": {m: [[round(a, 3), round(b, 3)] for a, b in spans] for m, spans in sorted(self.down.items())},
                "leader_changes": [round(t, 3) for t in self.leader_changes],
                "steps": [[name, round(a, 3), round(b, 3)] for name, a, b in self.steps]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Self:
        return cls(label=str(doc["label"]), wall=float(doc["wall_s"]),
                   writes=[(float(t), float(ms)) for t, ms in doc.get("writes", [])],
                   failed=[float(t) for t in doc.get("failed", [])],
                   down={m: [(float(a), float(b)) for a, b in spans] for m, spans in doc.get("down", {}).items()},
                   leader_changes=[float(t) for t in doc.get("leader_changes", [])],
                   steps=[(str(n), float(a), float(b)) for n, a, b in doc.get("steps", [])])


def steps_from_transitions(transitions: Sequence[tuple[float, str, str]]) -> list[tuple[str, float, float]]:
    """The request's steps as bands, from its condition transitions as observed (``(seconds, type, status)``): each
    step (a condition without ``--``, ``Running`` and the terminal ones left out) from the end of the step before
    (the first: from 0) to when it turned True."""
    ends: dict[str, float] = {}
    for at, type_, status in transitions:
        if "--" in type_ or type_ in ("Running", "Successful", "Failed") or status != "True":
            continue
        ends.setdefault(type_, at)
    out, start = [], 0.0
    for name, end in sorted(ends.items(), key=lambda item: item[1]):
        out.append((name, start, end))
        start = end
    return out


def down_spans(samples: Sequence[tuple[float, Mapping[str, bool]]], end: float) -> dict[str, list[tuple[float, float]]]:
    """Pure: from polls ``(seconds, {member: up})`` the intervals each member was down (a member first seen in a
    later poll was down before it — a member added by a scale-up is not: it starts at its first poll)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    since: dict[str, float] = {}
    for at, states in samples:
        for member, up in states.items():
            spans.setdefault(member, [])
            if not up and member not in since:
                since[member] = at
            elif up and member in since:
                spans[member].append((since.pop(member), at))
    for member, at in since.items():
        spans[member].append((at, end))
    return spans


class DownTracker:
    """Polls ``db``'s member pods (``<db>-<n>``) every ``interval`` s while it runs: when each was down."""

    def __init__(self, kube: Any, namespace: str, db: str, *, interval: float = 0.1) -> None:
        self.kube, self.namespace, self.interval = kube, namespace, interval
        self._name = re.compile(rf"^{re.escape(db)}-\d+$")
        self.samples: list[tuple[float, dict[str, bool]]] = []
        self.missed = 0  # samples lost to a transient API error
        self._task: asyncio.Task[None] | None = None
        self._started = 0.0

    @staticmethod
    def up(pod: Mapping[str, Any]) -> bool:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (pod.get("status") or {}).get("conditions") or [])

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                pods = await self.kube.list("v1", "Pod", self.namespace)
            except kube.KubeError as err:
                if not kube.is_transient(err):
                    raise  # read by stop(): a tracker that cannot read pods fails the run, not a blank picture
                self.missed += 1  # a loaded API server loses a sample, not the run
            else:
                self.samples.append((loop.time() - self._started,
                                     {p["metadata"]["name"]: self.up(p) for p in pods
                                      if self._name.match(p["metadata"]["name"])}))
            await asyncio.sleep(self.interval)

    def start(self, started: float) -> None:
        """Start polling; times count from ``started`` (``time.monotonic``)."""
        self._started = started
        self._task = asyncio.create_task(self._run(), name="down-tracker")

    async def stop(self, end: float) -> dict[str, list[tuple[float, float]]]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return down_spans(self.samples, end)


# --- drawing ------------------------------------------------------------------------------------------------------

STEP_COLOURS = ("#dbe9f6", "#fde2c8", "#d9f0d3", "#eadcf0", "#fbd5d5", "#f3f0c4", "#d5eef0", "#e8e8e8")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("svg")
    matplotlib.rcParams.update({"svg.hashsalt": "opsmanager-bench", "svg.fonttype": "path", "font.size": 8,
                                "axes.titlesize": 9, "path.simplify": True})
    import matplotlib.pyplot as plt

    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    return buf.getvalue()


def draw_operation(title: str, runs: Sequence[Timeline]) -> str:
    """One operation's runs, one panel each, on one time scale: write latency (points, log scale), failed writes
    (red marks at the top), members down (grey bars, one row each, under the points), leader changes (dashed
    lines) and the request's steps (bands behind, named). Returns the SVG."""
    plt = _pyplot()
    end = max([r.wall for r in runs] + [1.0])
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.3 * len(runs)), sharex=True, squeeze=False)
    for ax, run in zip((a[0] for a in axes), runs, strict=True):
        lat = [ms for _, ms in run.writes] or [1.0]
        members = sorted(run.down)
        # the members' rows go under the lowest latency, one factor of 2 apart on the log scale
        floor = min(min(lat), 1.0) / 1.5
        top, bottom = max(max(lat) * 3, 100.0), floor / 2 ** (len(members) + 0.5)
        for i, (name, a, b) in enumerate(run.steps):
            ax.axvspan(a, b, color=STEP_COLOURS[i % len(STEP_COLOURS)], zorder=0, lw=0)
            ax.text((a + b) / 2, top / 1.6, name, ha="center", va="top", fontsize=6, rotation=90 if b - a < end / 12
                    else 0, zorder=1)
        for row, member in enumerate(members):
            y = floor / 2 ** (row + 1)
            for a, b in run.down[member]:
                ax.plot([a, b], [y, y], color="#555555", lw=3, solid_capstyle="butt", zorder=2)
            ax.text(end * 1.025, y, member, ha="left", va="center", fontsize=6, color="#555555")
        for t in run.leader_changes:
            ax.axvline(t, color="#7a3db8", ls="--", lw=1, zorder=3)
        if run.writes:
            ax.scatter([t for t, _ in run.writes], [ms for _, ms in run.writes], s=2, color="#1f5fa8", lw=0,
                       zorder=4, rasterized=False)
        if run.failed:
            ax.scatter(run.failed, [top / 1.15] * len(run.failed), marker="x", s=14, color="#c62828", lw=1, zorder=5)
        ax.set_yscale("log")
        ax.set_ylim(bottom, top)
        ax.set_xlim(-end * 0.02, end * 1.02)
        ax.set_ylabel("write latency, ms")
        failed = f", {len(run.failed)} writes failed" if run.failed else ", no write failed"
        changes = len(run.leader_changes)
        ax.set_title(f"{run.label}: {run.wall:.1f} s{failed}, {changes} leader change{'' if changes == 1 else 's'}",
                     loc="left")
    axes[-1][0].set_xlabel("seconds since the request (or the naive strategy) started; grey bars: members down "
                           "(named at right); dashed: leader changes; red x: failed writes")
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    svg = _svg(fig)
    plt.close(fig)
    return svg


def draw_scale(title: str, points: Sequence[Mapping[str, Any]]) -> str:
    """Makespan against the number of clusters, with the CPU floor and N × one cluster alone's time: ``points``
    are ``{"clusters", "makespan_s", "cpu_floor_s", "single_wall_s"}``. Returns the SVG."""
    plt = _pyplot()
    pts = sorted(points, key=lambda p: int(p["clusters"]))
    n = [int(p["clusters"]) for p in pts]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(n, [float(p["makespan_s"]) for p in pts], marker="o", color="#1f5fa8", label="makespan")
    ax.plot(n, [float(p["cpu_floor_s"]) for p in pts], marker="s", ls="--", color="#555555",
            label="CPU floor (the work ÷ the cores)")
    ax.plot(n, [1.3 * float(p["cpu_floor_s"]) for p in pts], ls=":", color="#c62828", label="1.3 × CPU floor")
    ax.set_xlabel("clusters operated at once")
    ax.set_ylabel("seconds")
    ax.set_xticks(n)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", frameon=False)
    ax.set_title(title, loc="left")
    svg = _svg(fig)
    plt.close(fig)
    return svg


__all__ = ["DownTracker", "Timeline", "down_spans", "draw_operation", "draw_scale", "steps_from_transitions"]
