"""Probes that are not gRPC: the certificate a port serves right now, and etcd's plain-HTTP ``/health``.

``served_certificate`` answers "which certificate does this member hand out *now*?" with a fresh TLS handshake —
etcd re-reads its leaf cert/key on every handshake (client and peer ports), so this is how the operator proves a
rotated leaf is live without restarting anything, and how it spots a member still serving the old one. It does
not verify the chain (it only reads it), which also lets it look at a member whose CA the operator no longer
trusts. Peer ports under mTLS demand a client certificate: pass ``identity`` and it is presented.

``http_health`` reads ``GET /health`` on the metrics URL (``--listen-metrics-urls``, plain HTTP whatever the client
TLS mode — the endpoint kubelet probes use), so health keeps working while the client port changes scheme.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import ssl
import tempfile
import time

import aiohttp

from opsmanager import pki
from opsmanager.etcd import access, errors


def client_context(identity: access.TLSIdentity | None, *, verify: bool = False) -> ssl.SSLContext:
    """A TLS client context presenting ``identity``'s certificate (when it has one). ``verify``: the server must
    present a certificate ``identity``'s CA bundle signed, for the host name dialled (or the SNI given); without it
    nothing is verified (a probe reads the certificate and judges trust itself)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify and identity is not None:
        ctx.load_verify_locations(cadata=identity.ca_pem.decode())
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if identity is not None and identity.cert_pem is not None and identity.key_pem is not None:
        # ssl can only load a key from a file: a private temp dir, removed before the handshake starts.
        with tempfile.TemporaryDirectory(prefix="opsm-tls-") as tmp:
            os.chmod(tmp, 0o700)
            cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            with open(cert, "wb") as f:
                f.write(identity.cert_pem)
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(identity.key_pem)
            ctx.load_cert_chain(cert, key)
    return ctx


def _first_certificate(stream: bytes) -> bytes | None:
    """The first certificate of the TLS 1.2 ``Certificate`` handshake message in ``stream`` (raw records read from
    the server); None while more bytes are needed; ``b""`` when the stream cannot hold one (not TLS, an alert)."""
    handshake = b""
    at = 0
    while at + 5 <= len(stream):
        kind, length = stream[at], int.from_bytes(stream[at + 3:at + 5], "big")
        if at + 5 + length > len(stream):
            break
        if kind != 22:  # anything but a handshake record before the certificate: an alert, or not TLS
            return b""
        handshake += stream[at + 5:at + 5 + length]
        at += 5 + length
    pos = 0
    while pos + 4 <= len(handshake):
        msg, length = handshake[pos], int.from_bytes(handshake[pos + 1:pos + 4], "big")
        if pos + 4 + length > len(handshake):
            return None
        if msg == 11:  # Certificate: certificate_list<3>, then each certificate<3>
            body = handshake[pos + 4:pos + 4 + length]
            first = int.from_bytes(body[3:6], "big") if len(body) >= 6 else 0
            return body[6:6 + first] if first and len(body) >= 6 + first else b""
        pos += 4 + length
    return None


