"""The live writer: the client whose experience "zero failed writes" is about.

Used by tests, the demo and the benchmarks while a cluster is being changed under it. Design (measured in
``etcd-measured-3.5.1.md``, "Writer loop"):

* one op = one Put of **its own key** ``<prefix>/<seq:08d>`` (value: the sequence number), started every
  ``interval`` (20 ms) with **no catch-up** — after a slow op the next one starts at once and the cadence resumes;
  missed slots are not replayed;
* an op tries the **target** (endpoint x scheme x client identity) that worked last first, then fails over to the
  others in their order, each try with its own deadline (0.5 s); an op fails only when every target failed;
* counted: ops ok / failed; **fail-overs** (ops acknowledged by a target other than the one tried first: the
  last good one had stopped answering); the **max gap** between two successful writes finishing (including the
  trailing gap up to ``stop()``) — the better outage measure, since a failed op may take several tries' deadlines;
* every acknowledged sequence number is kept (:attr:`Writer.acknowledged`);
* targets can be replaced while running (:meth:`Writer.set_targets`): a TLS transition adds the https targets and
  the new client identity as they become usable, exactly what a well-behaved application does.

After ``stop()``, :meth:`Writer.read_back` reads the whole prefix back (a linearizable range read, paged at one
revision) and names every acknowledged sequence number that is not stored: "no acknowledged write was lost" is
checked write by write, not only for the last one.

**Following the material** (issue 12): :meth:`Writer.following` builds a writer that holds no identity of its own.
It trusts ``<db>-ca-bundle`` (``ca.crt``) and authenticates with ``<db>-client-cert`` (``tls.crt``/``tls.key``),
read through a :class:`Material` source — from the API (:class:`SecretMaterial`) or from files the way a pod gets
them mounted (:class:`FileMaterial`) — every ``refresh_interval`` seconds. When the material changes, the next op
uses it on new connections (the channels of the old material are closed: an application that reloads its
certificates). An op whose every try failed re-reads the material at once and, if it changed, tries again within
the same op; an op that still fails is counted failed like any other.

::

    targets = writer.targets_for(cluster.endpoints(), identities=[cluster.tls_identity()])
    async with writer.Writer(targets) as w:
        await w.wait_ok(5)            # it is writing
        ...                           # change the cluster
    print(w.result.failed, w.result.max_gap, w.result.failovers)
    (await w.read_back()).missing     # () — or raises LostWrites naming the missing sequence numbers
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import pathlib
import secrets
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from opsmanager import kube
from opsmanager.api import auth
from opsmanager.cluster import credentials, naming
from opsmanager.etcd import access, errors
from opsmanager.etcd import client as etcd_client


@dataclasses.dataclass(frozen=True)
class Target:
    """One way to reach the cluster: an endpoint, the scheme to use on its client port, and (for https) the
    TLS identity to present."""

    endpoint: access.Endpoint
    scheme: str
    identity: access.TLSIdentity | None = None

    def __post_init__(self) -> None:
        if self.scheme not in access.SCHEMES:
            raise ValueError(f"Target {self.endpoint.name}: scheme must be 'http' or 'https', not {self.scheme!r}")
        if self.scheme == "https" and self.identity is None:
            raise ValueError(f"Target {self.endpoint.name}: scheme 'https' needs an identity (TLSIdentity with the CA)")
        if self.scheme == "http" and self.identity is not None:
            object.__setattr__(self, "identity", None)  # plaintext presents nothing

    @property
    def label(self) -> str:
        who = f"/{self.identity.name}" if self.identity is not None else ""
        return f"{self.endpoint.name}/{self.scheme}{who}"


def moved(target: Target, name: str, host: str) -> Target:
    """``target`` at ``host`` when it is member ``name``'s (a replaced pod's new address), else as it is."""
    if target.endpoint.name != name or target.endpoint.host == host:
        return target
    return Target(dataclasses.replace(target.endpoint, host=host), target.scheme, target.identity)


def targets_for(endpoint_list: Iterable[access.Endpoint],
                identities: Iterable[access.TLSIdentity | None] = (None,),
                schemes: Sequence[str] | None = None) -> list[Target]:
    """Every (endpoint x scheme x identity) combination that makes sense: https with each identity given,
    http once per endpoint. ``schemes`` default to each endpoint's own."""
    ids = [i for i in identities if i is not None]
    out: list[Target] = []
    for ep in endpoint_list:
        for scheme in schemes or ep.schemes:
            if scheme == "https":
                out.extend(Target(ep, "https", ident) for ident in ids)
            else:
                out.append(Target(ep, "http"))
    return list(dict.fromkeys(out))


