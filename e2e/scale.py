"""Scale: one operator, many 3-member Etcds reconfigured at once (``python -m e2e.bench --scenario scale``).

Why: a KubeDB-style operator runs every request of a cluster fleet in one process. What matters is whether ten
clusters at once take about as long as one (each request mostly waits on etcd and cert-manager, so they should
overlap), what the operator costs in memory and CPU while doing it, and how many Kubernetes API requests an
operation costs — the API server is shared with everything else in a real cluster.

How: the operator talks to the API server through :class:`CountingProxy` (a streaming HTTP reverse proxy that
counts every request, watches included), so the counts are the operator's own and not the kubelet's or the
StatefulSet controller's. Memory and CPU come from ``/proc/<pid>`` of the operator process (:func:`read_proc`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import os
import pathlib
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from e2e import naive, processes, scenario
from opsmanager import kube
from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager.provisioner import handlers as provisioner_handlers

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host",
              "proxy-connection", "te", "trailer", "upgrade"}


def resource_of(path: str) -> str:
    """The resource (and subresource) a Kubernetes API path addresses: ``/api/v1/namespaces/a/pods/p/status`` →
    ``pods/status``; discovery and other paths → ``discovery``."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        rest = parts[3:]
    else:
        return "discovery"
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    elif rest[:1] == ["namespaces"]:
        return "namespaces"
    if not rest:
        return "discovery"
    return rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"


def request_key(method: str, path_qs: str) -> str:
    """``GET pods``, ``WATCH etcds``, ``PATCH etcds/status`` …: how requests are grouped in the report."""
    verb = "WATCH" if method == "GET" and "watch=true" in path_qs.lower() else method
    return f"{verb} {resource_of(path_qs)}"


class CountingProxy:
    """A reverse proxy in front of the API server that counts requests by :func:`request_key` and streams
    responses (watches) through unchanged."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", *, ca_file: str | os.PathLike[str] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.ca_file = ca_file  # the upstream's serving CA (kube-apiserver's), None for a plain-HTTP one
        self.host = host
        self.counts: collections.Counter[str] = collections.Counter()
        self.paths: collections.Counter[str] = collections.Counter()  # "METHOD /path" without the query: diagnostics
        self.bodies: list[tuple[float, str, str, bytes]] | None = None  # set to [] to keep write bodies (diagnostics)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def start(self) -> str:
        connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(self.ca_file))) \
            if self.ca_file else None
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False,
                                              connector=connector)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def snapshot(self) -> collections.Counter[str]:
        return collections.Counter(self.counts)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        self.counts[request_key(request.method, request.path_qs)] += 1
        self.paths[f"{request_key(request.method, request.path_qs).split()[0]} {request.path}"] += 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        if self.bodies is not None and request.method in ("PATCH", "PUT", "POST"):
            self.bodies.append((time.monotonic(), request.method, request.path, body[:4000]))
        async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                         data=body or None) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers.add(key, value)
            if "Content-Encoding" in upstream.headers:
                response.headers["Content-Encoding"] = upstream.headers["Content-Encoding"]
            await response.prepare(request)
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            with contextlib.suppress(ConnectionResetError):
                await response.write_eof()
            return response


# --- /proc of the operator -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProcSample:
    rss_kb: int
    peak_rss_kb: int  # VmHWM: the high-water mark over the process's life
    cpu_seconds: float  # utime + stime


def parse_proc(status_text: str, stat_text: str, clock_ticks: int) -> ProcSample:
    """Pure: ``/proc/<pid>/status`` and ``/proc/<pid>/stat`` → RSS, peak RSS and CPU seconds."""
    fields = {}
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()

    def kb(key: str) -> int:
        value = fields.get(key, "0 kB").split()
        return int(value[0]) if value else 0

    # comm (field 2) may hold spaces and parentheses: split after the last ')'. utime, stime are fields 14, 15.
    rest = stat_text.rsplit(")", 1)[1].split()
    utime, stime = int(rest[11]), int(rest[12])
    return ProcSample(kb("VmRSS"), kb("VmHWM"), (utime + stime) / clock_ticks)


def read_proc(pid: int) -> ProcSample:
    base = pathlib.Path(f"/proc/{pid}")
    return parse_proc((base / "status").read_text(), (base / "stat").read_text(), os.sysconf("SC_CLK_TCK"))


def parse_busy(stat_text: str, clock_ticks: int) -> float:
    """Pure: the CPU seconds the whole machine has been busy (every core; all but idle and iowait) from the
    ``cpu`` line of ``/proc/stat``."""
    fields = [int(x) for x in stat_text.splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is already counted in user and nice
    return (sum(fields[:8]) - idle) / clock_ticks


def machine_busy() -> float:
    return parse_busy(pathlib.Path("/proc/stat").read_text(), os.sysconf("SC_CLK_TCK"))


async def scrape(url: str, name: str) -> float:
    """The sum of every series of the counter ``name`` on a ``/metrics`` page (0 when it has none)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
        text = await resp.text()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name)


