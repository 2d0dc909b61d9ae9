"""An in-memory etcd cluster behind the :class:`~opsmanager.etcd.admin.EtcdAdmin` protocol, for fast tests.

:class:`FakeCluster` holds what the ops engine observes of etcd — members with IDs and peer URLs, learners, one
leader, the raft term, which members are up, the certificate each member serves — and :meth:`FakeCluster.admin`
is an :data:`~opsmanager.etcd.admin.AdminFactory`: ``Engine(client, etcd=cluster.admin)``. What it models:

- **leadership and terms**: every leader change increments the term and is recorded in :attr:`FakeCluster.history`
  with its cause, ``"move"`` (MoveLeader) or ``"election"`` (the leader went down). A test that asserts "no
  election the engine did not ask for" checks that no ``"election"`` is recorded.
- **MoveLeader** to a voting member that is up: accepted (leader changes, term + 1). To an ID that is not a
  member, or a learner: :class:`errors.BadLeaderTransferee`; to a member that is down:
  :class:`errors.LeaderTransferTimeout` — the typed errors the real client raises for those answers.
- **restarts**: :meth:`FakeCluster.stop` takes a member down (its pod was deleted), :meth:`FakeCluster.start`
  brings it back caught up; a majority down means no quorum (:class:`errors.NoQuorum` on consensus calls).
- **membership**: MemberAdd (learners only), MemberPromote (refused with :class:`errors.LearnerNotReady` until
  the learner runs and has applied every entry; one in :attr:`FakeCluster.lagging` never catches up) and
  MemberRemove.
- **versions**: each member's binary (:attr:`FakeMember.version`, set from its pod's image by the test world),
  the cluster version (the lowest minor, or a downgrade's target) and etcd 3.6's downgrade protocol (validate,
  enable — one minor down only, every member on 3.6+ —, cancel; it ends by itself once every member runs the
  target).
- **served certificates**: :meth:`FakeCluster.serve` sets the certificate a member hands out on its client or
  peer port (a test sets it from the Secret mounted when the pod was created).
- **auth**: users (password, roles), auth on or off, tokens. With auth on, every call that reaches etcd needs a
  user and raises what etcd raises: no credentials → :class:`errors.AuthRequired` (or, with
  :attr:`FakeCluster.client_cert_auth`, the client certificate's CN is the user), a wrong password →
  :class:`errors.AuthFailed`; admin calls (membership, MoveLeader, defragment, compaction, setting alarms,
  downgrade, snapshot, auth management) need the role ``root``: :class:`errors.PermissionDenied` without it,
  :class:`errors.UserNotFound` for a CN that is no user. Each :class:`FakeAdmin` logs in lazily and once more when its token
  is gone (:meth:`FakeCluster.expire_tokens`: the TTL passed), as the real client does. A password change drops the
  user's tokens, so an admin still holding the old password fails to log in again; AuthDisable drops every token.
  Status, MemberList and reading alarms need any user. HTTP probes (health, flags, cluster version) and served
  certificates need none, as on etcd.
- **snapshots**: :meth:`FakeAdmin.snapshot` writes a small file (a fake backend + its sha256 trailer, through the
  same verified writer as the real client) and reports the cluster's revision.

Nothing waits: ``wait_recovered`` answers from the current state at once (the real one polls until its timeout),
so a test drives time itself. It lives with the tests, not in the package: nothing in the product imports it, so it
has no place in the wheel or the operator's image. It imports nothing but the etcd layer, so any suite — the
engine's, the provisioner's — uses the same one, and mypy checks it with the tests that use it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import pathlib
import urllib.parse
from collections.abc import Sequence
from typing import Self

from opsmanager import pki
from opsmanager.api import versions
from opsmanager.etcd import access, client, errors, probes, snapshot

CLUSTER_ID = 0xC1D


def _minor(version: str) -> tuple[int, int]:
    major, minor, _patch = versions.parse(version)
    return major, minor


@dataclasses.dataclass
class FakeMember:
    id: int
    name: str
    peer_urls: tuple[str, ...]
    is_learner: bool = False
    up: bool = True
    started: bool = True  # False from MemberAdd until its process first runs: etcd lists it with no name then
    version: str = "3.5.1"  # the etcd binary the member runs (its pod's image)
    flags: tuple[str, ...] = ()  # the command line it started with (its pod's args)
    applied_index: int = 0
    served: dict[str, pki.CertInfo] = dataclasses.field(default_factory=dict)  # "client"/"peer" -> certificate


@dataclasses.dataclass
class FakeUser:
    password: str
    roles: list[str] = dataclasses.field(default_factory=list)


ROOT = "root"


@dataclasses.dataclass(frozen=True)
class LeaderChange:
    term: int
    previous: str | None  # member name, None when there was no leader
    leader: str | None  # None: quorum lost
    cause: str  # "move" (MoveLeader) or "election"


class FakeCluster:
    """The etcd state shared by every :class:`FakeAdmin` (it outlives any one reconcile, as etcd does)."""

    def __init__(self, names: Sequence[str], *, peer_urls: Sequence[str] | None = None,
                 leader: str | None = None) -> None:
        if not names:
            raise ValueError("FakeCluster needs at least one member")
        urls = list(peer_urls) if peer_urls is not None else [f"http://{n}:2380" for n in names]
        self.members: dict[str, FakeMember] = {
            n: FakeMember(id=0x1000 + i + 1, name=n, peer_urls=(u,))
            for i, (n, u) in enumerate(zip(names, urls, strict=True))
        }
        self.term = 1
        self.raft_index = 10
        self.compacted = 0  # the revision of the last compaction
        self.db_size: dict[str, int] = {n: 1 << 24 for n in names}  # file sizes; a defragmentation shrinks them
        self.defragmented: list[tuple[str, str | None]] = []  # (member, the leader then), in order
        self.alarms: list[client.Alarm] = []
        self.leader: str | None = leader or names[0]
        self.history: list[LeaderChange] = []
        self.calls: list[str] = []  # "move_leader etcd-1", "member_update etcd-0", ... in order
        self.lagging: set[str] = set()  # learners that never catch up with the leader (MemberPromote refuses them)
        self.late_move_answers = 0  # the next N MoveLeader calls move leadership, then time out (a late answer)
        self.downgrade_target = ""  # a downgrade in progress (etcd 3.6+): its major.minor
        self._next_id = 0x2000
        self.open_admins = 0
        self.auth_enabled = False
        self.users: dict[str, FakeUser] = {}
        self.tokens: dict[str, str] = {}  # token -> user name
        self.auth_revision = 1
        self.client_cert_auth = False  # --client-cert-auth: a call with no token acts as its certificate's CN
        self._tokens = itertools.count(1)

    # --- the cluster's life (driven by the test) --------------------------------------------------------------

    def member(self, name: str) -> FakeMember:
        return self.members[name]

    def by_id(self, member_id: int) -> FakeMember | None:
        return next((m for m in self.members.values() if m.id == member_id), None)

    @property
    def voters(self) -> list[FakeMember]:
        return [m for m in self.members.values() if not m.is_learner]

    def has_quorum(self) -> bool:
        voters = self.voters
        return sum(m.up for m in voters) > len(voters) // 2

    def _change_leader(self, new: str | None, cause: str) -> None:
        self.term += 1
        self.history.append(LeaderChange(self.term, self.leader, new, cause))
        self.leader = new

    def _elect(self) -> None:
        """A new leader among the voters that are up (most caught up, then by name), if there is quorum."""
        candidates = sorted((m for m in self.voters if m.up), key=lambda m: (-m.applied_index, m.name))
        self._change_leader(candidates[0].name if candidates and self.has_quorum() else None, "election")

    def stop(self, name: str) -> None:
        """The member's process is gone (pod deleted). A leader that goes down causes an election."""
        member = self.members[name]
        if not member.up:
            return
        member.up = False
        if self.leader == name or (self.leader is not None and not self.has_quorum()):
            self._elect()

    def start(self, name: str) -> None:
        """The member is back (pod recreated), caught up with the leader (a learner in :attr:`lagging`: behind)."""
        member = self.members[name]
        member.up = True
        member.started = True
        if name in self.lagging:
            member.up, member.applied_index = True, 0
            return
        member.applied_index = self.raft_index
        if self.leader is None and self.has_quorum():
            self._elect()
        self._finish_downgrade()

    def write(self, n: int = 1) -> None:
        """``n`` committed entries; every member that is up applies them."""
        self.raft_index += n
        for m in self.members.values():
            if m.up and m.name not in self.lagging:
                m.applied_index = self.raft_index

    def serve(self, name: str, port: str, cert: pki.CertInfo | None) -> None:
        """Set (or clear, with None) the certificate ``name`` serves on its ``client`` or ``peer`` port."""
        if cert is None:
            self.members[name].served.pop(port, None)
        else:
            self.members[name].served[port] = cert

    def cluster_version(self) -> str:
        """What etcd decides: the downgrade target while one is enabled, else the lowest minor any member runs."""
        if self.downgrade_target:
            return self.downgrade_target
        lowest = min(_minor(m.version) for m in self.members.values())
        return f"{lowest[0]}.{lowest[1]}"

    def storage_version(self) -> str:
        return f"{self.cluster_version()}.0"

    def _finish_downgrade(self) -> None:
        """etcd ends downgrade mode by itself once every member runs the target minor."""
        if self.downgrade_target and all(versions.minor(m.version) == self.downgrade_target
                                         for m in self.members.values()):
            self.downgrade_target = ""

    def add_user(self, name: str, password: str, *roles: str) -> None:
        """Set up a user directly (test setup; an admin's :meth:`FakeAdmin.user_add` is the checked way)."""
        self.users[name] = FakeUser(password, sorted(set(roles)))
        self.auth_revision += 1

    def enable_auth(self) -> None:
        """Turn auth on directly (test setup): ``root`` with the role ``root`` must exist, as for AuthEnable."""
        self._check_root()
        self.auth_enabled = True
        self.auth_revision += 1

    def _check_root(self) -> None:
        root = self.users.get(ROOT)
        if root is None:
            raise errors.RootUserNotExist("AuthEnable: etcdserver: root user does not exist",
                                          code="FAILED_PRECONDITION")
        if ROOT not in root.roles:
            raise errors.RootRoleNotExist("AuthEnable: etcdserver: root user does not have root role",
                                          code="FAILED_PRECONDITION")

    def expire_tokens(self) -> None:
        """Every token is gone (``--auth-token-ttl`` passed, or the members restarted): the next call of each admin
        logs in again."""
        self.tokens.clear()

    def _issue_token(self, user: str) -> str:
        token = f"fake-{next(self._tokens)}"
        self.tokens[token] = user
        return token

    def _drop_tokens(self, user: str | None = None) -> None:
        for token in [t for t, u in self.tokens.items() if user is None or u == user]:
            del self.tokens[token]

    @property
    def elections(self) -> list[LeaderChange]:
        """Leader changes nobody asked for (a leader went down)."""
        return [c for c in self.history if c.cause == "election"]

    # --- the factory --------------------------------------------------------------------------------------------

    def admin(self, endpoints: Sequence[access.Endpoint], tls: access.TLSIdentity | None, *,
              credentials: access.Credentials | None = None) -> FakeAdmin:
        """An :data:`~opsmanager.etcd.admin.AdminFactory` over this cluster."""
        return FakeAdmin(self, endpoints, tls, credentials=credentials)


