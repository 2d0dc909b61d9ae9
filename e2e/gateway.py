"""A watch through etcd's JSON gateway, as clients that speak HTTP rather than gRPC watch.

etcd serves a grpc-gateway on its client port: ``POST /v3/watch`` with a ``create_request`` opens a watch, and the
answer is a stream of JSON objects, one per line, each a ``WatchResponse`` (``{"result": {...}}``) or an error
(``{"error": {...}}``); 64-bit numbers come as strings and keys and values in base64. Inside the member the gateway
is a gRPC client of the member itself, so a stopping member holds a gateway watch open exactly as it holds a gRPC
one (its HTTP server waits for the stream too).

:func:`watch` yields the same :class:`opsmanager.etcd.kv.WatchBatch` a gRPC watch yields and raises the same errors
(:class:`~opsmanager.etcd.errors.Compacted` with its revision, a transport error when the stream breaks), so that
:class:`e2e.history.Watcher` reads either way alike. etcd3gw, the tests' other gateway client, runs its watch in a
thread and drops the header, the confirmation and the errors that a watch log must record; hence this reader.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from e2e import writer
from opsmanager.etcd import access, errors, kv, probes

WATCH_PATH = "/v3/watch"
LOGIN_PATH = "/v3/auth/authenticate"
_GRPC_OUT_OF_RANGE = 11


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _decoded(value: str | None) -> bytes:
    return base64.b64decode(value) if value else b""


def create_request(prefix: str, start_revision: int) -> dict[str, Any]:
    """The body that opens a watch on every key under ``prefix`` from ``start_revision``."""
    end = kv.prefix_end(prefix.encode()).decode()
    return {"create_request": {"key": _b64(prefix), "range_end": _b64(end), "start_revision": start_revision}}


def parse(line: bytes, *, label: str, start_revision: int) -> kv.WatchBatch:
    """One line of the stream as a batch; raises what a gRPC watch raises for the same answer (an error line, a
    cancelled watch: compacted below ``start_revision`` or for another reason)."""
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise errors.EtcdServerError(f"Watch on {label} (gateway): not JSON: {line[:200]!r}",
                                     endpoint=label) from exc
    if "error" in doc:
        err = doc["error"] or {}
        code, message = int(err.get("grpc_code", err.get("code", 0)) or 0), err.get("message", "")
        if code == _GRPC_OUT_OF_RANGE:
            raise errors.Compacted(f"Watch on {label} (gateway): {message}", endpoint=label)
        raise errors.MemberUnreachable(f"Watch on {label} (gateway): the stream ended with gRPC code {code}: "
                                       f"{message}", endpoint=label)
    result = doc.get("result") or {}
    if result.get("canceled"):
        compact = int(result.get("compact_revision", 0) or 0)
        if compact:
            compacted = errors.Compacted(f"Watch on {label} (gateway): revision {start_revision} is compacted "
                                         f"(the last compaction is at {compact})", endpoint=label)
            compacted.compact_revision = compact
            raise compacted
        reason = result.get("cancel_reason", "")
        raise errors.EtcdServerError(f"Watch on {label} (gateway): cancelled ({reason})", endpoint=label,
                                     details=reason)
    header = result.get("header") or {}
    events = tuple(kv.WatchEvent(kind="delete" if e.get("type") == "DELETE" else "put",
                                 key=_decoded(e["kv"].get("key")), value=_decoded(e["kv"].get("value")),
                                 mod_revision=int(e["kv"].get("mod_revision", 0)),
                                 version=int(e["kv"].get("version", 0)))
                   for e in result.get("events") or ())
    return kv.WatchBatch(events=events, revision=int(header.get("revision", 0)),
                         cluster_id=int(header.get("cluster_id", 0)), member_id=int(header.get("member_id", 0)))


def _tls(target: writer.Target) -> ssl.SSLContext | bool:
    return probes.client_context(target.identity, verify=True) if target.scheme == "https" else False


async def _token(session: aiohttp.ClientSession, target: writer.Target, credentials: access.Credentials,
                 tls: ssl.SSLContext | bool, timeout: float) -> str:
    """A token for ``credentials`` (each password in turn, as the gRPC client tries them)."""
    url = target.endpoint.url(target.scheme) + LOGIN_PATH
    refused = ""
    for password in (credentials.password, *credentials.alternates):
        async with session.post(url, json={"name": credentials.username, "password": password}, ssl=tls,
                                server_hostname=target.endpoint.server_name,
                                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            body = await resp.json(content_type=None)
            if resp.status == 200 and body.get("token"):
                return str(body["token"])
            refused = str(body.get("message", resp.status))
    raise errors.AuthFailed(f"Authenticate on {target.label} (gateway): refused ({refused})", endpoint=target.label)


async def watch(session: aiohttp.ClientSession, target: writer.Target, prefix: str, *, start_revision: int,
                timeout: float, credentials: access.Credentials | None = None) -> AsyncGenerator[kv.WatchBatch, None]:
    """The changes under ``prefix`` from ``start_revision`` on, as ``target``'s gateway streams them, until the
    caller stops iterating. ``timeout`` bounds the set-up only: until etcd confirms the watch."""
    label = target.label
    tls = _tls(target)
    resp: aiohttp.ClientResponse | None = None
    try:
        async with asyncio.timeout(timeout):
            headers = {}
            if credentials is not None:
                headers["Authorization"] = await _token(session, target, credentials, tls, timeout)
            resp = await session.post(target.endpoint.url(target.scheme) + WATCH_PATH,
                                      json=create_request(prefix, start_revision), headers=headers, ssl=tls,
                                      server_hostname=target.endpoint.server_name,
                                      timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout))
            if resp.status != 200:
                raise errors.MemberUnreachable(f"Watch on {label} (gateway): HTTP {resp.status}: "
                                               f"{(await resp.text())[:200]}", endpoint=label)
            line = await resp.content.readline()
        while True:
            if not line:
                raise errors.MemberUnreachable(f"Watch on {label} (gateway): the stream ended", endpoint=label)
            if line.strip():
                yield parse(line, label=label, start_revision=start_revision)
            line = await resp.content.readline()
    except errors.EtcdError:
        raise
    except TimeoutError as exc:
        raise errors.RequestTimeout(f"Watch on {label} (gateway): not confirmed within {timeout}s",
                                    endpoint=label) from exc
    except (aiohttp.ClientError, ssl.SSLError, OSError, ValueError) as exc:
        raise errors.MemberUnreachable(f"Watch on {label} (gateway): {type(exc).__name__}: {exc}",
                                       endpoint=label) from exc
    finally:
        if resp is not None:
            resp.close()  # a watch has no end of its own: the connection goes with it


__all__ = ["create_request", "parse", "watch"]
