"""Read the operator's ``/metrics`` in tests: how a test sees that provisioner passes happen, now that a pass reads
nothing from the API server (``opsmanager_etcd_reconciles_total``, :mod:`opsmanager.metrics`)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.polling import aeventually


async def sample(url: str, name: str, **labels: str) -> float:
    """The value of the series ``name{labels}`` (0 when it does not exist yet)."""
    async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
        text = await resp.text()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


async def reconciles(url: str, namespace: str, etcd: str) -> float:
    return await sample(url, "opsmanager_etcd_reconciles_total", namespace=namespace, etcd=etcd)


async def wait_passes(url: str, namespace: str, etcd: str, count: int, *, timeout: float) -> None:
    """Wait until the provisioner has made ``count`` more passes over ``namespace/etcd``."""
    start = await reconciles(url, namespace, etcd)

    async def enough() -> bool:
        return await reconciles(url, namespace, etcd) >= start + count
    await aeventually(enough, timeout=timeout, interval=0.1, what=f"{count} more provisioner passes over {etcd}")


def sandbox_metrics_url(sandbox_dir: str | Path) -> str:
    """The operator's metrics URL a sandbox recorded (``<dir>/endpoints.json``)."""
    return str(json.loads((Path(sandbox_dir) / "endpoints.json").read_text())["operatorMetrics"])
