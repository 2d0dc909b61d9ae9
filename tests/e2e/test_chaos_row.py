"""A representative row of the fault matrix (``e2e.chaos``; the whole matrix is ``make chaos``) on three real nodes.

We test these aspects, each a cell: a fault injected in the middle of a step of the operation, healed after its
bounded time, and then the request Successful (or Failed naming the fault), no acknowledged write lost, HashKV
equal, the clients' history linearizable, the watch guarantees kept, every member Ready and the Etcd not paused:
* a member's peer traffic cut × add TLS, then × rotate on the same Etcd (now TLS), then × scaling 3→5→3 on it;
* the operator cut from the API server for 30 s × add TLS;
* the leader's node drained × add TLS.

The seed (victim member, request and step) is ``$CHAOS_SEED`` or random, printed; a failing cell's message says
how to reproduce it (``make chaos CHAOS_SEED=… CHAOS_CELLS=…``).
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
import pytest_asyncio

from e2e import chaos, scenario

# A cell's requests get CELL_TIMEOUT together (a loaded machine runs a cell up to 5-10 times slower than an idle
# one: the scale cell takes 40 s idle), then up to 180 s for the Etcd to be Ready and the checks (the linearizability
# checker's own 60 s): a cell that overruns fails with its own verdict, naming the step still in flight, before
# pytest's timeout would end it without one.
CELL_TIMEOUT = 420.0
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(780)]

SEED = int(os.environ.get(chaos.SEED_ENV) or random.randrange(1 << 31))
BROKEN: set[str] = set()  # the shared Etcd after a cell on it failed: the cells after it would judge its leftovers


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def session(tmp_path_factory: pytest.TempPathFactory) -> Any:
    print(f"chaos row: seed {SEED} ({chaos.SEED_ENV}={SEED} reproduces)")
    async with scenario.Scenario(tmp_path_factory.mktemp("chaos-row"), control_plane="kubernetes", nodes=3,
                                 printer=print) as sc, chaos.Session(sc, seed=SEED) as s:
        yield s


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(session: chaos.Session) -> str:
    """One Etcd for the partition cells: plain, TLS after the first, scaled and back after the third (each cell
    ends with it Ready and every check passed, or the cells after it fail unrun)."""
    return await session.etcd("plain")


def passed(result: chaos.CellResult) -> None:
    print(f"{result.cell}: {result.outcome} in {result.wall_s:.1f}s; writes {result.writes}; {result.verdicts}; "
          f"injected {result.injected}" + (f"; notes: {result.notes}" if result.notes else ""))
    assert result.passed, f"{result.cell}: {result.problem} (reproduce: {chaos.reproduce(result)})"


@pytest.mark.parametrize("op", ["add-tls", "rotate", "scale"])
async def test_a_member_cut_from_its_peers_in_the_middle_of_a_step(session: chaos.Session, shared: str,
                                                                   op: str) -> None:
    if shared in BROKEN:
        pytest.fail(f"not run: the shared Etcd {shared} failed an earlier cell, whose leftovers this cell would judge")
    result = await session.run(op, "peer-cut", db=shared, timeout=CELL_TIMEOUT)
    if not result.passed:
        BROKEN.add(shared)
    passed(result)


async def test_the_operator_cut_from_the_api_server_for_30s_in_the_middle_of_an_add_tls(
        session: chaos.Session) -> None:
    passed(await session.run("add-tls", "operator-cut-api", timeout=CELL_TIMEOUT))


async def test_the_leaders_node_drained_in_the_middle_of_an_add_tls(session: chaos.Session) -> None:
    passed(await session.run("add-tls", "leader-drained", timeout=CELL_TIMEOUT))
