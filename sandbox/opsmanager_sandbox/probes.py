"""Container probes (startup, liveness, readiness) as the kubelet runs them: httpGet, tcpSocket, exec, grpc.

One probe run is :func:`run_probe`; :class:`Prober` repeats it with the probe's timing and thresholds
(``initialDelaySeconds``, ``periodSeconds`` default 10, ``timeoutSeconds`` default 1, ``successThreshold``
default 1, ``failureThreshold`` default 3), every duration multiplied by the sandbox-wide ``speed`` factor
(1.0 = real time). httpGet succeeds on 200–399 and does not verify TLS certificates (like the kubelet); its
host defaults to the pod IP, and ``localhost``/``127.0.0.1`` mean the pod itself. exec runs inside the
container's mount namespace and root (nsenter), so ``etcdctl --cacert /etc/etcd/tls/ca.crt`` works.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from opsmanager_sandbox import containers, process

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    ok: bool
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Timing:
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def of(cls, probe: Obj, speed: float = 1.0) -> Timing:
        return cls(
            initial_delay=float(probe.get("initialDelaySeconds") or 0) * speed,
            period=max(1.0, float(probe.get("periodSeconds") or 10)) * speed,
            timeout=max(1.0, float(probe.get("timeoutSeconds") or 1)) * max(speed, 0.5),
            success_threshold=max(1, int(probe.get("successThreshold") or 1)),
            failure_threshold=max(1, int(probe.get("failureThreshold") or 3)),
        )


def _host(probe_host: str | None, pod_ip: str) -> str:
    if not probe_host or probe_host in ("localhost", "0.0.0.0"):
        return pod_ip
    return containers.pod_local(probe_host, pod_ip)


_NO_VERIFY = ssl.create_default_context()
_NO_VERIFY.check_hostname = False
_NO_VERIFY.verify_mode = ssl.CERT_NONE


_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_REDIRECTS = 10
_BODY_IN_MESSAGE = 200


class _HTTPError(Exception):
    """A response the probe cannot read (reported as ``Get "<url>": <message>``)."""


class _DialError(Exception):
    def __init__(self, host: str, port: int, error: OSError) -> None:
        super().__init__(f"{host}:{port}")
        self.host, self.port, self.error = host, port, error


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str], limit: int) -> bytes:
    """Up to ``limit`` bytes of the (de-chunked) body."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while len(body) < limit:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            body += await reader.readexactly(size)
            await reader.readline()
        return body[:limit]
    if "content-length" in headers:
        length = int(headers["content-length"])
        return await reader.readexactly(min(length, limit))
    body = b""
    while len(body) < limit:
        chunk = await reader.read(limit - len(body))
        if not chunk:
            break
        body += chunk
    return body


