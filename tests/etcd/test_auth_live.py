"""Auth and snapshots of the admin client on real etcd 3.5.35 and 3.6.16 (the control plane's builds), each as a
3-member cluster in plain and in mTLS mode (``--client-cert-auth``; the operator's client certificate has the CN
``opsmanager``, which is no etcd user).

We test these aspects, in this order on one cluster per variant: auth is enabled the etcdctl way (UserAdd root,
UserGrantRole root root, AuthEnable; refused with ``RootUserNotExist`` / ``RootRoleNotExist`` before that); with
credentials every call the engine makes still works (Status, MemberList, Put/Get/Range, HashKV and the consistency
check, MoveLeader, Defragment, alarms, the recovery gate); without credentials calls are refused with typed errors
(plain: ``AuthRequired``; mTLS: etcd takes the CN as the user, so Status still answers but data and admin calls
are refused) while the same certificate with credentials works (the token wins); a live password change: a fresh
login with the old password fails, the new one works, a client still holding the old password is refused at its
next call (etcd drops the user's tokens at once) and works again with the new one, while a client that has the
new password staged as an alternate carries on without an error; a restarted member forgets every
token and the client logs in again without the caller noticing; a snapshot of a follower holding about 5 MB, with
auth on, is a file whose sha256 trailer verifies, that ``etcdutl snapshot status`` reads at the same revision and
``etcdutl snapshot restore`` accepts, written without holding the file in memory; a snapshot without credentials or
past its deadline leaves nothing behind; a token naming a raft index far ahead of the cluster's (what a restore
leaves a client holding) stalls every call until the client forgets it; AuthDisable lets everyone in again. Separately (one member each): a token
that outlives ``--auth-token-ttl`` is renewed transparently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import pathlib
import subprocess
import tracemalloc
from collections.abc import AsyncIterator, Iterator

import pytest

from e2e import localcluster
from opsmanager.etcd import access, errors
from opsmanager.etcd import client as etcd_client
from opsmanager_sandbox import realcp

pytestmark = pytest.mark.slow

Cluster = localcluster.LocalEtcdCluster
ROOT = access.Credentials("root", "root-pw-1")
VALUE = b"v" * 4096


@dataclasses.dataclass
class Live:
    cluster: Cluster
    version: str  # "3.5" or "3.6"
    mode: str

    def client(self, credentials: access.Credentials | None = None, **kw: object) -> etcd_client.EtcdClient:
        return etcd_client.EtcdClient(self.cluster.endpoints(), tls=self.cluster.tls_identity(), timeout=10.0,
                                      credentials=credentials, **kw)  # type: ignore[arg-type]

    def tool(self, name: str) -> pathlib.Path:
        return realcp.binary(f"etcd-{self.version}", name)


def _start(version: str, mode: str, base: pathlib.Path, size: int = 3,
           extra: dict[str, str | None] | None = None) -> Cluster:
    cluster = Cluster(size, mode=mode, base_dir=base, extra_args=extra)
    cluster.binary = realcp.binary(f"etcd-{version}", "etcd")
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster


VARIANTS = [(v, m) for v in ("3.5", "3.6") for m in ("plain", "mtls")]


@pytest.fixture(scope="module", params=VARIANTS, ids=[f"etcd-{v}-{m}" for v, m in VARIANTS])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    version, mode = request.param
    cluster = _start(version, mode, tmp_path_factory.mktemp(f"auth-{version}-{mode}-"))
    try:
        yield Live(cluster, version, mode)
    finally:
        cluster.close()


@pytest.fixture
async def root(live: Live) -> AsyncIterator[etcd_client.EtcdClient]:
    async with live.client(ROOT) as c:
        yield c


@pytest.fixture
async def auth_on(root: etcd_client.EtcdClient) -> etcd_client.EtcdClient:
    """``root`` on the cluster with auth enabled (done by the first test; again here, idempotently, so that any
    test can run on its own) and the key /auth/k = v."""
    try:
        await root.user_add("root", ROOT.password)
    except errors.UserExists:
        pass
    await root.user_grant_role("root", "root")
    await root.auth_enable()
    await root.kv.put("/auth/k", "v")
    return root


async def test_enable_auth_then_every_call_works_with_credentials(live: Live, root: etcd_client.EtcdClient) -> None:
    assert await root.auth_status() is False
    with pytest.raises(errors.RootUserNotExist):
        await root.auth_enable()
    await root.user_add("root", ROOT.password)
    with pytest.raises(errors.UserExists):
        await root.user_add("root", "another")
    with pytest.raises(errors.RootRoleNotExist):
        await root.auth_enable()
    with pytest.raises(errors.RoleNotFound):
        await root.user_grant_role("root", "no-such-role")
    await root.user_grant_role("root", "root")
    await root.user_grant_role("root", "root")  # again: a no-op
    assert await root.user_get("root") == ("root",)
    with pytest.raises(errors.UserNotFound):
        await root.user_get("nobody")
    await root.auth_enable()
    await root.auth_enable()  # again: a no-op

    assert await root.auth_status() is True
    views = await root.statuses()
    assert all(isinstance(v, etcd_client.MemberStatus) for v in views.values()), views
    assert len(await root.members()) == 3
    revision = await root.kv.put("/auth/k", "v")
    assert await root.kv.get("/auth/k") == b"v"
    assert await root.kv.range_prefix("/auth/") == ([(b"/auth/k", b"v")], revision)
    for name in views:
        assert (await root.hash_kv(name)).member_id == views[name].member_id  # type: ignore[union-attr]
    await root.maintenance.check_consistency()
    leader = await root.maintenance.leader()
    follower = next(n for n in views if n != leader.endpoint.name)
    move = await root.move_leader(views[follower].member_id)  # type: ignore[union-attr]
    assert move.leader_id == views[follower].member_id  # type: ignore[union-attr]
    await root.defragment(leader.endpoint.name)
    assert await root.alarms() == []
    await root.wait_recovered(leader.endpoint.name, expected_voters=3)
    assert (await root.health(follower)).healthy
    # One login for all of it; a member that had not applied the login yet may ask for one more.
    assert 1 <= root.logins <= 3, root.logins


async def test_calls_without_credentials_are_refused_and_the_token_wins_over_the_certificate(
        live: Live, auth_on: etcd_client.EtcdClient, tmp_path: pathlib.Path) -> None:
    async with live.client() as anonymous:
        assert await anonymous.auth_status() is True
        name = live.cluster.members[1].name
        if live.mode == "plain":
            for call in (anonymous.maintenance.status(name), anonymous.members(), anonymous.kv.put("/auth/x", "y"),
                         anonymous.kv.get("/auth/k"), anonymous.alarms()):
                with pytest.raises(errors.AuthRequired, match="user name is empty"):
                    await call
            admin_refusal: type[errors.EtcdError] = errors.AuthRequired
        else:  # --client-cert-auth: no token, so etcd acts as the certificate's CN ("opsmanager", no user)
            # any authenticated name will do
            assert (await anonymous.maintenance.status(name)).version.startswith(live.version)
            assert len(await anonymous.members()) == 3
            for call in (anonymous.kv.put("/auth/x", "y"), anonymous.kv.get("/auth/k")):
                with pytest.raises(errors.PermissionDenied):  # "cannot find a user for permission check"
                    await call
            admin_refusal = errors.UserNotFound
        for call in (anonymous.hash_kv(name), anonymous.defragment(name), anonymous.user_get("root"),
                     anonymous.auth_disable()):
            with pytest.raises(admin_refusal):
                await call
        with pytest.raises(admin_refusal):
            await anonymous.snapshot(name, tmp_path / "refused.db", timeout=10)
        assert list(tmp_path.iterdir()) == []
    # The same certificate with credentials: every one of those works (the token, not the CN, names the user).
    await auth_on.hash_kv(name)
    await auth_on.defragment(name)
    assert await auth_on.kv.get("/auth/k") == b"v"


async def test_a_password_change_takes_effect_at_once(live: Live, auth_on: etcd_client.EtcdClient) -> None:
    await auth_on.user_add("alice", "old-pw")
    await auth_on.user_grant_role("alice", "root")
    staged = access.Credentials("alice", "old-pw", alternates=("new-pw",))  # the new password staged beside
    async with live.client(access.Credentials("alice", "old-pw")) as alice, live.client(staged) as follower:
        await alice.kv.put("/auth/alice", "1")
        await follower.kv.put("/auth/alice", "1")
        assert alice.logins >= 1 and follower.logins >= 1
        await auth_on.user_change_password("alice", "new-pw")
        await follower.kv.put("/auth/alice", "1")  # dropped token, old password refused, the staged one logs in
        assert await auth_on.check_login(None, "alice", "old-pw") is False
        assert await auth_on.check_login(live.cluster.members[2].name, "alice", "new-pw") is True
        # Observed on 3.5.35 and 3.6.16: etcd drops the user's simple tokens when the password changes, so the
        # client holding the old token does NOT keep working: its next call is "invalid auth token", the client logs
        # in again with the password it has, and that fails.
        with pytest.raises(errors.AuthFailed):
            await alice.kv.put("/auth/alice", "2")
        alice.set_credentials(access.Credentials("alice", "new-pw"))
        await alice.kv.put("/auth/alice", "3")
    assert await auth_on.kv.get("/auth/alice") == b"3"


async def test_a_restarted_member_forgets_tokens_and_the_client_logs_in_again(
        live: Live, auth_on: etcd_client.EtcdClient) -> None:
    await auth_on.statuses()
    before = auth_on.logins
    name = next(n for n, v in (await auth_on.statuses()).items()
                if isinstance(v, etcd_client.MemberStatus) and not v.is_leader)
    await asyncio.to_thread(live.cluster.restart_member, name)
    st = await auth_on.maintenance.status(name)  # "invalid auth token" from the restarted member, a new login, resent
    assert st.endpoint.name == name
    assert auth_on.logins > before
    await auth_on.wait_recovered(name, expected_voters=3)
    views = await auth_on.statuses()
    assert all(isinstance(v, etcd_client.MemberStatus) for v in views.values()), views
    assert await auth_on.kv.get("/auth/k", endpoint=name) == b"v"


async def test_a_token_from_a_longer_raft_log_stalls_until_the_client_forgets_it(
        live: Live, auth_on: etcd_client.EtcdClient) -> None:
    """etcd holds a call whose simple token names a raft index it has not applied until the call's deadline: a
    token the same members issued before a restore from a snapshot, whose new log is shorter. The token here is
    etcd's own with its index pushed far ahead. Calls carrying it time out, whatever the member; once the client
    forgets it (what the Restore step makes every pooled client do), the next call logs in afresh and answers."""
    async with live.client(ROOT) as c:
        await c.kv.get("/auth/k")
        login = c.transport.login  # the client's token, as the interceptors hold it
        assert login.token is not None and c.logins == 1
        prefix, _, index = login.token.rpartition(".")
        stale = login.token = f"{prefix}.{int(index) + 10**9}"
        for ep in c.endpoints:
            with pytest.raises(errors.EtcdError):
                await c.kv.get("/auth/k", endpoint=ep.name, timeout=1.0)
        assert login.token == stale  # a timeout is no reason to log in again (a lost quorum times out too)
        c.forget_login()
        assert await c.kv.get("/auth/k", timeout=5.0) == b"v"
        assert c.logins == 2 and login.token != stale


async def _fill(c: etcd_client.EtcdClient, total: int) -> int:
    revision = 0
    keys = [f"/snap/{i:06d}".encode() for i in range(total // len(VALUE))]
    for start in range(0, len(keys), 32):
        revisions = await asyncio.gather(*(c.kv.put(k, VALUE) for k in keys[start:start + 32]))
        revision = max(revision, *revisions)
    return revision


async def test_snapshot_of_a_follower_with_auth_on(live: Live, auth_on: etcd_client.EtcdClient,
                                                   tmp_path: pathlib.Path) -> None:
    last_put = await _fill(auth_on, 5 * 1024 * 1024)
    leader = await auth_on.maintenance.leader()
    follower = next(m.name for m in live.cluster.members if m.name != leader.endpoint.name)
    follower_id = (await auth_on.maintenance.status(follower)).member_id
    await auth_on.kv.get("/auth/k", endpoint=follower)  # linearizable there: the follower has applied every put
    dest = tmp_path / "follower.db"

    tracemalloc.start()
    try:
        result = await auth_on.snapshot(follower, dest, timeout=60)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    data = dest.read_bytes()
    assert len(data) > 5 * 1024 * 1024
    assert peak < len(data) / 4, f"{peak} bytes traced for a {len(data)}-byte snapshot"
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]  # etcd's trailer
    assert (result.path, result.size, result.sha256_hex) == (dest, len(data), hashlib.sha256(data).hexdigest())
    assert result.member_id == follower_id
    assert result.version == ("3.6.0" if live.version == "3.6" else "")
    assert result.revision >= last_put
    status = json.loads(subprocess.run([str(live.tool("etcdutl")), "snapshot", "status", str(dest), "-w", "json"],
                                       check=True, capture_output=True, text=True, timeout=60).stdout)
    assert status["revision"] == result.revision
    assert status["totalSize"] == len(data) - 32
    restored = tmp_path / "restored"
    subprocess.run([str(live.tool("etcdutl")), "snapshot", "restore", str(dest), "--data-dir", str(restored)],
                   check=True, capture_output=True, text=True, timeout=60)  # checks the sha256 trailer itself
    assert (restored / "member" / "snap" / "db").is_file()


async def test_a_snapshot_past_its_deadline_leaves_nothing(live: Live, auth_on: etcd_client.EtcdClient,
                                                           tmp_path: pathlib.Path) -> None:
    # A deadline inside the stream itself is tested on a stalling stand-in (test_auth_client.py): on loopback a
    # 5 MB snapshot takes well under 0.2 s, too little to aim a deadline into.
    name = live.cluster.members[0].name
    async with live.client(ROOT) as fresh:  # it must log in first: a bcrypt check and a raft round trip
        with pytest.raises(errors.RequestTimeout):  # DeadlinePassed included
            await fresh.snapshot(name, tmp_path / "late.db", timeout=0.01)
        assert list(tmp_path.iterdir()) == []
        assert (await fresh.snapshot(name, tmp_path / "in-time.db", timeout=30)).path.is_file()


async def test_auth_disable_lets_everyone_in_again(live: Live, auth_on: etcd_client.EtcdClient) -> None:
    await auth_on.auth_disable()
    async with live.client() as anonymous:
        assert await anonymous.auth_status() is False
        assert await anonymous.kv.get("/auth/k") == b"v"
        await anonymous.hash_kv(live.cluster.members[0].name)
        with pytest.raises(errors.AuthNotEnabled):
            await anonymous.check_login(None, "root", ROOT.password)
    assert await auth_on.kv.get("/auth/k") == b"v"  # the root client now goes without a token


@pytest.mark.parametrize("version", ["3.5", "3.6"])
async def test_a_token_past_its_ttl_is_renewed_transparently(version: str, tmp_path: pathlib.Path) -> None:
    cluster = await asyncio.to_thread(_start, version, "plain", tmp_path, 1, {"--auth-token-ttl": "1"})
    try:
        async with etcd_client.EtcdClient(cluster.endpoints(), timeout=10.0, credentials=ROOT) as c:
            await c.user_add("root", ROOT.password)
            await c.user_grant_role("root", "root")
            await c.auth_enable()
            await c.kv.put("/ttl", "1")
            assert c.logins == 1
            await asyncio.sleep(3)  # etcd drops a simple token --auth-token-ttl after its last use
            await c.kv.put("/ttl", "2")
            assert c.logins == 2
            assert await c.kv.get("/ttl") == b"2"
    finally:
        cluster.close()
