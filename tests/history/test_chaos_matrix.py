"""The fault matrix's pure parts (``e2e.chaos``): what it runs and how it judges a cell, without a cluster.

We test these aspects:
* the matrix is every operation the issue names times every fault, and ``CHAOS_CELLS`` picks a subset (``*``
  matches any), refusing a name it does not know;
* a cell's choices (victim, request, step) depend on the seed and the cell only, so one cell reproduces alone;
* a step is in flight while its condition is False; Pending, Running, Failed and Successful are not steps;
* the judgement: Successful (having waited with a condition naming the fault, or not) passes; Failed passes only
  when its message names the fault; a fault never injected, a request not finished, or any check's problem fails;
* the table and the command that reproduces a failing cell;
* the nftables rules of the operator's cut match its cgroup's sockets only;
* the operator's crash point names a member the operation has per-member steps for (the new ones when scaling),
  and an operation without them names its first step;
* a member fault whose victim is between two pods waits for its container to run, and notes how late it was;
* an operation whose steps start and end within one write is held in flight up to the chosen step (the operator's
  hold points), except when the fault is the operator's own crash point.
"""

from __future__ import annotations

import pytest

from e2e import chaos
from opsmanager.api import constants
from opsmanager_sandbox.realnodes import faults


def test_the_matrix_is_every_operation_times_every_fault() -> None:
    assert set(chaos.OPERATIONS) == {"add-tls", "rotate", "issuer-change", "scale", "update-version", "defragment",
                                     "rotate-auth", "backup"}
    assert set(chaos.FAULTS) == {"peer-cut", "peer-cut-in", "isolated", "operator-cut-member", "operator-cut-api",
                                 "member-killed", "operator-killed", "leader-drained", "node-stopped"}
    assert len(chaos.select(None)) == len(chaos.OPERATIONS) * len(chaos.FAULTS)
    assert chaos.select("add-tls:peer-cut, rotate:*")[:2] == [("add-tls", "peer-cut"), ("rotate", "peer-cut")]
    assert chaos.select("*:node-stopped") == [(op, "node-stopped") for op in chaos.OPERATIONS]
    assert chaos.OPERATIONS["scale"].requests[0][1] == {"horizontalScaling": {"replicas": 5}}
    with pytest.raises(ValueError, match="unknown cells"):
        chaos.select("add-tls:typo")


def test_a_cells_choices_depend_on_the_seed_and_the_cell_only() -> None:
    first = chaos.plan(7, "scale", "peer-cut", requests=2)
    assert chaos.plan(7, "scale", "peer-cut", requests=2) == first
    assert 0 <= first.victim_index < 3 and 0 <= first.request < 2 and first.step in (1, 2)
    many = {chaos.plan(seed, "add-tls", "isolated") for seed in range(40)}
    assert len({p.victim_index for p in many}) == 3 and {p.step for p in many} == {1, 2}
    assert all(p.request == 0 for p in many)


def cond(type_: str, status: str, message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "message": message}


def test_a_step_is_in_flight_while_its_condition_is_false() -> None:
    req = {"status": {"conditions": [cond(constants.COND_PENDING, constants.FALSE), cond("IssueCertificates", "True"),
                                     cond(constants.COND_RUNNING, constants.FALSE),
                                     cond("RestartPods--db-1", constants.FALSE), cond(constants.COND_FAILED, "False")]}}
    assert chaos.in_flight(req) == ["RestartPods--db-1"]
    assert chaos.in_flight(None) == []


NAMES = ("db-1", "node-2")


def test_successful_passes_waiting_or_not() -> None:
    seen = chaos.Observation(phases=[constants.PHASE_SUCCESSFUL], injected="r: RestartPods; victim db-1")
    assert chaos.judge(seen, NAMES) == ("Successful", [])
    seen.waited.append("EtcdDefragmented: defragmented db-1: 3.0 MB → 1.0 MB")  # names it in passing: no wait
    assert chaos.judge(seen, NAMES) == ("Successful", [])
    seen.waited.append("RestartPods: not at rest: db-1 unhealthy")
    outcome, problems = chaos.judge(seen, NAMES)
    assert outcome == "Successful, having waited: RestartPods: not at rest: db-1 unhealthy" and problems == []


def test_failed_passes_only_naming_the_fault() -> None:
    named = chaos.Observation(phases=[constants.PHASE_FAILED], failures=["member db-1 unreachable for 120s"],
                              injected="x")
    assert chaos.judge(named, NAMES) == ("Failed: member db-1 unreachable for 120s", [])
    vague = chaos.Observation(phases=[constants.PHASE_FAILED], failures=["timed out"], injected="x")
    outcome, problems = chaos.judge(vague, NAMES)
    assert outcome == "Failed: timed out" and problems == ["failed without naming the fault (db-1, node-2)"]


def test_a_fault_never_injected_an_unfinished_request_and_a_checks_problem_fail_the_cell() -> None:
    early = chaos.Observation(phases=[constants.PHASE_SUCCESSFUL])
    assert "never injected" in chaos.judge(early, NAMES)[1][0]
    stuck = chaos.Observation(phases=[], injected="x", problems=["TimeoutError: still Progressing"])
    outcome, problems = chaos.judge(stuck, NAMES)
    assert outcome == "not finished (no request)" and problems == ["TimeoutError: still Progressing", outcome]
    lost = chaos.Observation(phases=[constants.PHASE_SUCCESSFUL], injected="x", problems=["2 acknowledged writes lost"])
    assert chaos.judge(lost, NAMES) == ("Successful", ["2 acknowledged writes lost"])