async def _get_once(url: str, headers: Mapping[str, str]) -> tuple[int, Mapping[str, str], bytes]:
    """One HTTP/1.1 GET on a fresh connection (``Connection: close``, like the kubelet's prober, which keeps
    no connection alive); the body is read only when the status fails the probe."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _HTTPError(f"unsupported protocol scheme {parts.scheme!r}")
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        reader, writer = await asyncio.open_connection(host, port,
                                                       ssl=_NO_VERIFY if parts.scheme == "https" else None)
    except OSError as exc:
        raise _DialError(host, port, exc) from exc
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        fields = {"host": ("Host", parts.netloc), "accept": ("Accept", "*/*")}
        for name, value in headers.items():
            fields[name.lower()] = (name, value)
        fields["connection"] = ("Connection", "close")
        request = f"GET {target} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields.values()) + "\r\n"
        writer.write(request.encode("latin-1"))
        while True:
            line = await reader.readline()
            if not line:
                raise _HTTPError("EOF (the server closed the connection without a response)")
            version, _, rest = line.decode("latin-1").partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/") or not code.isdigit():
                raise _HTTPError(f"malformed HTTP response {line[:100]!r}")
            status = int(code)
            response: dict[str, str] = {}
            while True:
                header = await reader.readline()
                if header in (b"\r\n", b"\n"):
                    break
                if not header:
                    raise _HTTPError("server closed the connection before the end of the headers")
                name, _, value = header.decode("latin-1").partition(":")
                response[name.strip().lower()] = value.strip()
            if not 100 <= status < 200:
                break  # an informational response (103 Early Hints) is followed by the real one
        ok = 200 <= status < 400 and status not in _REDIRECTS
        body = b"" if ok or status in _REDIRECTS else await _read_body(reader, response, _BODY_IN_MESSAGE)
        return status, response, body
    finally:
        writer.close()


async def _http(spec: Obj, container: Obj, pod_ip: str, timeout: float) -> ProbeResult:
    """An httpGet probe: a plain HTTP/1.1 GET over asyncio streams (no client session per probe: that cost most
    of a probe's CPU), following up to 10 redirects; 200–399 is success, TLS is not verified."""
    port = containers.container_port(container, spec.get("port", 80))
    scheme = str(spec.get("scheme") or "HTTP").lower()
    path = spec.get("path") or "/"
    if not path.startswith("/"):
        path = "/" + path
    url = f"{scheme}://{_host(spec.get('host'), pod_ip)}:{port}{path}"
    headers = {h["name"]: h.get("value", "") for h in spec.get("httpHeaders") or []}
    headers.setdefault("User-Agent", "kube-probe/1.32")
    try:
        async with asyncio.timeout(timeout):
            target = url
            for _ in range(_MAX_REDIRECTS + 1):
                status, response, body = await _get_once(target, headers)
                location = response.get("location")
                if status not in _REDIRECTS or not location:
                    break
                target = urllib.parse.urljoin(target, location)
            else:
                raise _HTTPError(f"stopped after {_MAX_REDIRECTS} redirects")
    except TimeoutError:
        return ProbeResult(False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting '
                           "headers)")
    except _DialError as exc:
        host_port = f"{exc.host}:{exc.port}"
        return ProbeResult(False, f'Get "{url}": dial tcp {host_port}: connect: connection refused'
                           if isinstance(exc.error, ConnectionRefusedError) else f'Get "{url}": dial tcp {host_port}: '
                           f"{exc.error}")
    except (_HTTPError, ValueError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        return ProbeResult(False, f'Get "{url}": {exc}')
    if 200 <= status < 400:
        return ProbeResult(True)
    return ProbeResult(False, f"HTTP probe failed with statuscode: {status} ({body!r})")


async def _tcp(spec: Obj, container: Obj, pod_ip: str, timeout: float) -> ProbeResult:
    port = containers.container_port(container, spec.get("port", 0))
    host = _host(spec.get("host"), pod_ip)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.close()
        return ProbeResult(True)
    except (TimeoutError, OSError) as exc:
        return ProbeResult(False, f"dial tcp {host}:{port}: {exc or 'i/o timeout'}")


async def _exec(spec: Obj, pid: int | None, env: Mapping[str, str], pod_ip: str, timeout: float) -> ProbeResult:
    command = [containers.pod_local(str(a), pod_ip) for a in spec.get("command") or []]
    if not command:
        return ProbeResult(False, "exec probe has no command")
    if pid is None:
        return ProbeResult(False, "container is not running")
    code, out = await process.exec_in(pid, command, env, timeout)
    if code == 0:
        return ProbeResult(True)
    text = out.decode(errors="replace").strip()[-300:]
    return ProbeResult(False, f"command {command!r} exited with {code}: {text}")


async def _grpc(spec: Obj, pod_ip: str, timeout: float) -> ProbeResult:
    import grpc  # type: ignore[import-untyped,unused-ignore]  # only needed for grpc probes

    port = int(spec.get("port", 0))
    service = str(spec.get("service") or "")
    request = (b"\x0a" + bytes([len(service)]) + service.encode()) if service else b""
    try:
        async with grpc.aio.insecure_channel(f"{pod_ip}:{port}") as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
            reply: bytes = await check(request, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        return ProbeResult(False, f"rpc error: code = {exc.code().name} desc = {exc.details()}")
    status = reply[1] if len(reply) >= 2 and reply[0] == 0x08 else 0
    if status == 1:
        return ProbeResult(True)
    return ProbeResult(False, f"service unhealthy (responded with {status})")


async def run_probe(probe: Obj, *, container: Obj, pod_ip: str, pid: int | None, env: Mapping[str, str],
                    timeout: float) -> ProbeResult:
    """One run of ``probe`` against a container."""
    try:
        if "httpGet" in probe:
            return await _http(probe["httpGet"], container, pod_ip, timeout)
        if "tcpSocket" in probe:
            return await _tcp(probe["tcpSocket"], container, pod_ip, timeout)
        if "exec" in probe:
            return await _exec(probe["exec"], pid, env, pod_ip, timeout)
        if "grpc" in probe:
            return await _grpc(probe["grpc"], pod_ip, timeout)
    except containers.ContainerConfigError as exc:
        return ProbeResult(False, str(exc))
    return ProbeResult(False, "probe has no handler (httpGet, tcpSocket, exec or grpc)")


class Prober:
    """Runs one probe of one container until cancelled; reports transitions through ``on_result``.

    ``on_result(ok, message)`` is called when the probe's verdict changes (after the thresholds), and also
    on every failure (so the kubelet can record Unhealthy events). Liveness and startup start as "ok" from the
    kubelet's point of view; readiness starts as "not ready".
    """

    def __init__(self, kind: str, probe: Obj, run: Callable[[float], Awaitable[ProbeResult]], *,
                 speed: float, on_result: Callable[[bool, bool, str], None]) -> None:
        self.kind = kind
        self.timing = Timing.of(probe, speed)
        self._run = run
        self._on_result = on_result

    async def loop(self) -> None:
        t = self.timing
        if t.initial_delay:
            await asyncio.sleep(t.initial_delay)
        successes = failures = 0
        verdict: bool | None = None
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            result = await self._run(t.timeout)
            if result.ok:
                successes, failures = successes + 1, 0
                if successes >= t.success_threshold and verdict is not True:
                    verdict = True
                    self._on_result(True, True, "")
            else:
                failures, successes = failures + 1, 0
                changed = failures >= t.failure_threshold and verdict is not False
                if changed:
                    verdict = False
                self._on_result(False, changed, result.message)
            await asyncio.sleep(max(0.0, t.period - (loop.time() - started)))
