"""The operator's cost to the API server (issue 14's budget), counted by verb and resource at the API server.

The operator runs behind :class:`e2e.scale.CountingProxy` (every request it makes, kopf's and ours, watches
included, passes through it). Two 3-member Etcds, one plaintext and one with TLS from a CA Issuer, sit idle once
Ready and scanned; then one ``ReconfigureTLS`` adds TLS to the plaintext one (:func:`e2e.apicost.one`, the same
measurement as ``make bench``'s ``api-cost``). Budget: at most 80 requests for the whole add-TLS (Events
included; the idle Etcd's periodic scans that fall in its window are reported apart, they are the idle figure's)
and at most 0.1 requests/s per idle Etcd. The breakdown is printed and kept in the assertion message,
so a regression says which verb and resource grew.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e import apicost
from opsmanager.api import constants

pytestmark = pytest.mark.slow

ADD_TLS_BUDGET = 80
IDLE_BUDGET_PER_ETCD = 0.1  # requests per second
IDLE_WINDOW = 40.0  # seconds


async def test_add_tls_and_idle_stay_within_the_api_budget(tmp_path: Path) -> None:
    result = await apicost.one(tmp_path / "sb", cached=True, idle_window=IDLE_WINDOW)
    idle, add = result["idle"], result["add"]
    report: dict[str, Any] = {"idle_two_etcds": idle.as_dict(), "add_tls": add.as_dict()}
    print(json.dumps(report, indent=1))
    assert result["phase"] == constants.PHASE_SUCCESSFUL
    assert add.total <= ADD_TLS_BUDGET, f"one add-TLS made {add.total} API requests: {report['add_tls']}"
    # an idle Etcd's StatefulSet is never rewritten (on kube-apiserver, an empty field the render kept and the
    # server omits made every pass PUT it)
    assert not idle.counts.get("PUT statefulsets"), report["idle_two_etcds"]
    per_etcd = idle.rate / 2
    assert per_etcd <= IDLE_BUDGET_PER_ETCD, f"an idle Etcd costs {per_etcd:.3f} requests/s: {report['idle_two_etcds']}"