class FakeAdmin:
    """One reconcile's view of a :class:`FakeCluster`, through the given endpoints (members by name)."""

    def __init__(self, cluster: FakeCluster, endpoints: Sequence[access.Endpoint],
                 tls: access.TLSIdentity | None, *, credentials: access.Credentials | None = None) -> None:
        if not endpoints:
            raise ValueError("EtcdClient needs at least one endpoint")  # as the real client
        self.cluster = cluster
        self._endpoints = tuple(endpoints)
        self.tls = tls
        self._credentials = credentials
        self._token: str | None = None
        self.logins = 0

    @property
    def endpoints(self) -> tuple[access.Endpoint, ...]:
        return self._endpoints

    async def __aenter__(self) -> Self:
        self.cluster.open_admins += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cluster.open_admins -= 1

    # --- helpers ----------------------------------------------------------------------------------------------

    def _endpoint(self, ref: access.Endpoint | str) -> access.Endpoint:
        return access.find(self._endpoints, ref)

    def _reachable(self, ep: access.Endpoint, call: str) -> FakeMember:
        member = self.cluster.members.get(ep.name)
        if member is None or not member.up:
            raise errors.MemberUnreachable(f"{call} on {ep.label}: connection refused", endpoint=ep.label,
                                           code="UNAVAILABLE")
        return member

    def _consensus(self, call: str, *, auth: str = "root") -> None:
        if not any(self.cluster.members.get(ep.name) and self.cluster.members[ep.name].up for ep in self._endpoints):
            raise errors.MemberUnreachable(f"{call}: no endpoint reachable")
        if self.cluster.leader is None or not self.cluster.has_quorum():
            raise errors.NoQuorum(f"{call}: etcdserver: no leader")
        self._authorize(call, auth)

    # --- auth -------------------------------------------------------------------------------------------------

    def _user(self, call: str) -> str | None:
        """The user this call acts as (None while auth is off); logs in when there is no valid token."""
        cluster = self.cluster
        if not cluster.auth_enabled:
            return None
        if self._credentials is not None:
            if self._token not in cluster.tokens:
                self._login(call)
            assert self._token is not None
            return cluster.tokens[self._token]
        if cluster.client_cert_auth and self.tls is not None and self.tls.cert_pem is not None:
            return pki.cert_info(self.tls.cert_pem).common_name
        raise errors.AuthRequired(f"{call}: etcdserver: user name is empty", code="INVALID_ARGUMENT")

    def _login(self, call: str) -> None:
        credentials = self._credentials
        assert credentials is not None
        user = self.cluster.users.get(credentials.username)
        if user is None or user.password not in credentials.passwords:  # the client tries each password
            raise errors.AuthFailed(f"Authenticate as {credentials.username!r} (before {call}): etcdserver: "
                                    "authentication failed, invalid user ID or password", code="INVALID_ARGUMENT")
        self._token = self.cluster._issue_token(credentials.username)
        self.logins += 1

    def _authorize(self, call: str, need: str) -> None:
        """``need``: "user" (any user: Status, MemberList, reading alarms), "root" (admin calls: the role root,
        UserNotFound for an unknown user), "key" (KV: the role root here, PermissionDenied for an unknown user)."""
        user = self._user(call)
        if user is None or need == "user":
            return
        record = self.cluster.users.get(user)
        if record is None and need == "root":
            raise errors.UserNotFound(f"{call} as {user!r}: etcdserver: user name not found",
                                      code="FAILED_PRECONDITION")
        if record is None or ROOT not in record.roles:
            raise errors.PermissionDenied(f"{call} as {user!r}: etcdserver: permission denied",
                                          code="PERMISSION_DENIED")

    def _member_list(self) -> list[client.Member]:
        return [client.Member(id=m.id, name=m.name if m.started else "", peer_urls=m.peer_urls,
                              client_urls=(f"https://{m.name}:2379",), is_learner=m.is_learner)
                for m in self.cluster.members.values()]

    def _status(self, ep: access.Endpoint) -> client.MemberStatus:
        member = self._reachable(ep, "Status")
        self._authorize("Status", "user")
        leader = self.cluster.members.get(self.cluster.leader or "")
        scheme = "https" if self.tls is not None and "https" in ep.schemes else ep.schemes[-1]
        return client.MemberStatus(
            endpoint=ep, scheme=scheme, member_id=member.id, cluster_id=CLUSTER_ID,
            leader_id=leader.id if leader is not None else 0, raft_index=self.cluster.raft_index,
            raft_term=self.cluster.term, raft_applied_index=member.applied_index, revision=self.cluster.raft_index,
            version=member.version, db_size=self.cluster.db_size.get(member.name, 1 << 16), db_size_in_use=1 << 15,
            is_learner=member.is_learner, errors=tuple(f"memberID:{a.member_id} alarm:{a.alarm}"
                                                       for a in self.cluster.alarms),
            storage_version=self.cluster.storage_version() if _minor(member.version) >= (3, 6) else "",
            downgrade_target=(f"{self.cluster.downgrade_target}.0" if self.cluster.downgrade_target
                              and _minor(member.version) >= (3, 6) else ""),  # etcd names it in full: 3.5.0
        )

    # --- EtcdAdmin ----------------------------------------------------------------------------------------------

    async def statuses(self, *, timeout: float | None = None, deadline: float | None = None,
                       extra: Sequence[access.Endpoint] = ()) -> dict[str, client.MemberStatus | errors.EtcdError]:
        out: dict[str, client.MemberStatus | errors.EtcdError] = {}
        for ep in [*self._endpoints, *(e for e in extra if e not in self._endpoints)]:
            try:
                out[ep.name] = self._status(ep)
            except errors.EtcdError as err:
                out[ep.name] = err
        return out

    async def health(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> probes.Health:
        ep = self._endpoint(endpoint)
        member = self.cluster.members.get(ep.name)
        if member is None or not member.up:
            return probes.Health(ep.label, False, "unreachable: connection refused", reachable=False, via="fake")
        if self.cluster.leader is None or not self.cluster.has_quorum():
            return probes.Health(ep.label, False, "RAFT NO LEADER", no_quorum=True, via="fake")
        return probes.Health(ep.label, True, via="fake")

    async def members(self, *, linearizable: bool = True, timeout: float | None = None,
                      deadline: float | None = None) -> list[client.Member]:
        if linearizable:
            self._consensus("MemberList", auth="user")
        else:
            self._authorize("MemberList", "user")
        return self._member_list()

    async def member_update(self, member_id: int, peer_urls: Sequence[str], *,
                            timeout: float | None = None) -> list[client.Member]:
        self._consensus("MemberUpdate")
        member = self.cluster.by_id(member_id)
        if member is None:
            raise errors.MemberNotFound(f"MemberUpdate {member_id:x}: etcdserver: member not found")
        self.cluster.calls.append(f"member_update {member.name}")
        member.peer_urls = tuple(peer_urls)
        self.cluster.write()
        return self._member_list()

    async def member_add(self, peer_urls: Sequence[str], *, is_learner: bool = False,
                         timeout: float | None = None) -> tuple[client.Member, list[client.Member]]:
        """The new member is known by the first label of its peer URL's host (its pod's name) in the fake; etcd
        lists it with no name until its process starts, as here."""
        self._consensus("MemberAdd")
        cluster = self.cluster
        if any(set(peer_urls) & set(m.peer_urls) for m in cluster.members.values()):
            raise errors.MembershipError(f"MemberAdd {list(peer_urls)}: etcdserver: peerURL exists")
        if not is_learner:
            raise errors.MembershipError("MemberAdd: the fake adds learners only (as the engine does)")
        name = (urllib.parse.urlsplit(peer_urls[0]).hostname or "").split(".")[0]
        cluster._next_id += 1
        member = FakeMember(id=cluster._next_id, name=name, peer_urls=tuple(peer_urls), is_learner=True, up=False,
                            started=False)
        cluster.members[name] = member
        cluster.db_size.setdefault(name, 1 << 16)
        cluster.calls.append(f"member_add {name}")
        cluster.write()
        listed = self._member_list()
        return next(m for m in listed if m.id == member.id), listed

    async def member_promote(self, member_id: int, *, timeout: float | None = None) -> list[client.Member]:
        self._consensus("MemberPromote")
        member = self.cluster.by_id(member_id)
        if member is None:
            raise errors.MemberNotFound(f"MemberPromote {member_id:x}: etcdserver: member not found")
        if not member.is_learner:
            raise errors.MembershipError(f"MemberPromote {member_id:x}: etcdserver: can only promote a learner member")
        if not member.up or member.applied_index < self.cluster.raft_index:
            raise errors.LearnerNotReady(f"MemberPromote {member_id:x}: etcdserver: can only promote a learner "
                                         "member which is in sync with leader", code="FAILED_PRECONDITION")
        member.is_learner = False
        self.cluster.calls.append(f"member_promote {member.name}")
        self.cluster.write()
        return self._member_list()

    async def member_remove(self, member_id: int, *, timeout: float | None = None) -> list[client.Member]:
        self._consensus("MemberRemove")
        cluster = self.cluster
        member = cluster.by_id(member_id)
        if member is None:
            raise errors.MemberNotFound(f"MemberRemove {member_id:x}: etcdserver: member not found")
        del cluster.members[member.name]
        cluster.calls.append(f"member_remove {member.name}")
        if cluster.leader == member.name:
            cluster._elect()
        cluster.write()
        return self._member_list()

    async def move_leader(self, target_id: int, *, via: access.Endpoint | str | None = None,
                          timeout: float = 5.0, agree_timeout: float = 2.0) -> client.LeaderMove:
        self._consensus("MoveLeader")
        cluster = self.cluster
        target = cluster.by_id(target_id)
        if target is None or target.is_learner:
            raise errors.BadLeaderTransferee(f"MoveLeader to {target_id:x}: etcdserver: bad leader transferee",
                                             code="FAILED_PRECONDITION")
        if not target.up:
            raise errors.LeaderTransferTimeout(f"MoveLeader to {target_id:x}: not finished within {timeout}s")
        previous = cluster.members[cluster.leader or ""]
        cluster.calls.append(f"move_leader {target.name}")
        if target.name != previous.name:
            cluster._change_leader(target.name, "move")
        if cluster.late_move_answers > 0:
            cluster.late_move_answers -= 1
            raise errors.LeaderTransferTimeout(f"MoveLeader to {target_id:x}: not every member reports it as leader")
        up = tuple(sorted(m.name for m in cluster.members.values() if m.up))
        down = tuple(sorted(m.name for m in cluster.members.values() if not m.up))
        return client.LeaderMove(previous_leader_id=previous.id, leader_id=target.id, sent_to=previous.name,
                                 redirects=0, rpc_seconds=0.001, total_seconds=0.002, agreed=up, unreachable=down)

    async def defragment(self, endpoint: access.Endpoint | str, *, timeout: float | None = None) -> None:
        member = self._reachable(self._endpoint(endpoint), "Defragment")
        self._authorize("Defragment", "root")
        self.cluster.defragmented.append((member.name, self.cluster.leader))
        self.cluster.db_size[member.name] = 1 << 15

    async def hash_kv(self, endpoint: access.Endpoint | str, *, revision: int = 0, timeout: float | None = None,
                      deadline: float | None = None) -> client.KVHash:
        ep = self._endpoint(endpoint)
        member = self._reachable(ep, "HashKV")
        self._authorize("HashKV", "root")
        at = revision or self.cluster.raft_index
        if at <= self.cluster.compacted:
            raise errors.Compacted(f"HashKV: revision {at} has been compacted (at {self.cluster.compacted})")
        if at > self.cluster.raft_index:
            raise errors.EtcdServerError(f"HashKV: revision {at} is a future revision")
        # Every member holds the same history in the fake: the hash is a function of the revision alone.
        return client.KVHash(endpoint=ep.name, member_id=member.id, revision=at, hash=(at * 2654435761) % 2**32,
                             compact_revision=self.cluster.compacted)

    async def alarms(self, *, timeout: float | None = None) -> list[client.Alarm]:
        self._consensus("Alarm", auth="user")
        return list(self.cluster.alarms)

    async def set_alarm(self, member_id: int, alarm: str, *, raised: bool,
                        timeout: float | None = None) -> list[client.Alarm]:
        self._consensus("Alarm")
        entry = client.Alarm(member_id, alarm)
        if raised and entry not in self.cluster.alarms:
            self.cluster.alarms.append(entry)
            return [entry]
        if not raised and entry in self.cluster.alarms:
            self.cluster.alarms.remove(entry)
            return [entry]
        return []

    async def compact(self, revision: int, *, physical: bool = True, timeout: float | None = None) -> int:
        self._consensus("Compact")
        if revision <= self.cluster.compacted:
            raise errors.Compacted(f"Compact: revision {revision} has been compacted (at {self.cluster.compacted})")
        if revision > self.cluster.raft_index:
            raise errors.EtcdServerError(f"Compact: revision {revision} is a future revision")
        self.cluster.compacted = revision
        return self.cluster.raft_index

    async def downgrade(self, action: str, version: str, *, timeout: float | None = None) -> str:
        self._consensus("Downgrade")
        cluster = self.cluster
        current = cluster.cluster_version()
        allowed = f"{_minor(current + '.0')[0]}.{_minor(current + '.0')[1] - 1}"
        cluster.calls.append(f"downgrade {action} {version}")
        if action == "CANCEL":
            if not cluster.downgrade_target:
                raise errors.EtcdServerError("Downgrade: etcdserver: no inflight downgrade job")
            cluster.downgrade_target = ""
            return current
        if any(_minor(m.version) < (3, 6) for m in cluster.members.values()):
            raise errors.EtcdServerError("Downgrade: etcdserver: cluster version is not supported for downgrade")
        if cluster.downgrade_target:
            raise errors.EtcdServerError("Downgrade: etcdserver: the cluster has an ongoing downgrade job")
        if version != allowed:
            raise errors.EtcdServerError(f"Downgrade: etcdserver: invalid downgrade target version {version}")
        if action == "ENABLE":
            cluster.downgrade_target = version
            cluster.write()
        return current

    async def flags(self, endpoint: access.Endpoint | str, *, timeout: float = 3.0) -> tuple[str, ...]:
        return ("etcd", *self._reachable(self._endpoint(endpoint), "flags").flags)

    async def cluster_version(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> str:
        self._reachable(self._endpoint(endpoint), "cluster_version")
        return self.cluster.cluster_version()

    async def wait_recovered(self, member: access.Endpoint | str, *, expected_voters: int,
                             timeout: float = 30.0, poll_interval: float = 0.1,
                             check_hash: bool = False) -> client.Recovery:
        ep = self._endpoint(member)
        self._consensus("wait_recovered", auth="key")  # MemberList, Status and a linearizable read
        cluster = self.cluster
        voters = cluster.voters
        learners = [m.name for m in cluster.members.values() if m.is_learner]
        if len(voters) != expected_voters or learners:
            raise errors.NotRecovered(f"wait_recovered({ep.name}): {len(voters)} voters (expected "
                                      f"{expected_voters}), learners: {learners or 'none'}", reason="membership")
        down = [m.name for m in voters if not m.up]
        if down:
            raise errors.NotRecovered(f"wait_recovered({ep.name}): unhealthy: {', '.join(down)}", reason="health")
        mine = self._reachable(ep, "Status")
        leader = cluster.members[cluster.leader or ""]
        return client.Recovery(member=ep.name, member_id=mine.id, leader_id=leader.id, voters=len(voters),
                               applied_index=mine.applied_index, leader_commit_index=cluster.raft_index,
                               seconds=0.0, polls=1)

    async def served_certificate(self, endpoint: access.Endpoint | str, *, port: str | int = "client",
                                 timeout: float = 3.0) -> pki.CertInfo:
        ep = self._endpoint(endpoint)
        member = self._reachable(ep, "served_certificate")
        cert = member.served.get(str(port))
        if cert is None:
            raise errors.TLSHandshakeFailed(f"served_certificate {ep.label} {port}: no TLS on this port",
                                            endpoint=ep.label)
        return cert

    # --- auth -------------------------------------------------------------------------------------------------

    @property
    def credentials(self) -> access.Credentials | None:
        return self._credentials

    def set_credentials(self, credentials: access.Credentials | None) -> None:
        if credentials != self._credentials:
            self._credentials, self._token = credentials, None

    async def auth_status(self, *, timeout: float | None = None) -> bool:
        try:
            self._consensus("AuthStatus", auth="user")
        except (errors.PermissionDenied, errors.UserNotFound):
            return True  # as the real client: refused for want of a user means auth is on
        return self.cluster.auth_enabled

    async def auth_enable(self, *, timeout: float | None = None) -> None:
        self._consensus("AuthEnable")
        self.cluster.calls.append("auth_enable")
        if not self.cluster.auth_enabled:
            self.cluster.enable_auth()
        self._token = None

    async def auth_disable(self, *, timeout: float | None = None) -> None:
        self._consensus("AuthDisable")
        self.cluster.calls.append("auth_disable")
        if self.cluster.auth_enabled:
            self.cluster.auth_enabled = False
            self.cluster.auth_revision += 1
            self.cluster._drop_tokens()
        self._token = None

    async def user_add(self, name: str, password: str, *, timeout: float | None = None) -> None:
        self._consensus(f"UserAdd {name!r}")
        if name in self.cluster.users:
            raise errors.UserExists(f"UserAdd {name!r}: etcdserver: user name already exists",
                                    code="FAILED_PRECONDITION")
        self.cluster.calls.append(f"user_add {name}")
        self.cluster.add_user(name, password)

    def _known(self, call: str, name: str) -> FakeUser:
        record = self.cluster.users.get(name)
        if record is None:
            raise errors.UserNotFound(f"{call}: etcdserver: user name not found", code="FAILED_PRECONDITION")
        return record

    async def user_get(self, name: str, *, timeout: float | None = None) -> tuple[str, ...]:
        self._consensus(f"UserGet {name!r}")
        return tuple(self._known(f"UserGet {name!r}", name).roles)

    async def user_grant_role(self, name: str, role: str, *, timeout: float | None = None) -> None:
        call = f"UserGrantRole {name!r} {role!r}"
        self._consensus(call)
        record = self._known(call, name)
        if role != ROOT:  # the fake knows no role but root
            raise errors.RoleNotFound(f"{call}: etcdserver: role name not found", code="FAILED_PRECONDITION")
        if role not in record.roles:
            record.roles = sorted({*record.roles, role})
            self.cluster.auth_revision += 1
        self.cluster.calls.append(f"user_grant_role {name} {role}")

    async def user_change_password(self, name: str, password: str, *, timeout: float | None = None) -> None:
        call = f"UserChangePassword {name!r}"
        self._consensus(call)
        self._known(call, name).password = password
        self.cluster.auth_revision += 1
        self.cluster._drop_tokens(name)
        self.cluster.calls.append(f"user_change_password {name}")
        if self._credentials is not None and self._credentials.username == name:
            self.set_credentials(access.Credentials(name, password))

    async def check_login(self, endpoint: access.Endpoint | str | None, username: str, password: str, *,
                          timeout: float | None = None) -> bool:
        if endpoint is not None:
            self._reachable(self._endpoint(endpoint), "Authenticate")
        elif not any(m.up for m in self.cluster.members.values()):
            raise errors.MemberUnreachable("Authenticate: no endpoint reachable")
        if not self.cluster.auth_enabled:
            raise errors.AuthNotEnabled(f"Authenticate as {username!r}: etcdserver: authentication is not enabled",
                                        code="FAILED_PRECONDITION")
        user = self.cluster.users.get(username)
        return user is not None and user.password == password

    # --- snapshots --------------------------------------------------------------------------------------------

    async def snapshot(self, endpoint: access.Endpoint | str, dest_path: str | os.PathLike[str], *,
                       timeout: float) -> client.SnapshotResult:
        ep = self._endpoint(endpoint)
        member = self._reachable(ep, "Snapshot")
        self._authorize("Snapshot", "root")
        cluster = self.cluster
        revision = cluster.raft_index
        db = (f"fake etcd backend: cluster {CLUSTER_ID:x} member {member.id:x} revision {revision}\n"
              .encode().ljust(4096, b"\0"))
        dest = pathlib.Path(dest_path)
        size, digest = await asyncio.to_thread(snapshot.write_verified, dest, db)
        cluster.calls.append(f"snapshot {member.name}")
        return client.SnapshotResult(path=dest, size=size, sha256_hex=digest, revision=revision,
                                     member_id=member.id,
                                     version=cluster.storage_version() if _minor(member.version) >= (3, 6) else "")
