"""From what each member said to one verdict: the Etcd's ``phase`` and the facts behind it.

Pure: :mod:`opsmanager.provisioner.observe` asks the members (through the etcd admin client, with the operator's
own client certificate) and hands the answers here as :class:`MemberView` values.

The phase follows KubeDB's meaning, decided from **real member health**, not from pod readiness alone:

- ``Ready``: every expected member is healthy (has a leader, no alarm, answers a linearizable read), all of
  them name the same leader, which is one of them, and every pod is Ready for the kubelet (so the client Service
  has every member behind it);
- ``Critical``: a quorum (``replicas // 2 + 1``) is healthy, but not all — the cluster serves, one more failure
  may stop it;
- ``NotReady``: no quorum is healthy — the cluster does not serve writes;
- ``Provisioning``: not Ready yet and never was (the ``Provisioned`` condition is not True);
- ``Halted``: ``spec.halted`` is true (members stopped on purpose, data kept).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from opsmanager.api import constants


@dataclasses.dataclass(frozen=True)
class MemberView:
    """One expected member as observed now — the one view that both the health verdict here and the rolling
    restart's decision (:mod:`opsmanager.ops.rollout`) read; built by :func:`opsmanager.cluster.members.observe`.

    ``pod_ready``: the pod serves (kubelet Ready, an address, not terminating); ``healthy``: etcd's own notion (a
    linearizable read went through and Status answered); ``member_id``/``leader_id`` from its Status (0 when it did
    not answer); ``up_to_date``: its pod runs the StatefulSet's update revision (always True when nobody asked)."""

    name: str
    pod_ready: bool = False
    reachable: bool = False
    healthy: bool = False
    member_id: int = 0
    leader_id: int = 0
    reason: str = ""
    exists: bool = True  # the pod object exists and is not terminating
    is_learner: bool = False
    applied_index: int = 0
    up_to_date: bool = True
    raft_index: int = 0  # its raft committed index (Status ``raftIndex``; 0 when it did not answer)
    node: str = ""  # the node its pod is on
    node_down: str = ""  # why that node is not Ready ("" when it is, or when nobody could tell)

    @property
    def on_down_node(self) -> str:
        """``"<member> is on node <node>, which is not Ready (<why>)"``, or "" when its node is Ready."""
        return f"{self.name} is on node {self.node}, which is not Ready ({self.node_down})" if self.node_down else ""

    @property
    def answering(self) -> bool:
        """etcd answered Status through this member."""
        return self.member_id != 0

    @property
    def is_leader(self) -> bool:
        return self.answering and self.member_id == self.leader_id


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The assessment of one observation; ``phase`` is computed by :func:`phase_of` from it."""

    replicas: int
    healthy: tuple[str, ...]
    pods_ready: tuple[str, ...]
    reachable: tuple[str, ...]
    leader: str | None
    all_healthy_one_leader: bool
    has_quorum: bool
    problems: tuple[str, ...]
    blocked: str = ""  # why nothing could be asked at all (no StatefulSet, no client identity)
    committed: tuple[tuple[str, int], ...] = ()  # (member, raft committed index) of every member that answers

    @property
    def accepting_connections(self) -> bool:
        return bool(self.healthy)

    def summary(self) -> str:
        """A stable, human-readable line (no timings, so an unchanged cluster writes no new status)."""
        if self.blocked:
            return self.blocked
        text = f"{len(self.healthy)}/{self.replicas} members healthy"
        if self.leader:
            text += f", leader {self.leader}"
        if self.problems:
            text += "; " + "; ".join(self.problems)
        return text


def quorum(replicas: int) -> int:
    return replicas // 2 + 1


def assess(replicas: int, views: Sequence[MemberView], *, blocked: str = "") -> Verdict:
    """Judge the members. ``views`` should hold one entry per expected member; a missing one counts as down."""
    by_name = {v.name: v for v in views}
    healthy = tuple(sorted(v.name for v in views if v.healthy))
    leader_ids = {v.leader_id for v in views if v.healthy}
    ids = {v.member_id: v.name for v in views if v.member_id}
    leader: str | None = None
    if len(leader_ids) == 1:
        (leader_id,) = leader_ids
        leader = ids.get(leader_id) if leader_id else None
    problems = tuple(
        v.on_down_node or f"{v.name}: {v.reason or 'unhealthy'}"
        for v in sorted(by_name.values(), key=lambda v: v.name) if not v.healthy or v.node_down
    )
    return Verdict(
        replicas=replicas,
        healthy=healthy,
        pods_ready=tuple(sorted(v.name for v in views if v.pod_ready)),
        reachable=tuple(sorted(v.name for v in views if v.reachable)),
        leader=leader,
        all_healthy_one_leader=(len(healthy) == replicas and replicas > 0 and leader is not None
                                and all(v.pod_ready for v in views if v.healthy)),
        has_quorum=len(healthy) >= quorum(replicas),
        problems=problems,
        blocked=blocked,
        committed=tuple(sorted((v.name, v.raft_index) for v in views if v.answering)),
    )


def phase_of(verdict: Verdict, *, halted: bool, provisioned: bool) -> str:
    """The one place the Etcd's phase is decided."""
    if halted:
        return constants.DB_PHASE_HALTED
    if verdict.all_healthy_one_leader:
        return constants.DB_PHASE_READY
    if not provisioned:
        return constants.DB_PHASE_PROVISIONING
    if verdict.has_quorum:
        return constants.DB_PHASE_CRITICAL
    return constants.DB_PHASE_NOT_READY


def survivor(committed: Sequence[tuple[str, int]]) -> str | None:
    """The member a recovery from lost quorum keeps: the highest raft committed index among the members that answer
    (their data is there, and it has every write any of them acknowledged); a tie goes to the lowest ordinal."""
    if not committed:
        return None
    return max(committed, key=lambda c: (c[1], -_ordinal(c[0])))[0]


def _ordinal(pod: str) -> int:
    tail = pod.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0

