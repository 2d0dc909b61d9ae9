"""The fault matrix on real nodes: every operation with a fault injected in the middle of one of its steps, judged
the way etcd judges itself (``make chaos``; a representative row in ``tests/e2e/test_chaos_row.py``).

A **cell** is one operation (:data:`OPERATIONS`) with one fault (:data:`FAULTS`). The cell's requests run under
:meth:`e2e.scenario.Scenario.observed` (the live writer, a client history and a watch log). When the request the
fault is aimed at has its k-th step condition ``False`` (in flight), the fault is injected; it is healed after its
own bounded time (:attr:`Fault.hold`). The cell is then judged (:func:`judge`):

- the outcome: the requests end ``Successful`` (having waited with a condition naming the fault, or not), or one
  ends ``Failed`` with a message naming the fault while the Etcd is left Ready and resumed;
- in every cell: no acknowledged write lost (read back) and HashKV equal on every member, the history
  linearizable (:mod:`e2e.lincheck`), the watch guarantees kept (:mod:`e2e.watchcheck`), every member Ready (none
  left stopped) and the Etcd not paused.

The seed picks, per cell, the victim member, the request and the step the fault is injected in (a cell's choices
depend only on the seed and the cell, so ``CHAOS_CELLS`` and ``CHAOS_SEED`` reproduce one cell alone).

How each fault is made (real nodes, ``opsmanager_sandbox.realnodes``):

- the member's faults are nftables tables in the member pod's network namespace (:class:`faults.Cut`), or a SIGKILL
  of its etcd process (the kubelet restarts the container);
- the operator runs as a child process on the host, in a cgroup v2 group of its own
  (:class:`faults.ProcessGroup`); its cuts are nftables rules in the host's output hook that drop what its sockets
  send to one member's pod IP or to kube-apiserver (:class:`faults.ProcessCut`): a real partition of that one
  process (its connections stall and resume with TCP's retransmissions), the harness's writer untouched;
- the operator killed is its own crash point (:mod:`opsmanager.ops.core.failpoints`): armed before the request
  for every per-member condition of the victim member, it SIGKILLs the operator right after the write that records
  that member's part of a step — the step in flight, the other members' parts still to do — and it is started
  again after the hold; an operation without per-member steps (``RotateAuth``, ``Backup``) crashes right after
  the write of its first step's condition, the next step still to do;
- a drain is ``kubectl drain`` of the leader's node (uncordoned at the heal); a stopped node is
  :meth:`RealNodes.stop_node` (its kubelet, kube-proxy and containerd killed) until :meth:`RealNodes.start_node`.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import random
import signal
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from e2e import history, scenario, writer
from opsmanager import kube
from opsmanager.api import auth, constants
from opsmanager.cluster import naming

ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer"}
CELLS_ENV = "CHAOS_CELLS"
SEED_ENV = "CHAOS_SEED"
WAITING_WORDS = ("wait", "not at rest", "not answering", "not Ready", "not recovered", "unhealthy")
NOT_STEPS = frozenset({constants.COND_PENDING, constants.COND_RUNNING, constants.COND_FAILED, constants.COND_SUCCESSFUL})


# --- faults -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Victim:
    """What a cell's fault acts on: a member (the leader for a drain) and its node, chosen by the seed."""

    sc: scenario.Scenario
    db: str
    member: str
    node: str
    group: Any  # faults.ProcessGroup: the operator's cgroup
    table: str  # the nftables table's name, the cell's own


class Fault(abc.ABC):
    """One fault kind: :meth:`inject` in the middle of a step, :meth:`heal` after :attr:`hold` seconds."""

    name: ClassVar[str]
    hold: ClassVar[float] = 15.0
    leader: ClassVar[bool] = False  # the victim is the leader (else any member, by the seed)
    crash_point: ClassVar[bool] = False  # the operator's own crash point makes it (armed before the request)
    what: ClassVar[str] = ""

    def __init__(self, victim: Victim) -> None:
        self.v = victim
        self.notes: list[str] = []

    @abc.abstractmethod
    async def inject(self) -> None: ...

    async def heal(self) -> None:
        return None

    def names(self) -> tuple[str, ...]:
        """Words that name this fault in a condition or a failure: the victim member and its node."""
        return (self.v.member, self.v.node)


