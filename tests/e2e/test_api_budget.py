"""The operator's cost to the API server (issue 14's budget), counted by verb and resource at the API server.

The operator runs behind :class:`e2e.scale.CountingProxy` (every request it makes, kopf's and ours, watches
included, passes through it). Two 3-member Etcds, one plaintext and one with TLS from a CA Issuer, sit idle once
Ready and scanned; then one ``ReconfigureTLS`` adds TLS to the plaintext one. Budget: at most 80 requests for the
whole add-TLS (Events included) and at most 0.1 requests/s per idle Etcd. The breakdown is printed and kept in the
assertion message, so a regression says which verb and resource grew.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e import apicost, scenario
from opsmanager.api import constants

pytestmark = pytest.mark.slow

ADD_TLS_BUDGET = 80
IDLE_BUDGET_PER_ETCD = 0.1  # requests per second
IDLE_WINDOW = 40.0  # seconds


async def scanned(sc: scenario.Scenario, name: str) -> bool:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, name)
    return bool((((obj or {}).get("status") or {}).get("tls") or {}).get("lastScanTime"))


async def test_add_tls_and_idle_stay_within_the_api_budget(tmp_path: Path) -> None:
    async with scenario.Scenario(tmp_path / "sb", namespace="budget") as sc:
        await sc.ca_issuer("ca-a")
        async with apicost.counted_operator(sc, tmp_path) as proxy:
            await sc.create_etcd("plain")
            await sc.create_etcd("tls", issuer="ca-a")
            await sc.wait_ready("plain", timeout=120)
            await sc.wait_ready("tls", timeout=120)
            await sc.wait_for("the first TLS scan", lambda: scanned(sc, "tls"), timeout=60)
            idle = await apicost.measure(proxy, IDLE_WINDOW)
            add, phase = await apicost.add_tls_cost(sc, proxy, "plain")
    report: dict[str, Any] = {"idle_two_etcds": idle.as_dict(), "add_tls": add.as_dict()}
    print(json.dumps(report, indent=1))
    assert phase == constants.PHASE_SUCCESSFUL
    assert add.total <= ADD_TLS_BUDGET, f"one add-TLS made {add.total} API requests: {report['add_tls']}"
    per_etcd = idle.rate / 2
    assert per_etcd <= IDLE_BUDGET_PER_ETCD, f"an idle Etcd costs {per_etcd:.3f} requests/s: {report['idle_two_etcds']}"
