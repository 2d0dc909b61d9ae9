"""``opsmanager install-etcdstop``: the members' first init container. It copies ``etcdstop`` (``tools/etcdstop``,
which the operator's image ships) into the pod's ``etcdstop`` volume, and the etcd container runs etcd under it.

Why: a member asked to stop closes its client port, answers the requests it holds, and then waits for its watch
and keep-alive streams to end, which clients never do by themselves. That wait is etcd's request timeout (7 s with
the default election timeout), cut short only by the kubelet's SIGKILL at the end of the grace period. ``etcdstop``
runs etcd as its child and forwards every signal. Once a stopping member is a follower with no unary or
server-streaming call in flight and its client port closed, it kills etcd. What that skips is only the wait for
streams, whose clients reconnect elsewhere either way. A leader is left to finish its own stop, which hands
leadership over. The engine moves leadership off a member before it restarts it, so that case is rare.

Why a copy: users run stock etcd images, which cannot be rebuilt with a wrapper. An init container from the
operator's own image can bring one, as it brings ``restore-member``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

IMAGE_PATH: Final = "/usr/local/lib/opsmanager/etcdstop"
"""Where the operator's image keeps ``etcdstop`` (the Dockerfile builds it from ``tools/etcdstop``)."""
ENV: Final = "OPSMANAGER_ETCDSTOP"
"""Names another ``etcdstop`` to copy (the sandbox sets it to its own build)."""
PROG: Final = "opsmanager install-etcdstop"


def install(source: Path, directory: Path) -> Path:
    """Copy ``source`` to ``directory``/etcdstop, executable, by rename: a container that restarts never sees half a
    file."""
    target = directory / "etcdstop"
    partial = directory / ".etcdstop.partial"
    shutil.copyfile(source, partial)
    partial.chmod(0o755)
    os.replace(partial, target)
    return target


def main(argv: Sequence[str]) -> int:
    """``opsmanager install-etcdstop --to DIR``: 0 installed, 1 failed (one line on stderr naming what and why)."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--to", required=True, type=Path, help="the directory the etcd container mounts")
    args = parser.parse_args(list(argv))
    source = Path(os.environ.get(ENV) or IMAGE_PATH)
    if not source.is_file():
        print(f"{PROG}: no etcdstop at {source} (${ENV} or the image's {IMAGE_PATH}): the operator's image must "
              "ship it", file=sys.stderr)
        return 1
    try:
        target = install(source, args.to)
    except OSError as err:
        print(f"{PROG}: cannot copy {source} into {args.to}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(f"{PROG}: {target} ({target.stat().st_size} bytes)")
    return 0