# Hold points (:meth:`_Cell.holds`): a step before the chosen one is held long enough for the 0.1 s poll to see it in
# flight; the chosen one long enough for the slowest injection (a drain) to be in place before the step runs.
HOLD_SEEN = 1.0
HOLD_STRUCK = 8.0
# How long an injection waits for its victim's etcd container to run again: a member the operator is restarting at
# the chosen moment is between two pods (its network namespace and process gone until the next one starts).
RUNNING_TIMEOUT = 120.0


async def running_member_pid(fault: Fault) -> int:
    """The host PID of the victim's etcd container, waiting (polling, with a deadline) while it is not running."""
    v = fault.v
    waited = time.monotonic()

    async def pid() -> int | None:
        pod = await v.sc.k.get("v1", "Pod", v.sc.namespace, v.member)
        try:
            # etcdstop's PID: it shares etcd's network namespace, and a SIGKILL to it ends etcd too
            return await v.sc.sandbox.realnodes.container_pid(pod, naming.CONTAINER_NAME) if pod else None
        except LookupError:
            return None

    found: int = await v.sc.wait_for(f"the etcd container of {v.member} running", pid, timeout=RUNNING_TIMEOUT,
                                     interval=0.2)
    if (late := time.monotonic() - waited) > 0.5:
        fault.notes.append(f"injected {late:.1f}s late: {v.member}'s container was not running (being restarted)")
    return found


class _PodCut(Fault):
    ports: ClassVar[tuple[int, ...]] = (naming.PEER_PORT_HTTP, naming.PEER_PORT_HTTPS)
    inbound: ClassVar[bool] = True
    outbound: ClassVar[bool] = True

    async def inject(self) -> None:
        from opsmanager_sandbox.realnodes import faults

        pid = await running_member_pid(self)
        self.cut = faults.Cut(pid, ports=self.ports, inbound=self.inbound, outbound=self.outbound)
        await asyncio.to_thread(self.cut.apply)

    async def heal(self) -> None:
        from opsmanager_sandbox.realnodes import faults

        try:
            await asyncio.to_thread(self.cut.heal)
        except (faults.FaultError, OSError) as err:  # the pod (and its network namespace) was replaced meanwhile
            self.notes.append(f"the cut ended with its pod ({err})")


class PeerCut(_PodCut):
    name = "peer-cut"
    what = "the member's peer traffic dropped both ways (nftables in its pod)"


class PeerCutInbound(_PodCut):
    name = "peer-cut-in"
    outbound = False
    what = "what reaches the member's peer ports dropped, what it sends let out (one way)"


class Isolated(_PodCut):
    name = "isolated"
    ports = (naming.CLIENT_PORT, naming.PEER_PORT_HTTP, naming.METRICS_PORT, naming.PEER_PORT_HTTPS)
    what = "the member cut from everyone: clients, peers, the kubelet's probes"


class _OperatorCut(Fault):
    async def target(self) -> tuple[str, int | None]:
        raise NotImplementedError

    async def inject(self) -> None:
        from opsmanager_sandbox.realnodes import faults

        address, port = await self.target()
        self.cut = faults.ProcessCut(self.v.group, address, port, table=self.v.table)
        await asyncio.to_thread(self.cut.apply)

    async def heal(self) -> None:
        await asyncio.to_thread(self.cut.heal)


class OperatorCutFromMember(_OperatorCut):
    name = "operator-cut-member"
    what = "what the operator sends to one member's pod IP dropped (its cgroup's sockets, host nftables)"

    async def target(self) -> tuple[str, int | None]:
        pod = await self.v.sc.k.get("v1", "Pod", self.v.sc.namespace, self.v.member) or {}
        ip = str((pod.get("status") or {}).get("podIP"))
        self.notes.append(f"cut from {ip}, the pod IP {self.v.member} had then")  # a recreated pod gets another
        return ip, None


class OperatorCutFromAPI(_OperatorCut):
    name = "operator-cut-api"
    hold = 30.0
    what = "what the operator sends to kube-apiserver dropped for 30 s (its cgroup's sockets, host nftables)"

    async def target(self) -> tuple[str, int | None]:
        url = urllib.parse.urlsplit(str(self.v.sc.sandbox.url))
        return str(url.hostname), url.port

    def names(self) -> tuple[str, ...]:
        return ("API server", "apiserver")


class MemberKilled(Fault):
    name = "member-killed"
    hold = 0.0
    what = "the member's etcd process SIGKILLed (the kubelet restarts the container)"

    async def inject(self) -> None:
        os.kill(await running_member_pid(self), signal.SIGKILL)


