"""``opsmanager sandbox up --storage``: real nodes get CSI volumes unless asked otherwise; CSI without real nodes is
refused naming the fix."""

from __future__ import annotations

import pytest

from opsmanager_sandbox import cli, cluster


@pytest.mark.parametrize(("asked", "nodes", "storage"), [
    (None, 3, cluster.CSI), (None, 0, cluster.HOSTPATH), (cluster.HOSTPATH, 3, cluster.HOSTPATH),
    (cluster.CSI, 1, cluster.CSI), (cluster.HOSTPATH, 0, cluster.HOSTPATH),
])
def test_the_storage_follows_the_nodes_unless_asked(asked: str | None, nodes: int, storage: str) -> None:
    assert cli.storage_for(asked, nodes) == storage


def test_csi_without_real_nodes_is_refused_naming_the_fix() -> None:
    with pytest.raises(SystemExit, match="CSI volumes need real nodes: add --control-plane kubernetes"):
        cli.storage_for(cluster.CSI, 0)
