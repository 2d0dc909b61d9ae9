"""The async etcd admin client the operator uses to see and steer a cluster (:class:`EtcdClient`): one
:class:`~opsmanager.etcd.transport.Transport` and a service per etcd gRPC service over it, as etcd's proto divides
them — :attr:`EtcdClient.kv` (:mod:`~opsmanager.etcd.kv`), :attr:`EtcdClient.cluster`
(:mod:`~opsmanager.etcd.cluster`), :attr:`EtcdClient.maintenance` (:mod:`~opsmanager.etcd.maintenance`) and
:attr:`EtcdClient.auth` (:mod:`~opsmanager.etcd.auth`) — plus what spans them: health, the "recovered?" gate after a
restart, the member's flags and the certificate a port serves.

Why our own client (not etcdctl, not etcd3gw): every decision of a leader-aware rolling restart rests on facts
only the v3 API gives — who the leader is (``Status.header.member_id == Status.leader``), how far a member has
applied, whether a linearizable read goes through — and on two calls with sharp edges: MoveLeader must reach the
leader and has no server-side deadline (:meth:`~opsmanager.etcd.maintenance.Maintenance.move_leader`), and **a
restarted member is not "back" when its port opens.** :meth:`EtcdClient.wait_recovered` is the gate: the expected
voter count and no learners, every endpoint healthy, the member's applied index caught up with the leader's commit
index, and a linearizable read through that member.

The client's own calls are those of the engine's seam, :class:`~opsmanager.etcd.admin.EtcdAdmin` (which the tests'
fake implements too): the services' methods it names are the client's attributes (``client.members`` is
``client.cluster.members``). Anything else is asked of its service: ``client.kv.put(...)``,
``client.maintenance.status(...)``.

The transport holds the channels (cached per endpoint, scheme and identity; closed by :meth:`EtcdClient.close` or
``async with``), the TLS identity (swappable: :meth:`EtcdClient.set_tls`), the etcd login (``credentials=`` or
:meth:`EtcdClient.set_credentials`), the endpoint and scheme choice, deadlines and the translation of gRPC errors:
``timeout`` is the budget of one attempt (one endpoint, one scheme); ``deadline`` (absolute ``loop.time()``) caps a
whole call. Every call has a deadline: nothing here can hang. Errors: only :mod:`opsmanager.etcd.errors` types
leave this package.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable

from opsmanager import pki
from opsmanager.etcd import (
    access,
    auth,
    cluster,
    errors,
    kv,
    maintenance,
    probes,
    snapshot,
    tokens,
    transport,
)

DEFAULT_TIMEOUT = transport.DEFAULT_TIMEOUT
HEALTH_KEY = b"health"  # the key etcd's own /health reads; reading it changes nothing

# The value types of the client's own calls (the engine's seam names them ``client.Member`` ...).
MemberStatus = maintenance.MemberStatus
LeaderMove = maintenance.LeaderMove
Alarm = maintenance.Alarm
KVHash = maintenance.KVHash
Member = cluster.Member
Health = probes.Health
SnapshotResult = snapshot.SnapshotResult


@dataclasses.dataclass(frozen=True)
class Recovery:
    """The state in which :meth:`EtcdClient.wait_recovered` let a member pass the gate."""

    member: str
    member_id: int
    leader_id: int
    voters: int
    applied_index: int
    leader_commit_index: int
    seconds: float
    polls: int



class EtcdClient:
    """Admin client over a set of member endpoints. Use ``async with EtcdClient(eps, tls=...) as c:``.

    ``endpoints``: the members to talk to (their ``name`` is how the other calls refer to them).
    ``tls``: trust bundle and client identity for ``https`` schemes; None for plaintext-only endpoints.
    ``timeout``: default per-attempt budget in seconds.
    ``credentials``: the etcd user to act as when the cluster has auth enabled (None: no token is sent).
    ``board``: the token this cluster's other clients got, shared (:mod:`~opsmanager.etcd.pool`).
    """

    def __init__(self, endpoint_list: Iterable[access.Endpoint], *, tls: access.TLSIdentity | None = None,
                 timeout: float = DEFAULT_TIMEOUT, credentials: access.Credentials | None = None,
                 board: tokens.Board | None = None) -> None:
        self.transport = transport.Transport(endpoint_list, tls=tls, timeout=timeout, credentials=credentials,
                                             board=board)
        self.kv = kv.KV(self.transport)
        self.cluster = cluster.Cluster(self.transport)
        self.maintenance = maintenance.Maintenance(self.transport, self.cluster)
        self.auth = auth.Auth(self.transport)
        # The calls of the engine's seam (admin.EtcdAdmin) that one service answers are that service's methods.
        self.statuses = self.maintenance.statuses
        self.move_leader = self.maintenance.move_leader
        self.hash_kv = self.maintenance.hash_kv
        self.alarms = self.maintenance.alarms
        self.set_alarm = self.maintenance.set_alarm
        self.defragment = self.maintenance.defragment
        self.downgrade = self.maintenance.downgrade
        self.snapshot = self.maintenance.snapshot
        self.members = self.cluster.members
        self.member_update = self.cluster.member_update
        self.member_add = self.cluster.member_add
        self.member_remove = self.cluster.member_remove
        self.member_promote = self.cluster.member_promote
        self.compact = self.kv.compact
        self.auth_status = self.auth.auth_status
        self.auth_enable = self.auth.auth_enable
        self.auth_disable = self.auth.auth_disable
        self.user_add = self.auth.user_add
        self.user_get = self.auth.user_get
        self.user_grant_role = self.auth.user_grant_role
        self.user_change_password = self.auth.user_change_password
        self.check_login = self.auth.check_login

    # -- configuration (the transport's) --

    @property
    def timeout(self) -> float:
        """The default per-attempt budget in seconds (a pooled client gets its lessee's)."""
        return self.transport.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self.transport.timeout = value

    @property
    def endpoints(self) -> tuple[access.Endpoint, ...]:
        return self.transport.endpoints

    @property
    def tls(self) -> access.TLSIdentity | None:
        return self.transport.tls

    @property
    def credentials(self) -> access.Credentials | None:
        return self.transport.login.credentials

    @property
    def logins(self) -> int:
        """How many times this client has authenticated (a new token each time)."""
        return self.transport.login.logins

    def set_endpoints(self, endpoint_list: Iterable[access.Endpoint]) -> None:
        """Replace the endpoint set (e.g. after a member was replaced). Channels already open stay cached."""
        self.transport.set_endpoints(endpoint_list)

    def set_tls(self, tls: access.TLSIdentity | None) -> None:
        """Use another trust bundle / client identity from now on (e.g. the new client cert during a rotation).
        Channels of the previous identity stay open (calls in flight finish) until :meth:`close`."""
        self.transport.set_tls(tls)

    def set_credentials(self, credentials: access.Credentials | None) -> None:
        """Act as this etcd user from the next call on (None: send no token). The token of the previous
        credentials is dropped; the next call logs in (lazily, on the channel it uses). Channels are not touched:
        credentials are not part of the TLS identity."""
        self.transport.set_credentials(credentials)

    def forget_login(self) -> None:
        """Drop the token: the next call logs in again. For whoever replaced the members' data (a restore): a token
        of the old cluster would stall every call on the new one to its deadline (see :mod:`~opsmanager.etcd.tokens`)."""
        self.transport.login.forget()

    def endpoint(self, ref: access.Endpoint | str) -> access.Endpoint:
        """The configured endpoint named ``ref`` (an :class:`Endpoint` is returned as is)."""
        return self.transport.endpoint(ref)

    # -- lifecycle --

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel and the HTTP session. The client can be used again afterwards (reconnects)."""
        await self.transport.close()

    # -- the metrics port --

    async def cluster_version(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> str:
        """The cluster version a member has decided (``etcd_cluster_version`` on its plain-HTTP metrics port):
        the lowest minor its members run, or the downgrade target. "" when the member does not report one."""
        return await probes.http_cluster_version(self.transport.session(), self.endpoint(endpoint), timeout=timeout)

    async def quota_bytes(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> int | None:
        """``--quota-backend-bytes`` as the member runs it (``etcd_server_quota_backend_bytes`` on its metrics port;
        etcd's default, 2 GiB, when the flag is 0); None when the member does not report it."""
        metrics = await probes.http_metrics(self.transport.session(), self.endpoint(endpoint), timeout=timeout)
        value = probes.metric_value(metrics, "etcd_server_quota_backend_bytes")
        return int(value) if value is not None else None

    # -- health and recovery --

    async def health(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> probes.Health:
        """Is this member healthy, by etcd's own definition (has a leader, no alarm, a linearizable read completes)?

        Uses ``GET /health`` on the plain-HTTP metrics port when the endpoint has one, else reproduces the same check
        over gRPC (Status + a linearizable Range). Returns a :class:`probes.Health` — never raises for an unhealthy or
        unreachable member — and within ``timeout`` (plus up to 1 s to confirm, by Status, that a member whose
        ``/health`` hung is alive).
        ``no_quorum`` is set when the member answers but consensus does not.
        """
        ep = self.endpoint(endpoint)
        started = time.monotonic()
        if ep.metrics_url is not None:
            try:
                return await probes.http_health(self.transport.session(), ep, timeout=timeout)
            except errors.RequestTimeout as err:
                # The member accepted /health but its linearizable read hung: alive without consensus, if Status
                # confirms it is alive.
                try:
                    st = await self.maintenance.status(ep, timeout=min(1.0, timeout))
                except errors.EtcdError:
                    return probes.Health(ep.label, False, str(err), reachable=False, via="http-metrics",
                                         took=time.monotonic() - started)
                return probes.Health(ep.label, False, f"{err} (member up, leader={st.leader_id:x})", no_quorum=True,
                                     via="http-metrics", took=time.monotonic() - started)
            except errors.MemberUnreachable:
                pass  # no metrics listener (or the member is down): ask over gRPC
        return await self._grpc_health(ep, timeout, started)

    async def _grpc_health(self, ep: access.Endpoint, timeout: float, started: float) -> probes.Health:
        deadline = asyncio.get_running_loop().time() + timeout  # one budget for Status and the read together
        try:
            st = await self.maintenance.status(ep, timeout=timeout, deadline=deadline)
        except errors.EtcdError as err:
            return probes.Health(ep.label, False, f"unreachable: {err}", reachable=False, via="grpc",
                                 took=time.monotonic() - started)
        via = f"grpc-{st.scheme}"
        if st.errors:
            reason = "; ".join(st.errors)
            return probes.Health(ep.label, False, reason, no_quorum=probes.reason_means_no_quorum(reason), via=via,
                                 took=time.monotonic() - started)
        if st.leader_id == 0:
            return probes.Health(ep.label, False, "RAFT NO LEADER", no_quorum=True, via=via,
                                 took=time.monotonic() - started)
        try:
            await self.kv.get(HEALTH_KEY, endpoint=ep, scheme=st.scheme, timeout=timeout, deadline=deadline)
        except (errors.NoQuorum, errors.RequestTimeout) as err:
            return probes.Health(ep.label, False, f"linearizable read failed: {err}", no_quorum=True, via=via,
                                 took=time.monotonic() - started)
        except errors.EtcdError as err:
            return probes.Health(ep.label, False, f"linearizable read failed: {err}", via=via,
                                 took=time.monotonic() - started)
        return probes.Health(ep.label, True, via=via, took=time.monotonic() - started)

    async def wait_recovered(self, member: access.Endpoint | str, *, expected_voters: int,
                             timeout: float = 30.0, poll_interval: float = 0.1,
                             check_hash: bool = False) -> Recovery:
        """The gate after ``member`` restarted. Polls until all of these hold, or ``timeout`` seconds pass:

        1. MemberList (linearizable) has ``expected_voters`` voters and no learners;
        2. every endpoint is healthy (:meth:`health`);
        3. the member's applied index has reached the leader's commit index (sampled just before);
        4. a linearizable read through the member succeeds;
        5. with ``check_hash``: every member hashes its store identically at one revision (:meth:`check_consistency`;
           a scan of the store on every member, so off by default). A mismatch raises
           :class:`errors.DataInconsistent` at once — it does not heal by waiting.

        Raises :class:`errors.NoQuorum` when the last blocker was lost quorum, else :class:`errors.NotRecovered`
        with the blocker as ``reason`` — never later than about ``timeout`` (+ one poll's own bound).
        """
        if expected_voters < 1:
            raise ValueError(f"wait_recovered: expected_voters must be >= 1, not {expected_voters}")
        ep = self.endpoint(member)
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout
        blocker: errors.EtcdError = errors.NotRecovered("not checked yet", reason="not checked yet")
        polls = 0
        while True:
            polls += 1
            step = max(0.05, min(self.transport.timeout, deadline - loop.time()))
            try:
                result = await self._recovery_check(ep, expected_voters, step, deadline)
                if check_hash:
                    await self.maintenance.check_consistency(timeout=step, deadline=deadline)
                return dataclasses.replace(result, seconds=loop.time() - started, polls=polls)
            except errors.DataInconsistent:
                raise
            except errors.RequestTimeout as err:
                # A poll cut short by the overall deadline (or by DeadlinePassed) says only that time ran out:
                # it does not replace an earlier, more telling blocker (e.g. the stopped member's health).
                if polls == 1 or (step >= self.transport.timeout and not isinstance(err, errors.DeadlinePassed)):
                    blocker = err
            except errors.EtcdError as err:
                blocker = err
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.sleep(min(poll_interval, remaining))
        msg = f"wait_recovered({ep.name}): not recovered within {timeout}s ({polls} polls); last blocker: {blocker}"
        if isinstance(blocker, errors.NoQuorum):
            raise errors.NoQuorum(msg, endpoint=ep.label) from blocker
        raise errors.NotRecovered(msg, reason=str(blocker), endpoint=ep.label) from blocker

    async def _recovery_check(self, ep: access.Endpoint, expected_voters: int, step: float,
                              deadline: float) -> Recovery:
        members = await self.members(linearizable=True, timeout=step, deadline=deadline)
        voters = [m for m in members if not m.is_learner]
        learners = [m.name or m.id_hex for m in members if m.is_learner]
        if len(voters) != expected_voters or learners:
            raise errors.NotRecovered(
                f"{len(voters)} voters (expected {expected_voters}), learners: {learners or 'none'}",
                reason="membership")
        healths = await asyncio.gather(*(self.health(e, timeout=step) for e in self.transport.endpoints))
        bad = [h for h in healths if not h.healthy]
        if bad:
            detail = "; ".join(f"{h.endpoint}: {h.reason}" for h in bad)
            if any(h.no_quorum for h in bad) and len(bad) > len(healths) // 2:
                raise errors.NoQuorum(f"unhealthy: {detail}")
            raise errors.NotRecovered(f"unhealthy: {detail}", reason="health")
        leader = await self.maintenance.leader(timeout=step)
        mine = await self.maintenance.status(ep, timeout=step, deadline=deadline)
        if mine.raft_applied_index < leader.raft_index:
            raise errors.NotRecovered(
                f"{ep.name} applied index {mine.raft_applied_index} < leader {leader.endpoint.name}'s commit index "
                f"{leader.raft_index}", reason="catching up")
        await self.kv.get(HEALTH_KEY, endpoint=ep, timeout=step, deadline=deadline)
        return Recovery(member=ep.name, member_id=mine.member_id, leader_id=leader.member_id, voters=len(voters),
                        applied_index=mine.raft_applied_index, leader_commit_index=leader.raft_index,
                        seconds=0.0, polls=0)

    # -- certificates --

    async def flags(self, endpoint: access.Endpoint | str, *, timeout: float = 3.0) -> tuple[str, ...]:
        """The command line the member started with: Go's ``expvar`` publishes ``cmdline`` on etcd's ``/debug/vars``
        (the client port; with this client's certificate on a TLS member). The scheme that works first is used."""
        ep = self.endpoint(endpoint)
        failures = []
        for scheme in ep.schemes:
            try:
                return await probes.debug_cmdline(self.transport.session(), ep, scheme, identity=self.transport.tls,
                                                  timeout=timeout)
            except errors.EtcdError as err:
                failures.append(err)
        raise failures[0]

    async def served_certificate(self, endpoint: access.Endpoint | str, *, port: str | int = "client",
                                 timeout: float = 3.0) -> pki.CertInfo:
        """The certificate ``endpoint`` serves now on its client port (``port="client"``), peer port (``"peer"``) or
        any port number, read with a fresh handshake that presents this client's certificate (if any)."""
        ep = self.endpoint(endpoint)
        number = {"client": ep.client_port, "peer": ep.peer_port}.get(port, port) if isinstance(port, str) else port
        if not isinstance(number, int):
            raise ValueError(f"served_certificate: port must be 'client', 'peer' or a number, not {port!r}")
        return await probes.served_certificate(ep.host, number, ep.server_name, identity=self.transport.tls,
                                               timeout=timeout)
