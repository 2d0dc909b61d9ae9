"""No annotation serves as the operator's memory: what the engine, the provisioner and the lifecycle remember is
typed status. The annotations they once remembered in are only read (legacy readers with a removal note) or
deleted (set to None in a patch); every annotation the product still writes describes the object it is on."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "opsmanager"

# Annotations that were memory, now typed status: the engine's rotation baselines and member count, the
# provisioner's announced material, the lifecycle's scan, auto-renew and auto-defragment memory.
MEMORY = frozenset({
    "ANNOTATION_ROTATION", "ANNOTATION_SCALED_BY", "ANNOTATION_MATERIAL_ANNOUNCED", "ANNOTATION_AUTO_DEFRAGMENT",
    "ANNOTATION_AUTO_RENEW", "ANNOTATION_EVENT_KEYS", "ANNOTATION_SCAN_REQUESTED", "ANNOTATION_SECRET_SEEN",
})


def _name(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, annotation) of every dict entry or subscript assignment that gives a memory annotation a value."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                deleted = isinstance(value, ast.Constant) and value.value is None
                if _name(key) in MEMORY and not deleted:
                    found.append((node.lineno, _name(key)))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _name(target.slice) in MEMORY:
                    found.append((node.lineno, _name(target.slice)))
    return found


def test_no_memory_annotation_is_written() -> None:
    found = {str(p.relative_to(ROOT)): writes for p in sorted(ROOT.rglob("*.py")) if (writes := _writes(
        ast.parse(p.read_text())))}
    assert found == {}, f"annotations written as memory (keep it in typed status): {found}"


def test_the_check_finds_a_memory_annotation_written() -> None:
    code = 'patch = {"metadata": {"annotations": {naming.ANNOTATION_MATERIAL_ANNOUNCED: "[]"}}}\n' \
           'meta["annotations"][ANNOTATION_SCAN_REQUESTED] = when\n' \
           'gone = {"metadata": {"annotations": {ANNOTATION_SCALED_BY: None}}}\n'
    assert sorted(_writes(ast.parse(code))) == [(1, "ANNOTATION_MATERIAL_ANNOUNCED"), (2, "ANNOTATION_SCAN_REQUESTED")]
