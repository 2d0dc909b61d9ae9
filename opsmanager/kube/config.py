"""The one kubeconfig / in-cluster loader: where the API server is and how to prove who we are.

Why the ``kubernetes`` package stays here although the transport is aiohttp: reading a kubeconfig correctly
is the part that must not be hand-written — contexts, merged ``$KUBECONFIG`` lists, embedded certificate data
(written to temporary files), tokens, exec credential plugins, OIDC/GCP providers, and the in-cluster service
account whose token file is rotated by the kubelet. The package does all that into a
``kubernetes.client.Configuration``; this module turns it into what an HTTP client needs: a base URL, an
``ssl.SSLContext``, and an ``Authorization`` header that is re-read when it expires (the package's
``refresh_api_key_hook``, which re-runs an exec plugin or re-reads the service-account token).

Order, for the operator, the webhook and the tools alike: an explicit kubeconfig path (it must load), else
``$KUBECONFIG`` / ``~/.kube/config`` when present, else the in-cluster service account; otherwise
:class:`~opsmanager.kube.errors.ConfigError`. ``$KUBECONFIG`` is read at call time (the package reads it once, at
import). Credentials are never logged nor put in ``repr``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import ssl
import threading
import time
from typing import Any

import kubernetes

from opsmanager.kube import errors

DEFAULT_KUBECONFIG = "~/.kube/config"
SERVICE_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


@dataclasses.dataclass
class Connection:
    """Where the API server is and how to authenticate to it.

    ``credentials`` is the loaded ``kubernetes.client.Configuration`` (the source of a refreshed token); it is
    None for a plain loopback server without authentication (the sandbox)."""

    server: str
    ca_path: str | None = None
    verify: bool = True
    cert_path: str | None = None
    key_path: str | None = None
    tls_server_name: str | None = None
    credentials: Any = dataclasses.field(default=None, repr=False)
    refresh_interval: float = 30.0
    """Seconds an ``Authorization`` header is reused before the loader is asked again (it refreshes only what
    expired, but an exec plugin is a subprocess: not on every request)."""
    _header: str | None = dataclasses.field(default=None, init=False, repr=False)
    _header_at: float = dataclasses.field(default=float("-inf"), init=False, repr=False)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def for_url(cls, url: str, *, token: str | None = None, ca_path: str | None = None) -> Connection:
        """A connection to ``url`` (e.g. the sandbox's API server on loopback), unauthenticated or with a bearer
        ``token``; ``ca_path`` verifies an ``https`` server."""
        credentials = None
        if token:
            credentials = kubernetes.client.Configuration()
            credentials.host = url
            credentials.api_key = {"BearerToken": token}
            credentials.api_key_prefix = {"BearerToken": "Bearer"}
        return cls(server=url.rstrip("/"), ca_path=ca_path, credentials=credentials)

    @property
    def base_url(self) -> str:
        return self.server.rstrip("/")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS settings for an ``https`` server (None for ``http``): CA, client certificate, verification."""
        if not self.base_url.startswith("https:"):
            return None
        try:
            context = ssl.create_default_context(cafile=self.ca_path)
            if not self.verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.cert_path:
                context.load_cert_chain(self.cert_path, self.key_path)
        except (OSError, ssl.SSLError) as exc:
            raise errors.ConfigError(f"TLS settings for {self.base_url}: {exc}") from exc
        return context

    def authorization(self, *, force: bool = False) -> str | None:
        """The ``Authorization`` header value (``Bearer …`` or ``Basic …``), refreshed when older than
        ``refresh_interval`` or when ``force`` (after a 401). Blocking: an exec plugin may run."""
        if self.credentials is None:
            return None
        with self._lock:
            now = time.monotonic()
            if force or now - self._header_at >= self.refresh_interval:
                self._header = self._read_header()
                self._header_at = now
            return self._header

    def is_fresh(self) -> bool:
        """True while :meth:`authorization` answers from its cache (no loader call, no I/O)."""
        return time.monotonic() - self._header_at < self.refresh_interval

    def _read_header(self) -> str | None:
        config = self.credentials
        try:
            header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix(
                "authorization")
            if not header and config.username:
                header = config.get_basic_auth_token()
        except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
            raise errors.ConfigError(f"refreshing the credentials for {self.base_url}: {exc}") from exc
        if header and " " not in str(header):
            header = f"Bearer {header}"
        return str(header) if header else None

    def scheme_and_token(self) -> tuple[str | None, str | None]:
        """The header split as kopf's ``ConnectionInfo`` wants it (``scheme``, ``token``); (None, None) without."""
        header = self.authorization()
        if not header or header.startswith("Basic "):
            return None, None
        scheme, _, token = header.partition(" ")
        return scheme, token

    @property
    def username(self) -> str | None:
        return str(self.credentials.username) if self.credentials is not None and self.credentials.username else None

    @property
    def password(self) -> str | None:
        return str(self.credentials.password) if self.credentials is not None and self.credentials.password else None


def default_kubeconfig() -> str | None:
    """``$KUBECONFIG`` (as it is now, possibly a ``:`` list), else ``~/.kube/config`` if it exists, else None."""
    env = os.environ.get("KUBECONFIG")
    if env:
        return env
    try:
        path = pathlib.Path(DEFAULT_KUBECONFIG).expanduser()
    except RuntimeError:  # no $HOME and no passwd entry (a container's arbitrary user): there is no ~/.kube
        return None
    return str(path) if path.is_file() else None


def load(kubeconfig: str | os.PathLike[str] | None = None, *, context: str | None = None,
         token_file: str = SERVICE_TOKEN_FILE, ca_file: str = SERVICE_CA_FILE) -> Connection:
    """Load the connection (see the module doc for the order). ``token_file``/``ca_file`` are the service
    account's files for the in-cluster case (tests point them elsewhere)."""
    if kubeconfig is not None:
        return from_kubeconfig(os.fspath(kubeconfig), context=context)
    found = default_kubeconfig()
    if found is not None:
        return from_kubeconfig(found, context=context)
    try:
        return in_cluster(token_file=token_file, ca_file=ca_file)
    except errors.ConfigError as exc:
        raise errors.ConfigError(f"no kubeconfig found (give one or set $KUBECONFIG) and not running in a "
                                 f"cluster: {exc}") from exc


def from_kubeconfig(path: str, *, context: str | None = None) -> Connection:
    config = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(
            config_file=path, context=context, client_configuration=config)
    except (kubernetes.config.ConfigException, OSError, TypeError, ValueError, KeyError) as exc:
        raise errors.ConfigError(f"cannot load kubeconfig {path!r}: {type(exc).__name__}: {exc}") from exc
    return _connection(config)


def in_cluster(*, token_file: str = SERVICE_TOKEN_FILE, ca_file: str = SERVICE_CA_FILE) -> Connection:
    """The pod's service account (``KUBERNETES_SERVICE_HOST``/``_PORT``, token and CA files)."""
    config = kubernetes.client.Configuration()
    loader = kubernetes.config.incluster_config.InClusterConfigLoader(
        token_filename=token_file, cert_filename=ca_file)
    try:
        loader.load_and_set(config)
    except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
        raise errors.ConfigError(f"in-cluster config: {exc}") from exc
    return _connection(config)


def _connection(config: Any) -> Connection:
    return Connection(
        server=str(config.host).rstrip("/"),
        ca_path=config.ssl_ca_cert or None,
        verify=bool(config.verify_ssl),
        cert_path=config.cert_file or None,
        key_path=config.key_file or None,
        tls_server_name=getattr(config, "tls_server_name", None) or None,
        credentials=config,
    )
