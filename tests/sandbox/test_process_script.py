"""The container set-up script (pure): the operator image's installation is mounted after the pod's volumes, so a
volume at a parent of it (the bundle's emptyDir at /tmp, with a checkout under /tmp as in CI) does not hide it."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsmanager_sandbox import process


def test_the_installation_is_mounted_after_a_volume_that_covers_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "product_image_dirs", lambda: ("/tmp/checkout", "/opt/python"))
    spec = process.ProcessSpec(argv=["/opt/python/bin/python3", "-m", "opsmanager"], env={},
                               root=tmp_path / "root", etc_files={}, hostname="op-0",
                               mounts=[process.Mount(tmp_path / "empty", "/tmp")], product_image=True)
    lines = [line.replace("//", "/") for line in process.setup_script(spec).splitlines()]
    volume = next(i for i, line in enumerate(lines) if line.endswith(f"{tmp_path}/root/tmp"))
    for d in ("/tmp/checkout", "/opt/python"):
        made = lines.index(f"mkdir -p {tmp_path}/root{d}")
        bound = next(i for i, line in enumerate(lines) if line.endswith(f"{d} {tmp_path}/root{d}"))
        assert volume < made < bound, lines
