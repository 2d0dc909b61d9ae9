"""The in-memory etcd's auth and snapshots (:mod:`tests.fakes.etcd`) answer as the real client does against
etcd 3.5/3.6 (tests/etcd/test_auth_live.py checks those answers on real members).

We test these aspects: AuthEnable needs ``root`` with the role ``root`` (``RootUserNotExist``,
``RootRoleNotExist``); with auth on, an admin without credentials is refused with ``AuthRequired`` (health, a plain
HTTP probe, still answers), with a wrong password ``AuthFailed``, as a user without the root role
``PermissionDenied`` on admin calls while Status works; with ``--client-cert-auth`` a CN that is no user may ask
Status but gets ``UserNotFound`` on admin calls, and credentials win over the CN; each admin logs in lazily and again
when its token is gone; a password change drops the user's tokens (the admin holding the old password can no longer
log in, a fresh login with the new one works, the admin that made the change follows); AuthDisable lets everyone in
again; user management raises ``UserExists`` / ``UserNotFound`` / ``RoleNotFound``; a snapshot is a verified file
with the cluster's revision, needs the root role and a running member.
"""

from __future__ import annotations

import hashlib
import pathlib

import pytest

from opsmanager import pki
from opsmanager.etcd import access, errors
from tests.fakes import etcd as fake

NAMES = ["e-0", "e-1", "e-2"]
ROOT = access.Credentials("root", "root-pw")
ENDPOINTS = [access.Endpoint(name=n, host=f"10.0.0.{i + 1}", schemes=("http",)) for i, n in enumerate(NAMES)]


def authed(cluster: fake.FakeCluster) -> fake.FakeCluster:
    cluster.add_user("root", ROOT.password, "root")
    cluster.enable_auth()
    return cluster


async def test_auth_enable_needs_root_with_the_root_role_and_then_refuses_anonymous_calls() -> None:
    cluster = fake.FakeCluster(NAMES)
    async with cluster.admin(ENDPOINTS, None) as a:
        assert await a.auth_status() is False
        with pytest.raises(errors.RootUserNotExist):
            await a.auth_enable()
        await a.user_add("root", ROOT.password)
        with pytest.raises(errors.UserExists):
            await a.user_add("root", "other")
        with pytest.raises(errors.RootRoleNotExist):
            await a.auth_enable()
        await a.user_grant_role("root", "root")
        await a.user_grant_role("root", "root")  # again: no-op
        with pytest.raises(errors.RoleNotFound):
            await a.user_grant_role("root", "writers")
        with pytest.raises(errors.UserNotFound):
            await a.user_grant_role("nobody", "root")
        await a.auth_enable()
        assert cluster.auth_enabled and await a.auth_status() is True
        statuses = await a.statuses()
        assert all(isinstance(s, errors.AuthRequired) for s in statuses.values())
        for call in (a.members(), a.move_leader(cluster.member("e-1").id), a.defragment("e-1"), a.user_get("root"),
                     a.snapshot("e-1", "/nonexistent/x.db", timeout=5)):
            with pytest.raises(errors.AuthRequired):
                await call
        assert (await a.health("e-1")).healthy  # /health is plain HTTP: no user needed


async def test_credentials_log_in_lazily_and_again_when_the_token_is_gone() -> None:
    cluster = authed(fake.FakeCluster(NAMES))
    async with cluster.admin(ENDPOINTS, None, credentials=ROOT) as a:
        assert a.logins == 0
        await a.statuses()
        await a.members()
        await a.move_leader(cluster.member("e-2").id)
        await a.defragment("e-1")
        assert a.logins == 1
        cluster.expire_tokens()
        assert await a.user_get("root") == ("root",)
        assert a.logins == 2
    async with cluster.admin(ENDPOINTS, None, credentials=access.Credentials("root", "wrong")) as bad:
        with pytest.raises(errors.AuthFailed) as caught:
            await bad.members()
    assert "wrong" not in str(caught.value)