# Every per-member condition a step writes (``<Step>--<pod>``): the operator's crash point names them all for its
# victim, and the first the request records True fires it.
MEMBER_STEPS = (
    constants.STEP_EVICT_POD, constants.STEP_MOVE_LEADER, constants.STEP_CHECK_POD_READY,
    constants.STEP_ETCD_CLUSTER_HEALTHY, constants.STEP_VERIFY_SERVED_CERTIFICATE, constants.STEP_VERIFY_VERSION,
    constants.STEP_VERIFY_CONFIGURATION, constants.STEP_DEFRAGMENT, constants.STEP_UPDATE_PEER_URL,
    constants.STEP_ETCD_MEMBER_ADDED, constants.STEP_ETCD_LEARNER_PROMOTED, constants.STEP_ETCD_MEMBER_REMOVED)


class OperatorKilled(Fault):
    name = "operator-killed"
    hold = 5.0
    crash_point = True
    what = ("the operator's crash point right after a member's part of a step is recorded (the step in flight), "
            "started again 5 s later")

    async def inject(self) -> None:
        await self.v.sc.kill_operator()

    async def heal(self) -> None:
        await self.v.sc.start_operator()

    def names(self) -> tuple[str, ...]:
        return ()


class LeaderDrained(Fault):
    name = "leader-drained"
    leader = True
    hold = 0.0
    what = "kubectl drain of the leader's node (the budget paces it), uncordoned once done"

    async def inject(self) -> None:
        self.drain = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", str(self.v.sc.sandbox.kubeconfig), "drain", self.v.node, "--ignore-daemonsets",
            "--delete-emptydir-data", "--timeout=240s", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)

    async def heal(self) -> None:
        out, _ = await asyncio.wait_for(self.drain.communicate(), timeout=300)
        if self.drain.returncode != 0:
            self.notes.append(f"kubectl drain exited {self.drain.returncode}: {out.decode()[-300:]}")
        await _kubectl(self.v.sc, "uncordon", self.v.node)


class NodeStopped(Fault):
    name = "node-stopped"
    hold = 30.0
    what = "the member's node stopped (kubelet, kube-proxy, containerd killed; containers run on) for 30 s"

    async def inject(self) -> None:
        await self.v.sc.sandbox.realnodes.stop_node(self.v.node)

    async def heal(self) -> None:
        await self.v.sc.sandbox.realnodes.start_node(self.v.node, self.v.sc.sandbox.kubernetes)


FAULTS: dict[str, type[Fault]] = {f.name: f for f in (
    PeerCut, PeerCutInbound, Isolated, OperatorCutFromMember, OperatorCutFromAPI, MemberKilled, OperatorKilled,
    LeaderDrained, NodeStopped)}


