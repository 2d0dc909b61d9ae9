"""One home per condition, checked from the code; the step table in the docs is current.

We test these aspects: the generated table in ``docs/operations.md`` equals what the code gives now; no two step
modules own the same condition; each step kind has one step type; every step the plans declare runs in the
step module that owns its condition; a step module sets no condition it does not own; outside the step modules,
the ops package sets no step's condition, but for the restart machinery reporting a lone restart under
``RestartPods`` (which ``restart_pods`` owns); and the checker itself catches a module that breaks the rule.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

from opsmanager.api import constants
from opsmanager.ops import engine, plan, steptable

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS = ROOT / "opsmanager" / "ops"


def owners() -> dict[str, str]:
    """condition → the step module that owns it (asserting no condition has two owners)."""
    out: dict[str, str] = {}
    for run in set(engine.STEPS.values()):
        module = sys.modules[run.__module__]
        for condition in module.CONDITIONS:
            assert out.get(condition, module.__name__) == module.__name__, \
                f"{condition} is owned by {out[condition]} and {module.__name__}"
            out[condition] = module.__name__
    return out


def set_conditions(source: str) -> set[str]:
    """The ``constants.COND_*`` names a module passes to ``set_condition`` (as the first argument)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_condition":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Attribute) and first.attr.startswith("COND_"):
                found.add(getattr(constants, first.attr))
    return found


def _step_class_name(func: ast.expr) -> str | None:
    """``X`` of a call to ``X(…)`` or ``plan.X(…)`` (the type modules import the plan module)."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "plan":
        return func.attr
    return None


def declared_steps() -> list[tuple[str, str]]:
    """(condition, StepKind name) of every step the plans declare: ``<StepClass>(constants.COND_…, …)``, in the
    plan module and in every operation type's module."""
    out = []
    for path in [OPS / "plan.py", *sorted((OPS / "operations").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (name := _step_class_name(node.func)) is not None and node.args and \
                    isinstance(node.args[0], ast.Attribute) and node.args[0].attr.startswith("COND_"):
                step_class = getattr(plan, name)
                assert issubclass(step_class, plan.Step), name
                out.append((getattr(constants, node.args[0].attr), step_class.kind.name))
    return out


def test_each_step_kind_has_one_step_type() -> None:
    types = [c for c in vars(plan).values() if isinstance(c, type) and issubclass(c, plan.Step) and c is not plan.Step]
    assert sorted(t.kind.name for t in types) == sorted(k.name for k in plan.StepKind)


def foreign_sets(path: pathlib.Path, owner: dict[str, str], source: str | None = None) -> set[str]:
    """The step conditions the module at ``path`` (its ``source``, else the file's) sets without owning them."""
    module = "opsmanager." + ".".join(path.relative_to(ROOT / "opsmanager").with_suffix("").parts)
    text = path.read_text() if source is None else source
    return {c for c in set_conditions(text) if c in owner and owner[c] != module}


def test_the_step_table_in_the_docs_is_current() -> None:
    text = (ROOT / steptable.DOC).read_text()
    assert steptable.rewrite(text) == text, "docs/operations.md: run python -m opsmanager.ops.steptable"


def test_every_step_kind_has_a_step_module_that_owns_conditions() -> None:
    assert set(engine.STEPS) == set(plan.StepKind)
    assert owners(), "no step module declares CONDITIONS"


def test_every_declared_step_runs_in_the_module_that_owns_its_condition() -> None:
    owner = owners()
    steps = declared_steps()
    assert len(steps) >= 15, steps  # the plans of every request type
    for condition, kind in steps:
        runner = engine.STEPS[plan.StepKind[kind]].__module__
        assert owner.get(condition) == runner, f"{condition} runs as {kind} in {runner}, owned by {owner.get(condition)}"


def test_each_condition_is_set_in_one_step_module_only() -> None:
    owner = owners()
    for path in sorted((OPS / "steps").glob("*.py")):
        assert foreign_sets(path, owner) == set(), f"{path.name} sets a condition another step owns"
    exceptions = {OPS / "restart.py": {constants.COND_RESTART_PODS}}
    for path in sorted(OPS.glob("*.py")):
        assert foreign_sets(path, owner) <= exceptions.get(path, set()), f"{path.name} sets a step's condition"


@pytest.mark.parametrize(("statement", "stolen"), [
    ("ctx.set_condition(constants.COND_RESTART_PODS, 'True', 'x')", constants.COND_RESTART_PODS),
    ("ctx.set_condition(constants.COND_UPDATE_DATABASE, 'False')", constants.COND_UPDATE_DATABASE),
])
def test_the_check_catches_a_step_setting_another_steps_condition(statement: str, stolen: str) -> None:
    path = OPS / "steps" / "move_leader.py"
    owner = owners()
    assert foreign_sets(path, owner) == set()
    broken = path.read_text() + f"\n\ndef _broken(ctx):\n    {statement}\n"
    assert foreign_sets(path, owner, broken) == {stolen}
