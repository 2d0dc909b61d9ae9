"""etcd's Auth service (:class:`Auth`): AuthStatus, AuthEnable, AuthDisable, users and their roles, and a login
check, over the client's one :class:`~opsmanager.etcd.transport.Transport` — whose login (the token every call
carries) these calls keep right: enabling or disabling auth drops it, changing the client's own password takes the
new one as its credentials."""

from __future__ import annotations

from typing import TypeVar

from opsmanager.etcd import access, errors, transport
from opsmanager.etcd._pb import rpc_pb2

T = TypeVar("T")


def check_name(value: str, what: str, call: str) -> str:
    """``value`` when it is a non-empty string (else ``ValueError`` naming ``what`` and ``call``)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{call}: {what} must be a non-empty string")
    return value


class Auth:
    """etcd's Auth service over ``transport``; every call goes to the first member that answers, unless it names
    one."""

    def __init__(self, transport_: transport.Transport) -> None:
        self.transport = transport_

    async def _rpc(self, call: str, fn: transport.Call[T], *,
                   endpoint: access.Endpoint | str | None = None, timeout: float | None = None) -> T:
        if endpoint is None:
            resp, _ = await self.transport.on_any(call, fn, timeout=timeout)
        else:
            resp, _ = await self.transport.call(self.transport.endpoint(endpoint), call, fn, timeout=timeout)
        return resp

    async def auth_status(self, *, timeout: float | None = None) -> bool:
        """Is auth enabled? (etcd 3.5+.) etcd checks the caller's user only while auth is on, so a refusal of the
        question itself — :class:`errors.AuthRequired` (no credentials, no certificate CN) or
        :class:`errors.UserNotFound` (no credentials, ``--client-cert-auth`` and a CN that is no user) — answers
        True too."""
        request = rpc_pb2.AuthStatusRequest()

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthStatusResponse:
            return await c.auth.AuthStatus(request, timeout=t)  # type: ignore[no-any-return]

        try:
            resp = await self._rpc("AuthStatus", fn, timeout=timeout)
        except (errors.PermissionDenied, errors.UserNotFound):
            return True
        return bool(resp.enabled)

    async def auth_enable(self, *, timeout: float | None = None) -> None:
        """Enable auth (through consensus, every member). Needs the user ``root`` with the role ``root``
        (:class:`errors.RootUserNotExist`, :class:`errors.RootRoleNotExist`). Enabling it again is a no-op. From
        the next call on this client logs in (with its credentials; without, calls are refused with
        :class:`errors.AuthRequired` unless a client certificate's CN names a user)."""
        request = rpc_pb2.AuthEnableRequest()

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthEnableResponse:
            return await c.auth.AuthEnable(request, timeout=t)  # type: ignore[no-any-return]

        await self._rpc("AuthEnable", fn, timeout=timeout)
        self.transport.login.forget()

    async def auth_disable(self, *, timeout: float | None = None) -> None:
        """Disable auth (needs the root role while it is on). etcd drops every token; calls go without one from
        then on."""
        request = rpc_pb2.AuthDisableRequest()

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthDisableResponse:
            return await c.auth.AuthDisable(request, timeout=t)  # type: ignore[no-any-return]

        await self._rpc("AuthDisable", fn, timeout=timeout)
        self.transport.login.forget()

    async def user_add(self, name: str, password: str, *, timeout: float | None = None) -> None:
        """Create user ``name`` with ``password`` (etcd stores a bcrypt hash). :class:`errors.UserExists` when there
        is one already — catch it to create idempotently (the password is then not changed)."""
        check_name(name, "name", "user_add")
        request = rpc_pb2.AuthUserAddRequest(name=name, password=password)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthUserAddResponse:
            return await c.auth.UserAdd(request, timeout=t)  # type: ignore[no-any-return]

        await self._rpc(f"UserAdd {name!r}", fn, timeout=timeout)

    async def user_get(self, name: str, *, timeout: float | None = None) -> tuple[str, ...]:
        """The roles of user ``name`` (sorted, as etcd keeps them); :class:`errors.UserNotFound`."""
        check_name(name, "name", "user_get")
        request = rpc_pb2.AuthUserGetRequest(name=name)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthUserGetResponse:
            return await c.auth.UserGet(request, timeout=t)  # type: ignore[no-any-return]

        resp = await self._rpc(f"UserGet {name!r}", fn, timeout=timeout)
        return tuple(resp.roles)

    async def user_grant_role(self, name: str, role: str, *, timeout: float | None = None) -> None:
        """Grant ``role`` to user ``name`` (granting it again is a no-op; the role ``root`` always exists).
        :class:`errors.UserNotFound`, :class:`errors.RoleNotFound`."""
        check_name(name, "name", "user_grant_role")
        check_name(role, "role", "user_grant_role")
        request = rpc_pb2.AuthUserGrantRoleRequest(user=name, role=role)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthUserGrantRoleResponse:
            return await c.auth.UserGrantRole(request, timeout=t)  # type: ignore[no-any-return]

        await self._rpc(f"UserGrantRole {name!r} {role!r}", fn, timeout=timeout)

    async def user_change_password(self, name: str, password: str, *, timeout: float | None = None) -> None:
        """Set user ``name``'s password. etcd drops that user's tokens at once: every client logged in as ``name``
        must log in again, and only the new password works. When ``name`` is this client's own user, the client
        takes the new password as its credentials (else its very next call would fail to log in).
        :class:`errors.UserNotFound`."""
        check_name(name, "name", "user_change_password")
        request = rpc_pb2.AuthUserChangePasswordRequest(name=name, password=password)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthUserChangePasswordResponse:
            return await c.auth.UserChangePassword(request, timeout=t)  # type: ignore[no-any-return]

        await self._rpc(f"UserChangePassword {name!r}", fn, timeout=timeout)
        own = self.transport.login.credentials
        if own is not None and own.username == name:
            self.transport.set_credentials(access.Credentials(name, password))

    async def check_login(self, endpoint: access.Endpoint | str | None, username: str, password: str, *,
                          timeout: float | None = None) -> bool:
        """Would etcd accept ``username`` / ``password``? A fresh Authenticate (on ``endpoint``, else on any member)
        whose token is thrown away: this client's own login is not touched. False when etcd refuses the pair
        (:class:`errors.AuthFailed`); :class:`errors.AuthNotEnabled` when auth is off (there is no login to check)."""
        check_name(username, "username", "check_login")
        request = rpc_pb2.AuthenticateRequest(name=username, password=password)

        async def fn(c: transport.Conn, t: float) -> rpc_pb2.AuthenticateResponse:
            return await c.auth.Authenticate(request, timeout=t)  # type: ignore[no-any-return]

        try:
            await self._rpc(f"Authenticate as {username!r}", fn, endpoint=endpoint, timeout=timeout)
        except errors.AuthFailed:
            return False
        return True