def test_the_table_and_the_command_that_reproduces_a_cell() -> None:
    ok = chaos.CellResult("add-tls", "peer-cut", "Successful", 41.26, "2000/0", "linearizable; watch ok", seed=9)
    bad = chaos.CellResult("rotate", "isolated", "Failed: x|y", 3.0, "10/1", "-", problem="lost", seed=9)
    table = chaos.format_table([ok, bad]).splitlines()
    assert table[2] == "| add-tls | peer-cut | Successful | 41.3 | 2000/0 | linearizable; watch ok | - |"
    assert table[3] == "| rotate | isolated | Failed: x/y | 3.0 | 10/1 | - | lost |"
    assert ok.passed and not bad.passed
    assert chaos.reproduce(bad) == "make chaos CHAOS_SEED=9 CHAOS_CELLS=rotate:isolated"


def test_the_operators_cut_drops_only_its_cgroups_sockets_to_one_address() -> None:
    group = faults.ProcessGroup("opsmanager-chaos-1")
    rules = faults.ProcessCut(group, "198.18.0.254", 6443, table="t1").ruleset()
    assert 'socket cgroupv2 level 1 "unified/opsmanager-chaos-1" ip daddr 198.18.0.254 tcp dport 6443 drop' in rules
    assert rules.startswith("table inet t1 {") and "hook output" in rules
    assert "tcp dport" not in faults.ProcessCut(group, "198.18.9.7").ruleset()
    assert group.prefix()[-1] == "/sys/fs/cgroup/unified/opsmanager-chaos-1"


def test_the_operators_crash_point_names_a_member_the_operation_has_a_step_for() -> None:
    session = type("S", (), {"sc": None})()
    seen = set()
    for seed in range(30):
        for op, members in (("add-tls", {"db-0", "db-1", "db-2"}), ("scale", {"db-3", "db-4"})):
            cell = chaos._Cell(session, chaos.OPERATIONS[op], chaos.OperatorKilled,  # type: ignore[arg-type]
                               chaos.plan(seed, op, "operator-killed", len(chaos.OPERATIONS[op].requests)), "db")
            assert cell.crash_point and cell.crash_member() in members
            seen.add(cell.crash_member())
    assert seen == {"db-0", "db-1", "db-2", "db-3", "db-4"}
    backup = chaos._Cell(session, chaos.OPERATIONS["backup"], chaos.OperatorKilled,  # type: ignore[arg-type]
                         chaos.plan(1, "backup", "operator-killed"), "db")
    assert backup.crash_point and backup.crash_conditions() == [constants.COND_SNAPSHOT_UPLOADED]  # its first step
    scale = chaos._Cell(session, chaos.OPERATIONS["scale"], chaos.OperatorKilled,  # type: ignore[arg-type]
                        chaos.plan(1, "scale", "operator-killed", 2), "db")
    assert f"EtcdMemberAdded--{scale.crash_member()}" in scale.crash_conditions()
    assert not chaos._Cell(session, chaos.OPERATIONS["add-tls"], chaos.PeerCut,  # type: ignore[arg-type]
                           chaos.plan(1, "add-tls", "peer-cut"), "db").crash_point
    assert all(step in constants.__dict__.values() for step in chaos.MEMBER_STEPS)


async def test_a_member_fault_waits_for_its_victims_container_to_run_and_notes_how_late() -> None:
    """The chosen moment may find the victim between two pods (the operator restarting it): the injection waits
    for its etcd container to run (it was a LookupError that aborted the cell, its request left running)."""
    from e2e import scenario

    answers = [LookupError("not running")] * 4 + [4242]

    class Nodes:
        async def container_pid(self, pod: dict[str, str], container: str) -> int:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    class Kube:
        async def get(self, *_args: str) -> dict[str, str]:
            return {"name": "db-1"}

    sc = scenario.Scenario.__new__(scenario.Scenario)
    sc.kube = Kube()  # type: ignore[assignment]
    sc.namespace = "demo"
    sc.sandbox = type("Sandbox", (), {"realnodes": Nodes()})()
    fault = chaos.PeerCut(chaos.Victim(sc, "db", "db-1", "node-2", None, "t"))
    assert await chaos.running_member_pid(fault) == 4242
    assert answers == []
    assert fault.notes and "db-1's container was not running" in fault.notes[0]


def test_a_quick_operation_is_held_in_flight_up_to_the_chosen_step_unless_the_operator_crashes() -> None:
    session = type("S", (), {"sc": None})()
    for step in (1, 2):
        plan = chaos.Plan(request=0, step=step, victim_index=0)
        cell = chaos._Cell(session, chaos.OPERATIONS["rotate-auth"], chaos.PeerCut, plan, "db")  # type: ignore[arg-type]
        held = cell.holds("r")
        assert [c for _, c, _ in held] == list(chaos.OPERATIONS["rotate-auth"].hold_steps[:step])
        assert [s for _, _, s in held] == [chaos.HOLD_SEEN] * (step - 1) + [chaos.HOLD_STRUCK]
    killed = chaos._Cell(session, chaos.OPERATIONS["backup"], chaos.OperatorKilled,  # type: ignore[arg-type]
                         chaos.plan(1, "backup", "operator-killed"), "db")
    assert killed.crash_point and killed.holds("r") == []
    rolled = chaos._Cell(session, chaos.OPERATIONS["add-tls"], chaos.PeerCut,  # type: ignore[arg-type]
                         chaos.plan(1, "add-tls", "peer-cut"), "db")
    assert rolled.holds("r") == []  # its steps last long enough to be seen