async def _kubectl(sc: scenario.Scenario, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec("kubectl", "--kubeconfig", str(sc.sandbox.kubeconfig), *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    return out.decode()


# --- operations ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Operation:
    """One operation: its requests in order (type, spec), the Etcd it starts from (``etcd``: a kind of
    :class:`Session`'s pool) and the kind it leaves (None: not reused)."""

    name: str
    requests: tuple[tuple[str, dict[str, Any]], ...]
    etcd: str = "plain"
    leaves: str | None = "plain"
    # The members (indices) whose per-member conditions the operator's crash point may name; none: the operation has
    # no per-member step, and the crash point is after ``crash_after``'s step instead (its next step still to do).
    members: tuple[int, ...] = (0, 1, 2)
    crash_after: str = ""
    # Steps that start and end within one status write (no moment in flight for a poll to see): a cell with another
    # fault holds them in flight with the operator's hold points (:meth:`_Cell.holds`).
    hold_steps: tuple[str, ...] = ()


def etcd_36() -> str:
    from opsmanager_sandbox import realcp

    return str(realcp.build_module().COMPONENTS["etcd-3.6"].version()).removeprefix("v")


OPERATIONS: dict[str, Operation] = {o.name: o for o in (
    Operation("add-tls", ((constants.OPS_TYPE_RECONFIGURE_TLS, {"tls": {"issuerRef": {**ISSUER, "name": "ca-a"}}}),),
              leaves="tls"),
    Operation("rotate", ((constants.OPS_TYPE_RECONFIGURE_TLS, {"tls": {"rotateCertificates": True}}),),
              etcd="tls", leaves="tls"),
    Operation("issuer-change", ((constants.OPS_TYPE_RECONFIGURE_TLS,
                                 {"tls": {"issuerRef": {**ISSUER, "name": "ca-b"}}}),), etcd="tls", leaves=None),
    Operation("scale", ((constants.OPS_TYPE_HORIZONTAL_SCALING, {"horizontalScaling": {"replicas": 5}}),
                        (constants.OPS_TYPE_HORIZONTAL_SCALING, {"horizontalScaling": {"replicas": 3}})),
              members=(3, 4)),
    Operation("update-version", ((constants.OPS_TYPE_UPDATE_VERSION, {"updateVersion": {"targetVersion": "3.6"}}),),
              leaves=None),
    # A small database defragments in well under a second per member, and its alarm check is immediate.
    Operation("defragment", ((constants.OPS_TYPE_DEFRAGMENT, {"defragment": {}}),),
              hold_steps=(constants.COND_ETCD_DEFRAGMENTED, constants.COND_ETCD_ALARM_CLEARED)),
    Operation("rotate-auth", ((constants.OPS_TYPE_ROTATE_AUTH, {}),), etcd="auth", leaves="auth", members=(),
              crash_after=constants.COND_UPDATE_CREDENTIAL,
              hold_steps=(constants.COND_UPDATE_CREDENTIAL, constants.COND_ETCD_CREDENTIAL_APPLIED)),
    Operation("backup", ((constants.OPS_TYPE_BACKUP, {"backup": {}}),), etcd="backup", leaves="backup",
              members=(), crash_after=constants.COND_SNAPSHOT_UPLOADED,
              hold_steps=(constants.COND_SNAPSHOT_UPLOADED, constants.COND_SNAPSHOTS_PRUNED)),
)}


# --- cells and their judgement ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the seed chose for one cell."""

    victim_index: int  # among the members (ignored when the fault's victim is the leader)
    request: int  # which of the operation's requests
    step: int  # the k-th step condition seen in flight (1-based)


def plan(seed: int, op: str, fault: str, requests: int = 1) -> Plan:
    """The cell's choices: a function of the seed and the cell only (so a subset of cells reproduces)."""
    rng = random.Random(f"{seed}/{op}/{fault}")
    return Plan(victim_index=rng.randrange(3), request=rng.randrange(requests), step=rng.randint(1, 2))


def in_flight(req: dict[str, Any] | None) -> list[str]:
    """The request's step conditions that are ``False`` (a step in flight), in their order."""
    return [c["type"] for c in ((req or {}).get("status") or {}).get("conditions") or ()
            if c.get("status") == constants.FALSE and c["type"] not in NOT_STEPS]


@dataclasses.dataclass(frozen=True)
class CellResult:
    """One cell, as the table shows it."""

    op: str
    fault: str
    outcome: str
    wall_s: float
    writes: str  # acknowledged/failed during the cell
    verdicts: str
    problem: str = ""  # empty: the cell passed
    seed: int = 0
    injected: str = ""  # where: request, step condition, victim
    notes: str = ""  # what the fault itself reported (a cut that ended with its pod, a drain's exit)

    @property
    def passed(self) -> bool:
        return not self.problem

    @property
    def cell(self) -> str:
        return f"{self.op}:{self.fault}"


@dataclasses.dataclass
class Observation:
    """What a cell saw, for :func:`judge`."""

    phases: list[str] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)
    waited: list[str] = dataclasses.field(default_factory=list)  # in-flight messages naming the fault, while held
    injected: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)  # from the checks: loss, history, watch, health


def judge(seen: Observation, names: Sequence[str]) -> tuple[str, list[str]]:
    """The outcome and the problems of a cell (pure). Allowed: every request Successful (waiting or not), or one
    Failed naming the fault (``names``); anything else, or any check's problem, is a problem."""
    problems = list(seen.problems)
    if not seen.injected:
        problems.append("the fault was never injected: the request finished before the chosen step")
    if seen.failures:
        text = seen.failures[0]
        outcome = f"Failed: {text}"
        if not any(n and n in text for n in names):
            problems.append(f"failed without naming the fault ({', '.join(n for n in names if n) or 'nothing'})")
    elif seen.phases and all(p == constants.PHASE_SUCCESSFUL for p in seen.phases):
        # a message that says it waits, rather than one that names the victim in passing ("defragmented x-2")
        waited = next((w for w in seen.waited if any(word in w for word in WAITING_WORDS)), "")
        outcome = f"Successful, having waited: {waited}" if waited else "Successful"
    else:
        outcome = f"not finished ({', '.join(seen.phases) or 'no request'})"
        problems.append(outcome)
    return outcome, problems


