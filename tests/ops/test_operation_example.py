"""What adding an operation type takes, shown with an example type registered only inside this test.

We test these aspects: a type the engine did not know runs to ``Successful`` through the real engine once its
module (a plan, a write-back, a success message: one :class:`~opsmanager.ops.operations.base.Operation`) is in the
registry — the engine, the plan module, the queue and ``UpdateDatabase`` unchanged; outside the registration the
same request fails as a type the engine does not run; and no engine module outside ``ops/operations/`` names a
request type, so there is no other place a new type would have to touch.

The example takes the name ``StorageMigration``, a type the API's schema admits (KubeDB's), with the type's own
module taken out of the registry for the length of each test (every type of the schema now has one): its API model
is there, and the fast world has no admission webhook, so the module is all it needs here. A real type adds its
fields to ``opsmanager/api/opsrequest.py`` and its rule to the webhook (``docs/architecture.md``, "Adding an
operation type").
"""

from __future__ import annotations

import ast
import enum
import pathlib

import pytest

from opsmanager.api import conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import context, operations, plan
from opsmanager.ops.operations import base
from tests.ops import world as w

EXAMPLE_TYPE = "StorageMigration"
MARK = "example.opsmanager.dev/done-by"  # what the example writes back to the Etcd


# --- the example type's module: all a new type brings to the engine ---------------------------------------------


def plan_example(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """Pause the Etcd, move the leader (an existing step), then write back."""
    steps = (
        plan.running("Etcd ops request is running the example"),
        plan.MoveLeader(constants.COND_ETCD_LEADER_MOVED, "Moved the leader, the example's one action"),
        plan.update_database("The example marked the Etcd"),
    )
    return plan.Plan(request.spec.type, None, db.spec.tls, steps)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """The Etcd is annotated with the request that ran (skipped once done, as every write-back)."""
    if (ctx.db_obj["metadata"].get("annotations") or {}).get(MARK) != ctx.name:
        ctx.db_obj = await ctx.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                          ctx.db_name, {"metadata": {"annotations": {MARK: ctx.name}}})
    return context.Done(step.message)


EXAMPLE = base.Operation(EXAMPLE_TYPE, plan_example, "Successfully ran the example", write_back=write_back)


# --- the tests ------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _unregistered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The type's own module out of the registry (put back after the test)."""
    monkeypatch.delitem(operations.REGISTRY, EXAMPLE_TYPE, raising=False)


async def test_a_registered_example_type_runs_to_successful_with_the_engine_unchanged(world: w.World) -> None:
    await world.etcd("db")
    await world.request("example", "db", EXAMPLE_TYPE)
    with operations.registered(EXAMPLE):
        req = await world.run("example")
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert w.umbrella(req) == [constants.COND_RUNNING, constants.COND_ETCD_LEADER_MOVED,
                               constants.COND_UPDATE_DATABASE, constants.COND_SUCCESSFUL]
    done = conditions.get_condition(req["status"]["conditions"], constants.COND_SUCCESSFUL) or {}
    assert done.get("message") == "Successfully ran the example"
    assert (await world.get_etcd("db"))["metadata"]["annotations"][MARK] == "example"
    assert not await world.is_paused("db")  # the engine resumed the Etcd, as for every type
    assert operations.get(EXAMPLE_TYPE) is None, "registered only inside the block"


async def test_outside_the_registry_the_same_type_is_not_run(world: w.World) -> None:
    await world.etcd("db")
    await world.request("example", "db", EXAMPLE_TYPE)
    req = await world.run("example")
    assert req["status"]["phase"] == constants.PHASE_FAILED
    failed = conditions.get_condition(req["status"]["conditions"], constants.COND_FAILED) or {}
    assert failed.get("message") == f"unsupported EtcdOpsRequest type {EXAMPLE_TYPE!r}"


def test_no_engine_module_outside_the_type_modules_names_a_request_type() -> None:
    ops = pathlib.Path(__file__).resolve().parents[2] / "opsmanager" / "ops"
    types = {name for name in vars(constants) if name.startswith("OPS_TYPE_")}
    for path in sorted(ops.rglob("*.py")):
        if "operations" in path.relative_to(ops).parts:
            continue
        named = {node.attr for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Attribute) and node.attr in types}
        assert named == set(), f"{path.relative_to(ops)} names {sorted(named)}: that belongs in its type's module"