async def test_a_user_without_the_root_role_may_ask_status_but_not_steer() -> None:
    cluster = authed(fake.FakeCluster(NAMES))
    cluster.add_user("viewer", "v-pw")
    async with cluster.admin(ENDPOINTS, None, credentials=access.Credentials("viewer", "v-pw")) as a:
        assert all(not isinstance(s, errors.EtcdError) for s in (await a.statuses()).values())
        assert len(await a.members()) == 3
        for call in (a.move_leader(cluster.member("e-1").id), a.defragment("e-1"), a.auth_disable(),
                     a.snapshot("e-1", "/nonexistent/x.db", timeout=5)):
            with pytest.raises(errors.PermissionDenied) as caught:
                await call
            assert type(caught.value) is errors.PermissionDenied


async def test_a_certificate_cn_that_is_no_user_is_refused_and_credentials_win() -> None:
    cluster = authed(fake.FakeCluster(NAMES))
    cluster.client_cert_auth = True
    ca = pki.make_ca("ca")
    leaf = pki.make_leaf(ca, "opsmanager", usages=("client",))
    tls = access.TLSIdentity(ca.cert_pem, leaf.cert_pem, leaf.key_pem)
    async with cluster.admin(ENDPOINTS, tls) as anonymous:
        assert all(not isinstance(s, errors.EtcdError) for s in (await anonymous.statuses()).values())
        with pytest.raises(errors.UserNotFound, match="'opsmanager'"):
            await anonymous.defragment("e-1")
    async with cluster.admin(ENDPOINTS, tls, credentials=ROOT) as a:
        await a.defragment("e-1")


async def test_a_password_change_drops_the_users_tokens() -> None:
    cluster = authed(fake.FakeCluster(NAMES))
    cluster.add_user("alice", "old", "root")
    async with cluster.admin(ENDPOINTS, None, credentials=ROOT) as admin, \
            cluster.admin(ENDPOINTS, None, credentials=access.Credentials("alice", "old")) as alice:
        await alice.members()
        await admin.user_change_password("alice", "new")
        assert await admin.check_login(None, "alice", "old") is False
        assert await admin.check_login("e-0", "alice", "new") is True
        with pytest.raises(errors.AuthFailed):
            await alice.members()  # its token was dropped; the old password no longer logs in
        alice.set_credentials(access.Credentials("alice", "old", alternates=("new",)))  # a change in flight
        await alice.members()
        await alice.user_change_password("alice", "newer")  # its own: it follows
        assert alice.credentials == access.Credentials("alice", "newer")
        await alice.members()
        assert admin.logins == 1  # check_login did not touch the admin's own login


async def test_auth_disable_lets_everyone_in_and_check_login_needs_auth_on() -> None:
    cluster = authed(fake.FakeCluster(NAMES))
    async with cluster.admin(ENDPOINTS, None, credentials=ROOT) as a, cluster.admin(ENDPOINTS, None) as anonymous:
        await a.auth_disable()
        assert cluster.tokens == {} and await anonymous.auth_status() is False
        await anonymous.defragment("e-1")
        await a.members()
        with pytest.raises(errors.AuthNotEnabled):
            await a.check_login(None, "root", ROOT.password)


async def test_snapshot_is_a_verified_file_with_the_clusters_revision(tmp_path: pathlib.Path) -> None:
    cluster = authed(fake.FakeCluster(NAMES))
    cluster.member("e-1").version = "3.6.16"
    cluster.write(5)
    async with cluster.admin(ENDPOINTS, None, credentials=ROOT) as a:
        result = await a.snapshot("e-1", tmp_path / "s.db", timeout=5)
        data = result.path.read_bytes()
        assert hashlib.sha256(data[:-32]).digest() == data[-32:]
        assert (result.size, result.sha256_hex) == (len(data), hashlib.sha256(data).hexdigest())
        assert (result.revision, result.member_id) == (cluster.raft_index, cluster.member("e-1").id)
        assert result.version == cluster.storage_version()
        assert (await a.snapshot("e-0", tmp_path / "t.db", timeout=5)).version == ""  # a 3.5 member names none
        cluster.stop("e-2")
        with pytest.raises(errors.MemberUnreachable):
            await a.snapshot("e-2", tmp_path / "u.db", timeout=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db", "t.db"]
    assert cluster.calls[-2:] == ["snapshot e-1", "snapshot e-0"]