def format_table(results: Sequence[CellResult]) -> str:
    """The matrix as a Markdown table (docs/reliability.md keeps the last one)."""
    lines = ["| operation | fault | outcome | wall s | writes ok/failed | verdicts | problem |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        cells = (r.op, r.fault, r.outcome, f"{r.wall_s:.1f}", r.writes, r.verdicts, r.problem or "-")
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines)


def reproduce(result: CellResult) -> str:
    return f"make chaos {SEED_ENV}={result.seed} {CELLS_ENV}={result.cell}"


def select(spec: str | None) -> list[tuple[str, str]]:
    """``op:fault,…`` (``*`` for every operation or fault; empty: the whole matrix) → the cells, in matrix order."""
    wanted = [part.strip().split(":", 1) for part in (spec or "*:*").split(",") if part.strip()]
    out = []
    for op in OPERATIONS:
        for fault in FAULTS:
            if any(len(w) == 2 and w[0] in ("*", op) and w[1] in ("*", fault) for w in wanted):
                out.append((op, fault))
    unknown = [":".join(w) for w in wanted if len(w) != 2 or (w[0] != "*" and w[0] not in OPERATIONS)
               or (w[1] != "*" and w[1] not in FAULTS)]
    if unknown:
        raise ValueError(f"unknown cells {unknown}: operations {sorted(OPERATIONS)}, faults {sorted(FAULTS)}")
    return out


# --- running cells ------------------------------------------------------------------------------------------------


class Session:
    """A scenario on real nodes made ready for the matrix: the operator in a cgroup of its own, the issuers, and a
    pool of Etcds by kind that cells share while they stay healthy."""

    def __init__(self, sc: scenario.Scenario, *, seed: int, print_: Callable[[str], None] = print) -> None:
        self.sc = sc
        self.seed = seed
        self.print = print_
        self.pool: dict[str, str] = {}
        self.count = 0
        self.group: Any = None
        self.object_store: Any = None

    async def __aenter__(self) -> Session:
        from opsmanager_sandbox.realnodes import faults

        assert self.sc.sandbox.realnodes is not None, "the fault matrix runs on real nodes (Scenario(nodes=3))"
        self.group = faults.ProcessGroup(f"opsmanager-chaos-{os.getpid()}").create()
        self.sc.operator_prefix = self.group.prefix()
        if self.sc.operator is not None:
            await asyncio.to_thread(self.sc.operator.stop)
        await self.sc.start_operator()
        for name in ("ca-a", "ca-b"):
            await self.sc.ca_issuer(name)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.sc.operator is not None:
            await asyncio.to_thread(self.sc.operator.stop)
            self.sc.operator = None
        if self.object_store is not None:
            await asyncio.to_thread(self.object_store.stop)
        with contextlib.suppress(OSError):
            self.group.remove()

    async def etcd(self, kind: str) -> str:
        """A Ready Etcd of ``kind`` (plain, tls, auth, backup): the pool's, else a fresh one."""
        if kind in self.pool:
            return self.pool.pop(kind)
        self.count += 1
        db = f"x{self.count}"
        extra: dict[str, Any] = {}
        if kind == "auth":
            extra = {"authSecret": {"name": f"{db}-auth"}}
        elif kind == "backup":
            extra = {"backup": await self._backup_policy()}
        await self.sc.fresh_etcd(db, issuer="ca-a" if kind == "tls" else None, extra=extra, timeout=180)
        if kind == "auth":
            await self.sc.wait_for("authentication on", lambda: self._auth_enabled(db), timeout=90)
        return db

    async def _auth_enabled(self, db: str) -> bool:
        obj = await self.sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, self.sc.namespace, db)
        return bool(((obj or {}).get("status") or {}).get("authEnabled"))

    async def _backup_policy(self) -> dict[str, Any]:
        from opsmanager_sandbox.objectstore import ObjectStoreServer

        if self.object_store is None:
            where = pathlib.Path(tempfile.mkdtemp(prefix="s3-", dir=self.sc.dir))
            self.object_store = await asyncio.to_thread(ObjectStoreServer(where, buckets=("backups",)).start)
            await self.sc.k.apply({"apiVersion": "v1", "kind": "Secret",
                                   "metadata": {"name": "s3", "namespace": self.sc.namespace},
                                   "data": auth.encode({"accessKeyId": self.object_store.access_key,
                                                        "secretAccessKey": self.object_store.secret_key})})
        return {"schedule": "0 0 1 1 *", "retention": 2,
                "destination": {"endpoint": self.object_store.endpoint, "bucket": "backups", "prefix": "chaos",
                                "credentialsSecret": {"name": "s3"}}}

    def login(self, db: str, kind: str) -> writer.Login | None:
        return writer.SecretLogin(self.sc.k, self.sc.namespace, f"{db}-auth") if kind == "auth" else None

    async def run(self, op_name: str, fault_name: str, *, db: str | None = None,
                  timeout: float = 360.0) -> CellResult:
        """One cell (on ``db`` if given, which is then the caller's, else an Etcd of the pool, given back to it
        if the cell passed and dropped if not); never raises for what it finds: that is a problem of the result.
        ``timeout``: for all the cell's requests together, so a caller with a deadline of its own (a test's) gets
        the cell's verdict, naming the step still in flight, before that deadline."""
        op = OPERATIONS[op_name]
        chosen = plan(self.seed, op_name, fault_name, len(op.requests))
        pooled = db is None
        started = time.monotonic()
        try:
            db = db or await self.etcd(op.etcd)
        except (TimeoutError, kube.KubeError) as err:  # no Etcd to run the cell on: a row that says so
            return CellResult(op_name, fault_name, "no Etcd", time.monotonic() - started, "-", "-",
                              f"the cell's Etcd: {type(err).__name__}: {err}", self.seed)
        cell = _Cell(self, op, FAULTS[fault_name], chosen, db)
        seen = Observation()
        try:
            await cell.run(seen, timeout)
        except Exception as err:  # a cell that broke is a row of the table, not the end of the matrix
            seen.problems.append(f"{type(err).__name__}: {err}")
        await cell.after(seen)
        outcome, problems = judge(seen, cell.fault.names() if cell.fault is not None else ())
        result = CellResult(op_name, fault_name, outcome, time.monotonic() - started, cell.writes, cell.verdicts,
                            "; ".join(problems), self.seed, seen.injected,
                            "; ".join(cell.fault.notes) if cell.fault is not None else "")
        if pooled and result.passed and op.leaves is not None:
            self.pool[op.leaves] = db
        elif pooled:
            with contextlib.suppress(kube.KubeError):
                await self.sc.drop_etcd(db)
        return result


