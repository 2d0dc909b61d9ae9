"""API cost of the operator: requests per add-TLS and per idle second (``python -m e2e.apicost``).

The operator runs behind :class:`e2e.scale.CountingProxy`, so every request it makes (kopf's and ours, watches
included) is counted by verb and resource. Used by ``tests/e2e/test_api_budget.py`` and the benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import pathlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from e2e import processes, scale, scenario
from opsmanager.api import constants


@dataclasses.dataclass
class Cost:
    counts: collections.Counter[str]
    seconds: float
    paths: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    audited: collections.Counter[str] | None = None
    """On the real control plane: the same window as kube-apiserver's audit log counted it for the operator's
    user (``"get secrets"`` …), the check on the proxy's count."""
    elsewhere: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Requests in the window about other Etcds' objects (their periodic scans), by path: not in ``counts``."""

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def rate(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"total": self.total, "seconds": round(self.seconds, 1),
                               "per_second": round(self.rate, 3), "by_verb_and_resource": dict(self.counts.most_common())}
        if self.paths:
            out["by_path"] = dict(self.paths.most_common())
        if self.elsewhere:
            out["other_etcds_by_path"] = dict(self.elsewhere.most_common())
        if self.audited is not None:
            out["audit_log_total"] = sum(self.audited.values())
            out["audit_log_by_verb_and_resource"] = dict(self.audited.most_common())
        return out


def audited(sc: scenario.Scenario, since: float, until: float) -> collections.Counter[str] | None:
    """The operator's requests in ``[since, until]`` (``time.monotonic()``) by kube-apiserver's audit log; None on
    the embedded control plane."""
    if sc.sandbox.kubernetes is None:
        return None
    from opsmanager_sandbox import realcp

    return collections.Counter(f"{r.verb} {r.resource}" for r in sc.sandbox.audit.records(user=realcp.OPERATOR_USER,
                                                                                         since=since)
                               if r.at <= until)


@contextlib.asynccontextmanager
async def counted_operator(sc: scenario.Scenario, workdir: pathlib.Path, interval: float | None = None, *,
                           cached: bool = True) -> AsyncIterator[scale.CountingProxy]:
    """Restart ``sc``'s operator behind a counting proxy; yields the proxy. ``cached=False``: the operator reads
    every object from the API server (``--no-watch-cache``), the baseline the caches are measured against."""
    await asyncio.to_thread(sc.operator.stop)  # type: ignore[union-attr]
    proxy = scale.CountingProxy(sc.sandbox.url, ca_file=sc.sandbox.ca_file)
    await proxy.start()
    kubeconfig = scenario.kubeconfig_copy(sc.sandbox.operator_kubeconfig, workdir / "kubeconfig-counted",
                                          server=proxy.url)
    sc.operator = await asyncio.to_thread(processes.OperatorProcess.start, kubeconfig,
                                          log_path=workdir / "operator-counted.log", interval=interval,
                                          extra_args=() if cached else ("--no-watch-cache",))
    try:
        yield proxy
    finally:
        await asyncio.to_thread(sc.operator.stop)
        sc.operator = None
        await proxy.stop()


async def measure(sc: scenario.Scenario, proxy: scale.CountingProxy, seconds: float) -> Cost:
    before, started = proxy.snapshot(), time.monotonic()
    await asyncio.sleep(seconds)  # measuring a rate over a window, not synchronising
    ended = time.monotonic()
    return Cost(scale._delta(proxy.snapshot(), before), ended - started, audited=audited(sc, started, ended))


def names_another_etcd(path: str, others: Sequence[str]) -> bool:
    """``"PATCH /apis/…/etcds/tls/status"`` or ``"GET /api/v1/…/persistentvolumeclaims/data-tls-0"``: a request
    about one of ``others`` (the Etcd itself, or an object named after it or its members)."""
    parts = path.split()[-1].strip("/").split("/")
    if "namespaces" not in parts or len(parts) < parts.index("namespaces") + 4:
        return False
    name = parts[parts.index("namespaces") + 3]
    return any(name == o or name.startswith((f"{o}-", f"data-{o}-")) for o in others)


