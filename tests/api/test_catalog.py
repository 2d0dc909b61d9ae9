"""The version catalog (:mod:`opsmanager.api.catalog`) and etcd 3.7 in the version logic.

We test these aspects: the shipped objects are one per supported version, valid against the generated CRD's model,
and ``deploy/catalog/`` holds exactly what the generator writes; KubeDB's constraint semantics (allowlist, then
denylist); the shipped constraints allow each minor one up and (from 3.6) one down and nothing that skips 3.6; and
the flags each version renders — 3.7 gets none of the flags it removed, and a renamed one under its new name.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from opsmanager.api import catalog, constants, crdgen, versions
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import render

DEPLOY_CATALOG = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "catalog"


def test_one_shipped_object_per_supported_version() -> None:
    names = [o["metadata"]["name"] for o in catalog.objects()]
    assert names == list(constants.SUPPORTED_ETCD_VERSIONS)
    for obj in catalog.objects():
        parsed = catalog.EtcdVersion.model_validate(obj)
        assert parsed.spec.version == obj["metadata"]["name"] and not parsed.spec.deprecated
        assert parsed.spec.db.image == f"quay.io/coreos/etcd:v{parsed.spec.version}"
        assert versions.supported(parsed.spec.version)


def test_deploy_catalog_is_what_the_generator_writes() -> None:
    assert catalog.check(DEPLOY_CATALOG) == [], "regenerate: python -m opsmanager.api.catalog --out deploy/catalog"
    assert catalog.main(["--out", str(DEPLOY_CATALOG), "--check"]) == 0
    docs = list(yaml.safe_load_all((DEPLOY_CATALOG / catalog.OBJECTS_FILE).read_text()))
    assert docs == catalog.objects()
    kustomization = yaml.safe_load((DEPLOY_CATALOG / catalog.KUSTOMIZATION_FILE).read_text())
    assert "namespace" not in kustomization  # cluster-scoped objects


def test_check_reports_a_stale_catalog(tmp_path: pathlib.Path) -> None:
    assert catalog.main(["--out", str(tmp_path)]) == 0 and catalog.check(tmp_path) == []
    (tmp_path / catalog.OBJECTS_FILE).write_text("# edited\n")
    assert catalog.check(tmp_path) and catalog.main(["--out", str(tmp_path), "--check"]) == 1


def test_the_crd_is_cluster_scoped_with_kubedbs_columns() -> None:
    spec = next(s for s in crdgen.CRDS if s.kind == constants.ETCDVERSION_KIND)
    crd = crdgen.crd(spec)
    assert crd["spec"]["scope"] == "Cluster" and crd["metadata"]["name"] == "etcdversions.catalog.opsmanager.dev"
    version = crd["spec"]["versions"][0]
    assert "subresources" not in version
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Version", "DB_IMAGE", "Deprecated", "Age"]


def test_the_etcd_crd_lists_no_versions() -> None:
    etcd = crdgen.crd(crdgen.CRDS[0])
    node = etcd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["version"]
    assert "enum" not in node and "3.6.16" not in node["description"]


@pytest.mark.parametrize(("constraint", "version", "meets"), [
    (">= 3.6.0, < 3.8.0", "3.7.3", True),
    (">= 3.6.0, < 3.8.0", "3.8.0", False),
    ("< 3.5.35", "3.5.1", True),
    ("3.6.16", "3.6.16", True),
    ("< 3.5 || >= 3.7", "3.6.16", False),
    ("< 3.5 || >= 3.7", "3.7.0", True),
])
def test_constraints(constraint: str, version: str, meets: bool) -> None:
    assert catalog.matches(constraint, version) is meets


def test_a_constraint_that_does_not_parse_is_an_error() -> None:
    with pytest.raises(ValueError):
        catalog.matches("~> 3.6", "3.6.16")


def test_allowlist_then_denylist() -> None:
    both = catalog.UpdateConstraints(allowlist=[">= 3.5.0, < 3.7.0"], denylist=["< 3.5.35"])
    assert catalog.update_allowed(both, "3.6.16") and not catalog.update_allowed(both, "3.5.1")
    assert not catalog.update_allowed(both, "3.7.3")
    assert catalog.update_allowed(catalog.UpdateConstraints(), "3.7.3")  # empty: everything


@pytest.mark.parametrize(("start", "target", "allowed"), [
    ("3.5.35", "3.6.16", True), ("3.6.16", "3.7.3", True), ("3.7.3", "3.6.16", True), ("3.6.16", "3.5.35", True),
    ("3.5.35", "3.7.3", False), ("3.7.3", "3.5.35", False), ("3.5.35", "3.5.1", False), ("3.6.16", "3.5.1", False),
])
def test_the_shipped_constraints(start: str, target: str, allowed: bool) -> None:
    current = next(v for v in catalog.SHIPPED if v.spec.version == start)
    assert catalog.update_allowed(current.spec.update_constraints, target) is allowed


def _db(version: str) -> etcd_api.Etcd:
    return etcd_api.Etcd.model_validate({
        "metadata": {"name": "db", "namespace": "demo"},
        "spec": {"version": version, "tls": {"issuerRef": {"name": "ca"}},
                 "configuration": {"tuning": {"quotaBackendBytes": 4 << 30, "autoCompactionMode": "periodic",
                                              "autoCompactionRetention": "1h", "snapshotCount": 10000,
                                              "heartbeatInterval": 100, "electionTimeout": 1000,
                                              "maxRequestBytes": 1 << 20, "maxTxnOps": 128}}}})


@pytest.mark.parametrize("version", constants.SUPPORTED_ETCD_VERSIONS)
def test_every_rendered_flag_is_one_the_version_accepts(version: str) -> None:
    db = _db(version)
    args = render.etcd_args(db, render.Wiring.steady(db.spec.tls))
    assert args and all(versions.flag_for(version, a) == a for a in args)
    assert not {a.partition("=")[0] for a in args} & set(versions.REMOVED_IN_3_7)
    containers = render.render_statefulset(db)["spec"]["template"]["spec"]["containers"]
    assert next(c for c in containers if c["name"] == "etcd")["image"] == f"quay.io/coreos/etcd:v{version}"


def test_3_7_drops_or_renames_the_flags_it_removed() -> None:
    args = ["--name=x", "--experimental-snapshot-catchup-entries=5000", "--experimental-initial-corrupt-check=true",
            "--discovery=https://d"]
    assert versions.accepted_args("3.7.3", args) == ["--name=x", "--snapshot-catchup-entries=5000"]
    assert versions.accepted_args("3.6.16", args) == args  # 3.6 still takes them (deprecated)
