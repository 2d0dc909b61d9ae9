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
        return out


@contextlib.asynccontextmanager
async def counted_operator(sc: scenario.Scenario, workdir: pathlib.Path,
                           interval: float | None = None) -> AsyncIterator[scale.CountingProxy]:
    """Restart ``sc``'s operator behind a counting proxy; yields the proxy."""
    await asyncio.to_thread(sc.operator.stop)  # type: ignore[union-attr]
    proxy = scale.CountingProxy(sc.sandbox.url)
    await proxy.start()
    kubeconfig = scale.write_proxied_kubeconfig(sc.sandbox.kubeconfig, workdir / "kubeconfig-counted", proxy.url)
    sc.operator = await asyncio.to_thread(processes.OperatorProcess.start, kubeconfig,
                                          log_path=workdir / "operator-counted.log", interval=interval)
    try:
        yield proxy
    finally:
        await asyncio.to_thread(sc.operator.stop)
        sc.operator = None
        await proxy.stop()


async def measure(proxy: scale.CountingProxy, seconds: float) -> Cost:
    before, started = proxy.snapshot(), time.monotonic()
    await asyncio.sleep(seconds)  # measuring a rate over a window, not synchronising
    return Cost(scale._delta(proxy.snapshot(), before), time.monotonic() - started)


async def add_tls_cost(sc: scenario.Scenario, proxy: scale.CountingProxy, db: str) -> tuple[Cost, str]:
    before, started = proxy.snapshot(), time.monotonic()
    paths_before = collections.Counter(proxy.paths)
    await sc.submit(f"{db}-add-tls", db, constants.OPS_TYPE_RECONFIGURE_TLS, **scale.ADD_TLS)
    req = await sc.watch_request(f"{db}-add-tls", timeout=300)
    phase = (req.get("status") or {}).get("phase", "")
    cost = Cost(scale._delta(proxy.snapshot(), before), time.monotonic() - started)
    cost.paths = scale._delta(collections.Counter(proxy.paths), paths_before)
    return cost, phase


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="apicost-"))
    async with scenario.Scenario(workdir, namespace="cost") as sc:
        await sc.ca_issuer("ca-a")
        async with counted_operator(sc, workdir, interval=args.interval) as proxy:
            await sc.fresh_etcd("c1")
            idle_plain = await measure(proxy, args.idle)
            add, phase = await add_tls_cost(sc, proxy, "c1")
            await sc.wait_ready("c1")
            idle_tls = await measure(proxy, args.idle)
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
