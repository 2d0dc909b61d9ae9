"""No function in the product package is longer than 60 lines, from its ``def`` line to its last line (decorators
not counted); the generated protobuf modules (``opsmanager/etcd/_pb``) are not ours to split.

A function that grows past the limit is split into named helpers, each saying what it does.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "opsmanager"
LIMIT = 60

def _functions(tree: ast.AST) -> list[tuple[str, int]]:
    """Every function and method (nested ones too) as (qualified name, lines from ``def`` to its end)."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def test_no_function_in_opsmanager_exceeds_60_lines() -> None:
    too_long = []
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT)
        if module.parts[:2] == ("etcd", "_pb"):
            continue
        for name, lines in _functions(ast.parse(path.read_text(), str(path))):
            if lines > LIMIT:
                too_long.append(f"{module} {name}: {lines} lines")
    assert not too_long, f"functions over {LIMIT} lines (split them into named helpers): {too_long}"