# --- the material a following writer reads ----------------------------------------------------------------------

REREAD_MIN_INTERVAL = 0.2  # seconds between two re-reads of the material after failed ops
MATERIAL_IDENTITY = "material"  # the name of every identity a Material source builds (labels stay stable)


class Material(Protocol):
    """Where a following writer gets its trust and its client certificate. ``read`` returns None while the
    material is missing or incomplete (the writer then keeps what it has)."""

    async def read(self) -> access.TLSIdentity | None: ...


def _identity(ca: bytes | None, cert: bytes | None, key: bytes | None) -> access.TLSIdentity | None:
    if not ca or not cert or not key:
        return None
    try:
        return access.TLSIdentity(ca_pem=ca, cert_pem=cert, key_pem=key, name=MATERIAL_IDENTITY)
    except ValueError:
        return None  # a key that does not match its certificate: incomplete, as far as a client can tell


def _secret_bytes(secret: dict[str, Any] | None, key: str) -> bytes | None:
    raw = ((secret or {}).get("data") or {}).get(key)
    if not isinstance(raw, str):
        return None
    try:
        return base64.b64decode(raw)
    except (binascii.Error, ValueError):
        return None


class SecretMaterial:
    """The user-facing contract read from the API: ``ca.crt`` of ``<db>-ca-bundle`` (trust) and ``tls.crt`` +
    ``tls.key`` of ``<db>-client-cert`` (who the writer is). Other Secret names can be given."""

    def __init__(self, k: kube.Kube, namespace: str, db: str, *, bundle_secret: str | None = None,
                 client_secret: str | None = None) -> None:
        self.k, self.namespace = k, namespace
        self.bundle_secret = bundle_secret or naming.trust_bundle_secret(db)
        self.client_secret = client_secret or f"{db}-client-cert"

    async def read(self) -> access.TLSIdentity | None:
        bundle = await self.k.get("v1", "Secret", self.namespace, self.bundle_secret)
        client = await self.k.get("v1", "Secret", self.namespace, self.client_secret)
        return _identity(_secret_bytes(bundle, "ca.crt"), _secret_bytes(client, "tls.crt"),
                         _secret_bytes(client, "tls.key"))


class Login(Protocol):
    """Where a writer reads the credentials it logs in with (a cluster with etcd's authentication on)."""

    async def read(self) -> access.Credentials | None: ...


class SecretLogin:
    """The root credentials from the Etcd's auth Secret, as an application that re-reads it would: ``password``
    first, then ``password.next`` (staged by a RotateAuth before etcd changes the password)."""

    def __init__(self, k: kube.Kube, namespace: str, secret: str) -> None:
        self.k, self.namespace, self.secret = k, namespace, secret

    async def read(self) -> access.Credentials | None:
        return credentials.credentials([auth.decode(await self.k.get("v1", "Secret", self.namespace, self.secret))])


class FileMaterial:
    """The same material from files, as a pod sees its mounted Secrets (the kubelet swaps them atomically)."""

    def __init__(self, ca_file: str | pathlib.Path, cert_file: str | pathlib.Path,
                 key_file: str | pathlib.Path) -> None:
        self.ca_file, self.cert_file, self.key_file = (pathlib.Path(p) for p in (ca_file, cert_file, key_file))

    async def read(self) -> access.TLSIdentity | None:
        def load(path: pathlib.Path) -> bytes | None:
            try:
                return path.read_bytes()
            except OSError:
                return None
        return await asyncio.to_thread(lambda: _identity(load(self.ca_file), load(self.cert_file),
                                                         load(self.key_file)))


def key_for(prefix: bytes, seq: int) -> bytes:
    """The key op ``seq`` writes: ``<prefix>/<seq:08d>`` (zero-padded, so keys sort in write order)."""
    return prefix + b"/" + f"{seq:08d}".encode()