async def add_tls_cost(sc: scenario.Scenario, proxy: scale.CountingProxy, db: str,
                       others: Sequence[str] = ()) -> tuple[Cost, str]:
    """The requests one add-TLS on ``db`` costs. Those about ``others`` (idle Etcds whose periodic scans may fall
    in the window) are kept apart in ``elsewhere``: their cost is the idle figure's, not this operation's."""
    before, started = proxy.snapshot(), time.monotonic()
    paths_before = collections.Counter(proxy.paths)
    await sc.submit(f"{db}-add-tls", db, constants.OPS_TYPE_RECONFIGURE_TLS, **scale.ADD_TLS)
    req = await sc.watch_request(f"{db}-add-tls", timeout=300)
    phase = (req.get("status") or {}).get("phase", "")
    ended = time.monotonic()
    counts = scale._delta(proxy.snapshot(), before)
    paths = scale._delta(collections.Counter(proxy.paths), paths_before)
    elsewhere = collections.Counter({p: n for p, n in paths.items() if names_another_etcd(p, others)})
    for path, n in elsewhere.items():
        method, _, url = path.partition(" ")
        counts[scale.request_key(method, url)] -= n
    counts = +counts  # drops what fell to zero
    cost = Cost(counts, ended - started, audited=audited(sc, started, ended))
    cost.paths = collections.Counter({p: n for p, n in paths.items() if p not in elsewhere})
    cost.elsewhere = elsewhere
    return cost, phase


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="apicost-"))
    async with scenario.Scenario(workdir, namespace="cost") as sc:
        await sc.ca_issuer("ca-a")
        async with counted_operator(sc, workdir, interval=args.interval) as proxy:
            await sc.fresh_etcd("c1")
            idle_plain = await measure(sc, proxy, args.idle)
            add, phase = await add_tls_cost(sc, proxy, "c1")
            await sc.wait_ready("c1")
            idle_tls = await measure(sc, proxy, args.idle)
    return {"add_tls": add.as_dict(), "add_tls_phase": phase, "idle_plain": idle_plain.as_dict(),
            "idle_tls": idle_tls.as_dict()}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.apicost")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=None)
    args = parser.parse_args(list(argv))
    print(json.dumps(asyncio.run(main_async(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


async def one(workdir: pathlib.Path, *, cached: bool, idle_window: float,
              control_plane: str | None = None, etcd_version: str | None = None) -> dict[str, Any]:
    """Two idle 3-member Etcds (plaintext, TLS) and then one add-TLS, counted; the operator with or without its
    watch caches."""
    async with scenario.Scenario(workdir, namespace="cost", printer=lambda _line: None,
                                 control_plane=control_plane, etcd_version=etcd_version) as sc:
        await sc.ca_issuer("ca-a")
        async with counted_operator(sc, workdir, cached=cached) as proxy:
            await sc.create_etcd("plain")
            await sc.create_etcd("tls", issuer="ca-a")
            await sc.wait_ready("plain", timeout=180)
            await sc.wait_ready("tls", timeout=180)
            await sc.wait_for("the first TLS scan", lambda: _scanned(sc, "tls"), timeout=120)
            idle = await measure(sc, proxy, idle_window)
            add, phase = await add_tls_cost(sc, proxy, "plain", others=("tls",))
    return {"idle": idle, "add": add, "phase": phase}


async def _scanned(sc: scenario.Scenario, name: str) -> bool:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, name)
    return bool((((obj or {}).get("status") or {}).get("tls") or {}).get("lastScanTime"))


STRATEGY_CACHED = "opsmanager (watch caches)"
STRATEGY_UNCACHED = "baseline: the same operator with --no-watch-cache (every read a GET)"


async def bench(workdir: pathlib.Path, say: Any, *, idle_window: float = 30.0,
                control_plane: str = "embedded", etcd_version: str | None = None) -> list[dict[str, Any]]:
    """The ``api-cost`` records of ``make bench``: ours and the baseline, measured at the same time in two
    sandboxes (the counts do not depend on the machine's load; the wall times do)."""
    from e2e import bench as bench_module

    results = await asyncio.gather(
        one(workdir / "cached", cached=True, idle_window=idle_window, control_plane=control_plane,
            etcd_version=etcd_version),
        one(workdir / "uncached", cached=False, idle_window=idle_window, control_plane=control_plane,
            etcd_version=etcd_version))
    records = []
    for strategy, result in zip((STRATEGY_CACHED, STRATEGY_UNCACHED), results, strict=True):
        idle, add = result["idle"], result["add"]
        record = {
            "scenario": "api-cost", "strategy": strategy, "operation": "add TLS (3 members) and idle Etcds",
            "outcome": result["phase"], "ok": result["phase"] == constants.PHASE_SUCCESSFUL,
            "add_tls_requests": add.total, "add_tls_wall_s": round(add.seconds, 1),
            "add_tls_by_verb_and_resource": dict(add.counts.most_common()),
            "idle_requests_per_s_per_etcd": round(idle.rate / 2, 3), "idle_window_s": round(idle.seconds, 1),
            "idle_by_verb_and_resource": dict(idle.counts.most_common()),
            "control_plane": control_plane, "etcd_version": etcd_version, "measured_at": bench_module.now_text(),
        }
        if add.audited is not None and idle.audited is not None:
            record.update(add_tls_audit_log_requests=sum(add.audited.values()),
                          idle_audit_log_requests_per_s_per_etcd=round(
                              sum(idle.audited.values()) / idle.seconds / 2, 3) if idle.seconds > 0 else None,
                          add_tls_audit_log_by_verb_and_resource=dict(add.audited.most_common()))
        say(f"api cost ({control_plane}), {strategy}: add TLS {add.total} requests ({result['phase']}"
            + (f"; kube-apiserver's audit log: {record['add_tls_audit_log_requests']}" if add.audited is not None
               else "") + f"), idle {record['idle_requests_per_s_per_etcd']} requests/s per Etcd")
        records.append(record)
        bench_module.drop_volumes(workdir / ("cached" if strategy == STRATEGY_CACHED else "uncached"))
    return records
