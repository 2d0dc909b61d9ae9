"""The serials each TLS port must serve, and whether a member serves them — read by a fresh TLS handshake per port,
because etcd re-reads its leaf on every new handshake but keeps serving the old one until the new files are there
(a Secret written is not a certificate served)."""

from __future__ import annotations

from opsmanager import pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import render
from opsmanager.etcd import admin
from opsmanager.etcd import errors as etcd_errors
from opsmanager.tls import material, trust


async def expected_serials(ctx: trust.Target, tls: etcd_api.TLSConfig) -> dict[str, int]:
    """The serial each TLS port must serve (``constants.PORT_ALIAS``): that of the leaf in the port's alias Secret."""
    out = {}
    for port, alias in constants.PORT_ALIAS.items():
        secret = await ctx.secret(render.secret_name(ctx.db_name, tls, alias))
        cert = material.secret_bytes(secret, "tls.crt")
        if cert:
            out[port] = pki.cert_info(cert).serial
    return out


async def served_problem(client: admin.EtcdAdmin, member: str, expected: dict[str, int]) -> str | None:
    """What is wrong with what ``member`` serves (a fresh TLS handshake per port), or None when every port serves
    the serial ``expected`` names for it."""
    for port, serial in expected.items():
        alias = constants.PORT_ALIAS[port]
        try:
            served = await client.served_certificate(member, port=port)
        except etcd_errors.EtcdError as err:
            return f"reading the {alias} certificate {member} serves: {err}"
        if served.serial != serial:
            return f"{member} serves {alias} certificate serial {served.serial_hex}, expected {serial:x}"
    return None
