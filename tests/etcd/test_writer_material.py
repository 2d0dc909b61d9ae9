"""The live writer following its material (issue 12, part 2) against a real 3-member mTLS etcd cluster.

We test these aspects: a following writer reads its trust and client certificate from files (as a pod gets its
mounted Secrets) and writes; a renewed client certificate is taken up by new connections; a client certificate no
member accepts makes ops fail and they are counted failed; when good material comes back, the failing op re-reads
it and succeeds without waiting for the refresh; every acknowledged write is read back at the end; the existing
fixed-identity mode is untouched (its tests are in ``test_client_mtls.py``).
"""

from __future__ import annotations

import pathlib

import pytest

from e2e import localcluster, writer
from opsmanager import pki
from tests.polling import aeventually

pytestmark = pytest.mark.slow


def put_material(where: pathlib.Path, ca: bytes, leaf: pki.KeyPair) -> None:
    """Write the three files the way the kubelet does: each replaced whole (rename)."""
    for name, data in (("ca.crt", ca), ("tls.crt", leaf.cert_pem), ("tls.key", leaf.key_pem)):
        tmp = where / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(where / name)


async def test_a_following_writer_takes_up_new_material_and_counts_what_fails(
        etcd_mtls_cluster: localcluster.LocalEtcdCluster, tmp_path: pathlib.Path) -> None:
    cluster = etcd_mtls_cluster
    put_material(tmp_path, cluster.ca.cert_pem, pki.make_leaf(cluster.ca, "writer", usages=("client",)))
    material = writer.FileMaterial(tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")
    w = await writer.Writer.following(cluster.endpoints(), material, prefix=b"/test/writer-material",
                                      refresh_interval=0.2, try_timeout=0.3)
    async with w:
        await w.wait_ok(5)
        # A renewed client certificate (same CA): taken up, writes go on.
        put_material(tmp_path, cluster.ca.cert_pem, pki.make_leaf(cluster.ca, "writer", usages=("client",)))
        await aeventually(lambda: w.snapshot().material_changes >= 1, timeout=10)
        await w.wait_ok(5)
        assert w.snapshot().failed == 0
        # A client certificate from a CA no member trusts: ops fail and are counted.
        foreign = pki.make_ca("foreign")
        put_material(tmp_path, cluster.ca.cert_pem, pki.make_leaf(foreign, "writer", usages=("client",)))
        await aeventually(lambda: w.snapshot().failed >= 3, timeout=15)
        # Good material again, with the periodic refresh out of the way: the failing op re-reads it and succeeds.
        await w.stop_refreshing()  # deterministic: no periodic re-read can pick the good material up first
        await aeventually(lambda: w.snapshot().failed >= 5, timeout=15)
        put_material(tmp_path, cluster.ca.cert_pem, pki.make_leaf(cluster.ca, "writer", usages=("client",)))
        await w.wait_ok(5, timeout=15)
    result = w.result
    assert result is not None
    assert result.failed >= 3 and result.ok >= 15, result.summary()
    assert result.material_changes >= 3 and result.material_retries >= 1, result.summary()
    assert any("FAILED" in e for e in result.errors)
    read = await w.read_back()  # every acknowledged write read back (raises LostWrites naming any missing)
    assert read.ok and read.acknowledged == result.ok, read.describe()
