"""Where a member is and how to talk to it: :class:`Endpoint` (address, ports, URL schemes),
:class:`TLSIdentity` (trust bundle + optional client certificate, as bytes) and :class:`Credentials` (an etcd
user for clusters with auth enabled).

An endpoint may carry several schemes ("dual view"): while a cluster moves between plaintext and TLS a member can
serve ``http`` and ``https`` on the same client port, and the operator cannot know in advance which one its own
client will get through. The client tries the schemes in order, each with its own time budget, and remembers
the one that worked. TLS material is given as bytes — straight from a Kubernetes Secret — never as file paths, so
nothing private touches the operator's disk.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
import pathlib
import urllib.parse
from collections.abc import Mapping, Sequence

from opsmanager import pki

SCHEMES = ("http", "https")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One etcd member as seen by a client.

    ``schemes`` is the order in which the client tries the client port (``("https",)``, ``("http",)`` or both for a
    member in a TLS transition). ``server_name`` is the name the member's certificate must carry when it differs
    from ``host`` — e.g. dial a pod IP but verify ``etcd-0.etcd.ns.svc`` (``grpc.ssl_target_name_override``).
    ``metrics_port`` is the plain-HTTP ``--listen-metrics-urls`` port serving ``/health``; None when there is none.
    """

    name: str
    host: str
    client_port: int = 2379
    metrics_port: int | None = 2381
    peer_port: int = 2380
    schemes: tuple[str, ...] = ("https",)
    server_name: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Endpoint.name is empty; give the member name (e.g. 'etcd-0')")
        if not self.host:
            raise ValueError(f"Endpoint {self.name!r}: host is empty; give an IP or DNS name")
        for field in ("client_port", "peer_port", "metrics_port"):
            port = getattr(self, field)
            if port is not None and not (0 < int(port) < 65536):
                raise ValueError(f"Endpoint {self.name!r}: {field}={port} is not a TCP port (1-65535)")
        if isinstance(self.schemes, str) or not self.schemes:
            raise ValueError(f"Endpoint {self.name!r}: schemes must be a non-empty tuple like ('https', 'http')")
        bad = [s for s in self.schemes if s not in SCHEMES]
        if bad:
            raise ValueError(f"Endpoint {self.name!r}: unknown scheme(s) {bad}; use 'http' and/or 'https'")
        object.__setattr__(self, "schemes", tuple(dict.fromkeys(self.schemes)))

    @property
    def target(self) -> str:
        """``host:port`` of the client port, as gRPC dials it (IPv6 in brackets)."""
        return f"{self._host_for_url()}:{self.client_port}"

    def _host_for_url(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def url(self, scheme: str | None = None) -> str:
        """The client URL for ``scheme`` (default: the first of ``schemes``)."""
        return f"{scheme or self.schemes[0]}://{self.target}"

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://{self._host_for_url()}:{self.metrics_port}"

    @property
    def label(self) -> str:
        """``name (host:port)``: how errors and logs name this endpoint."""
        return f"{self.name} ({self.target})"

    def with_schemes(self, *schemes: str) -> Endpoint:
        return dataclasses.replace(self, schemes=tuple(schemes))

    @classmethod
    def from_url(cls, name: str, url: str, **kwargs: object) -> Endpoint:
        """An endpoint from a client URL such as ``https://10.0.0.5:2379`` (etcd's ``clientURLs``)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ValueError(f"member {name!r}: client URL {url!r} is not http(s)://host:port")
        return cls(name=name, host=parts.hostname, client_port=parts.port or 2379,
                   schemes=(parts.scheme,), **kwargs)  # type: ignore[arg-type]


def find(endpoints: Sequence[Endpoint], ref: Endpoint | str) -> Endpoint:
    """The endpoint named ``ref`` among ``endpoints`` (an :class:`Endpoint` is returned as is)."""
    if isinstance(ref, Endpoint):
        return ref
    for ep in endpoints:
        if ep.name == ref:
            return ep
    raise ValueError(f"unknown endpoint {ref!r}; known: {[e.name for e in endpoints]}")


@dataclasses.dataclass(frozen=True, repr=False)
class TLSIdentity:
    """What the client trusts and who it is: ``ca_pem`` (trust bundle, may hold several CAs during a rotation),
    and optionally ``cert_pem`` + ``key_pem`` (the client certificate for mTLS). ``name`` labels the identity in
    logs and the writer's per-target counts ("idA", "new-client"); it is never derived from the key.

    The repr never shows the key.
    """

    ca_pem: bytes
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    name: str = "tls"

    def __post_init__(self) -> None:
        if not self.ca_pem or not pki.split_pem(self.ca_pem):
            raise ValueError(f"TLSIdentity {self.name!r}: ca_pem holds no PEM certificate; pass the CA bundle bytes "
                             "(e.g. the Secret's ca.crt)")
        if (self.cert_pem is None) != (self.key_pem is None):
            missing = "key_pem" if self.key_pem is None else "cert_pem"
            raise ValueError(f"TLSIdentity {self.name!r}: {missing} is missing; a client certificate needs both "
                             "cert_pem (tls.crt) and key_pem (tls.key), or neither for server-only TLS")
        if self.cert_pem is not None and self.key_pem is not None:
            if not pki.split_pem(self.cert_pem):
                raise ValueError(f"TLSIdentity {self.name!r}: cert_pem holds no PEM certificate")
            if not pki.key_matches_cert(self.cert_pem, self.key_pem):
                raise ValueError(f"TLSIdentity {self.name!r}: key_pem is not the private key of cert_pem; "
                                 "use the tls.key that belongs to this tls.crt")

    def __repr__(self) -> str:
        who = pki.cert_info(self.cert_pem).subject if self.cert_pem else "no client cert"
        return f"TLSIdentity(name={self.name!r}, client={who!r}, key=<redacted>)"

    @property
    def fingerprint(self) -> str:
        """A short digest of the whole identity (cache key; reveals nothing usable)."""
        h = hashlib.sha256()
        for part in (self.ca_pem, self.cert_pem or b"", self.key_pem or b""):
            h.update(hashlib.sha256(part).digest())
        return h.hexdigest()[:16]

    @classmethod
    def from_files(cls, ca: str | pathlib.Path, cert: str | pathlib.Path | None = None,
                   key: str | pathlib.Path | None = None, *, name: str = "tls") -> TLSIdentity:
        return cls(
            ca_pem=pathlib.Path(ca).read_bytes(),
            cert_pem=pathlib.Path(cert).read_bytes() if cert else None,
            key_pem=pathlib.Path(key).read_bytes() if key else None,
            name=name,
        )

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str | bytes], *, ca: Mapping[str, str | bytes] | None = None,
                         name: str = "tls", ca_key: str = "ca.crt") -> TLSIdentity:
        """From a Secret's ``data`` (base64 strings as the API returns them, or raw bytes): ``tls.crt`` and
        ``tls.key``; the trust bundle from ``ca[ca_key]`` when given (keep it separate from leaf Secrets), else
        from ``data[ca_key]``."""
        def raw(source: Mapping[str, str | bytes], key: str, where: str) -> bytes:
            if key not in source:
                raise ValueError(f"TLSIdentity {name!r}: {where} has no key {key!r}")
            value = source[key]
            return base64.b64decode(value) if isinstance(value, str) else value

        ca_pem = raw(ca, ca_key, "the CA bundle") if ca is not None else raw(data, ca_key, "the Secret")
        has_cert = "tls.crt" in data or "tls.key" in data
        return cls(
            ca_pem=ca_pem,
            cert_pem=raw(data, "tls.crt", "the Secret") if has_cert else None,
            key_pem=raw(data, "tls.key", "the Secret") if has_cert else None,
            name=name,
        )


@dataclasses.dataclass(frozen=True, repr=False)
class Credentials:
    """An etcd user and its password, for a cluster with auth enabled (``etcdctl auth enable``). The client trades
    them for a token (Authenticate) and sends the token with every call.

    ``alternates``: other passwords to try, in order, when etcd refuses ``password`` — a password change in flight
    (the new one staged beside the old): a login that fails with one tries the next, and the client keeps using the
    one that worked.

    Not part of the TLS identity: with ``--client-cert-auth`` etcd takes the certificate's CN as the user only when a
    call carries no token, so a client with credentials acts as ``username`` whatever its certificate says.

    ``repr`` and ``str`` never show a password.
    """

    username: str
    password: str
    alternates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.username, str) or not self.username:
            raise ValueError("Credentials: username is empty; give the etcd user (e.g. 'root')")
        if not isinstance(self.password, str):
            raise TypeError(f"Credentials {self.username!r}: password must be a str, not {type(self.password).__name__}")
        if isinstance(self.alternates, str) or not all(isinstance(p, str) for p in self.alternates):
            raise TypeError(f"Credentials {self.username!r}: alternates must be a tuple of str")
        object.__setattr__(self, "alternates", tuple(self.alternates))

    @property
    def passwords(self) -> tuple[str, ...]:
        """``password``, then each alternate (without repeats): the order a login tries them in."""
        return tuple(dict.fromkeys((self.password, *self.alternates)))

    def __repr__(self) -> str:
        more = f", alternates=<{len(self.alternates)} redacted>" if self.alternates else ""
        return f"Credentials(username={self.username!r}, password=<redacted>{more})"

    __str__ = __repr__
