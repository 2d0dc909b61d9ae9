"""docs/api.md is generated from the models and must be current; it documents every field of both kinds."""

from __future__ import annotations

import pathlib

from opsmanager.api import apidoc, crdgen

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_committed_api_reference_is_current() -> None:
    assert (REPO / "docs" / "api.md").read_text() == apidoc.render(), (
        "docs/api.md is stale: run python -m opsmanager.api.apidoc --out docs/api.md"
    )
    assert apidoc.main(["--out", str(REPO / "docs" / "api.md"), "--check"]) == 0


def test_check_fails_on_a_stale_page(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "api.md"
    assert apidoc.main(["--out", str(page), "--check"]) == 1
    assert apidoc.main(["--out", str(page)]) == 0
    assert apidoc.main(["--out", str(page), "--check"]) == 0
    page.write_text(page.read_text().replace("`10m`", "`20m`"))
    assert apidoc.main(["--out", str(page), "--check"]) == 1


def test_every_schema_field_has_a_row() -> None:
    text = apidoc.render()
    for spec in crdgen.CRDS:
        schema = crdgen.openapi_schema(spec.model)
        stack = [(key, schema["properties"][key]) for key in ("spec", "status") if key in schema["properties"]]
        while stack:
            path, node = stack.pop()
            assert f"| `{path}` |" in text, path
            stack += [(f"{path}.{k}", v) for k, v in node.get("properties", {}).items()]
            items = node.get("items") or {}
            stack += [(f"{path}[].{k}", v) for k, v in items.get("properties", {}).items()]
    assert "## Etcd" in text and "## EtcdOpsRequest" in text
