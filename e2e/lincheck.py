"""Run the linearizability checker (``lincheck``, sandbox/controlplane/lincheck: porcupine and our model of etcd's
key-value store) on a recorded :class:`e2e.history.History`.

The binary is built like the control plane (``make controlplane``, or ``python3 sandbox/controlplane/build.py build
lincheck``, a few seconds) and found the same way (:func:`opsmanager_sandbox.realcp.binary`). The history goes to a
JSON file beside the report; on failure the checker writes porcupine's HTML visualisation there, and
:class:`Verdict` names it::

    verdict = await lincheck.check(rec.history(), tmp_path / "lincheck")
    verdict.raise_for_problems()      # AssertionError: the problems and where the visualisation is
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib

from e2e import history
from opsmanager_sandbox import realcp

COMPONENT = "lincheck"
EXIT_VERDICTS = {0: "linearizable", 1: "not linearizable", 3: "undecided"}


def binary() -> pathlib.Path:
    """The built checker, or :class:`realcp.NotBuilt` saying how to build it."""
    return realcp.binary(COMPONENT, COMPONENT)


class NotLinearizable(AssertionError):
    """The checker refused the history (or could not decide in time): the message names the problems and the
    visualisation."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the checker said: ``verdict`` (linearizable | not linearizable | undecided), the counts, its problems
    (sentences), how long it took, the history file it read and the visualisation it wrote (None when it passed)."""

    verdict: str
    operations: int
    unknown: int
    keys: int
    seconds: float
    problems: tuple[str, ...]
    history: pathlib.Path
    visualization: pathlib.Path | None

    @property
    def ok(self) -> bool:
        return self.verdict == "linearizable"

    def describe(self) -> str:
        text = (f"{self.verdict}: {self.operations} operations ({self.unknown} of unknown outcome) on {self.keys} "
                f"keys, checked in {self.seconds:.3f}s")
        if self.problems:
            text += "; " + "; ".join(self.problems)
        if self.visualization is not None:
            text += f"; visualisation: {self.visualization} (history: {self.history})"
        return text

    def raise_for_problems(self) -> None:
        if not self.ok:
            raise NotLinearizable(self.describe())


async def check(h: history.History, directory: pathlib.Path, *, timeout: float = 60.0,
                name: str = "history") -> Verdict:
    """Write ``h`` to ``directory/<name>.json`` and check it; on failure the visualisation is
    ``directory/<name>.html``. ``timeout``: the checker's own (it answers ``undecided`` after it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = h.write(directory / f"{name}.json")
    viz = directory / f"{name}.html"
    process = await asyncio.create_subprocess_exec(
        str(binary()), "-history", str(path), "-visualization", str(viz), "-timeout", f"{timeout}s",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout + 30)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    code = process.returncode
    if code not in EXIT_VERDICTS:
        raise RuntimeError(f"lincheck exited {code} on {path}: {err.decode(errors='replace').strip()}")
    report = json.loads(out)
    return Verdict(verdict=report["verdict"], operations=report["operations"], unknown=report["unknown"],
                   keys=report["keys"], seconds=report["seconds"], problems=tuple(report["problems"]),
                   history=path, visualization=pathlib.Path(report["visualization"])
                   if report.get("visualization") else None)


__all__ = ["COMPONENT", "NotLinearizable", "Verdict", "binary", "check"]
