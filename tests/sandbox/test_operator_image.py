"""The operator image the sandbox makes (mmdebstrap, the wheel, umoci) is the image the Dockerfile describes.

We test these aspects:
- the recipe read from the Dockerfile: Debian's python3 on bookworm, the user, the entrypoint, the bundled tools;
- the made image's OCI configuration carries the Dockerfile's ENTRYPOINT, CMD, USER and ENV;
- its root filesystem has the same Python minor as the Dockerfile's base release ships, the user, exactly the files
  the Dockerfile's tool stage puts under /usr/local/lib/opsmanager, and an ``opsmanager`` that runs.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from opsmanager_sandbox.realnodes import images, operator_image

pytestmark = pytest.mark.slow

# The python3 each Debian release ships (the Dockerfile's base decides the image's interpreter).
DEBIAN_PYTHON = {"bookworm": (3, 11), "trixie": (3, 13)}


def test_the_recipe_is_read_from_the_dockerfile() -> None:
    rec = operator_image.recipe(operator_image.DOCKERFILE.read_text())
    assert rec.suite == "bookworm" and "python3" in rec.packages
    assert rec.uid == 65532 and rec.user == "65532:65532"
    assert rec.entrypoint == ("opsmanager",) and rec.cmd == ("run",)
    assert "PYTHONUNBUFFERED=1" in rec.env
    assert rec.lib_files == ("etcd-3.5/etcdutl", "etcd-3.6/etcdutl", "etcdauth", "etcdstop")


def test_a_dockerfile_on_another_base_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="debian:<suite>"):
        operator_image.recipe("FROM python:3.11-slim\nENTRYPOINT [\"opsmanager\"]\n")


def _config(archive: Path) -> dict[str, object]:
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> dict[str, object]:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return json.load(member)

        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = blob(index["manifests"][0]["digest"])
        return blob(manifest["config"]["digest"])  # type: ignore[index]


def test_the_made_image_is_the_dockerfiles() -> None:
    rec = operator_image.recipe(operator_image.DOCKERFILE.read_text())
    image = operator_image.image()
    config = _config(images.archive(image))["config"]
    assert config["Entrypoint"] == list(rec.entrypoint)  # type: ignore[index]
    assert config["Cmd"] == list(rec.cmd)  # type: ignore[index]
    assert config["User"] == rec.user  # type: ignore[index]
    assert set(rec.env) <= set(config["Env"])  # type: ignore[index]

    root, _ = operator_image.rootfs()
    minor = subprocess.run(["chroot", str(root), "python3", "-c", "import sys; print(*sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert tuple(int(x) for x in minor) == DEBIAN_PYTHON[rec.suite]
    passwd = (root / "etc" / "passwd").read_text()
    assert any(line.split(":")[2] == str(rec.uid) for line in passwd.splitlines())
    lib = root / operator_image.LIB_DIR.lstrip("/")
    shipped = sorted(str(p.relative_to(lib)) for p in lib.rglob("*") if p.is_file())
    assert shipped == list(rec.lib_files)
    helped = subprocess.run(["chroot", "--userspec", rec.user, str(root), *rec.entrypoint, "--help"],
                            capture_output=True, text=True, env={"PATH": images.PATH_ENV.split("=", 1)[1]})
    assert helped.returncode == 0 and "run" in helped.stdout, helped.stderr
