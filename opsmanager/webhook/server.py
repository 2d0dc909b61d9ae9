"""The admission webhook's HTTPS server (aiohttp): ``opsmanager webhook serve --port P --tls-cert F --tls-key F``.

Only transport lives here; decisions are in ``opsmanager.webhook.admission`` / ``opsmanager.webhook.validation``. Routes:

- ``POST /validate-etcdopsrequest``, ``POST /validate-etcd``, ``POST /mutate-etcd``: AdmissionReview v1 in and out;
  a malformed body gets HTTP 400 with ``{"error": "<what is wrong>"}``;
- ``GET /healthz``: ``ok``;
- anything else: 404 (or 405 for a wrong method), never a silent allow.

A bug in a rule never becomes an HTTP 500 nor an allow: the review is denied (``status.code`` 500 in the body)
and the traceback logged. The rules are pure and cheap and run inline on the event loop (no thread hop); they read
the objects they need from memory — ``opsmanager.webhook.lookup``'s watch-fed caches when serving for real — and
an object not in memory is fetched with one GET by :func:`opsmanager.webhook.admission.decide` before the rules
run again.

Readiness: ``opsmanager webhook serve`` starts listening once its caches have synced (list + watch of Etcds and
EtcdOpsRequests), or after ``--cache-sync-timeout`` seconds; until they sync every lookup is one GET.

Certificate hot reload: cert-manager rewrites the mounted Secret files in place. Every ``reload_interval`` seconds
the server compares the files' (mtime, size, inode) with what it loaded and, when they changed, calls
``load_cert_chain`` on the live ``SSLContext``; new handshakes get the new certificate, established connections
keep the old one. A half-written or mismatched pair is tried on a scratch context first, logged and retried on
the next change; it never reaches the live context.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import ssl
import sys
import tempfile
from collections.abc import Sequence

from aiohttp import web

from opsmanager.webhook import admission
from opsmanager.webhook.validation.lookups import EtcdLookup, InMemoryEtcdLookup
from opsmanager.webhook.validation.verdict import Verdict

log = logging.getLogger("opsmanager.webhook")

MAX_BODY_BYTES = 8 * 1024 * 1024  # the API server caps objects at ~3 MiB; an update carries two of them

_FileStamp = tuple[int, int, int]


def _stamp(path: str) -> _FileStamp:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class WebhookServer:
    """The webhook server, usable in-process (tests, sandbox) or from :func:`main`.

    ``port=0`` picks a free port; :meth:`start` returns the base URL (``https://127.0.0.1:PORT``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        cert_file: str | os.PathLike[str] = "tls.crt",
        key_file: str | os.PathLike[str] = "tls.key",
        lookup: EtcdLookup | None = None,
        reload_interval: float = 2.0,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.cert_file = os.fspath(cert_file)
        self.key_file = os.fspath(key_file)
        self.lookup: EtcdLookup = lookup if lookup is not None else InMemoryEtcdLookup()
        self.reload_interval = reload_interval
        self.reloads = 0
        self._port: int | None = None
        self._runner: web.AppRunner | None = None
        self._reloader: asyncio.Task[None] | None = None
        self._stamps: tuple[_FileStamp, _FileStamp] | None = None
        self._failed_stamps: tuple[_FileStamp, _FileStamp] | None = None
        self.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ssl_context.minimum_version = ssl.TLSVersion.TLSv1_2

    # --- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the webhook server is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def app(self) -> web.Application:
        """The aiohttp application (routes only; TLS is the site's)."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        for path in admission.ENDPOINTS:
            app.router.add_post(path, self._admit)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def start(self) -> str:
        """Load the certificate, bind, serve; return the base URL."""
        self._load_certificate()
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._requested_port, ssl_context=self.ssl_context)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        self._port = int(self._runner.addresses[0][1])
        self._reloader = asyncio.create_task(self._reload_loop(), name="webhook-certificate-reloader")
        self._reloader.add_done_callback(self._reloader_done)
        log.info("webhook serving on %s", self.url)
        return self.url

    async def stop(self) -> None:
        """Stop reloading and serving; safe to call twice."""
        if self._reloader is not None:
            self._reloader.cancel()
            try:
                await self._reloader
            except asyncio.CancelledError:
                pass
            self._reloader = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> WebhookServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- certificate reload ------------------------------------------------------------------------------------

    def _load_certificate(self) -> None:
        stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        self.ssl_context.load_cert_chain(self.cert_file, self.key_file)
        self._stamps = stamps

    def reload_if_changed(self) -> bool:
        """Reload the certificate when its files changed; True when a new certificate was loaded."""
        try:
            stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        except OSError as exc:
            log.warning("cannot stat the webhook certificate files: %s", exc)
            return False
        if stamps == self._stamps or stamps == self._failed_stamps:
            return False
        try:
            self._swap_certificate()
        except (ssl.SSLError, OSError, ValueError) as exc:
            self._failed_stamps = stamps
            log.warning("not reloading the webhook certificate (keeping the current one): %s", exc)
            return False
        self._stamps = stamps
        self.reloads += 1
        log.info("reloaded the webhook certificate from %s", self.cert_file)
        return True

    def _swap_certificate(self) -> None:
        # Read the pair once and try it on a scratch context first: on a mismatched pair OpenSSL has already
        # replaced the certificate and dropped the key of the context it loads into, which would leave the live
        # context unable to handshake. Loading from a private copy also closes the gap in which cert-manager could
        # rewrite one file between the check and the swap.
        with open(self.cert_file, "rb") as f:
            cert_pem = f.read()
        with open(self.key_file, "rb") as f:
            key_pem = f.read()
        with tempfile.TemporaryDirectory(prefix="opsmanager-webhook-") as tmp:
            cert_copy, key_copy = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            for path, data in ((cert_copy, cert_pem), (key_copy, key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_copy, key_copy)
            self.ssl_context.load_cert_chain(cert_copy, key_copy)

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            self.reload_if_changed()

    @staticmethod
    def _reloader_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the certificate reloader stopped", exc_info=task.exception())

    # --- handlers ----------------------------------------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _admit(self, request: web.Request) -> web.Response:
        endpoint = admission.ENDPOINTS[request.path]
        body = await request.read()
        try:
            req = admission.parse_review(body, endpoint)
        except admission.BadReview as exc:
            return web.json_response({"error": str(exc)}, status=400)
        try:
            verdict = await admission.decide(endpoint, req, self.lookup)
        except Exception:
            log.exception("admission rule failed for %s %s/%s", endpoint.path, req.namespace, req.name)
            verdict = Verdict.deny(
                "internal error in the opsmanager admission webhook; see its log", code=500, reason="InternalError"
            )
        if not verdict.allowed:
            log.info("denied %s %s %s/%s: %s", req.operation, endpoint.kind, req.namespace, req.name, verdict.message)
        return web.json_response(admission.response(req.uid, verdict))


# --- command line ----------------------------------------------------------------------------------------------


async def _serve(args: argparse.Namespace) -> int:
    from opsmanager.webhook import lookup as lookup_module  # the Kubernetes client only when serving for real

    etcd_lookup = lookup_module.CachedEtcdLookup(kubeconfig=args.kubeconfig)
    await etcd_lookup.start()
    if not await etcd_lookup.wait_synced(args.cache_sync_timeout):
        log.warning("the Etcd and EtcdOpsRequest caches have not synced within %ss; serving anyway, with one GET "
                    "per lookup until they do", args.cache_sync_timeout)
    server = WebhookServer(
        args.host, args.port, cert_file=args.tls_cert, key_file=args.tls_key, lookup=etcd_lookup,
        reload_interval=args.reload_interval,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    # What start-up made (modules, models, the first lists) lives as long as the process: leave it out of the cycle
    # collector's scans, which otherwise stall the loop for tens of milliseconds each time they walk it.
    gc.collect()
    gc.freeze()
    print(f"opsmanager webhook serving on {server.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
        await etcd_lookup.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opsmanager webhook", description="The admission webhook server.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the admission webhooks over HTTPS until SIGINT/SIGTERM")
    serve.add_argument("--port", type=int, default=8443, help="port to listen on (default 8443)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--tls-cert", required=True, help="PEM certificate (chain) file, reloaded when it changes")
    serve.add_argument("--tls-key", required=True, help="PEM private key file, reloaded when it changes")
    serve.add_argument("--kubeconfig", default=None,
                       help="kubeconfig for looking up Etcd objects (default: in-cluster, then ~/.kube/config)")
    serve.add_argument("--cache-sync-timeout", type=float, default=10.0,
                       help="seconds to wait for the Etcd and EtcdOpsRequest caches before serving (default 10); "
                            "until they sync, every lookup is one GET")
    serve.add_argument("--reload-interval", type=float, default=2.0,
                       help="seconds between checks of the certificate files (default 2)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for path, flag in ((args.tls_cert, "--tls-cert"), (args.tls_key, "--tls-key")):
        if not os.path.isfile(path):
            print(f"opsmanager webhook: {flag} {path}: no such file", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_serve(args))
    except (ssl.SSLError, OSError) as exc:
        print(f"opsmanager webhook: cannot serve: {exc}", file=sys.stderr)
        return 1
