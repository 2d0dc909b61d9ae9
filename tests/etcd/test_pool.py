"""The etcd client pool: one client per (Etcd, identity, user), reused across leases, told the current addresses,
closed when the Etcd goes. Channels are made lazily (gRPC connects on the first call), so no etcd is needed to see
which channels a client holds."""

from __future__ import annotations

import asyncio
import threading

from opsmanager import pki
from opsmanager.etcd import access, pool


def ep(name: str, host: str) -> access.Endpoint:
    return access.Endpoint(name=name, host=host, schemes=("http",))


def identity(ca: pki.KeyPair) -> access.TLSIdentity:
    return access.TLSIdentity(ca_pem=ca.cert_pem)


async def test_a_lease_reuses_the_client_and_its_channels() -> None:
    p = pool.ClientPool()
    first = await p.lease("ns", "db", [ep("db-0", "10.0.0.1"), ep("db-1", "10.0.0.2")], None, timeout=2.0,
                          user="engine")
    first.transport.conn(first.endpoint("db-0"), "http")
    again = await p.lease("ns", "db", [ep("db-0", "10.0.0.1"), ep("db-1", "10.0.0.2")], None, timeout=3.0,
                          user="engine")
    assert again is first and p.opened == 1 and again.timeout == 3.0
    assert len(first.transport._conns) == 1, "the channel of the first lease is still open"
    async with again as c:  # a with-block does not close a pooled client
        assert c is first
    assert len(first.transport._conns) == 1
    await p.close()
    assert len(p) == 0 and first.transport._conns == {}


async def test_a_new_address_closes_the_channel_of_the_old_one() -> None:
    p = pool.ClientPool()
    c = await p.lease("ns", "db", [ep("db-0", "10.0.0.1")], None, timeout=2.0, user="engine")
    c.transport.conn(c.endpoint("db-0"), "http")
    c = await p.lease("ns", "db", [ep("db-0", "10.0.0.9")], None, timeout=2.0, user="engine")  # the pod was recreated
    assert c.transport._conns == {}
    assert c.endpoint("db-0").host == "10.0.0.9"
    await p.close()


async def test_identity_user_and_etcd_each_have_their_own_client() -> None:
    p = pool.ClientPool()
    ca_a, ca_b = pki.make_ca("a"), pki.make_ca("b")
    eps = [ep("db-0", "10.0.0.1")]
    clients = {
        await p.lease("ns", "db", eps, identity(ca_a), timeout=2.0, user="engine"),
        await p.lease("ns", "db", eps, identity(ca_b), timeout=2.0, user="engine"),
        await p.lease("ns", "db", eps, identity(ca_a), timeout=2.0, user="status"),
        await p.lease("ns", "other", eps, identity(ca_a), timeout=2.0, user="engine"),
    }
    assert len(clients) == 4 and p.opened == 4
    await p.forget("ns", "db")
    assert len(p) == 1
    await p.close()


async def test_idle_clients_are_closed() -> None:
    p = pool.ClientPool(idle_close=0.0)
    old = await p.lease("ns", "db", [ep("db-0", "10.0.0.1")], None, timeout=2.0, user="engine")
    old.transport.conn(old.endpoint("db-0"), "http")
    await p.lease("ns", "db2", [ep("db2-0", "10.0.0.2")], None, timeout=2.0, user="engine")
    assert old.transport._conns == {}, "the idle client of db was closed when another was leased"
    await p.close()


def test_a_lease_from_another_event_loop_starts_afresh() -> None:
    p = pool.ClientPool()
    made = []

    def in_a_loop_of_its_own() -> None:
        async def lease() -> None:
            made.append(await p.lease("ns", "db", [ep("db-0", "10.0.0.1")], None, timeout=2.0, user="engine"))
        asyncio.run(lease())

    for _ in range(2):
        thread = threading.Thread(target=in_a_loop_of_its_own)
        thread.start()
        thread.join()
    assert made[0] is not made[1] and p.opened == 2


async def test_the_clients_of_one_etcd_share_a_board_and_forget_their_logins_together() -> None:
    """The engine's and the status pass's clients of one Etcd share the token board (another Etcd has its own);
    forget_logins — after a restore replaced the members' data — clears every token of that Etcd and its board."""
    p = pool.ClientPool()
    engine = await p.lease("ns", "db", [ep("db-0", "10.0.0.1")], None, timeout=2.0, user="engine")
    status = await p.lease("ns", "db", [ep("db-0", "10.0.0.1")], None, timeout=2.0, user="status")
    other = await p.lease("ns", "other", [ep("other-0", "10.0.0.9")], None, timeout=2.0, user="status")
    assert engine.transport.login.board is status.transport.login.board is not None
    assert other.transport.login.board is not engine.transport.login.board
    engine.transport.login.board.post("root", "t.9")
    other.transport.login.board.post("root", "u.3")  # type: ignore[union-attr]
    for c, token in ((engine, "t.9"), (status, "t.9"), (other, "u.3")):
        c.transport.login.token = token
    p.forget_logins("ns", "db")
    assert engine.transport.login.token is None and status.transport.login.token is None
    assert engine.transport.login.board.token is None
    assert other.transport.login.token == "u.3"
    assert other.transport.login.board.token == "u.3"  # type: ignore[union-attr]
    await p.close()