def missing_writes(acknowledged: Iterable[int], stored: Iterable[int]) -> tuple[int, ...]:
    """Pure: the acknowledged sequence numbers not among the stored ones, in order."""
    have = set(stored)
    return tuple(sorted(s for s in set(acknowledged) if s not in have))


def _ranges(seqs: Sequence[int]) -> str:
    """``1-3, 7`` for (1, 2, 3, 7): sorted sequence numbers, runs collapsed."""
    runs: list[list[int]] = []
    for s in seqs:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


@dataclasses.dataclass(frozen=True)
class ReadBack:
    """The prefix read back after the writer stopped: how many acknowledged writes, how many keys stored, which
    acknowledged sequence numbers are missing (empty: no acknowledged write was lost)."""

    prefix: bytes
    acknowledged: int
    stored: int
    missing: tuple[int, ...]
    revision: int
    via: str  # the target that answered

    @property
    def ok(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        if self.ok:
            return f"all {self.acknowledged} acknowledged writes read back ({self.stored} keys at revision {self.revision})"
        return (f"{len(self.missing)} of {self.acknowledged} acknowledged writes missing under {self.prefix!r} at "
                f"revision {self.revision} (via {self.via}): seq {_ranges(self.missing[:200])}")


class LostWrites(AssertionError):
    """Acknowledged writes are not stored: the message names their sequence numbers."""

    def __init__(self, read: ReadBack) -> None:
        super().__init__(read.describe())
        self.read = read


class ClientPool:
    """One :class:`etcd_client.EtcdClient` per client identity, logged in with the current credentials: what a
    writer (and each client of :mod:`e2e.history`) keeps, so that a changed identity means new connections and a
    changed password reaches every client."""

    def __init__(self, try_timeout: float) -> None:
        self.try_timeout = try_timeout
        self._by_identity: dict[str | None, etcd_client.EtcdClient] = {}
        self._credentials: access.Credentials | None = None

    def use_credentials(self, creds: access.Credentials | None) -> None:
        if creds != self._credentials:
            self._credentials = creds
            for c in self._by_identity.values():
                c.set_credentials(creds)

    def for_target(self, target: Target) -> etcd_client.EtcdClient:
        key = _identity_key(target)
        c = self._by_identity.get(key)
        if c is None:
            c = etcd_client.EtcdClient([target.endpoint], tls=target.identity, timeout=self.try_timeout,
                                       credentials=self._credentials)
            self._by_identity[key] = c
        elif target.endpoint not in c.endpoints:  # a call naming the member by name finds its current address
            c.set_endpoints([*(e for e in c.endpoints if e.name != target.endpoint.name), target.endpoint])
        return c

    async def close_except(self, targets: Iterable[Target]) -> None:
        """Close the clients of identities none of ``targets`` uses (material that was replaced)."""
        keep = {_identity_key(t) for t in targets}
        for key in [k for k in self._by_identity if k not in keep]:
            await self._by_identity.pop(key).close()

    async def close(self) -> None:
        clients, self._by_identity = list(self._by_identity.values()), {}
        for c in clients:
            await c.close()


def _identity_key(target: Target) -> str | None:
    return target.identity.fingerprint if target.identity is not None else None


@dataclasses.dataclass(frozen=True)
class WriterResult:
    """Counts of one writer run (or a snapshot of a running one)."""

    ok: int
    failed: int
    max_gap: float
    duration: float
    last_value: int  # the highest acknowledged sequence number
    prefix: bytes  # each op wrote <prefix>/<seq:08d>
    by_target: dict[str, int]
    errors: tuple[str, ...]
    failure_offsets: tuple[float, ...]
    switches: int
    marks: tuple[tuple[float, str], ...]
    material_changes: int = 0  # following writer: how many times new material was taken up
    material_retries: int = 0  # ops that failed every try, re-read changed material and tried again
    failovers: int = 0  # ops acknowledged by a target other than the one they tried first
    # the longest gap: when it ended (seconds since the start) and the failed tries of the op that ended it (with
    # no failed op, a gap is that one op's tries plus the interval, so these say where the time went)
    max_gap_end: float = 0.0
    max_gap_tries: tuple[str, ...] = ()

    @property
    def ops(self) -> int:
        return self.ok + self.failed

    def longest_gap(self) -> str:
        """The longest gap, when it ended and what the op that ended it met: for a message about a stall."""
        return (f"{self.max_gap:.3f}s, ending +{self.max_gap_end:.3f}s; the op that ended it: "
                f"{list(self.max_gap_tries)}")

    def summary(self) -> str:
        text = (f"{self.ok} ok / {self.failed} failed in {self.duration:.2f}s, max gap {self.max_gap * 1000:.0f} ms, "
                f"{self.failovers} fail-overs, {self.switches} target switches")
        if self.material_changes:
            text += f", {self.material_changes} material changes"
        return text


class Writer:
    """Put every ``interval`` seconds, the last good target first, failing over to the others.
    ``start()``/``stop()`` or ``async with``.

    ``try_timeout``: deadline of one try on one target. ``prefix``: op ``n`` writes ``<prefix>/<n:08d>`` = ``n``;
    by default ``/opsmanager/writer/<8 random hex digits>``, its own for every writer, so keys a previous writer
    left on the same cluster can never stand in for a write of this one that was lost.
    """

    def __init__(self, targets: Sequence[Target], *, interval: float = 0.02, try_timeout: float = 0.5,
                 prefix: bytes | None = None, keep_errors: int = 50, material: Material | None = None,
                 refresh_interval: float = 1.0, login: Login | None = None,
                 login_as: access.Credentials | None = None) -> None:
        """``material``: follow this source (see :meth:`following`); the targets' endpoints are kept and their
        identity replaced whenever the material changes, re-read every ``refresh_interval`` seconds.
        ``login``: log in with what it holds (a cluster with authentication), re-read every ``refresh_interval``
        seconds and at once after an op that failed (then the op is tried again); ``login_as``: the credentials to
        start with (else the first read)."""
        if interval <= 0 or try_timeout <= 0 or refresh_interval <= 0:
            raise ValueError("Writer: interval, try_timeout and refresh_interval must be positive seconds")
        self.material, self.refresh_interval = material, refresh_interval
        self.login, self._credentials = login, login_as
        self._login_task: asyncio.Task[None] | None = None
        self._login_changes = 0
        self._identity: access.TLSIdentity | None = None  # the material in use (following writer)
        self._pending: access.TLSIdentity | None = None  # newer material, taken up by the next op
        self._material_task: asyncio.Task[None] | None = None
        self._material_changes = self._material_retries = 0
        self._last_reread = float("-inf")
        if prefix is None:
            prefix = b"/opsmanager/writer/" + secrets.token_hex(4).encode()
        if not prefix or prefix.endswith(b"/"):
            raise ValueError(f"Writer: prefix must be a non-empty key without a trailing '/', not {prefix!r}")
        self.interval, self.try_timeout, self.prefix, self.keep_errors = interval, try_timeout, prefix, keep_errors
        self._acknowledged: list[int] = []  # every acknowledged sequence number, in order
        self._failovers = 0
        self._targets: list[Target] = []
        self._clients = ClientPool(try_timeout)
        self._last_good: Target | None = None  # tried first by the next op
        self._last_ok_label: str | None = None  # for counting switches (survives set_targets)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._ok = self._failed = self._seq = self._last_value = self._switches = 0
        self._by_target: dict[str, int] = {}
        self._errors: list[str] = []
        self._failure_offsets: list[float] = []
        self._marks: list[tuple[float, str]] = []
        self._started_at = self._stopped_at = 0.0
        self._op_started = 0.0
        # every acknowledged op: (its start, seconds since the writer started; its latency, seconds), for pictures
        self._latencies: list[tuple[float, float]] = []
        self._last_ok_at: float | None = None
        self._max_gap = self._max_gap_end = 0.0
        self._max_gap_tries: tuple[str, ...] = ()
        self._ok_event = asyncio.Event()
        self.result: WriterResult | None = None
        self.set_targets(targets)

    # -- targets --

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(self._targets)

    @property
    def credentials(self) -> access.Credentials | None:
        """What the writer logs in with now (None on a cluster without authentication)."""
        return self._credentials

    def set_targets(self, targets: Sequence[Target]) -> None:
        """Replace the targets; the next op uses the new list (still starting with the last good one if kept)."""
        new = list(dict.fromkeys(targets))
        if not new:
            raise ValueError("Writer needs at least one target")
        self._targets = new
        if self._last_good not in new:
            self._last_good = None

    def move_endpoint(self, name: str, host: str) -> None:
        """Member ``name`` answers at ``host`` now (a pod replaced on real nodes gets a new IP, as an application
        would learn from DNS): its targets use it from the next try on."""
        self._targets = [moved(t, name, host) for t in self._targets]
        if self._last_good is not None:
            self._last_good = moved(self._last_good, name, host)

    def add_targets(self, targets: Iterable[Target]) -> None:
        self.set_targets([*self._targets, *targets])

    @classmethod
    async def following(cls, endpoints: Sequence[access.Endpoint], material: Material, *, timeout: float = 30.0,
                        **kwargs: Any) -> Writer:
        """A writer over https on every endpoint with whatever ``material`` holds (waits up to ``timeout`` seconds
        for it to be complete), re-reading it as it changes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        identity = await material.read()
        while identity is None:
            if loop.time() >= deadline:
                raise TimeoutError(f"Writer.following: no complete material within {timeout:.0f}s (a CA bundle "
                                   "with ca.crt and a client Secret with tls.crt and a matching tls.key)")
            await asyncio.sleep(0.2)
            identity = await material.read()
        w = cls(targets_for(endpoints, identities=[identity], schemes=("https",)), material=material, **kwargs)
        w._identity = identity
        return w

    def _take_up(self, identity: access.TLSIdentity) -> None:
        """Use ``identity`` for the next tries (same endpoints, https)."""
        endpoints = list(dict.fromkeys(t.endpoint for t in self._targets))
        self.set_targets(targets_for(endpoints, identities=[identity], schemes=("https",)))
        self._identity = identity
        self._material_changes += 1
        self.mark(f"material changed (#{self._material_changes})")

    async def _close_stale_clients(self) -> None:
        await self._clients.close_except(self._targets)

    async def stop_refreshing(self) -> None:
        """Stop the periodic re-read (tests: from now on only a failed op re-reads the material)."""
        if self._material_task is not None:
            self._material_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._material_task
            self._material_task = None

    async def _refresh(self) -> None:
        """Re-read the material every ``refresh_interval``; newer material is taken up by the next op."""
        assert self.material is not None
        while not self._stopping:
            with contextlib.suppress(kube.KubeError, OSError):
                identity = await self.material.read()
                current = self._pending or self._identity
                if identity is not None and (current is None or identity.fingerprint != current.fingerprint):
                    self._pending = identity
            await asyncio.sleep(self.refresh_interval)

    def mark(self, text: str) -> None:
        """Timestamp an event ("move_leader start") in the result, for reading gaps against actions."""
        self._marks.append((self._now() - self._started_at, text))

    def _client_for(self, target: Target) -> etcd_client.EtcdClient:
        self._clients.use_credentials(self._credentials)  # set before the first op (start) or by _log_in_with
        return self._clients.for_target(target)

    def _log_in_with(self, creds: access.Credentials | None) -> bool:
        """Use ``creds`` from the next call on (every client); True when they changed."""
        if creds is None or creds == self._credentials:
            return False
        self._credentials = creds
        self._login_changes += 1
        self.mark(f"credentials changed (#{self._login_changes})")
        self._clients.use_credentials(creds)
        return True

    async def _refresh_login(self) -> None:
        assert self.login is not None
        while not self._stopping:
            with contextlib.suppress(kube.KubeError, OSError):
                self._log_in_with(await self.login.read())
            await asyncio.sleep(self.refresh_interval)

    # -- running --

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    @property
    def started_at(self) -> float:
        """When it started, on the event loop's clock (``time.monotonic``)."""
        return self._started_at

    def latencies(self, since: float = 0.0) -> list[tuple[float, float]]:
        """Every acknowledged op that started ``since`` seconds after the writer or later: (start, latency), both
        in seconds, the start counted from the writer's (failed ops: :attr:`WriterResult.failure_offsets`)."""
        return [entry for entry in self._latencies if entry[0] >= since]

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("Writer already started")
        if self.login is not None and self._credentials is None:
            self._credentials = await self.login.read()  # before the first op: it makes the clients
        self._started_at = self._now()
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name="etcd-live-writer")
        if self.material is not None:
            self._material_task = asyncio.get_running_loop().create_task(self._refresh(), name="writer-material")
        if self.login is not None:
            self._login_task = asyncio.get_running_loop().create_task(self._refresh_login(), name="writer-login")

    async def stop(self) -> WriterResult:
        """Finish the op in flight, stop, close the channels; returns (and keeps as ``.result``) the counts."""
        if self._task is None:
            raise RuntimeError("Writer not started")
        self._stopping = True
        for task in (self._material_task, self._login_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            await self._task
        finally:
            self._stopped_at = self._now()
            self._gap_ends(self._stopped_at, None)
            self.result = self.snapshot()
            await self._clients.close()
        return self.result

    async def __aenter__(self) -> Writer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _gap_ends(self, now: float, tried: Sequence[str] | None) -> None:
        """A gap between acknowledgements ends at ``now``: by an op acknowledged after its failed ``tried``, or
        (None) by the writer stopping."""
        if self._last_ok_at is not None and now - self._last_ok_at > self._max_gap:
            self._max_gap, self._max_gap_end = now - self._last_ok_at, now - self._started_at
            self._max_gap_tries = ("the writer stopped",) if tried is None else (
                *tried, f"acknowledged {now - self._op_started:.3f}s after the op began")

    def snapshot(self) -> WriterResult:
        now = self._stopped_at or self._now()
        return WriterResult(
            ok=self._ok, failed=self._failed, max_gap=self._max_gap, duration=now - self._started_at,
            last_value=self._last_value, prefix=self.prefix, by_target=dict(self._by_target),
            errors=tuple(self._errors), failure_offsets=tuple(self._failure_offsets), switches=self._switches,
            marks=tuple(self._marks), material_changes=self._material_changes,
            material_retries=self._material_retries, failovers=self._failovers, max_gap_end=self._max_gap_end,
            max_gap_tries=self._max_gap_tries,
        )

    @property
    def acknowledged(self) -> tuple[int, ...]:
        """Every sequence number a put was acknowledged for, in order."""
        return tuple(self._acknowledged)

    async def read_back(self, *, timeout: float = 10.0, identities: Sequence[access.TLSIdentity] = (),
                        check: bool = True) -> ReadBack:
        """Read the whole prefix back — a linearizable range read, paged at one revision — through the targets as
        they are now (a following writer re-reads its material first), then with ``identities`` (over https on the
        targets' endpoints) if none answered. Every acknowledged sequence number must be stored: with ``check``
        a missing one raises :class:`LostWrites` naming them all. Raises :class:`errors.EtcdError` when no
        target answers. Call it after :meth:`stop` (a write in flight is not acknowledged yet)."""
        if self.material is not None:
            with contextlib.suppress(kube.KubeError, OSError):
                fresh = await self.material.read()
                if fresh is not None and (self._identity is None or fresh.fingerprint != self._identity.fingerprint):
                    self._take_up(fresh)
        endpoints = list(dict.fromkeys(t.endpoint for t in self._targets))
        tries = [*self._targets, *(Target(ep, "https", ident) for ident in identities for ep in endpoints)]
        last: errors.EtcdError | None = None
        if self.login is not None:
            with contextlib.suppress(kube.KubeError, OSError):
                self._log_in_with(await self.login.read())
        for target in tries:
            async with etcd_client.EtcdClient([target.endpoint], tls=target.identity, timeout=timeout,
                                              credentials=self._credentials) as c:
                try:
                    pairs, revision = await c.kv.range_prefix(self.prefix + b"/", endpoint=target.endpoint,
                                                           scheme=target.scheme, timeout=timeout)
                except errors.EtcdError as err:
                    last = err
                    continue
            stored = [int(value) for _key, value in pairs if value.isdigit()]
            read = ReadBack(prefix=self.prefix, acknowledged=len(self._acknowledged), stored=len(pairs),
                            missing=missing_writes(self._acknowledged, stored), revision=revision, via=target.label)
            if check and not read.ok:
                raise LostWrites(read)
            return read
        assert last is not None
        raise last

    async def wait_ok(self, count: int = 1, *, timeout: float = 10.0) -> None:
        """Wait until ``count`` more ops have succeeded (a sync point: "the writer is writing")."""
        target = self._ok + count
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._ok < target:
            if self._task is not None and self._task.done():
                self._task.result()  # re-raise what killed it
                raise RuntimeError("Writer stopped")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"Writer: {self._ok - (target - count)} of {count} ops ok within {timeout}s; "
                                   f"last errors: {self._errors[-3:]}")
            self._ok_event.clear()
            try:
                await asyncio.wait_for(self._ok_event.wait(), min(remaining, 0.2))
            except TimeoutError:
                pass

    async def _run(self) -> None:
        next_at = self._now()
        while not self._stopping:
            delay = next_at - self._now()
            if delay > 0:
                await asyncio.sleep(delay)
                if self._stopping:
                    break
            await self._one_op()
            next_at += self.interval
            now = self._now()
            if next_at < now:
                next_at = now  # no catch-up: missed slots are not replayed

    async def _one_op(self) -> None:
        self._op_started = self._now()
        self._seq += 1
        value = str(self._seq).encode()
        key = key_for(self.prefix, self._seq)
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if self._identity is None or pending.fingerprint != self._identity.fingerprint:
                self._take_up(pending)
                await self._close_stale_clients()
        tried: list[str] = []
        used = self._credentials
        if await self._try_targets(key, value, tried):
            return
        if self.material is not None and self._now() - self._last_reread >= REREAD_MIN_INTERVAL:
            # A failed handshake may be stale material: re-read it, try once more (at most every 0.2 s, so an
            # outage does not turn into a flood of reads).
            self._last_reread = self._now()
            fresh: access.TLSIdentity | None = None
            with contextlib.suppress(kube.KubeError, OSError):
                fresh = await self.material.read()
            if fresh is not None and (self._identity is None or fresh.fingerprint != self._identity.fingerprint):
                self._material_retries += 1
                self._take_up(fresh)
                await self._close_stale_clients()
                if await self._try_targets(key, value, tried):
                    return
        if self.login is not None:  # a refused login may be a password that changed: re-read it, try once more
            fresh_login: access.Credentials | None = None
            with contextlib.suppress(kube.KubeError, OSError):
                fresh_login = await self.login.read()
            changed = self._log_in_with(fresh_login)
            # The background re-read may have taken up the new password while this op's tries failed with the
            # old one: that is a change too, and worth the one more try.
            if (changed or self._credentials != used) and await self._try_targets(key, value, tried):
                return
        self._failed += 1
        offset = self._now() - self._started_at
        self._failure_offsets.append(offset)
        if len(self._errors) < self.keep_errors:
            self._errors.append(f"+{offset:.3f}s op {self._seq} FAILED: " + " | ".join(tried))

    async def _try_targets(self, key: bytes, value: bytes, tried: list[str]) -> bool:
        """One pass over the targets, the last good one first; True when a put was acknowledged (counted; a
        fail-over when an earlier try of this op failed)."""
        order = list(self._targets)
        if self._last_good in order:
            order.remove(self._last_good)
            order.insert(0, self._last_good)
        for target in order:
            c = self._client_for(target)
            began = self._now()
            try:
                await c.kv.put(key, value, endpoint=target.endpoint, scheme=target.scheme,
                            timeout=self.try_timeout)
            except errors.EtcdError as err:
                tried.append(f"{target.label}: {type(err).__name__}: {err} ({self._now() - began:.3f}s)")
                continue
            now = self._now()
            self._gap_ends(now, tried)
            self._last_ok_at = now
            if self._last_ok_label is not None and self._last_ok_label != target.label:
                self._switches += 1
            self._last_good, self._last_ok_label = target, target.label
            self._ok += 1
            self._latencies.append((self._op_started - self._started_at, now - self._op_started))
            self._last_value = self._seq
            self._acknowledged.append(self._seq)
            if tried:
                self._failovers += 1
            self._by_target[target.label] = self._by_target.get(target.label, 0) + 1
            self._ok_event.set()
            if tried and len(self._errors) < self.keep_errors:  # failed tries before a success: worth seeing
                self._errors.append(f"+{now - self._started_at:.3f}s op {self._seq} ok after: " + " | ".join(tried))
            return True
        return False


__all__ = ["ClientPool", "FileMaterial", "Login", "LostWrites", "Material", "ReadBack", "SecretLogin", "SecretMaterial", "Target",
           "Writer", "WriterResult", "key_for", "missing_writes", "moved", "targets_for"]
