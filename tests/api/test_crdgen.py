"""CRD generation: the committed ``crds/`` match the models, ``--check`` catches drift, the schema is structural.

We test these aspects: ``opsmanager crds --check`` passes on the committed files and fails (naming the file) on a
modified, missing or unexpected file in a temporary copy; ``--out`` writes what is committed; every schema node is
structural (a type everywhere, no ``$ref``, no ``anyOf`` with null, no ``additionalProperties`` beside
``properties``) and documented; defaults satisfy their enums and patterns; the CRD carries the status subresource,
printer columns, short names, categories and CEL rules; a union the converter cannot express is refused.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
import yaml

from opsmanager.api import constants, crdgen

REPO = pathlib.Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CRDS / name).read_text())


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}.*")
    for i, member in enumerate(node.get("anyOf", [])):
        yield from _nodes(member, f"{path}|{i}")


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """An independent (small) check of the structural-schema rules the API server enforces."""
    problems = []
    for path, node in _nodes(schema):
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        if "|" not in path and "type" not in node and not int_or_string \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{path or '<root>'}: no type")
        if "$ref" in node or "$defs" in node or "definitions" in node:
            problems.append(f"{path}: $ref/$defs")
        if "anyOf" in node:
            if not int_or_string or node["anyOf"] != [{"type": "integer"}, {"type": "string"}]:
                problems.append(f"{path}: anyOf other than int-or-string")
        if node.get("type") == "null" or "nullable" in node or "oneOf" in node or "allOf" in node:
            problems.append(f"{path}: null / nullable / oneOf / allOf")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: properties and additionalProperties together")
        if node.get("uniqueItems") is True:
            problems.append(f"{path}: uniqueItems")
        for key in ("title", "const", "$schema", "examples"):
            if key in node:
                problems.append(f"{path}: {key} is not allowed")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{path}: array without items")
    return problems


@pytest.mark.parametrize("spec", crdgen.CRDS, ids=lambda s: s.kind)
def test_generated_schema_is_structural(spec: crdgen.CRDSpec) -> None:
    assert structural_problems(crdgen.openapi_schema(spec.model)) == []


def test_the_checker_itself_catches_violations() -> None:
    bad = {"type": "object", "properties": {
        "a": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "b": {"$ref": "#/$defs/X"},
        "c": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False},
        "d": {"description": "untyped"},
    }}
    problems = structural_problems(bad)
    assert problems == [
        ".a: no type", ".a: anyOf other than int-or-string", ".a|1: null / nullable / oneOf / allOf",
        ".b: no type", ".b: $ref/$defs", ".c: properties and additionalProperties together", ".d: no type",
    ]


@pytest.mark.parametrize("spec", crdgen.CRDS, ids=lambda s: s.kind)
def test_every_field_is_documented(spec: crdgen.CRDSpec) -> None:
    schema = crdgen.openapi_schema(spec.model)
    undocumented = [
        path for path, node in _nodes(schema)
        if path and path != ".metadata" and "|" not in path and not path.endswith(("[]", ".*"))
        and not node.get("description")
    ]
    assert undocumented == []


@pytest.mark.parametrize("spec", crdgen.CRDS, ids=lambda s: s.kind)
def test_defaults_satisfy_their_own_enums_and_patterns(spec: crdgen.CRDSpec) -> None:
    checked = 0
    for path, node in _nodes(crdgen.openapi_schema(spec.model)):
        if "default" not in node:
            continue
        checked += 1
        if "enum" in node:
            assert node["default"] in node["enum"], path
        if "pattern" in node:
            assert re.fullmatch(node["pattern"].strip("^$"), node["default"]), path
    assert checked >= (1 if spec.kind == "EtcdVersion" else 3)  # the catalog's kind has one default: deprecated


def test_committed_crds_are_up_to_date_and_check_passes() -> None:
    assert crdgen.check(CRDS) == []
    assert crdgen.main(["--out", str(CRDS), "--check"]) == 0


def test_console_script_check_runs(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "opsmanager", "crds", "--check", "--out", str(CRDS)],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"{len(crdgen.CRDS)} CRDs up to date" in result.stdout


def test_check_fails_naming_a_modified_file(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "crds"
    shutil.copytree(CRDS, out)
    target = out / "ops.opsmanager.dev_etcdopsrequests.yaml"
    target.write_text(target.read_text().replace("default: 10m", "default: 20m"))
    assert crdgen.main(["--out", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"{target} is stale" in err
    assert "-                default: 20m" in err and "+                default: 10m" in err
    assert "opsmanager.dev_etcds.yaml is stale" not in err
    assert "regenerate with: opsmanager crds --out" in err


def test_check_fails_on_missing_and_unexpected_files(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "crds"
    shutil.copytree(CRDS, out)
    (out / "opsmanager.dev_etcds.yaml").unlink()
    (out / "extra.yaml").write_text("kind: Nothing\n")
    problems = crdgen.check(out)
    assert problems == [
        f"{out / 'opsmanager.dev_etcds.yaml'} is missing",
        f"{out / 'extra.yaml'} is not generated by `opsmanager crds`; delete it or add its model",
    ]


def test_check_covers_the_kustomization(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "crds"
    shutil.copytree(CRDS, out)
    kustomization = yaml.safe_load((out / crdgen.KUSTOMIZATION_FILE).read_text())
    assert kustomization["resources"] == sorted(p.name for p in CRDS.glob("*.yaml"))
    (out / crdgen.KUSTOMIZATION_FILE).write_text("resources: []\n")
    (out / "kustomization.yaml").write_text("resources: []\n")
    problems = crdgen.check(out)
    assert problems[0].startswith(f"{out / crdgen.KUSTOMIZATION_FILE} is stale")
    assert problems[1:] == [f"{out / 'kustomization.yaml'} is not generated by `opsmanager crds`; delete it or add "
                            "its model"]


def test_out_writes_exactly_the_committed_files(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "new"
    assert crdgen.main(["--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in CRDS.iterdir())
    assert (out / crdgen.KUSTOMIZATION_FILE).exists()
    for path in out.iterdir():
        assert path.read_text() == (CRDS / path.name).read_text()
    assert crdgen.render_all() == crdgen.render_all()  # deterministic


def test_opsrequest_crd_identity_columns_and_immutability() -> None:
    crd = _load("ops.opsmanager.dev_etcdopsrequests.yaml")
    assert crd["metadata"]["name"] == "etcdopsrequests.ops.opsmanager.dev"
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["etcdops"] and names["plural"] == "etcdopsrequests"
    assert "ops" in names["categories"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Type"] == ".spec.type" and columns["Status"] == ".status.phase"
    assert columns["Age"] == ".metadata.creationTimestamp"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"rule": "self == oldSelf", "message": "spec is immutable"} in spec["x-kubernetes-validations"]
    # KubeDB's fourteen, and ours: Backup (KubeDB's backups come from KubeStash)
    assert spec["properties"]["type"]["enum"] == [*constants.KUBEDB_OPS_TYPES, constants.OPS_TYPE_BACKUP]
    assert spec["properties"]["timeout"]["default"] == "10m"
    assert spec["properties"]["apply"]["default"] == "IfReady"
    assert spec["required"] == ["databaseRef", "type"]


def test_etcd_crd_defaults_enums_and_cel() -> None:
    crd = _load("opsmanager.dev_etcds.yaml")
    version = crd["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Version", "Replicas", "Status", "Age"]
    assert crd["spec"]["names"]["shortNames"] == ["etcd"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec["properties"]
    assert props["replicas"]["default"] == 3
    assert props["storageType"]["enum"] == ["Durable", "Ephemeral"] and props["storageType"]["default"] == "Durable"
    assert props["deletionPolicy"]["default"] == "Delete"
    tls = props["tls"]
    assert tls["x-kubernetes-validations"][0] == {
        "message": "spec.tls.issuerRef is missing", "rule": "has(self.issuerRef) || has(self.externalSecrets)"}
    certs = tls["properties"]["certificates"]
    assert certs["x-kubernetes-list-type"] == "map" and certs["x-kubernetes-list-map-keys"] == ["alias"]
    assert certs["items"]["properties"]["alias"]["enum"] == ["server", "client", "peer"]
    quantity = props["storage"]["properties"]["resources"]["properties"]["requests"]["additionalProperties"]
    assert quantity == {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    assert props["podTemplate"]["properties"]["spec"]["properties"]["terminationGracePeriodSeconds"]["minimum"] == 0
    assert version["schema"]["openAPIV3Schema"]["properties"]["metadata"] == {"type": "object"}


def test_a_union_that_cannot_be_structural_is_refused() -> None:
    class Spec(pydantic.BaseModel):
        value: int | list[str]

    class Kind(pydantic.BaseModel):
        spec: Spec

    with pytest.raises(crdgen.SchemaError, match=r"spec.value: a union of 2 types"):
        crdgen.openapi_schema(Kind)
