"""RotateAuth in the fast world (the in-process API server and the fake etcd, whose users and tokens behave as
etcd's: a password change drops the user's tokens, a call without a valid login is refused).

We test these aspects: a rotation on a cluster with authentication stages the new password as ``password.next``
before etcd changes it, then the Secret holds it as ``password`` and the old one as ``password.prev`` — and etcd
takes only the new one; ``password.prev`` is dated the delivery bound ahead and the provisioner drops it only after
that date; an operator killed after every step (and right after the status write of each) resumes and
changes the password exactly once; a first RotateAuth on a cluster without authentication turns it on with the
named Secret's password and points ``spec.authSecret`` at it; a named Secret that is missing, has no password or
another user fails at the first step with KubeDB's words and nothing changes; no password is written to the
request's or the Etcd's status.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from opsmanager.api import auth, conditions, constants
from opsmanager.provisioner import applying
from opsmanager.provisioner import auth as provisioner_auth
from tests.ops import world as w

OLD = "old-password-0123456789"


async def with_auth(world: w.World, name: str = "db") -> None:
    await world.etcd(name)
    assert world.cluster is not None
    world.cluster.add_user(auth.USERNAME, OLD, auth.ROOT_ROLE)
    world.cluster.enable_auth()
    await world.kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-auth", "namespace": w.NS},
                             "data": auth.encode({"username": "root", "password": OLD})})
    await world.kube.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, w.NS, name,
                           {"spec": {"authSecret": {"name": f"{name}-auth"}}})


async def secret(world: w.World, name: str) -> dict[str, str]:
    return auth.decode(await world.kube.get("v1", "Secret", w.NS, name))


def logs_in(world: w.World, password: str) -> bool:
    assert world.cluster is not None
    return world.cluster.users[auth.USERNAME].password == password


def assert_no_password(obj: dict[str, Any], *passwords: str) -> None:
    assert all(p not in repr(obj.get("status")) for p in passwords)


async def test_a_rotation_stages_applies_and_moves_the_password(world: w.World) -> None:
    await with_auth(world)
    req = await world.request("rot", "db", constants.OPS_TYPE_ROTATE_AUTH)
    assert req is not None
    done = await world.run("rot")
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    assert w.umbrella(done) == ["Running", "UpdateCredential", "EtcdCredentialApplied", "UpdateDatabase",
                                 "Successful"]
    data = await secret(world, "db-auth")
    new = data[auth.KEY_PASSWORD]
    assert new != OLD and len(new) >= 24 and data[auth.KEY_PREV] == OLD and auth.KEY_NEXT not in data
    assert logs_in(world, new) and not logs_in(world, OLD)
    etcd = await world.get_etcd("db")
    assert etcd["spec"]["authSecret"] == {"name": "db-auth"} and etcd["status"]["authEnabled"] is True
    assert_no_password(done, OLD, new)
    assert_no_password(etcd, OLD, new)
    assert not await world.is_paused("db")


async def drop_pass(world: w.World, db: str = "db") -> list[str]:
    """The provisioner's pass over the auth Secret (what its reconcile runs)."""
    changed: list[str] = []
    await provisioner_auth.ensure_secret(world.kube, applying.parse(await world.get_etcd(db)), changed)
    return changed


async def test_the_previous_password_is_dated_and_dropped_only_after_the_delivery_bound(world: w.World) -> None:
    await with_auth(world)
    await world.request("rot", "db", constants.OPS_TYPE_ROTATE_AUTH)
    before = world.clock()
    done = await world.run("rot")
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    live = await world.kube.get("v1", "Secret", w.NS, "db-auth")
    assert live is not None
    until = conditions.parse_rfc3339(live["metadata"]["annotations"][auth.ANNOTATION_PREV_UNTIL])
    bound = datetime.timedelta(seconds=world.delivery_timeout)
    assert before + bound - datetime.timedelta(seconds=1) <= until <= world.clock() + bound
    assert await drop_pass(world) == []  # within the bound a pod's copy may still be the old Secret: kept
    assert (await secret(world, "db-auth"))[auth.KEY_PREV] == OLD

    # Past the date (the provisioner reads the real clock: the date is moved back instead of the clock forward).
    past = conditions.rfc3339(datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1))
    await world.kube.patch("v1", "Secret", w.NS, "db-auth",
                           {"metadata": {"annotations": {auth.ANNOTATION_PREV_UNTIL: past}}})
    assert await drop_pass(world) == ["Secret db-auth (the password before the last rotation dropped)"]
    live = await world.kube.get("v1", "Secret", w.NS, "db-auth")
    assert live is not None and auth.ANNOTATION_PREV_UNTIL not in (live["metadata"].get("annotations") or {})
    data = auth.decode(live)
    assert auth.KEY_PREV not in data and logs_in(world, data[auth.KEY_PASSWORD])
    assert await drop_pass(world) == []  # once


