"""Run an :class:`~opsmanager_sandbox.apiserver.server.APIServer` on its own event loop in a background
thread, for synchronous callers (the official ``kubernetes`` client, kopf's ``KopfRunner``, kubectl tests).

The server's loop never shares the caller's loop, so blocking client calls in a test cannot stall it.
``call`` runs a coroutine function on the server's loop and waits for its result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from opsmanager_sandbox.apiserver import server

T = TypeVar("T")


class ThreadedAPIServer:
    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: server.APIServer | None = None

    @property
    def server(self) -> server.APIServer:
        assert self._server is not None, "not started"
        return self._server

    @property
    def url(self) -> str:
        return self.server.url

    def start(self, timeout: float = 30.0) -> ThreadedAPIServer:
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                self._server = server.APIServer(**self._kwargs)
                await self._server.start()

            try:
                loop.run_until_complete(boot())
            except BaseException as e:
                ready.set_exception(e)
                loop.close()
                return
            ready.set_result(None)
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="sandbox-apiserver", daemon=True)
        self._thread.start()
        ready.result(timeout)
        return self

    def call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, timeout: float = 60.0,
             **kwargs: Any) -> T:
        assert self._loop is not None, "not started"
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self._loop)
        return future.result(timeout)

    def call_soon(self, fn: Callable[..., T], *args: Any, timeout: float = 60.0) -> T:
        """Run a plain function on the server's loop (for synchronous server methods)."""
        async def wrapper() -> T:
            return fn(*args)
        return self.call(wrapper, timeout=timeout)

    def issue_token(self, namespace: str, service_account: str, **options: Any) -> str:
        """A ServiceAccount token (see :meth:`APIServer.issue_token`), issued on the server's loop."""
        return self.call_soon(lambda: self.server.issue_token(namespace, service_account, **options).token)

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        return self.server.write_kubeconfig(path, namespace=namespace)

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._loop = None
        self._thread = None

    def __enter__(self) -> ThreadedAPIServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