OPS_PASSES = "opsmanager_opsrequest_reconciles_total"
ETCD_PASSES = "opsmanager_etcd_reconciles_total"


async def passes(url: str) -> tuple[float, float]:
    """(engine passes over requests, provisioner passes over Etcds) the operator has made so far."""
    return await scrape(url, OPS_PASSES), await scrape(url, ETCD_PASSES)


def exited_children_cpu() -> float:
    """CPU seconds of this process's children that have exited and been waited for (``os.times``): the etcd
    members the sandbox's kubelet restarted. With :func:`members_cpu` of the live ones, what every member process
    used over a phase in which members come and go."""
    t = os.times()
    return t.children_user + t.children_system


def members_ever_cpu(sc: scenario.Scenario) -> float:
    """CPU seconds every etcd member has used so far, the exited ones (:func:`exited_children_cpu`) with the live
    ones (:func:`members_cpu`): its delta over a phase is what the members used in it. On real nodes the pods'
    cgroups count the exited containers too."""
    if sc.sandbox.realnodes is not None:
        return members_cpu(sc)
    return exited_children_cpu() + members_cpu(sc)


CPUACCT = pathlib.Path("/sys/fs/cgroup/cpuacct")


def cgroup_cpu(path: str) -> float:
    """CPU seconds a cgroup (v1 ``cpuacct``, hierarchical) and everything ever in it below have used so far; 0 when
    it does not exist (yet)."""
    try:
        return int((CPUACCT / path.strip("/") / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return 0.0


def nodes_cpu(sc: scenario.Scenario, part: str) -> float:
    """On real nodes: CPU seconds of every node's ``kubepods`` (its pods: the members, and CoreDNS) or ``system``
    (the kubelet, containerd and its shims) cgroup, exited processes included; 0 without real nodes."""
    real = sc.sandbox.realnodes
    return sum(cgroup_cpu(f"{node.cgroup}/{part}") for node in real.nodes) if real is not None else 0.0


def node_agents_cpu(sc: scenario.Scenario) -> float:
    """CPU seconds the real nodes' own processes (kubelet, containerd, shims) have used so far."""
    return nodes_cpu(sc, "system")


def members_cpu(sc: scenario.Scenario) -> float:
    """CPU seconds the etcd processes of the scenario's namespace have used so far (from the kubelet's PIDs; on
    real nodes, every pod's, from the nodes' cgroups)."""
    if sc.sandbox.realnodes is not None:
        return nodes_cpu(sc, "kubepods")
    total = 0.0
    for (ns, _pod, container), pid in sc.sandbox.kubelet.pids().items():
        if ns == sc.namespace and container == naming.CONTAINER_NAME:
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += read_proc(pid).cpu_seconds
    return total


# --- the scenario ---------------------------------------------------------------------------------------------


async def _wait_terminal(sc: scenario.Scenario, names: list[str], started: float, *,
                         timeout: float) -> dict[str, tuple[str, float]]:
    """Poll every request (one LIST a poll) until all are terminal; their phase and time from ``started``."""
    done: dict[str, tuple[str, float]] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(names):
        if time.monotonic() > deadline:
            missing = sorted(set(names) - set(done))
            raise TimeoutError(f"requests {missing} not finished within {timeout:.0f}s")
        try:
            listed = await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace)
        except kube.KubeError as err:
            if not kube.is_transient(err):
                raise
            listed = []  # an API server too loaded to answer this poll answers a later one (the deadline holds)
        for req in listed:
            name = req["metadata"]["name"]
            phase = (req.get("status") or {}).get("phase")
            if name in names and name not in done and phase in constants.TERMINAL_OPS_PHASES:
                done[name] = (phase, time.monotonic() - started)
        await asyncio.sleep(0.25)
    return done


def slowest_transitions(request: dict[str, Any], count: int = 4) -> list[str]:
    """Pure: the ``count`` longest waits of a finished request — between one condition transition and the next
    (``lastTransitionTime``, whole seconds), each named by the condition it ended on and its message — to say
    where a straggler of the concurrent phase spent its time."""
    conds = sorted((c.get("lastTransitionTime") or "", c.get("type", ""), c.get("status", ""),
                     (c.get("message") or "")[:120]) for c in (request.get("status") or {}).get("conditions") or []
                    if c.get("lastTransitionTime"))
    created = (request.get("metadata") or {}).get("creationTimestamp") or (conds[0][0] if conds else "")
    stamps = [created, *(c[0] for c in conds)]

    def seconds(stamp: str) -> float:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    gaps = [(seconds(stamps[i + 1]) - seconds(stamps[i]), conds[i]) for i in range(len(conds))]
    return [f"{gap:.0f}s until {type_}={status}" + (f" ({message})" if message else "")
            for gap, (_at, type_, status, message) in sorted(gaps, key=lambda g: -g[0])[:count]]


def _delta(after: collections.Counter[str], before: collections.Counter[str]) -> collections.Counter[str]:
    out = collections.Counter(after)
    out.subtract(before)
    return collections.Counter({k: v for k, v in out.items() if v > 0})


def cpu_floor(*, clusters: int, cores: int, members_idle_cores: float, single_wall_s: float,
              single_cpu_s: float) -> float:
    """Pure: the shortest makespan this machine allows for ``clusters`` operations at once, from what one alone
    cost: each needs the CPU one alone used (operator, its members, sandbox + harness: ``single_cpu_s``) less its
    members' idle share over that time, and the idle members of every cluster take ``members_idle_cores`` off the
    ``cores`` for as long as the phase lasts. Perfect packing and no contention — a lower bound, not a forecast.
    Infinite when the idle members alone fill the machine."""
    spare = cores - members_idle_cores
    if spare <= 0:
        return float("inf")
    work = max(0.0, single_cpu_s - members_idle_cores / clusters * single_wall_s)
    return clusters * work / spare


def control_plane_cpu(sc: scenario.Scenario) -> float:
    """CPU seconds the real control plane's processes (etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler) have used so far; 0 on the embedded one (its API server is the harness process)."""
    kubernetes = sc.sandbox.kubernetes
    total = 0.0
    for pid in (kubernetes.pids().values() if kubernetes is not None else ()):
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += read_proc(pid).cpu_seconds
    return total


IDLE_WINDOW = 10.0  # seconds over which the idle members' CPU is measured

ADD_TLS = {"tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca-a"}}}


