"""``EtcdAdmin``: what the ops engine uses of etcd, as a Protocol — the seam between the engine and etcd.

The engine never names :class:`~opsmanager.etcd.client.EtcdClient`; it receives an :data:`AdminFactory` (on the
:class:`~opsmanager.ops.engine.Engine` constructor, handed to every :class:`~opsmanager.ops.context.OpsContext`)
that turns the member endpoints and the operator's TLS identity of one reconcile into an ``EtcdAdmin``. The real
one is :func:`connect` (the gRPC client); tests inject the tests' in-memory ``FakeCluster`` (``tests/fakes/etcd.py``, not shipped)'s factory.

The value types (:class:`~opsmanager.etcd.client.MemberStatus`, ``Member``, ``LeaderMove``, ``Recovery``) and
the error hierarchy (:mod:`opsmanager.etcd.errors`) are shared by every implementation: a fake must raise the
same typed errors the real client raises, or the engine's error handling is not what the tests exercise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Protocol, Self

from opsmanager import pki
from opsmanager.etcd import access, client, errors, probes


class EtcdAdmin(Protocol):
    """The calls the ops engine makes on etcd during one reconcile (an async context manager)."""

    @property
    def endpoints(self) -> tuple[access.Endpoint, ...]:
        """The member endpoints this admin talks to (one per member pod with an address)."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def statuses(self, *, timeout: float | None = None, deadline: float | None = None,
                       extra: Sequence[access.Endpoint] = ()) -> dict[str, client.MemberStatus | errors.EtcdError]:
        """Status of every endpoint; an endpoint that failed maps to its error."""
        ...

    async def health(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> probes.Health:
        """etcd's own health of one member; never raises for an unhealthy or unreachable member."""
        ...

    async def members(self, *, linearizable: bool = True, timeout: float | None = None,
                      deadline: float | None = None) -> list[client.Member]:
        """MemberList (raises :class:`errors.NoQuorum` rather than return a stale list)."""
        ...

    async def member_update(self, member_id: int, peer_urls: Sequence[str], *,
                            timeout: float | None = None) -> list[client.Member]:
        """Set a member's advertised peer URLs."""
        ...

    async def member_add(self, peer_urls: Sequence[str], *, is_learner: bool = False,
                         timeout: float | None = None) -> tuple[client.Member, list[client.Member]]:
        """Add a member (as a learner: it does not vote until promoted); the new member and the member list."""
        ...

    async def member_promote(self, member_id: int, *, timeout: float | None = None) -> list[client.Member]:
        """Make a learner a voter; :class:`errors.LearnerNotReady` until it has caught up with the leader."""
        ...

    async def member_remove(self, member_id: int, *, timeout: float | None = None) -> list[client.Member]:
        """Remove a member from the cluster (it stops itself once it learns of it)."""
        ...

    async def move_leader(self, target_id: int, *, via: access.Endpoint | str | None = None,
                          timeout: float = 5.0, agree_timeout: float = 2.0) -> client.LeaderMove:
        """Make ``target_id`` the leader; :class:`errors.BadLeaderTransferee` for a non-voter,
        :class:`errors.LeaderTransferTimeout` when it does not happen in time."""
        ...

    async def defragment(self, endpoint: access.Endpoint | str, *, timeout: float | None = None) -> None:
        """Defragment one member's backend (it answers nothing else meanwhile)."""
        ...

    async def hash_kv(self, endpoint: access.Endpoint | str, *, revision: int = 0, timeout: float | None = None,
                      deadline: float | None = None) -> client.KVHash:
        """HashKV of one member at ``revision`` (0: its current one); :class:`errors.Compacted` below the
        compaction."""
        ...

    async def alarms(self, *, timeout: float | None = None) -> list[client.Alarm]:
        """Every member's raised alarms."""
        ...

    async def set_alarm(self, member_id: int, alarm: str, *, raised: bool,
                        timeout: float | None = None) -> list[client.Alarm]:
        """Raise or disarm ``alarm`` on a member; the alarms the request changed."""
        ...

    async def compact(self, revision: int, *, physical: bool = True, timeout: float | None = None) -> int:
        """Compact the history below ``revision`` (through consensus; ``physical``: applied by the backend before
        the answer); :class:`errors.Compacted` when it is at or below the last compaction."""
        ...

    async def downgrade(self, action: str, version: str, *, timeout: float | None = None) -> str:
        """etcd's downgrade protocol (``VALIDATE``, ``ENABLE``, ``CANCEL``); the cluster version it answers with."""
        ...

    async def cluster_version(self, endpoint: access.Endpoint | str, *, timeout: float = 2.0) -> str:
        """The cluster version ``endpoint`` reports ("" when none)."""
        ...

    async def flags(self, endpoint: access.Endpoint | str, *, timeout: float = 3.0) -> tuple[str, ...]:
        """The command line the member started with (``expvar``'s ``cmdline`` on its ``/debug/vars``)."""
        ...

    async def wait_recovered(self, member: access.Endpoint | str, *, expected_voters: int,
                             timeout: float = 30.0, poll_interval: float = 0.1,
                             check_hash: bool = False) -> client.Recovery:
        """The gate after ``member`` restarted (:class:`errors.NotRecovered` / :class:`errors.NoQuorum`)."""
        ...

    async def served_certificate(self, endpoint: access.Endpoint | str, *, port: str | int = "client",
                                 timeout: float = 3.0) -> pki.CertInfo:
        """The certificate ``endpoint`` serves now on its client or peer port."""
        ...

    # -- auth: with credentials every call acts as that etcd user; without, a cluster with auth enabled refuses
    # -- calls with errors.AuthRequired (or takes the client certificate's CN as the user, --client-cert-auth)

    @property
    def credentials(self) -> access.Credentials | None:
        """The etcd user this admin acts as (None: none)."""
        ...

    def set_credentials(self, credentials: access.Credentials | None) -> None:
        """Act as this user from the next call on (logging in lazily)."""
        ...

    async def auth_status(self, *, timeout: float | None = None) -> bool:
        """Is auth enabled?"""
        ...

    async def auth_enable(self, *, timeout: float | None = None) -> None:
        """Enable auth; :class:`errors.RootUserNotExist` / :class:`errors.RootRoleNotExist` until ``root`` exists
        with the role ``root``."""
        ...

    async def auth_disable(self, *, timeout: float | None = None) -> None:
        """Disable auth (every token is dropped)."""
        ...

    async def user_add(self, name: str, password: str, *, timeout: float | None = None) -> None:
        """Create a user; :class:`errors.UserExists` when it exists."""
        ...

    async def user_get(self, name: str, *, timeout: float | None = None) -> tuple[str, ...]:
        """A user's roles; :class:`errors.UserNotFound`."""
        ...

    async def user_grant_role(self, name: str, role: str, *, timeout: float | None = None) -> None:
        """Grant a role (again: no-op); :class:`errors.UserNotFound`, :class:`errors.RoleNotFound`."""
        ...

    async def user_change_password(self, name: str, password: str, *, timeout: float | None = None) -> None:
        """Change a password: the user's tokens are dropped, only the new password logs in (this admin's own
        credentials follow when ``name`` is its user)."""
        ...

    async def check_login(self, endpoint: access.Endpoint | str | None, username: str, password: str, *,
                          timeout: float | None = None) -> bool:
        """Would etcd accept this user and password (a login of its own; this admin's is untouched)? False on
        :class:`errors.AuthFailed`; :class:`errors.AuthNotEnabled` while auth is off."""
        ...

    async def snapshot(self, endpoint: access.Endpoint | str, dest_path: str | os.PathLike[str], *,
                       timeout: float) -> client.SnapshotResult:
        """Save one member's backend to ``dest_path`` (verified against etcd's sha256 trailer, renamed into place
        only when complete); :class:`errors.SnapshotFailed`."""
        ...


TIMEOUT = 2.0
"""Seconds per attempt of the engine's etcd calls."""

AdminFactory = Callable[[Sequence[access.Endpoint], access.TLSIdentity | None], EtcdAdmin]
"""Builds the admin of one reconcile from the member endpoints and the operator's identity (None: plaintext). Both
factories here (:func:`connect`, ``FakeCluster.admin``) also take ``credentials=`` (keyword); an admin without them
gets its user by :meth:`EtcdAdmin.set_credentials`."""


def connect(endpoints: Sequence[access.Endpoint], tls: access.TLSIdentity | None, *,
            credentials: access.Credentials | None = None) -> EtcdAdmin:
    """The real admin: the gRPC :class:`~opsmanager.etcd.client.EtcdClient`, 2 s per attempt, acting as
    ``credentials`` when given.

    No endpoint at all (no member pod has an address yet, e.g. every pod is being recreated) is
    :class:`errors.MemberUnreachable` — transient, so the engine retries within the step's timeout — rather than
    the client's ``ValueError`` for a programming error."""
    if not endpoints:
        raise errors.MemberUnreachable("no etcd member has an address yet (every member pod is missing or starting)")
    return client.EtcdClient(endpoints, tls=tls, timeout=TIMEOUT, credentials=credentials)
