"""Pure parts of the benchmark: records, merging, the markdown page, /proc parsing, API path grouping,
percentiles and the webhook fuzz generator. No processes, no sockets."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from e2e import bench, scale, scenario, webhook_load
from opsmanager.webhook import admission


def _engine(**over: object) -> dict[str, object]:
    base = dict(scenario_key="add-tls", operation="add TLS", strategy=bench.ENGINE, outcome="Successful", ok=True,
                healthy_after=True, writes_failed=0, writes_ok=900, max_stall=0.05, elections=2, leader_moves=2,
                wall=20.0, member_restarts=6, bare_restart_sum=10.0)
    base.update(over)
    return bench.run_record(**base)  # type: ignore[arg-type]


def _scale(**over: object) -> dict[str, object]:
    """A scale record as e2e/scale.py writes one (the figures a test does not set are fixed)."""
    return {"scenario": "scale", "strategy": bench.ENGINE, "operation": "add TLS", "single_wall_s": 20.0,
            "operator_peak_rss_mb": 120.5,
            "operator_cpu_s": 30.2, "api_requests_per_operation": 400, "canary_writes_failed": 0,
            "canary_writes_total": 2000, "canary_unplanned_elections": 0, "api_requests_by_verb": {"GET pods": 10},
            "cores": 2, "members_idle_cores": 0.41, "machine_idle_cores": 0.52, "machine_busy_cores": 1.93,
            "operator_cores": 0.36, "sandbox_cores": 0.27, "members_busy_cores": 1.2, "members_idle_tls_cores": 0.45,
            "cpu_floor_s": 31.0, "cpu_floor_over_single": 1.55, "single_cpu_s": 0.6, "single_members_cpu_s": 1.7,
            "single_sandbox_cpu_s": 0.9, "single_engine_passes": 28, "single_provisioner_passes": 10,
            "operator_cpu_s_per_operation": 0.7, "members_cpu_s_per_operation": 2.9, "sandbox_cpu_s_per_operation": 1.0,
            "engine_passes_per_operation": 50, "provisioner_passes_per_operation": 20, **over}


def test_run_record_derives_totals_ratio_and_unplanned_elections() -> None:
    rec = _engine(writes_failed=3, writes_ok=97, elections=5, leader_moves=2, wall=25.0, bare_restart_sum=10.0)
    assert rec["writes_total"] == 100
    assert rec["unplanned_elections"] == 3
    assert rec["wall_over_bare_restarts"] == 2.5
    assert rec["method"] == bench.STRATEGY_TEXT[bench.ENGINE]
    assert bench.ratio(5.0, 0.0) is None


def test_merge_replaces_only_the_rerun_pairs() -> None:
    old = [_engine(), _engine(strategy="naive-https-only-restart", ok=False), _engine(scenario_key="rotate")]
    new = [_engine(wall=99.0)]
    merged = bench.merge_records(old, new)
    assert len(merged) == 3
    engine_add = [r for r in merged if r["scenario"] == "add-tls" and r["strategy"] == bench.ENGINE]
    assert [r["wall_s"] for r in engine_add] == [99.0]


def test_order_puts_engine_first_and_operations_in_their_order() -> None:
    recs = [_engine(scenario_key="restart", strategy="naive-sigkill-ordinal"), _engine(scenario_key="restart"),
            _engine(strategy="naive-https-only-restart"), {"scenario": "bare-restart", "strategy": "pod delete"}]
    ordered = sorted(recs, key=bench.order_key)
    assert [(r["scenario"], r["strategy"]) for r in ordered] == [
        ("bare-restart", "pod delete"), ("add-tls", "naive-https-only-restart"), ("restart", bench.ENGINE),
        ("restart", "naive-sigkill-ordinal")]


def test_verdict_flags_engine_failures_but_not_naive_ones() -> None:
    assert bench.verdict([_engine(), _engine(strategy="naive-https-only-restart", writes_failed=40, ok=False)]) == []
    problems = bench.verdict([_engine(writes_failed=1)])
    assert len(problems) == 1 and "1 failed writes" in problems[0]
    assert bench.verdict([_engine(elections=3, leader_moves=2)])
    scale_rec = {"scenario": "scale", "strategy": bench.ENGINE, "successful": 9, "clusters": 10,
                 "canary_writes_failed": 0, "canary_unplanned_elections": 0}
    assert bench.verdict([scale_rec])


def test_select_scenarios() -> None:
    assert bench.select("all") == (list(bench.OPERATION_KEYS), True, True)
    assert bench.select("rotate") == (["rotate"], False, False)
    assert bench.select("scale") == ([], True, False)
    assert bench.select("webhook") == ([], False, True)
    assert set(bench.OPERATION_KEYS) == {"add-tls", "rotate", "issuer-change", "remove-tls", "restart", "scale-up",
                                         "upgrade", "defragment", "resize-in-place"}
    # every operation beside a naive baseline, but the in-place resize (nobody restarts nothing another way)
    assert [op.key for op in bench.OPERATIONS if not op.naive] == ["resize-in-place"]


def test_markdown_has_machine_tables_and_every_row(tmp_path: pathlib.Path) -> None:
    records = [
        {"scenario": "bare-restart", "strategy": "pod delete", "operation": "bare member restart",
         "steps": ["bare-0 3.20s"], "bare_restart_sum_s": 9.6, "measured_at": "2026-11-29T15:00:00Z"},
        _engine(), _engine(strategy="naive-https-only-restart", outcome="members not back within 30s: x-2",
                           ok=False, healthy_after=False, writes_failed=29, steps=["x-2 delete: not back within 30s"]),
        _scale(clusters=10, successful=10, makespan_s=40.0, makespan_over_single=2.0),
        _engine(control_plane="kubernetes"),
        _scale(clusters=20, successful=20, control_plane="kubernetes", makespan_s=48.0, makespan_over_single=2.4,
               makespan_over_cpu_floor=1.2, cpu_floor_s=40.0, control_plane_cores=0.2,
               control_plane_cpu_s_per_operation=0.5, single_control_plane_cpu_s=0.4, slowest_request="s03",
               per_request_wall_s={"s03": 48.0}, slowest_request_waits=["14s until MoveLeader--s03-1=True"]),
        {"scenario": "webhook-latency", "strategy": bench.ENGINE, "rate_per_s": 500.0, "seconds": 20.0,
         "reviews": 10000, "p50_ms": 1.5, "p99_ms": 6.2, "max_ms": 12.0, "achieved_per_s": 499.9, "errors": 0,
         "api_reads": 0, "webhook_cpu_ms_per_review": 0.45, "saturation_per_s": 1500, "saturation_step_s": 5.0,
         "saturation_p99_bound_ms": 50.0, "machine_load": "load average 1.0", "machine_load_before": "load 0.5",
         "send_lag_p99_ms": 1.0, "generator_cpu_ms_per_review": 0.5,
         "saturation_steps": [{"rate_per_s": 500.0, "p99_ms": 6.0, "achieved_per_s": 500.0, "errors": 0},
                              {"rate_per_s": 1000.0, "p99_ms": 80.0, "achieved_per_s": 990.0, "errors": 0,
                               "send_lag_p99_ms": 2.0}]},
        {"scenario": "webhook-fuzz", "strategy": bench.ENGINE, "reviews": 10000, "concurrency": 50,
         "http_status": {"200": 5000, "400": 5000}, "denial_codes": {"422": 100}, "http_500": 0, "body_500": 0},
    ]
    path = tmp_path / "benchmarks.json"
    doc = bench.write_outputs(records, path, tmp_path / "benchmarks.md", elapsed=600.0)
    assert json.loads(path.read_text())["runs"] == doc["runs"]
    text = (tmp_path / "benchmarks.md").read_text()
    assert f"{doc['machine']['nproc']} CPUs" in text
    assert "| add TLS | opsmanager EtcdOpsRequest | embedded | Successful | yes | 0/900 |" in text
    assert "| add TLS | opsmanager EtcdOpsRequest | kubernetes | Successful | yes | 0/900 |" in text
    assert "| add TLS | naive: restart onto https-only, no peer-URL update | embedded | members not back" in text
    assert "**no**" in text  # healthy after: no
    assert "| embedded | 10 × 3 | add TLS | 10/10 | 20.0 | 40.0 | 2.00 | 1.29 | 120.5 | 30.2 | 400 | 0/2000 | 0 |" in text
    assert "| kubernetes | 20 × 3 | add TLS | 20/20 | 20.0 | 48.0 | 2.40 | 1.20 | 120.5 | 30.2 | 400 | 0/2000 | 0 |" \
        in text
    assert "| 2 | 0.41 | 0.45 | 0.52 | 1.93 | 1.20 | 0.36 | 0.27 | – |" in text  # where the scale run's CPU went
    assert "| one cluster alone | 0.60 | 1.70 | 0.90 | – | 28 | 10 |" in text
    assert "| each of 10 at once | 0.70 | 2.90 | 1.00 | – | 50 | 20 |" in text
    assert "(makespan ÷ floor **1.20**)" in text
    assert "The slowest request, s03 (48.0 s), waited longest: 14s until MoveLeader--s03-1=True." in text
    assert text.index("| kubernetes | 20 × 3") < text.index("| embedded | 10 × 3")
    assert "**31.0 s = 1.55 × one cluster alone**" in text
    assert "| 500 | 20 | 10000 | 1.50 | 6.20 | 12.0 | 499.9 | 0 | 0 | 0.45 | 1500 |" in text
    assert "1000/s → p99 80.0 ms, 990.0/s achieved, 0 errors, send lag p99 2.0 ms" in text
    assert "**0 HTTP 500, 0 reviews answered with code 500**" in text
    assert "sum **9.60 s**" in text
    # a partial re-run keeps the other rows
    bench.write_outputs([_engine(wall=33.0)], path, tmp_path / "benchmarks.md", elapsed=None)
    again = json.loads(path.read_text())
    assert len(again["runs"]) == len(records) and again["elapsed_s"] == 600.0
    assert "| 33.0 |" in (tmp_path / "benchmarks.md").read_text()


@pytest.mark.parametrize(("path", "want"), [
    ("/api/v1/namespaces/demo/pods/demo-0/status", "pods/status"),
    ("/api/v1/namespaces/demo/pods?labelSelector=a%3Db", "pods"),
    ("/api/v1/namespaces/demo/pods/demo-0/eviction", "pods/eviction"),
    ("/apis/opsmanager.dev/v1alpha1/namespaces/demo/etcds/x", "etcds"),
    ("/apis/opsmanager.dev/v1alpha1/etcds?watch=true", "etcds"),
    ("/api/v1/namespaces", "namespaces"),
    ("/api/v1/namespaces/demo", "namespaces"),
    ("/apis", "discovery"),
    ("/version", "discovery"),
])
def test_resource_of(path: str, want: str) -> None:
    assert scale.resource_of(path) == want


def test_request_key_tells_watches_apart() -> None:
    assert scale.request_key("GET", "/apis/opsmanager.dev/v1alpha1/etcds?watch=true&resourceVersion=1") == \
        "WATCH etcds"
    assert scale.request_key("PATCH", "/apis/opsmanager.dev/v1alpha1/namespaces/a/etcds/b/status") == \
        "PATCH etcds/status"


def test_parse_proc_reads_rss_peak_and_cpu() -> None:
    status = "Name:\tpython3\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n"
    # comm with a space and a parenthesis; utime=250 stime=50 ticks
    stat = "4242 (python (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 1000 200"
    sample = scale.parse_proc(status, stat, 100)
    assert sample.rss_kb == 102400 and sample.peak_rss_kb == 204800
    assert sample.cpu_seconds == pytest.approx(3.0)


def test_parse_busy_counts_every_state_but_idle_and_iowait() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice (ticks)
    stat = "cpu  1000 20 300 5000 80 5 7 3 40 0\ncpu0 500 10 150 2500 40 2 3 1 20 0\n"
    assert scale.parse_busy(stat, 100) == pytest.approx((1000 + 20 + 300 + 5 + 7 + 3) / 100)


def test_percentile_interpolates() -> None:
    values = [float(v) for v in range(1, 101)]
    assert webhook_load.percentile(values, 50) == pytest.approx(50.5)
    assert webhook_load.percentile(values, 99) == pytest.approx(99.01)
    assert webhook_load.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        webhook_load.percentile([], 50)


def test_fuzz_reviews_are_reproducible_and_varied() -> None:
    first = webhook_load.fuzz_reviews(2000, seed=3)
    assert first == webhook_load.fuzz_reviews(2000, seed=3)
    assert first != webhook_load.fuzz_reviews(2000, seed=4)
    paths = {p for p, _ in first}
    assert set(admission.ENDPOINTS) <= paths and "/nope" in paths
    parsed = 0
    for _, body in first:
        try:
            json.loads(body)
            parsed += 1
        except ValueError:
            pass
    assert 0 < len(first) - parsed < len(first) // 5  # some broken bodies, mostly JSON
    valid = [b for p, b in first if p in admission.ENDPOINTS]
    well_formed = 0
    for body in valid:
        try:
            admission.parse_review(body, admission.ENDPOINTS["/validate-etcdopsrequest"])
            well_formed += 1
        except admission.BadReview:
            pass
    assert well_formed > 50  # the mutator keeps enough reviews intact to reach the rules


def test_render_only_regenerates_the_page_from_the_json(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "b.json"
    bench.write_outputs([_engine(wall=12.5)], path, tmp_path / "b.md", elapsed=100.0)
    (tmp_path / "b.md").unlink()
    assert bench.main(["--json", str(path), "--render-only"]) == 0
    assert "| 12.5 |" in (tmp_path / "b.md").read_text()
    with pytest.raises(SystemExit):
        bench.main(["--render-only"])


def test_rotate_compares_zero_restart_with_the_restart_based_and_the_naive_rotate() -> None:
    rotate = next(op for op in bench.OPERATIONS if op.key == "rotate")
    assert rotate.engine_passes == 0  # same CA: the engine restarts nothing
    assert [v.strategy for v in rotate.naive] == ["reissue-then-restart", "naive-ordinal-roll"]
    assert all(v.strategy in bench.STRATEGY_TEXT for v in rotate.naive)
    rec = _engine(scenario_key="rotate", operation="rotate", strategy="reissue-then-restart", leader_moves=1,
                  elections=1, member_restarts=3)
    assert rec["unplanned_elections"] == 0 and "leader-aware Restart" in rec["method"]
    assert bench.verdict([rec]) == []  # not the engine's own row


def test_repeated_runs_keep_median_worst_and_raw_per_figure() -> None:
    runs = [_engine(wall=20.0, max_stall=0.05, writes_failed=0, read_back_ok=True, hashkv_agree=True,
                    missing_writes=0, writer_failovers=3),
            _engine(wall=24.0, max_stall=0.30, writes_failed=2, read_back_ok=False, hashkv_agree=True,
                    missing_writes=4, writer_failovers=5),
            _engine(wall=21.0, max_stall=0.07, writes_failed=0, read_back_ok=True, hashkv_agree=True,
                    missing_writes=0, writer_failovers=4, outcome="Failed")]
    agg = bench.aggregate(runs)
    assert agg["repeat"] == 3
    assert (agg["wall_s"], agg["worst"]["wall_s"]) == (21.0, 24.0)
    assert (agg["max_write_stall_s"], agg["worst"]["max_write_stall_s"]) == (0.07, 0.3)
    assert (agg["writes_failed"], agg["worst"]["writes_failed"]) == (0, 2)
    assert (agg["read_back_ok"], agg["worst"]["read_back_ok"]) == (True, False)  # worst of a yes/no is the no
    assert agg["worst"]["missing_writes"] == 4 and agg["raw"]["writer_failovers"] == [3, 5, 4]
    assert agg["outcome"] == "Successful ×2, Failed ×1"
    assert bench.aggregate(runs[:1])["repeat"] == 1
    # the table shows "median (worst)"; the verdict judges the worst run
    row = next(line for line in bench.ops_table([agg]) if line.startswith("| add TLS"))
    assert "| 21.0 (24.0) |" in row and "| 0.070 (0.300) |" in row and "| yes (**no**) |" in row
    problems = bench.verdict([agg])
    assert len(problems) == 1 and "2 failed writes" in problems[0] and "missing 4" in problems[0]


def test_the_verdict_needs_every_write_read_back_and_hashkv_agreeing() -> None:
    assert bench.verdict([_engine(read_back_ok=True, hashkv_agree=True)]) == []
    assert bench.verdict([_engine(read_back_ok=False, missing_writes=1, hashkv_agree=True)])
    assert bench.verdict([_engine(read_back_ok=True, hashkv_agree=False)])
    # the baseline minus MoveLeader is reported, not held to the bar
    assert bench.verdict([_engine(strategy=bench.NO_MOVE_LEADER, elections=3, leader_moves=0)]) == []


def test_wall_per_pass_and_where_the_rest_goes() -> None:
    rec = _engine(wall=24.0, bare_restart_sum=10.0, passes=2)
    assert rec["wall_over_bare_restarts"] == 2.4 and rec["wall_per_pass_over_bare_restarts"] == 1.2
    assert _engine(passes=None)["wall_per_pass_over_bare_restarts"] is None  # rotate: no pass
    timeline = [(0.1, "Running", "True"), (1.5, "CertificateSynced", "True"),
                (2.0, "MoveLeader--db-1", "False"), (2.2, "MoveLeader--db-1", "True"),
                (2.3, "CheckPodReady--db-1", "False"), (2.3, "EtcdClusterHealthy--db-1", "False"),
                (5.3, "CheckPodReady--db-1", "True"), (5.8, "EtcdClusterHealthy--db-1", "True"),
                (6.0, "VerifyServedCertificate--db-1", "True"),
                (6.5, "CheckPodReady--db-1", "False"), (9.5, "CheckPodReady--db-1", "True"),  # a second pass
                (9.9, "EtcdClusterHealthy--db-1", "True"), (10.0, "RestartPods", "True")]
    b = bench.time_breakdown(timeline, wall=10.5)
    assert (b["member_restarts_s"], b["member_restarts"]) == (6.0, 2)
    assert b["recovery_checks_s"] == 1.1 and b["move_leader_s"] == 0.2 and b["other_s"] == 3.2
    assert b["steps"] == [["Running", 0.1], ["CertificateSynced", 1.4], ["RestartPods", 8.5]]
    lines = bench.breakdown_lines([rec | {"breakdown": b}])
    assert lines and "member restarts 6.0 s (2 restarts)" in lines[0] and "CertificateSynced 1.4" in lines[0]
    row = next(line for line in bench.ops_table([rec]) if line.startswith("| add TLS"))
    assert "| 2.40 | 1.20 |" in row


def test_the_minus_move_leader_baseline_runs_for_every_operation_that_restarts() -> None:
    with_baseline = [op.key for op in bench.OPERATIONS if op.no_move_leader_baseline]
    assert with_baseline == ["add-tls", "issuer-change", "remove-tls", "restart", "upgrade"]
    assert bench.NO_MOVE_LEADER in bench.STRATEGY_TEXT
    makefile = (pathlib.Path(__file__).parents[2] / "Makefile").read_text()
    assert "REPEAT ?= 1" in makefile and "--repeat $(REPEAT)" in makefile
    with pytest.raises(SystemExit):
        bench.main(["--repeat", "0", "--scenario", "rotate"])


def test_records_are_kept_per_control_plane_and_per_scale_size() -> None:
    old = [_engine(), {"scenario": "scale", "strategy": bench.ENGINE, "clusters": 30},
           {"scenario": "scale", "strategy": bench.ENGINE, "clusters": 20}]
    new = [_engine(control_plane="kubernetes", wall=1.0), {"scenario": "scale", "strategy": bench.ENGINE,
                                                           "clusters": 20, "makespan_s": 1.0}]
    merged = bench.merge_records(old, new)
    assert len(merged) == 4  # the kubernetes engine row is added, the 20-cluster scale row replaced
    assert [r.get("makespan_s") for r in merged if r.get("clusters") == 20] == [1.0]
    assert {bench.control_plane_of(r) for r in merged if r["scenario"] == "add-tls"} == {"embedded", "kubernetes"}


def test_rows_on_real_nodes_are_kept_beside_the_node_agents_and_ordered_after_them() -> None:
    agent = _engine(control_plane="kubernetes", wall=2.0)
    real = {**_engine(control_plane="kubernetes", wall=3.0), "nodes": 3}
    merged = bench.merge_records([_engine(), agent], [real])
    assert len(merged) == 3  # a real-nodes row is no rerun of the node agent's
    assert [bench.control_plane_of(r) for r in sorted(merged, key=bench.order_key)] == [
        "embedded", "kubernetes", "kubernetes + 3 real nodes"]
    assert bench.control_planes("all") == ["embedded", "kubernetes", "nodes"]
    assert bench.control_planes("both") == ["embedded", "kubernetes"]
    assert bench.control_planes("real") == ["kubernetes", "nodes"]
    assert bench.select("tls") == (["add-tls", "rotate", "issuer-change", "remove-tls"], False, False)
    assert set(bench.TLS_KEYS) <= set(bench.OPERATION_KEYS)
    # what measures the API server or the operator runs on the real control plane once, nodes or not
    assert bench.api_planes(["embedded", "kubernetes", "nodes"]) == ["embedded", "kubernetes"]
    assert bench.api_planes(["nodes"]) == ["kubernetes"]
    with pytest.raises(SystemExit):
        bench.main(["--nodes", "0", "--scenario", "rotate"])


def test_cpu_floor_is_the_work_of_n_over_the_cores_the_idle_members_leave() -> None:
    # one alone used 3.0 CPU s in 20 s, 0.6 of them its members idling (0.9 cores for 30 clusters → 0.03 for one)
    floor = scale.cpu_floor(clusters=30, cores=2, members_idle_cores=0.9, single_wall_s=20.0, single_cpu_s=3.0)
    assert floor == pytest.approx(30 * (3.0 - 0.6) / (2 - 0.9))
    assert scale.cpu_floor(clusters=30, cores=2, members_idle_cores=2.0, single_wall_s=20.0,
                           single_cpu_s=3.0) == float("inf")
    # more clusters: more work and fewer spare cores, so the floor grows faster than N
    assert scale.cpu_floor(clusters=60, cores=2, members_idle_cores=1.8, single_wall_s=20.0, single_cpu_s=3.0) > 2 * floor


def test_the_slowest_transitions_of_a_request_name_what_it_waited_for() -> None:
    request = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"conditions": [
        {"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
        {"type": "EvictPod--x-0", "status": "True", "lastTransitionTime": "2026-01-01T00:01:41Z",
         "message": "eviction not allowed yet"},
        {"type": "RestartPods", "status": "True", "lastTransitionTime": "2026-01-01T00:01:51Z"}]}}
    assert scale.slowest_transitions(request, count=2) == [
        "100s until EvictPod--x-0=True (eviction not allowed yet)", "10s until RestartPods=True"]


def test_runs_with_watchers_sit_beside_their_runs_without_and_are_held_to_the_ratio() -> None:
    plain = _engine(wall=20.0)
    watched = _engine(strategy=bench.ENGINE_WATCHED, wall=23.0, watchers=3, watch_problems=0, watch_reconnects=6)
    assert bench.watched_pairs([watched, plain]) == [(plain, watched)]
    assert bench.watched_ratio(plain, watched) == 1.15
    assert bench.verdict([plain, watched]) == []
    rows = bench.watched_table([plain, watched])
    assert len(rows) == 3 and "| add TLS | embedded | 20.0 | 23.0 | 1.15 | 3 | 0 | 6 |" in rows[2]
    through_gateway = {**watched, "gateway_watchers": 1}
    assert "| 1.15 | 3 (1 gateway) | 0 | 6 |" in bench.watched_table([plain, through_gateway])[2]
    # slower than the target, or a watch problem, is a problem of our engine
    slow = _engine(strategy=bench.ENGINE_WATCHED, wall=30.0, watchers=3, watch_problems=0)
    assert any("1.5 × its time without watchers" in p for p in bench.verdict([plain, slow]))
    lost = _engine(strategy=bench.ENGINE_WATCHED, wall=21.0, watchers=3, watch_problems=2,
                   watch_problem_notes=["watcher 1: lost"])
    assert any("2 watch problems" in p for p in bench.verdict([plain, lost]))
    # repeated: a watch problem in any one run is the row's worst, shown and held to the bar
    repeated = bench.aggregate([watched, lost, watched])
    assert (repeated["watch_problems"], repeated["worst"]["watch_problems"]) == (0, 2)
    assert [r["watch_problem_notes"] for r in repeated["runs"]][1] == ["watcher 1: lost"]
    assert "| 0 (2) |" in bench.watched_table([plain, repeated])[2]
    assert any("2 watch problems: ['watcher 1: lost']" in p for p in bench.verdict([plain, repeated]))
    # a run on another control plane is not paired with this one
    assert bench.watched_pairs([plain, _engine(strategy=bench.ENGINE_WATCHED, control_plane="kubernetes")]) == []
    # engine_passes > 0 is what gets a watched run: the operations that restart members
    assert [op.key for op in bench.OPERATIONS if op.engine_passes] == [
        "add-tls", "issuer-change", "remove-tls", "restart", "upgrade"]


def test_cgroup_cpu_reads_cpuacct_usage_and_a_missing_cgroup_is_zero(tmp_path: pathlib.Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "node1" / "kubepods").mkdir(parents=True)
    (tmp_path / "node1" / "kubepods" / "cpuacct.usage").write_text("2500000000\n")
    monkeypatch.setattr(scale, "CPUACCT", tmp_path)
    assert scale.cgroup_cpu("/node1/kubepods") == 2.5
    assert scale.cgroup_cpu("node2/system") == 0.0


def test_a_kubeconfig_copy_swaps_the_server_or_the_user_and_keeps_the_rest(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "kubeconfig"
    source.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": "ca"}}],
        "users": [{"name": "u", "user": {"client-certificate": "crt", "client-key": "key"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x"}))
    proxied = yaml.safe_load(scenario.kubeconfig_copy(source, tmp_path / "p", server="http://127.0.0.1:9").read_text())
    assert proxied["clusters"][0]["cluster"] == {"server": "http://127.0.0.1:9", "certificate-authority": "ca"}
    assert proxied["users"][0]["user"] == {"client-certificate": "crt", "client-key": "key"}
    as_token = scenario.kubeconfig_copy(source, tmp_path / "t", user={"token": "t0k"})
    assert yaml.safe_load(as_token.read_text())["users"][0]["user"] == {"token": "t0k"}
    assert as_token.stat().st_mode & 0o777 == 0o600