async def test_a_previous_password_written_by_hand_is_left_alone(world: w.World) -> None:
    await with_auth(world)
    await world.kube.patch("v1", "Secret", w.NS, "db-auth", {"data": auth.encode({auth.KEY_PREV: "mine"})})
    assert await drop_pass(world) == []
    assert (await secret(world, "db-auth"))[auth.KEY_PREV] == "mine"


@pytest.mark.parametrize("crash_at", ["UpdateCredential", "EtcdCredentialApplied", "UpdateDatabase"])
async def test_killed_after_a_step_it_resumes_and_changes_the_password_once(world: w.World, crash_at: str) -> None:
    await with_auth(world)
    assert world.cluster is not None
    world.crash_points = {f"done {crash_at}"}
    before = world.cluster.auth_revision
    await world.request("rot", "db", constants.OPS_TYPE_ROTATE_AUTH)
    done = await world.run("rot")
    assert world.crashes == [f"done {crash_at}"]
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    data = await secret(world, "db-auth")
    assert logs_in(world, data[auth.KEY_PASSWORD]) and data[auth.KEY_PREV] == OLD
    # one UserChangePassword: the auth store's revision moved by exactly one change
    assert world.cluster.auth_revision == before + 1


async def test_a_first_rotate_auth_turns_authentication_on_with_the_named_secret(world: w.World) -> None:
    await world.etcd("db")
    assert world.cluster is not None and not world.cluster.auth_enabled
    await world.kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mine", "namespace": w.NS},
                             "data": auth.encode({"username": "root", "password": "chosen-by-the-user-000"})})
    await world.request("on", "db", constants.OPS_TYPE_ROTATE_AUTH, authentication={"secretRef": {"name": "mine"}})
    done = await world.run("on")
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    assert world.cluster.auth_enabled and logs_in(world, "chosen-by-the-user-000")
    etcd = await world.get_etcd("db")
    assert etcd["spec"]["authSecret"] == {"name": "mine"} and etcd["status"]["authEnabled"] is True
    assert await secret(world, "mine") == {"username": "root", "password": "chosen-by-the-user-000"}  # untouched


async def test_a_rotation_to_another_secret_leaves_no_old_password_behind(world: w.World) -> None:
    """The old password is kept (dated) only in the Secret the Etcd goes on naming: a Secret it stops naming is
    never looked at again, so it gets the new password alone."""
    await with_auth(world)
    await world.kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mine", "namespace": w.NS},
                             "data": auth.encode({"username": "root", "password": "chosen-by-the-user-000"})})
    await world.request("move", "db", constants.OPS_TYPE_ROTATE_AUTH, authentication={"secretRef": {"name": "mine"}})
    done = await world.run("move")
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    assert (await world.get_etcd("db"))["spec"]["authSecret"] == {"name": "mine"}
    assert logs_in(world, "chosen-by-the-user-000") and not logs_in(world, OLD)
    assert await secret(world, "db-auth") == {"username": "root", "password": "chosen-by-the-user-000"}
    live = await world.kube.get("v1", "Secret", w.NS, "db-auth")
    assert live is not None and auth.ANNOTATION_PREV_UNTIL not in (live["metadata"].get("annotations") or {})
    assert await secret(world, "mine") == {"username": "root", "password": "chosen-by-the-user-000"}


@pytest.mark.parametrize(("data", "message"), [
    (None, "referenced secret ops/mine not found"),
    ({"username": "root"}, 'referenced secret ops/mine must contain a non-empty "password"'),
    ({"username": "admin", "password": "x"}, 'username in referenced secret ops/mine must be "root"'),
])
async def test_a_named_secret_that_cannot_hold_the_password_fails_at_once_and_changes_nothing(
        world: w.World, data: dict[str, str] | None, message: str) -> None:
    await with_auth(world)
    if data is not None:
        await world.kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mine", "namespace": w.NS},
                                 "data": auth.encode(data)})
    await world.request("bad", "db", constants.OPS_TYPE_ROTATE_AUTH, authentication={"secretRef": {"name": "mine"}})
    done = await world.run("bad")
    assert done["status"]["phase"] == constants.PHASE_FAILED
    failed = next(c for c in done["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    assert message in failed["message"], failed["message"]
    assert logs_in(world, OLD) and await secret(world, "db-auth") == {"username": "root", "password": OLD}
    assert not await world.is_paused("db")
