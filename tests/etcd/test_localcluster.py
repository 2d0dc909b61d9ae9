"""The local cluster fixture itself (server-TLS mode, restarts onto new flags, cleanup by PID) and the live writer's
accounting (target fallback, switching targets while running, failure counting).

We test: the real etcd binary is found (not the Python launcher); ``server-tls`` mode serves TLS without demanding a
client certificate; a member restarted onto ``http+https`` client flags serves both schemes on one port; the
writer falls back past a dead target, counts failures when no target works and recovers when targets change;
``close()`` leaves no process and no data dir behind.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from e2e import localcluster, writer
from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client
from tests.fixtures.etcd_cluster import ClusterFactory
from tests.polling import aeventually


def test_the_real_etcd_binary_is_used() -> None:
    path = localcluster.etcd_binary()
    assert path.read_bytes()[:4] == b"\x7fELF", f"{path} is not the etcd executable (a launcher script?)"


def test_flags_follow_the_mode(tmp_path: pathlib.Path) -> None:
    cluster = localcluster.LocalEtcdCluster(3, mode="mtls", base_dir=tmp_path)  # not started: flags only
    try:
        args = cluster.members[1].args
        address = cluster.members[1].address
        assert args["--listen-client-urls"] == f"https://{address}:2379"
        assert args["--listen-metrics-urls"] == f"http://{address}:2381"
        assert "--client-cert-auth" in args and "--peer-client-cert-auth" in args
        assert args["--initial-cluster"].count("https://") == 3  # type: ignore[union-attr]
        plain = cluster.args_for("m1", mode="plain", extra={"--log-level": "<remove>", "--snapshot-count": "100"})
        assert plain["--listen-peer-urls"] == f"http://{address}:2380" and "--cert-file" not in plain
        assert "--log-level" not in plain and plain["--snapshot-count"] == "100"
        assert len({m.address for m in cluster.members}) == 3
        assert all(m.address.startswith("127.") and m.address.endswith(f".{i + 1}")
                   for i, m in enumerate(cluster.members))
    finally:
        cluster.close()
    assert not tmp_path.joinpath("m0", "data").exists()


@pytest.mark.slow
async def test_server_tls_mode_dual_scheme_restart_writer_and_cleanup(etcd_cluster_factory: ClusterFactory) -> None:
    cluster = etcd_cluster_factory(1, mode="server-tls")
    member = cluster.members[0]
    assert "--trusted-ca-file" not in member.args and "--client-cert-auth" not in member.args
    ident = cluster.tls_identity()
    assert ident is not None and ident.cert_pem is None  # CA only: server TLS needs no client certificate
    async with etcd_client.EtcdClient(cluster.endpoints(), tls=ident) as c:
        assert (await c.maintenance.status("m0")).scheme == "https"
        assert (await c.served_certificate("m0")).ip_addresses == (member.address,)

        # Restart onto http+https on the same client port (the first step of a plaintext -> TLS move).
        pid = member.pid
        cluster.restart_member("m0", args=cluster.args_for("m0", client_schemes=("http", "https")))
        assert member.pid != pid and member.starts == 2
        dual = cluster.endpoint("m0")
        assert dual.schemes == ("https", "http")
        c.set_endpoints([dual])
        assert (await c.maintenance.status("m0", scheme="http")).scheme == "http"
        assert (await c.maintenance.status("m0", scheme="https")).scheme == "https"

        # The writer: a dead target first is skipped, counts stay honest, targets can change while running.
        x, y = cluster.subnet
        dead = access.Endpoint("dead", f"127.{x}.{y}.250", schemes=("http",))
        live_http, live_https = writer.Target(dual, "http"), writer.Target(dual, "https", ident)
        w = writer.Writer([writer.Target(dead, "http"), live_https], prefix=b"/test/writer")
        async with w:
            await w.wait_ok(5)
            w.set_targets([writer.Target(dead, "http")])
            # every op fails now: one try per op, connection refused
            await aeventually(lambda: w.snapshot().failed >= 3, timeout=10, interval=0.02, what="three failed writes")
            w.set_targets([live_http, live_https])
            await w.wait_ok(5)
        result = w.result
        assert result is not None
        assert result.failed >= 3 and len(result.failure_offsets) == result.failed
        https, http = result.by_target.get("m0/https/client", 0), result.by_target.get("m0/http", 0)
        assert https >= 5 and https + http >= 10, result  # which live target served the last 5 depends on load
        assert "dead/http" not in result.by_target and result.switches >= (1 if http else 0), result
        assert any("FAILED" in e for e in result.errors)
        # The first op tried the dead target first and was acknowledged by the live one: a fail-over.
        assert result.failovers >= 1, result.summary()
        read = await w.read_back()  # every acknowledged write has its own key, read back
        assert read.ok and read.acknowledged == result.ok, read.describe()
        # An acknowledged write that is not stored any more is named (its key overwritten with junk here).
        victim = w.acknowledged[2]
        await c.kv.put(writer.key_for(result.prefix, victim), b"gone")
        with pytest.raises(writer.LostWrites, match=rf"1 of {result.ok} acknowledged writes missing.*seq {victim}\b"):
            await w.read_back()
        assert (await w.read_back(check=False)).missing == (victim,)

    pids, data_dir = cluster.pids(), member.data_dir
    assert pids and data_dir.exists()
    cluster.close()
    for p in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(p, 0)
    assert not data_dir.exists()
