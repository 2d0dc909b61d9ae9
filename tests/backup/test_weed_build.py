"""sandbox/controlplane/build.py for the S3 server of the backup tests: the ``seaweedfs`` component's pin is a
pseudo-version on a one-line ``require``, and its version stamp names SeaweedFS's own variable (no Go needed here);
the product's own Go tool (``etcdauth``) is keyed by a hash of its source."""

from __future__ import annotations

import pathlib
import re

import pytest

from opsmanager_sandbox import realcp

build = realcp.build_module()

GOMOD = """module opsmanager.dev/sandbox/controlplane/seaweedfs

go 1.26.6

require github.com/seaweedfs/seaweedfs v0.0.0-20261109003541-7506e5f91cd6 // indirect

require (
\tgithub.com/seaweedfs/seaweedfs/other v1.2.3 // indirect
\tgo.etcd.io/etcd/server/v3 v3.6.16
)

// github.com/seaweedfs/seaweedfs v9.9.9 in a comment does not count
replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0
replace (
\tk8s.io/api => k8s.io/api v0.37.2
)

tool github.com/seaweedfs/seaweedfs/weed
"""


@pytest.mark.parametrize(("module", "version"), [
    ("github.com/seaweedfs/seaweedfs", "v0.0.0-20261109003541-7506e5f91cd6"),
    ("github.com/seaweedfs/seaweedfs/other", "v1.2.3"),
    ("go.etcd.io/etcd/server/v3", "v3.6.16"),
    ("github.com/tyler-smith/go-bip39", None),  # only replaced
    ("k8s.io/api", None),  # only in a replace block
    ("github.com/seaweedfs", None),  # a path prefix is not the module
])
def test_required_version(module: str, version: str | None) -> None:
    assert build.required_version(GOMOD, module) == version


def test_the_committed_pins() -> None:
    seaweedfs = build.COMPONENTS["seaweedfs"]
    assert seaweedfs.tools == {"weed": "github.com/seaweedfs/seaweedfs/weed"}
    assert build.PSEUDO_VERSION.match(seaweedfs.version())
    assert str(build.binary("seaweedfs", "weed")).endswith(f"/seaweedfs-{seaweedfs.version()}/weed")
    assert (seaweedfs.directory / "go.sum").is_file()
    gomod = (seaweedfs.directory / "go.mod").read_text()
    assert "replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0" in gomod
    for name in ("etcd-3.5", "etcd-3.6", "kubernetes"):  # the other pins still read as before
        assert build.COMPONENTS[name].version().startswith(("v3.5.", "v3.6.", "v1."))


def test_ldflags_stamp_each_module_its_own_way() -> None:
    seaweedfs = build.ldflags("go", build.COMPONENTS["seaweedfs"])
    commit = build.COMPONENTS["seaweedfs"].version().rsplit("-", 1)[1]
    assert seaweedfs == f"-s -w -X github.com/seaweedfs/seaweedfs/weed/util/version.COMMIT={commit}"
    assert "etcd" not in seaweedfs  # weed links etcd's client packages: they must not claim an etcd version
    etcd = build.ldflags("go", build.COMPONENTS["etcd-3.6"])
    assert etcd == f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-{build.COMPONENTS['etcd-3.6'].version()}"


@pytest.mark.parametrize(("version", "commit"), [
    ("v0.0.0-20261109003541-7506e5f91cd6", "7506e5f91cd6"),
    ("v1.2.4-0.20261109003541-7506e5f91cd6", "7506e5f91cd6"),
    ("v1.3.0-rc.1.0.20261109003541-7506e5f91cd6", "7506e5f91cd6"),
    ("v3.6.16", None),
])
def test_pseudo_versions(version: str, commit: str | None) -> None:
    match = build.PSEUDO_VERSION.match(version)
    assert (match.group(1) if match else None) == commit


def test_the_products_own_go_tool_is_keyed_by_its_source(tmp_path: pathlib.Path) -> None:
    etcdauth = build.COMPONENTS["etcdauth"]
    assert etcdauth.directory == build.REPO / "tools" / "etcdauth" and (etcdauth.directory / "go.sum").is_file()
    assert re.fullmatch(r"src-[0-9a-f]{12}", etcdauth.version())
    assert build.ldflags("go", etcdauth) == "-s -w"
    for name in ("go.mod", "go.sum", "main.go"):
        (tmp_path / name).write_text(name)
    (tmp_path / "README").write_text("not source")
    local = build.Component("x", "example.com/x", {"x": "."}, source=str(tmp_path))
    before = local.version()
    (tmp_path / "README").write_text("still not source")
    assert local.version() == before
    (tmp_path / "main.go").write_text("package main // edited")
    assert local.version() != before  # an edit builds anew