class _Cell:
    """The moving parts of one cell (:meth:`Session.run`)."""

    def __init__(self, session: Session, op: Operation, fault: type[Fault], chosen: Plan, db: str) -> None:
        self.s, self.sc, self.op, self.fault_type, self.chosen, self.db = session, session.sc, op, fault, chosen, db
        self.fault: Fault | None = None
        self.writes = "-"
        self.verdicts = "-"
        self.recording: history.Recording | None = None
        self.live_writer: writer.Writer | None = None

    def request_name(self, index: int) -> str:
        return f"{self.db}-{self.op.name}-{self.fault_type.name}-{index}"[:60].rstrip("-")

    async def run(self, seen: Observation, timeout: float) -> None:
        self.s.print(f"  {self.op.name} x {self.fault_type.name} on {self.db}")
        deadline = time.monotonic() + timeout
        async with self.sc.observed(self.db, login=self.s.login(self.db, self.op.etcd)) as obs:
            self.live_writer = obs.live_writer
            try:
                for index, (type_, spec) in enumerate(self.op.requests):
                    if index == self.chosen.request and (self.crash_point or self.held):
                        await self.arm(self.request_name(index))
                    await self.sc.submit(self.request_name(index), self.db, type_, **_resolved(spec))
                    watched = asyncio.create_task(self.sc.watch_request(
                        self.request_name(index), timeout=max(deadline - time.monotonic(), 1.0)))
                    try:
                        if index == self.chosen.request:
                            await self.inject_and_heal(index, seen, watched)
                        req = await watched
                    finally:
                        watched.cancel()
                    status = req.get("status") or {}
                    seen.phases.append(status.get("phase", ""))
                    seen.failures += [c.get("message", "") for c in status.get("conditions") or ()
                                      if c["type"] == constants.COND_FAILED]
                    if seen.failures:
                        break
            finally:
                self.recording = obs.recording
        after = obs.after
        if after is not None:
            self.writes = f"{after.ok - obs.before.ok}/{after.failed - obs.before.failed}"

    @property
    def crash_point(self) -> bool:
        return self.fault_type.crash_point and bool(self.op.members or self.op.crash_after)

    def crash_member(self) -> str:
        """The member the operator's crash point names (one of the operation's, by the seed)."""
        index = self.op.members[self.chosen.victim_index % len(self.op.members)]
        return naming.pods(self.db, max(self.op.members) + 1)[index]

    def crash_conditions(self) -> list[str]:
        """The conditions the operator's crash point names: every per-member one of the crash member (the first the
        request records True fires it), else the operation's one step."""
        if not self.op.members:
            return [self.op.crash_after]
        member = self.crash_member()
        return [constants.per_pod_type(s, member) for s in MEMBER_STEPS]

    @property
    def held(self) -> bool:
        """Does this cell hold its operation's steps in flight (too quick to be seen, and no crash point)?"""
        return bool(self.op.hold_steps) and not self.crash_point

    def holds(self, request: str) -> list[tuple[str, str, float]]:
        """The hold points of a :attr:`held` cell: every step up to the chosen one shown in flight for
        :data:`HOLD_SEEN`, the chosen one held :data:`HOLD_STRUCK` so the fault strikes while it is still to run."""
        if not self.held:
            return []
        k = min(self.chosen.step, len(self.op.hold_steps))
        return [(request, step, HOLD_STRUCK if i == k else HOLD_SEEN)
                for i, step in enumerate(self.op.hold_steps[:k], 1)]

    async def arm(self, request: str) -> None:
        """The operator started again, armed to crash right after ``request`` records one of
        :meth:`crash_conditions` True, or with the cell's hold points."""
        await self.sc.kill_operator()
        if self.crash_point:
            await self.sc.start_operator(crash_after=[(request, c) for c in self.crash_conditions()])
        else:
            await self.sc.start_operator(holds=self.holds(request))

    async def crashed(self, name: str, seen: Observation, watched: asyncio.Task[Any]) -> bool:
        """Wait for the armed operator to crash (True), or for the request to end without it (False)."""
        operator = self.sc.operator
        assert operator is not None
        while not watched.done():
            if operator.process.poll() is not None:
                await asyncio.to_thread(operator.stop)
                self.sc.operator = None
                armed = self.crash_conditions()
                done = [c["type"] for c in ((await self.sc.request(name) or {}).get("status") or {}).get(
                    "conditions") or () if c.get("status") == constants.TRUE and c["type"] in armed]
                seen.injected = f"{name}: crash point after {', '.join(done) or 'an armed condition'}"
                return True
            await asyncio.sleep(0.1)  # the poll interval
        return False

    async def inject_and_heal(self, index: int, seen: Observation, watched: asyncio.Task[Any]) -> None:
        """Wait for the chosen step in flight, inject, hold (noting conditions that name the fault), heal."""
        name = self.request_name(index)
        if self.crash_point:
            self.fault = self.fault_type(await self.victim())
            if not await self.crashed(name, seen, watched):
                return
            self.s.print(f"    injected {self.fault_type.name}: {seen.injected}")
            await asyncio.sleep(self.fault.hold)  # the operator stays down for the hold (nothing to poll)
            await self.fault.heal()
            self.s.print(f"    healed {self.fault_type.name}")
            return
        steps: list[str] = []
        while len(steps) < self.chosen.step:
            if watched.done():
                return
            for step in in_flight(await self.sc.request(name)):
                if step not in steps:
                    steps.append(step)
            await asyncio.sleep(0.1)  # the poll interval
        victim = await self.victim()
        self.fault = self.fault_type(victim)
        await self.fault.inject()
        seen.injected = f"{name}: {steps[self.chosen.step - 1]}; victim {victim.member} on {victim.node}"
        self.s.print(f"    injected {self.fault_type.name}: {seen.injected}")
        try:
            deadline = time.monotonic() + self.fault.hold
            while time.monotonic() < deadline:
                req = await self.sc.request(name) or {}
                for c in (req.get("status") or {}).get("conditions") or ():
                    said = f"{c['type']}: {c.get('message', '')}"
                    if c.get("status") == constants.FALSE and any(n and n in said for n in self.fault.names()) \
                            and said not in seen.waited:
                        seen.waited.append(said)
                await asyncio.sleep(0.5)  # the sampling interval
        finally:
            await self.fault.heal()
            self.s.print(f"    healed {self.fault_type.name}")

    async def victim(self) -> Victim:
        members = naming.pods(self.db, 3)
        if self.fault_type.leader:
            member = await self.sc.wait_for(f"the leader of {self.db}", self._leader, timeout=60, interval=0.5)
        else:
            member = members[self.chosen.victim_index % len(members)]
        pod = await self.sc.k.get("v1", "Pod", self.sc.namespace, member) or {}
        table = f"opsmanager_chaos_{os.getpid()}"
        return Victim(self.sc, self.db, member, str((pod.get("spec") or {}).get("nodeName")), self.s.group, table)

    async def _leader(self) -> str | None:
        """The member that leads, None while any member does not answer Status (one restarted a moment ago, a
        Status refused under load): asked again rather than failing the cell with its request in flight."""
        login = self.s.login(self.db, self.op.etcd)  # a cluster with authentication answers a logged-in user
        try:
            statuses = await self.sc.member_statuses(
                self.db, credentials=await login.read() if login is not None else None)
        except (RuntimeError, kube.KubeError):
            return None
        return next((n for n, st in statuses.items() if st.is_leader), None)

    async def after(self, seen: Observation) -> None:
        """The checks of every cell: members Ready, not paused, nothing lost, history and watch."""
        if self.sc.operator is None or self.sc.operator.process.poll() is not None:
            seen.problems.append("the operator was not running after the cell (started again)")
            await self.sc.start_operator()
        try:
            await self.sc.wait_ready(self.db, timeout=180)
        except TimeoutError as err:
            seen.problems.append(f"not Ready after the cell: {err}")
        if await self.sc.is_paused(self.db):
            seen.problems.append("the Etcd was left paused")
        verdicts = []
        if self.live_writer is not None and self.live_writer.result is not None:
            checked = await self.sc.consistency(self.db, self.live_writer)
            seen.problems += checked.problems()
            verdicts.append("read-back, HashKV " + ("ok" if not checked.problems() else "FAILED"))
        recorded = self.recording.result if self.recording is not None else None
        if recorded is not None and recorded.history.operations:
            verdicts += await self._history(recorded, seen)
        self.verdicts = "; ".join(verdicts) or "-"

    async def _history(self, recorded: history.Recorded, seen: Observation) -> list[str]:
        from e2e import lincheck

        verdict = await lincheck.check(recorded.history, self.sc.dir / "lincheck",
                                       name=f"{self.db}-{self.op.name}-{self.fault_type.name}")
        out = [f"{verdict.verdict} ({verdict.operations} ops, {verdict.unknown} unknown)"]
        if not verdict.ok:
            seen.problems.append(verdict.describe())
        watch = recorded.watch_problems()
        out.append(f"watch {'ok' if not watch else 'BROKEN'} ({len(recorded.watch_log)} entries)")
        seen.problems += [f"watch: {p}" for p in watch[:3]]
        return out