async def bench(workdir: pathlib.Path, say: Callable[[str], None], *, clusters: int = 10,
                control_plane: str = "embedded", etcd_version: str | None = None, nodes: int = 0) -> dict[str, Any]:
    """One cluster alone, then ``clusters`` at once, add TLS on each; the ``scale`` record of the benchmark.
    ``nodes``: on that many real nodes (kubelets over containerd), whose own CPU counts in the floor."""
    from e2e import bench as bench_module

    proxy: CountingProxy | None = None
    async with scenario.Scenario(workdir, namespace="scale", control_plane=control_plane,
                                 etcd_version=etcd_version, nodes=nodes or None) as sc:
        try:
            # Route the operator through the counting proxy (same operator, default --interval).
            await asyncio.to_thread(sc.operator.stop)
            proxy = CountingProxy(sc.sandbox.url, ca_file=sc.sandbox.ca_file)
            await proxy.start()
            kubeconfig = scenario.kubeconfig_copy(sc.sandbox.operator_kubeconfig, workdir / "kubeconfig-proxied",
                                                  server=proxy.url)
            sc.operator = await asyncio.to_thread(processes.OperatorProcess.start, kubeconfig,
                                                  log_path=workdir / "operator.log")
            pid = sc.operator.pid
            await sc.ca_issuer("ca-a")

            # One cluster alone.
            await bench_module.fresh_etcd(sc, "solo", None)
            solo_cp_before, solo_agents_before = control_plane_cpu(sc), node_agents_cpu(sc)
            before, cpu_before = proxy.snapshot(), read_proc(pid).cpu_seconds
            passes_before = await passes(sc.operator.metrics_url)
            solo_members_before, solo_own_before = members_ever_cpu(sc), read_proc(os.getpid()).cpu_seconds
            started = time.monotonic()
            await sc.submit("solo-add-tls", "solo", constants.OPS_TYPE_RECONFIGURE_TLS, **ADD_TLS)
            solo = await _wait_terminal(sc, ["solo-add-tls"], started, timeout=300)
            single_phase, single_wall = solo["solo-add-tls"]
            single_requests = sum(_delta(proxy.snapshot(), before).values())
            single_cpu = read_proc(pid).cpu_seconds - cpu_before
            single_members_cpu = members_ever_cpu(sc) - solo_members_before
            single_sandbox_cpu = read_proc(os.getpid()).cpu_seconds - solo_own_before
            single_cp_cpu = control_plane_cpu(sc) - solo_cp_before
            single_agents_cpu = node_agents_cpu(sc) - solo_agents_before
            single_passes = [a - b for a, b in zip(await passes(sc.operator.metrics_url), passes_before, strict=True)]
            say(f"scale: one cluster alone: {single_phase} in {single_wall:.1f}s, {single_requests} operator API "
                f"requests, {single_cpu:.2f} CPU s (members {single_members_cpu:.2f}, sandbox + harness "
                f"{single_sandbox_cpu:.2f}), {single_passes[0]:.0f} engine passes, {single_passes[1]:.0f} provisioner "
                f"passes")
            await bench_module.delete_etcd(sc, "solo")

            # N clusters at once.
            names = [f"s{i:02d}" for i in range(clusters)]
            created = time.monotonic()
            for name in names:
                await sc.create_etcd(name)
            await asyncio.gather(*(sc.wait_ready(name, timeout=300) for name in names))
            say(f"scale: {clusters} Etcds ({3 * clusters} etcd processes) Ready in {time.monotonic() - created:.0f}s")
            # What the members alone cost before anything happens: the floor under the concurrent phase.
            idle_from, idle_busy, idle_cpu = time.monotonic(), machine_busy(), members_cpu(sc)
            idle_cp, idle_agents = control_plane_cpu(sc), node_agents_cpu(sc)
            await asyncio.sleep(IDLE_WINDOW)  # a measurement window, not a synchronisation
            idle_s = time.monotonic() - idle_from
            members_idle_cores = (members_cpu(sc) - idle_cpu) / idle_s
            control_plane_idle_cores = (control_plane_cpu(sc) - idle_cp) / idle_s
            # the kubelets' own upkeep of every pod: a load of the N clusters at rest, like their members'
            agents_idle_cores = (node_agents_cpu(sc) - idle_agents) / idle_s
            machine_idle_cores = (machine_busy() - idle_busy) / idle_s
            say(f"scale: idle, the {3 * clusters} etcd members use {members_idle_cores:.2f} cores, the machine "
                f"{machine_idle_cores:.2f} of {os.cpu_count()}")
            requests = [f"{name}-add-tls" for name in names]
            async with sc.live(names[0]) as (w, mon):
                w_before = w.snapshot()
                before, cpu_before = proxy.snapshot(), read_proc(pid).cpu_seconds
                busy_before, own_before = machine_busy(), read_proc(os.getpid()).cpu_seconds
                members_before, cp_before = members_ever_cpu(sc), control_plane_cpu(sc)
                agents_before = node_agents_cpu(sc)
                passes_before = await passes(sc.operator.metrics_url)
                started = time.monotonic()
                for req, name in zip(requests, names, strict=True):
                    await sc.submit(req, name, constants.OPS_TYPE_RECONFIGURE_TLS, **ADD_TLS)
                done = await _wait_terminal(sc, requests, started, timeout=900)
                makespan = max(t for _, t in done.values())
                sample = read_proc(pid)
                busy = machine_busy() - busy_before
                harness_cpu = read_proc(os.getpid()).cpu_seconds - own_before
                members_busy = members_ever_cpu(sc) - members_before
                cp_busy = control_plane_cpu(sc) - cp_before
                agents_busy = node_agents_cpu(sc) - agents_before
                counts = _delta(proxy.snapshot(), before)
                all_passes = [a - b for a, b in zip(await passes(sc.operator.metrics_url), passes_before,
                                                    strict=True)]
                w_after, mres = w.snapshot(), mon.result
            moves = await sc.leader_moves(requests[0])
            slowest = max(done, key=lambda name: done[name][1])
            straggler = slowest_transitions(await sc.request(slowest) or {})
            healthy = await asyncio.gather(*(naive.cluster_healthy(sc, name) for name in names))
            # The same idle window once every member serves TLS (peer traffic and probes over the new listeners).
            idle_from, idle_cpu = time.monotonic(), members_cpu(sc)
            await asyncio.sleep(IDLE_WINDOW)  # a measurement window, not a synchronisation
            members_idle_tls_cores = (members_cpu(sc) - idle_cpu) / (time.monotonic() - idle_from)
        finally:
            if proxy is not None:
                # the operator first (its watches go through the proxy), then the proxy
                if sc.operator is not None:
                    await asyncio.to_thread(sc.operator.stop)
                await proxy.stop()
    bench_module.drop_volumes(workdir)
    successful = sum(1 for phase, _ in done.values() if phase == constants.PHASE_SUCCESSFUL)
    floor = cpu_floor(clusters=clusters, cores=os.cpu_count() or 1,
                      members_idle_cores=members_idle_cores + agents_idle_cores, single_wall_s=single_wall,
                      # the control plane's own idle load (leases, resyncs) is shared, not one cluster's work
                      single_cpu_s=single_cpu + single_members_cpu + single_sandbox_cpu + single_agents_cpu
                      + max(0.0, single_cp_cpu - control_plane_idle_cores * single_wall))
    total_requests = sum(counts.values())
    record = {
        "scenario": "scale", "strategy": bench_module.ENGINE, "operation": "add TLS", "clusters": clusters,
        "control_plane": control_plane, "etcd_version": sc.etcd_version, **({"nodes": nodes} if nodes else {}),
        "single_node_agents_cpu_s": round(single_agents_cpu, 2), "node_agents_idle_cores": round(agents_idle_cores, 2),
        "node_agents_cpu_s_per_operation": round(agents_busy / clusters, 2),
        "node_agents_cores": round(agents_busy / makespan, 2),
        "single_control_plane_cpu_s": round(single_cp_cpu, 2),
        "control_plane_idle_cores": round(control_plane_idle_cores, 2),
        "control_plane_cpu_s_per_operation": round(cp_busy / clusters, 2),
        "control_plane_cores": round(cp_busy / makespan, 2),
        "makespan_over_cpu_floor": bench_module.ratio(makespan, floor),
        "successful": successful, "healthy_after": sum(healthy), "single_wall_s": round(single_wall, 1),
        "single_api_requests": single_requests, "single_cpu_s": round(single_cpu, 2),
        "single_members_cpu_s": round(single_members_cpu, 2), "single_sandbox_cpu_s": round(single_sandbox_cpu, 2),
        "members_cpu_s_per_operation": round(members_busy / clusters, 2),
        "sandbox_cpu_s_per_operation": round(harness_cpu / clusters, 2),
        "single_engine_passes": round(single_passes[0]), "single_provisioner_passes": round(single_passes[1]),
        "engine_passes_per_operation": round(all_passes[0] / clusters),
        "provisioner_passes_per_operation": round(all_passes[1] / clusters),
        "operator_cpu_s_per_operation": round((sample.cpu_seconds - cpu_before) / clusters, 2),
        "makespan_s": round(makespan, 1), "makespan_over_single": bench_module.ratio(makespan, single_wall),
        "cpu_floor_s": round(floor, 1), "cpu_floor_over_single": bench_module.ratio(floor, single_wall),
        "per_request_wall_s": {k: round(v[1], 1) for k, v in sorted(done.items())},
        "slowest_request": slowest, "slowest_request_waits": straggler,
        "operator_peak_rss_mb": round(sample.peak_rss_kb / 1024, 1),
        "operator_cpu_s": round(sample.cpu_seconds - cpu_before, 1),
        "cores": os.cpu_count(), "members_idle_cores": round(members_idle_cores, 2),
        "machine_idle_cores": round(machine_idle_cores, 2),
        "machine_busy_cores": round(busy / makespan, 2),
        "operator_cores": round((sample.cpu_seconds - cpu_before) / makespan, 2),
        "sandbox_cores": round(harness_cpu / makespan, 2),
        "members_busy_cores": round(members_busy / makespan, 2),
        "members_idle_tls_cores": round(members_idle_tls_cores, 2),
        "api_requests_total": total_requests, "api_requests_per_operation": round(total_requests / clusters),
        "api_requests_by_verb": dict(counts.most_common()),
        "canary_writes_failed": w_after.failed - w_before.failed,
        "canary_writes_total": (w_after.ok - w_before.ok) + (w_after.failed - w_before.failed),
        "canary_max_write_stall_s": round(w_after.max_gap, 3),
        # the canary writer's first failed tries and failed writes, for reading a stall or a failure
        "canary_writer_notes": [note[:300] for note in w_after.errors[len(w_before.errors):][:8]],
        "canary_unplanned_elections": max(0, mres.elections - moves),
        "operator_interval_s": provisioner_handlers.DEFAULT_INTERVAL,
        "measured_at": bench_module.now_text(),
    }
    say(f"scale ({control_plane}): {successful}/{clusters} Successful; makespan {makespan:.1f}s = "
        f"{record['makespan_over_single']} × one cluster (the machine's CPU floor {record['cpu_floor_s']}s = "
        f"{record['cpu_floor_over_single']} ×: makespan ÷ floor {record['makespan_over_cpu_floor']}); operator peak RSS {record['operator_peak_rss_mb']} MB, {record['operator_cpu_s']} CPU s; "
        f"{record['api_requests_per_operation']} API requests, {record['operator_cpu_s_per_operation']} operator CPU s, "
        f"{record['engine_passes_per_operation']} engine and {record['provisioner_passes_per_operation']} provisioner "
        f"passes per operation; machine busy {record['machine_busy_cores']} cores (members "
        f"{record['members_busy_cores']}, operator {record['operator_cores']}, sandbox + harness "
        f"{record['sandbox_cores']}); canary writes failed "
        f"{record['canary_writes_failed']}/{record['canary_writes_total']}, unplanned elections "
        f"{record['canary_unplanned_elections']}; the slowest request, {slowest} "
        f"({done[slowest][1]:.1f}s), waited longest: {'; '.join(straggler)}")
    return record
