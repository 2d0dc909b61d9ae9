"""A PodDisruptionBudget entry left by the request's own earlier restart does not hold the roll for two minutes.

kube-controller-manager keys ``disruptedPods`` by pod name; when it misses the delete of a pod the operator evicted
(the StatefulSet recreated it at once), the entry outlives the eviction by two minutes, counts the healthy successor
as disrupted, and every further eviction is refused. Here the world's budget gets that entry — the first member
evicted, stamped when it was evicted, its successor healthy again — right before the next eviction. We test these
aspects:
- the request proves the entry its own and every member serving, deletes the next member (the one disruption the
  budget allows) instead of waiting, and ends Successful having restarted each member once, one at a time (the
  world gives up long before the entry would expire);
- the Event of that restart says why; the budget's entry is left as it was (it still refuses everyone else);
- beside it, an entry for another member as new as its pod (someone else's disruption in flight): the refusal
  stands, nothing is deleted, and the request says it waits for the budget.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from opsmanager.api import conditions, constants
from tests.ops import test_engine_operations as operations
from tests.ops import world as w

RESTART = next(o for o in operations.OPERATIONS if o.name == "restart")


def stale_entry_after_first_eviction(world: w.World, *, someone_else: bool = False) -> None:
    """Before the second eviction, give the budget a stale entry for the first member evicted, stamped when it was
    evicted, with no disruption allowed, as kube-controller-manager leaves it; ``someone_else``: and an entry for
    the third member as new as its pod (another client's eviction admitted, its pod not deleted yet)."""
    evicted: list[tuple[str, datetime.datetime]] = []
    evict = world.kube.evict

    async def evict_with_a_stale_entry(namespace: str, pod: str, **kw: Any) -> None:
        if len(evicted) == 1:
            first, when = evicted[0]
            await first_eviction_settled(world, namespace, first)
            entries = {first: conditions.rfc3339(when)}
            if someone_else:
                third = next(p for p in operations.PODS if p not in (first, pod))
                entries[third] = conditions.rfc3339(datetime.datetime.now(datetime.UTC))
            await world.kube.patch("policy/v1", "PodDisruptionBudget", namespace, "db", {"status": {
                "disruptionsAllowed": 0, "disruptedPods": entries}}, subresource="status")
        evicted.append((pod, datetime.datetime.now(datetime.UTC)))
        await evict(namespace, pod, **kw)

    world.kube.evict = evict_with_a_stale_entry  # type: ignore[method-assign]


async def first_eviction_settled(world: w.World, namespace: str, first: str, *, timeout: float = 10.0) -> None:
    """Wait (polling, with a deadline) until the disruption controller has seen the first evicted pod go and
    dropped its entry: an entry written before that pass would be dropped with it, and the stale entry never
    seen."""
    deadline = time.monotonic() + timeout
    while first in (((await world.kube.get("policy/v1", "PodDisruptionBudget", namespace, "db")) or {})
                    .get("status") or {}).get("disruptedPods", {}):
        if time.monotonic() >= deadline:
            raise AssertionError(f"the disruption controller kept {first}'s entry for {timeout}s after its delete")
        await asyncio.sleep(0.02)


async def test_a_stale_entry_of_its_own_restart_is_proven_and_the_roll_goes_on(world: w.World) -> None:
    world.budget = True
    await operations.prepare(world, RESTART)
    stale_entry_after_first_eviction(world)
    req = await world.run(RESTART.name)
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    await operations.assert_rolled_safely(world, RESTART)
    first = world.record.evictions[0][0]
    rest = [p for p in operations.PODS if p != first]
    # The entry stays two minutes: each later member is refused by it alone, proven, and deleted, once.
    assert sorted(world.record.deletions) == sorted(rest), world.record
    events = [e["message"] for e in await world.kube.list("v1", "Event", w.NS)
              if e.get("reason") == "EvictPod" and "stale entry" in e.get("message", "")]
    assert len(events) == 2 and all(f"stale entry for {first}, left by this request's own restart" in m
                                    for m in events), events
    budget = await world.kube.get("policy/v1", "PodDisruptionBudget", w.NS, "db")
    assert first in ((budget or {}).get("status") or {}).get("disruptedPods", {}), budget  # left for the others


async def test_an_entry_it_cannot_account_for_is_waited_out_and_named(world: w.World) -> None:
    world.budget = True
    await operations.prepare(world, RESTART)
    stale_entry_after_first_eviction(world, someone_else=True)
    for _ in range(40):
        outcome = await world.engine().reconcile(w.NS, RESTART.name)
        await world.settle()
        assert not outcome.finished, await world.get_request(RESTART.name)
    req = await world.get_request(RESTART.name)
    waiting = [c.get("message", "") for c in req["status"]["conditions"] if c["type"] == constants.COND_RESTART_PODS]
    assert any("not allowed yet by the PodDisruptionBudget" in m for m in waiting), req["status"]["conditions"]
    assert world.record.deletions == []