async def _certificate_in_the_clear(host: str, port: int, server_name: str | None, *, timeout: float) -> bytes | None:
    """The leaf a TLS 1.2 server sends in its first flight, before it asks for (and judges) a client certificate:
    read from the raw records, nothing sent but a ClientHello, nothing verified. For rescue: when leaves
    have expired, the member refuses our (equally expired) client certificate, yet what it serves must be read."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name or None)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(outgoing.read())
                await writer.drain()
                stream = b""
                while len(stream) < 1 << 18:
                    data = await reader.read(1 << 16)
                    if not data:
                        return None
                    stream += data
                    found = _first_certificate(stream)
                    if found is not None:
                        return found or None
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return None
    return None


async def served_certificate(
    host: str,
    port: int,
    server_name: str | None = None,
    *,
    identity: access.TLSIdentity | None = None,
    timeout: float = 3.0,
) -> pki.CertInfo:
    """The leaf certificate ``host:port`` serves on a new TLS connection (serial, fingerprint, notAfter, issuer...).

    ``server_name`` is sent as SNI (etcd serves the same certificate either way); ``identity``'s client certificate is
    presented when it has one (peer ports under mTLS). Raises :class:`errors.MemberUnreachable` when nothing accepts
    the connection and :class:`errors.TLSHandshakeFailed` when the handshake fails before a certificate arrives.
    """
    where = f"{host}:{port}"
    ctx = client_context(identity)
    loop = asyncio.get_running_loop()
    started = loop.time()
    # TCP first, TLS second: "nothing listens" (unreachable) and "something listens but the TLS handshake fails"
    # (wrong scheme, certificate refused) are different findings.
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        raise errors.MemberUnreachable(f"served_certificate on {where}: cannot connect ({exc!r})",
                                       endpoint=where) from exc
    try:
        remaining = max(0.05, timeout - (loop.time() - started))
        async with asyncio.timeout(remaining):
            await writer.start_tls(ctx, server_hostname=server_name or None, ssl_handshake_timeout=remaining)
    except (ssl.SSLError, OSError, TimeoutError) as exc:
        writer.close()
        # The handshake was refused (our client certificate expired, or the member's peer check failed) — but a
        # TLS 1.2 server sends its certificate in the clear before it looks at ours: read it there (read-only).
        remaining = max(0.05, timeout - (loop.time() - started))
        if isinstance(exc, ssl.SSLError) and (der := await _certificate_in_the_clear(host, port, server_name,
                                                                                     timeout=remaining)):
            return pki.cert_info(der)
        raise errors.TLSHandshakeFailed(f"served_certificate on {where}: TLS handshake failed ({exc!r}); "
                                        "is the port serving TLS, and does it accept our client certificate?",
                                        endpoint=where) from exc
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    finally:
        writer.close()
        try:
            async with asyncio.timeout(1.0):
                await writer.wait_closed()
        except (OSError, TimeoutError, ssl.SSLError):
            pass  # the peer port may reset us after checking our certificate's SAN; we already have its cert
    del reader
    if not der:
        raise errors.TLSHandshakeFailed(f"served_certificate on {where}: the server sent no certificate", endpoint=where)
    return pki.cert_info(der)


@dataclasses.dataclass(frozen=True)
class Health:
    """One member's health as etcd judges it (``/health``) or as we reproduce it over gRPC.

    ``reason`` is etcd's (``RAFT NO LEADER``, ``ALARM NOSPACE``, ``RANGE ERROR:...``) or ours (unreachable, timeout);
    ``no_quorum`` is True when the member answers but consensus does not (no leader, linearizable read stuck);
    ``via`` is ``http-metrics``, ``grpc-https`` or ``grpc-http``.
    """

    endpoint: str
    healthy: bool
    reason: str = ""
    no_quorum: bool = False
    reachable: bool = True
    via: str = ""
    took: float = 0.0


_NO_QUORUM_REASONS = ("RAFT NO LEADER", "NO LEADER", "TIMED OUT", "LEADER CHANGED", "DEADLINE")


def reason_means_no_quorum(reason: str) -> bool:
    """Whether an etcd /health reason (or our own) says consensus is not working."""
    up = reason.upper()
    return any(marker in up for marker in _NO_QUORUM_REASONS)


async def http_health(session: aiohttp.ClientSession, endpoint: access.Endpoint, *, timeout: float) -> Health:
    """``GET <metrics_url>/health``. Raises :class:`errors.MemberUnreachable` when the port does not accept the
    connection and :class:`errors.RequestTimeout` when it accepts but does not answer in time (etcd's handler waits
    for a linearizable read, which hangs without quorum)."""
    started = time.monotonic()
    status, body = await _get_on_metrics_port(session, endpoint, "health", timeout=timeout)
    took = time.monotonic() - started
    try:
        doc = json.loads(body)
    except ValueError:
        doc = {}
    healthy = status == 200 and str(doc.get("health", "")).lower() == "true"
    reason = "" if healthy else (str(doc.get("reason") or "") or f"HTTP {status}: {body[:200]}")
    return Health(endpoint.label, healthy, reason, no_quorum=not healthy and reason_means_no_quorum(reason),
                  via="http-metrics", took=took)


async def http_metrics(session: aiohttp.ClientSession, endpoint: access.Endpoint, *, timeout: float) -> str:
    """The Prometheus exposition of ``GET <metrics_url>/metrics``."""
    _status, body = await _get_on_metrics_port(session, endpoint, "metrics", timeout=timeout)
    return body


def metric_value(metrics: str, name: str) -> float | None:
    """The value of an unlabelled series ``name`` in a Prometheus exposition (None when absent)."""
    found = re.search(rf"^{re.escape(name)}\s+(\S+)\s*$", metrics, re.M)
    try:
        return float(found.group(1)) if found else None
    except ValueError:
        return None


async def http_cluster_version(session: aiohttp.ClientSession, endpoint: access.Endpoint, *, timeout: float) -> str:
    """``etcd_cluster_version{cluster_version="3.6"} 1`` from ``GET <metrics_url>/metrics``: the version the
    cluster runs at (etcd's ``Status`` only names the member's own binary). "" when the gauge is absent."""
    _status, body = await _get_on_metrics_port(session, endpoint, "metrics", timeout=timeout)
    return cluster_version_of(body)


async def _get_on_metrics_port(session: aiohttp.ClientSession, endpoint: access.Endpoint, path: str, *,
                               timeout: float) -> tuple[int, str]:
    """``GET <metrics_url>/<path>`` (:func:`_http_get`)."""
    if endpoint.metrics_url is None:
        raise ValueError(f"endpoint {endpoint.name!r} has no metrics_port; /{path} over HTTP needs one")
    return await _http_get(session, endpoint, f"{endpoint.metrics_url}/{path}", f"/{path}", timeout=timeout)


async def _http_get(session: aiohttp.ClientSession, endpoint: access.Endpoint, url: str, what: str, *,
                    timeout: float, tls: ssl.SSLContext | None = None) -> tuple[int, str]:
    """``GET url`` on a member: (HTTP status, body); :class:`errors.MemberUnreachable` when the port does not accept
    the connection (or the handshake fails), :class:`errors.RequestTimeout` when it accepts but does not answer in
    time."""
    try:
        async with session.get(url, ssl=tls if tls is not None else False,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            return resp.status, await resp.text()
    except TimeoutError as exc:
        raise errors.RequestTimeout(f"{what} on {endpoint.label}: {url} gave no answer within {timeout}s",
                                    endpoint=endpoint.label) from exc
    except (aiohttp.ClientError, ssl.SSLError) as exc:
        raise errors.MemberUnreachable(f"{what} on {endpoint.label}: {url} unreachable ({exc})",
                                       endpoint=endpoint.label) from exc


_CLUSTER_VERSION = re.compile(r'^etcd_cluster_version\{cluster_version="([^"]*)"\}\s+1(?:\.0)?\s*$', re.M)


def cluster_version_of(metrics: str) -> str:
    """The cluster version a Prometheus exposition of etcd's metrics names ("" when none is set to 1)."""
    found = _CLUSTER_VERSION.search(metrics)
    return found.group(1) if found else ""


async def debug_cmdline(session: aiohttp.ClientSession, endpoint: access.Endpoint, scheme: str, *,
                        identity: access.TLSIdentity | None, timeout: float) -> tuple[str, ...]:
    """``cmdline`` from ``GET <scheme>://<member>:<client port>/debug/vars``: the flags the member really started
    with. On https the request carries ``identity``'s certificate (etcd asks for one)."""
    tls = client_context(identity) if scheme == "https" else None
    status, body = await _http_get(session, endpoint, f"{endpoint.url(scheme)}/debug/vars", "/debug/vars",
                                   timeout=timeout, tls=tls)
    try:
        cmdline = json.loads(body).get("cmdline") if status == 200 else None
    except ValueError:
        cmdline = None
    if not isinstance(cmdline, list):
        raise errors.EtcdServerError(f"/debug/vars on {endpoint.label}: HTTP {status}, no cmdline",
                                     endpoint=endpoint.label)
    return tuple(str(arg) for arg in cmdline)