def _resolved(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the target version spelled out (the 3.6 build's)."""
    if "updateVersion" in spec:
        return {"updateVersion": {"targetVersion": etcd_36()}}
    return spec


# --- the command ---------------------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> list[CellResult]:
    cells = select(args.cells)
    workdir = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="chaos-"))
    print(f"chaos: {len(cells)} cells, seed {args.seed} ({SEED_ENV}={args.seed} reproduces), in {workdir}")
    results: list[CellResult] = []
    async with scenario.Scenario(workdir, control_plane="kubernetes", nodes=3, printer=print) as sc, \
            Session(sc, seed=args.seed) as session:
        for op, fault in cells:
            result = await session.run(op, fault)
            results.append(result)
            print(f"  -> {result.outcome} in {result.wall_s:.1f}s; writes {result.writes}; {result.verdicts}"
                  + (f"; notes: {result.notes}" if result.notes else "")
                  + (f"; PROBLEM: {result.problem}" if result.problem else ""))
            if args.json:  # after every cell: a run stopped half-way keeps what it found
                pathlib.Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=os.environ.get(CELLS_ENV) or None,
                        help=f"op:fault,... ('*' matches any; default: ${CELLS_ENV}, else every cell)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get(SEED_ENV) or random.randrange(1 << 31)),
                        help=f"default: ${SEED_ENV}, else random (printed)")
    parser.add_argument("--dir", help="work directory (default: a new temporary one)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--list", action="store_true", help="print the cells and the faults, run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name, fault in FAULTS.items():
            print(f"{name:<20} {fault.what}")
        print(" ".join(f"{o}:{f}" for o, f in select(args.cells)))
        return 0
    results = asyncio.run(main_async(args))
    print(format_table(results))
    failed = [r for r in results if not r.passed]
    for r in failed:
        print(f"FAILED {r.cell} (seed {r.seed}): {r.problem}\n  reproduce: {reproduce(r)}")
    print(f"seed {args.seed}: {len(results) - len(failed)}/{len(results)} cells passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
