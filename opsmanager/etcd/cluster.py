"""etcd's Cluster service (:class:`Cluster`): MemberList, MemberAdd, MemberRemove, MemberUpdate, MemberPromote, over
the client's one :class:`~opsmanager.etcd.transport.Transport`; and finding a member's endpoint from MemberList."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from opsmanager.etcd import access, errors, transport
from opsmanager.etcd._pb import rpc_pb2


@dataclasses.dataclass(frozen=True)
class Member:
    """One entry of MemberList."""

    id: int
    name: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_learner: bool

    @property
    def id_hex(self) -> str:
        return format(self.id, "x")

    @classmethod
    def from_pb(cls, m: rpc_pb2.Member) -> Member:
        return cls(id=m.ID, name=m.name, peer_urls=tuple(m.peerURLs), client_urls=tuple(m.clientURLs),
                   is_learner=m.isLearner)


def check_peer_urls(peer_urls: Sequence[str], call: str) -> list[str]:
    """``peer_urls`` as a list, each ``http(s)://host:port`` (else ``ValueError`` naming ``call``)."""
    if isinstance(peer_urls, str) or not peer_urls:
        raise ValueError(f"{call}: peer_urls must be a non-empty list like ['https://10.0.0.5:2380']")
    out = []
    for url in peer_urls:
        try:
            access.Endpoint.from_url("peer", url)
        except ValueError:
            raise ValueError(f"{call}: peer_urls entry {url!r} is not http(s)://host:port") from None
        out.append(url)
    return out


class Cluster:
    """etcd's Cluster service over ``transport``; every call goes to the first member that answers."""

    def __init__(self, transport_: transport.Transport) -> None:
        self.transport = transport_

    async def members(self, *, linearizable: bool = True, timeout: float | None = None,
                      deadline: float | None = None) -> list[Member]:
        """MemberList from any voter. ``linearizable`` (etcd 3.5+) reads it through consensus, so it fails with
        :class:`errors.NoQuorum` rather than return a stale list when the cluster has no quorum."""
        request = rpc_pb2.MemberListRequest(linearizable=linearizable)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.MemberListResponse:
            return await c.cluster.MemberList(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("MemberList", fn, timeout=timeout, deadline=deadline)
        return [Member.from_pb(m) for m in resp.members]

    async def member_update(self, member_id: int, peer_urls: Sequence[str], *,
                            timeout: float | None = None) -> list[Member]:
        """Set a member's advertised peer URLs (goes through raft; needs quorum). Returns the new member list.
        Other members dial the new URLs from their next connection on; existing peer streams are not cut."""
        urls = check_peer_urls(peer_urls, "member_update")
        request = rpc_pb2.MemberUpdateRequest(ID=member_id, peerURLs=urls)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.MemberUpdateResponse:
            return await c.cluster.MemberUpdate(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("MemberUpdate", fn, timeout=timeout)
        return [Member.from_pb(m) for m in resp.members]

    async def member_add(self, peer_urls: Sequence[str], *, is_learner: bool = False,
                         timeout: float | None = None) -> tuple[Member, list[Member]]:
        """Add a member (optionally as learner); returns (the new member, the member list)."""
        urls = check_peer_urls(peer_urls, "member_add")
        request = rpc_pb2.MemberAddRequest(peerURLs=urls, isLearner=is_learner)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.MemberAddResponse:
            return await c.cluster.MemberAdd(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("MemberAdd", fn, timeout=timeout)
        return Member.from_pb(resp.member), [Member.from_pb(m) for m in resp.members]

    async def member_remove(self, member_id: int, *, timeout: float | None = None) -> list[Member]:
        """Remove a member; returns the member list."""
        request = rpc_pb2.MemberRemoveRequest(ID=member_id)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.MemberRemoveResponse:
            return await c.cluster.MemberRemove(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("MemberRemove", fn, timeout=timeout)
        return [Member.from_pb(m) for m in resp.members]

    async def member_promote(self, member_id: int, *, timeout: float | None = None) -> list[Member]:
        """Make a learner a voter; returns the member list."""
        request = rpc_pb2.MemberPromoteRequest(ID=member_id)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.MemberPromoteResponse:
            return await c.cluster.MemberPromote(request, timeout=t)  # type: ignore[no-any-return]

        resp, _ = await self.transport.on_any("MemberPromote", fn, timeout=timeout)
        return [Member.from_pb(m) for m in resp.members]

    async def discover(self, member_id: int, *, deadline: float | None = None) -> access.Endpoint | None:
        """An endpoint for ``member_id``: a configured one (known from Status) or one built from MemberList."""
        if member_id in self.transport.ids:
            return self.transport.ids[member_id]
        try:
            members = await self.members(linearizable=False, timeout=min(self.transport.timeout, 2.0),
                                         deadline=deadline)
        except errors.EtcdError:
            return None
        for m in members:
            if m.id == member_id and m.client_urls:
                return self._endpoint_of(m)
        return None

    def _endpoint_of(self, m: Member) -> access.Endpoint | None:
        for ep in self.transport.endpoints:  # a configured endpoint under the same name wins (TLS name, ports)
            if ep.name == m.name:
                return ep
        usable = {u.split("://", 1)[0] for u in m.client_urls} & set(access.SCHEMES)
        if self.transport.tls is None:
            usable.discard("https")  # we could not dial it anyway
        if not usable:
            return None
        schemes = sorted(usable, key=lambda s: s != "https")
        first = next(u for u in m.client_urls if u.startswith(f"{schemes[0]}://"))
        return dataclasses.replace(access.Endpoint.from_url(m.name, first, metrics_port=None),
                                   schemes=tuple(schemes))
