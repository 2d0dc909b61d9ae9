"""The churn soak (issue 12): certificates change under a live cluster on cert-manager's own schedule, CA included.

A CA ``Certificate`` (SelfSigned Issuer, ``isCA: true``, ``privateKey.rotationPolicy: Always``) writes the key pair
behind a CA Issuer; an Etcd takes its leaves (server, peer, client) from that CA Issuer with a short lifetime. No
``EtcdOpsRequest`` announces anything: cert-manager renews leaves at 2/3 of their lifetime and the CA at 2/3 of its
own, and each new CA (a new key) signs the leaves issued after it. For ``duration`` seconds the soak runs

- the **following writer** (:meth:`e2e.writer.Writer.following`): a Put every 20 ms, trusting ``<db>-ca-bundle``
  and authenticating with ``<db>-client-cert``, both re-read from the API as they change — the client the user-facing
  contract is about;
- the **leader monitor** (:mod:`e2e.monitor`), with an observer identity from every CA seen (it must keep seeing
  the terms whatever the members trust);
- a **sampler**, every second: the CA Secret, the leaf Secrets (which CA signed each leaf serial), and a fresh TLS
  handshake with every member's client and peer port (which leaf each member serves *now*, so which CA it serves).

Reported (:class:`SoakResult`): writes ok/failed, the longest stall, elections (unplanned = elections - MoveLeader
Events), CA rollovers seen (distinct CA serials that signed a served leaf, minus one), leaf renewals seen (new served
serials per member and port), members healthy at the end, every outage (a run of failed writes: start, duration,
the writer's error and the certificate event it followed), the read-back of every acknowledged write (each op
writes its own key) and whether HashKV agrees on every member at the end (:mod:`e2e.consistency`).

Strategies (:data:`STRATEGIES`) say how the Etcd is laid out. ``direct-mount`` is the layout before the material
gate: the operator is kept off (the Etcd paused) and cert-manager's Secrets are mounted directly, while members
trust the bundle they started with, so the first leaf of a new CA splits the cluster — the baseline. ``gated`` is
the operator's layout (issue 12, parts 1 and 4): the material gate holds a leaf of a CA not every member has
loaded, and the operator rolls each new CA over itself (an ``EtcdOpsRequest`` it files; widen, release, narrow) —
held to the bar: 0 failed writes, 0 unplanned elections, every member healthy.

``python -m e2e.soak --duration 90 --ca 90 --leaf 30`` runs it on its own; ``make bench`` runs it with
``--scenario soak`` (:data:`BENCH`: 7.5 minutes, CA 3 m, leaves 1 m — three CA rollovers; issue 12's 15-minute
:data:`FULL` with ``--soak-duration 900 --soak-ca 360 --soak-leaf 120``), both strategies **at the same time**
(:func:`soak_concurrently`: one child process and one sandbox each — its own API server, operator, event loop
and 3 etcd members), so the soak costs 7.5 minutes of the bench's wall time, not 2 × 15.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import pathlib
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp

from e2e import consistency, monitor, naive, scenario, writer
from opsmanager import kube, pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render
from opsmanager.etcd import access
from opsmanager.etcd import errors as etcd_errors
from opsmanager.etcd import probes as etcd_probes

log = logging.getLogger(__name__)

Printer = Callable[[str], None]
DB = "soak"
SELF_SIGNED = "soak-selfsigned"
CA_CERTIFICATE = "soak-ca"
CA_SECRET = "soak-ca-keypair"
CA_ISSUER = "soak-ca-issuer"
OUTAGE_JOIN_S = 3.0  # failed writes closer than this belong to one outage


@dataclasses.dataclass(frozen=True)
class SoakConfig:
    """How long the soak runs and how fast cert-manager churns (seconds)."""

    duration: float
    ca_lifetime: float
    leaf_lifetime: float
    sample_interval: float = 1.0

    def __post_init__(self) -> None:
        if min(self.duration, self.ca_lifetime, self.leaf_lifetime, self.sample_interval) <= 0:
            raise ValueError("SoakConfig: duration, lifetimes and sample_interval must be positive seconds")


FULL = SoakConfig(duration=900, ca_lifetime=360, leaf_lifetime=120)  # issue 12's: 15 min, CA 6 m, leaves 2 m
# make bench's (issue 14: the whole bench under 30 minutes): 7.5 min, CA 3 m, leaves 1 m — the same CA:leaf ratio
# and still three CA rollovers (the CA renews at 2/3 of its life: 120 s, 240 s, 360 s; the next at 480 s is after
# the end), both strategies at once: a rollover of a CA that itself came from a rollover is measured there.
BENCH = SoakConfig(duration=450, ca_lifetime=180, leaf_lifetime=60)
SHORT = SoakConfig(duration=90, ca_lifetime=90, leaf_lifetime=30)  # make test: one CA rollover, several renewals
# make test, the gated row: one CA rollover (the CA renews at 100 s) and the replaced CA's expiry at 150 s under the
# writer, many leaf renewals, in 170 s. The rollover has a third of the CA's life (50 s) before the CA it replaces
# expires, and the leaves the gate holds during it live longer than one (60 s). With CA 90 s / leaves 30 s, on a
# 2-core machine running the suite in parallel, a held leaf's predecessor expired mid-rollover.
SHORT_GATED = SoakConfig(duration=170, ca_lifetime=150, leaf_lifetime=60)


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A layout of the TLS material under test: ``prepare`` creates the Etcd ``db`` on the CA Issuer."""

    key: str  # the JSON's "strategy"
    label: str
    prepare: Callable[[scenario.Scenario, str, SoakConfig], Awaitable[None]]
    held_to_the_bar: bool = False  # make bench fails unless it had 0 failed writes, 0 unplanned elections, all healthy


async def create_etcd(sc: scenario.Scenario, db: str, config: SoakConfig) -> None:
    """A 3-member Etcd whose leaves come from the CA Issuer with ``config.leaf_lifetime``."""
    lifetime = f"{int(config.leaf_lifetime)}s"
    tls = {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": CA_ISSUER},
           "certificates": [{"alias": a, "duration": lifetime} for a in constants.CERT_ALIASES]}
    await sc.k.create({"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                       "metadata": {"name": db, "namespace": sc.namespace},
                       "spec": {"version": sc.etcd_version, "replicas": 3, "storageType": "Durable",
                                "deletionPolicy": "WipeOut", "tls": tls}})


_BACKGROUND: list[asyncio.Task[None]] = []  # a strategy's helpers running during the soak (cancelled at cleanup)


async def _mount_sources_directly(sc: scenario.Scenario, model: etcd_api.Etcd, tls: etcd_api.TLSConfig) -> None:
    """What cert-manager did before the material gate: each Secret it writes is what members and clients mount,
    at once (here: copied within half a second; the bundle stays as the members started with it)."""
    names = {alias: (render.source_secret_name(model, tls, alias), render.secret_name(model, tls, alias))
             for alias in constants.CERT_ALIASES}
    while True:
        try:
            for source_name, mounted_name in names.values():
                source = await sc.k.get("v1", "Secret", sc.namespace, source_name)
                mounted = await sc.k.get("v1", "Secret", sc.namespace, mounted_name)
                want = {k: v for k, v in ((source or {}).get("data") or {}).items()
                        if k in ("tls.crt", "tls.key", "ca.crt")}
                if want and want != ((mounted or {}).get("data") or {}):
                    await naive.mount_directly(sc, model, tls)
                    break
        except kube.Unavailable as err:  # a copier retries a failed API call on its next poll, as any controller
            log.warning("soak: copying the issued Secrets: %s (retried)", err)
        await asyncio.sleep(0.5)  # the copier's pace (a poll of what cert-manager wrote), not a synchronisation


async def create_direct_mount(sc: scenario.Scenario, db: str, config: SoakConfig) -> None:
    """The layout before the material gate: the Etcd as the operator creates it, then the operator kept off
    (paused, as the naive bench strategies are: no gate, no rollover) and cert-manager's Secrets mounted directly."""
    await create_etcd(sc, db, config)
    await sc.wait_ready(db, timeout=120)
    await naive.set_paused(sc.k, sc.namespace, db, True)
    model = await naive.etcd_model(sc, db)
    assert model.spec.tls is not None
    _BACKGROUND.append(asyncio.create_task(_mount_sources_directly(sc, model, model.spec.tls),
                                           name=f"soak-direct-mount-{db}"))


# The baseline: cert-manager's Secrets mounted directly (before the material gate); and the operator's layout.
STRATEGIES: tuple[Strategy, ...] = (
    Strategy("direct-mount", "direct mount", create_direct_mount),
    Strategy("gated", "gated (material gate + automatic CA rollover)", create_etcd, held_to_the_bar=True),
)
STRATEGY_KEYS = tuple(s.key for s in STRATEGIES)


# --- results ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outage:
    """A run of failed writes: from the first failure, for ``duration_s`` (to the end of the soak when
    ``ongoing_at_end``), with the writer's error and the certificate event before it as the ``cause``."""

    start_s: float  # since the soak started
    duration_s: float
    failed_writes: int
    ongoing_at_end: bool
    cause: str


@dataclasses.dataclass(frozen=True)
class SoakResult:
    strategy: str
    config: SoakConfig
    duration_s: float
    writes_ok: int
    writes_failed: int
    max_stall_s: float
    elections: int
    leader_moves: int
    monitor_blind_s: float  # time the monitor got no answer: elections in it are seen late, or by /metrics only
    leader_changes_metrics: int | None  # etcd_server_leader_changes_seen_total, end - start, most of any member
    ca_serials_issued: int  # distinct CAs the CA Secret held
    ca_serials_served: int  # distinct CAs that signed a leaf some member served
    leaf_renewals_served: int  # new served leaf serials, summed over members and ports
    ca_serials_mounted: int  # distinct CAs that signed a leaf delivered into a member's volumes
    leaf_renewals_mounted: int  # new leaf serials delivered into members' volumes, summed over members and aliases
    wire_blind_s: float  # from the last accepted handshake of the sampler to the end (served leaves unobservable)
    certificate_revisions: dict[str, int]  # cert-manager's revision of each Certificate at the end
    members_healthy: int
    members: int
    member_restarts: int
    material_changes: int
    last_acknowledged: int
    missing_writes: tuple[int, ...] | None  # acknowledged but not read back; None: no client could read at the end
    outages: tuple[Outage, ...]
    timeline: tuple[str, ...]
    writer_notes: tuple[str, ...]
    requests: tuple[str, ...]  # EtcdOpsRequests that appeared during the soak (name phase)
    hashkv_agree: bool | None = None  # HashKV equal on every member at the end (None: not checked)
    hashkv: str = ""  # what the HashKV check saw
    writer_failovers: int = 0
    control_plane: str = "embedded"  # whose API server and controllers ran it

    @property
    def unplanned_elections(self) -> int:
        return max(0, self.elections - self.leader_moves)

    @property
    def ca_rollovers(self) -> int:
        return max(0, self.ca_serials_served - 1)

    @property
    def ca_rollovers_mounted(self) -> int:
        return max(0, self.ca_serials_mounted - 1)

    @property
    def acknowledged_writes_kept(self) -> bool | None:
        return None if self.missing_writes is None else not self.missing_writes

    def record(self) -> dict[str, Any]:
        """The bench's JSON object for this run."""
        return {
            "scenario": "soak", "operation": "CA churn soak", "strategy": self.strategy,
            "control_plane": self.control_plane,
            "method": next((s.label for s in STRATEGIES if s.key == self.strategy), self.strategy),
            "held_to_the_bar": any(s.held_to_the_bar for s in STRATEGIES if s.key == self.strategy),
            "duration_s": round(self.duration_s, 1), "ca_lifetime_s": self.config.ca_lifetime,
            "leaf_lifetime_s": self.config.leaf_lifetime, "writes_failed": self.writes_failed,
            "writes_total": self.writes_ok + self.writes_failed, "max_write_stall_s": round(self.max_stall_s, 3),
            "elections": self.elections, "leader_moves": self.leader_moves,
            "unplanned_elections": self.unplanned_elections, "monitor_blind_s": round(self.monitor_blind_s, 1),
            "leader_changes_metrics": self.leader_changes_metrics, "ca_rollovers": self.ca_rollovers,
            "ca_serials_issued": self.ca_serials_issued, "leaf_renewals": self.leaf_renewals_served,
            "ca_rollovers_mounted": self.ca_rollovers_mounted, "leaf_renewals_mounted": self.leaf_renewals_mounted,
            "wire_blind_s": round(self.wire_blind_s, 1),
            "certificate_revisions": self.certificate_revisions, "members_healthy": self.members_healthy,
            "members": self.members, "member_restarts": self.member_restarts,
            "material_changes": self.material_changes, "acknowledged_writes_kept": self.acknowledged_writes_kept,
            "read_back_ok": self.acknowledged_writes_kept,
            "missing_writes": None if self.missing_writes is None else len(self.missing_writes),
            "missing_write_seqs": list((self.missing_writes or ())[:50]), "hashkv_agree": self.hashkv_agree,
            "hashkv": self.hashkv, "writer_failovers": self.writer_failovers,
            "outages": [dataclasses.asdict(o) for o in self.outages], "timeline": list(self.timeline),
            "writer_notes": list(self.writer_notes[:8]), "requests": list(self.requests),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def lines(self) -> list[str]:
        out = [f"soak [{self.strategy}] {self.duration_s:.0f}s (CA {self.config.ca_lifetime:.0f}s, leaves "
               f"{self.config.leaf_lifetime:.0f}s): writes {self.writes_failed} failed / "
               f"{self.writes_ok + self.writes_failed}, max stall {self.max_stall_s:.2f}s, elections {self.elections} "
               f"(MoveLeader {self.leader_moves}, unplanned {self.unplanned_elections}; monitor blind "
               f"{self.monitor_blind_s:.1f}s, leader changes in /metrics {self.leader_changes_metrics}), CA rollovers seen "
               f"{self.ca_rollovers} on the wire, {self.ca_rollovers_mounted} in members' mounted files "
               f"({self.ca_serials_issued} CAs issued), leaf renewals seen {self.leaf_renewals_served} on the wire, "
               f"{self.leaf_renewals_mounted} mounted (served leaves unobservable for the last "
               f"{self.wire_blind_s:.0f}s: no handshake accepted), members healthy at the end {self.members_healthy}/{self.members}, "
               f"member restarts {self.member_restarts}, acknowledged writes kept: "
               f"{_kept_text(self.acknowledged_writes_kept)}"
               f"{f' ({len(self.missing_writes)} missing)' if self.missing_writes else ''}, HashKV agrees: "
               f"{self.hashkv_agree} ({self.hashkv}), writer fail-overs {self.writer_failovers}"]
        out += [f"  outage at +{o.start_s:.1f}s for {o.duration_s:.1f}s ({o.failed_writes} failed writes"
                f"{', still going at the end' if o.ongoing_at_end else ''}): {o.cause}" for o in self.outages]
        return out


def _kept_text(kept: bool | None) -> str:
    if kept is None:
        return "unknown (no client identity, the material's nor an observer's from any CA, could read at the end)"
    return "yes" if kept else "NO"


def outages_of(failure_offsets: Sequence[float], errors: Sequence[str], *, end: float, interval: float,
               cause_of: Callable[[float, str], str]) -> list[Outage]:
    """Runs of failed writes (pure): failures less than ``OUTAGE_JOIN_S`` apart are one outage; it ends a write
    interval after its last failure, or is still going when that is within ``OUTAGE_JOIN_S`` of ``end``.
    ``cause_of(start, first_error)`` explains it."""
    out: list[Outage] = []
    runs: list[list[float]] = []
    for t in failure_offsets:
        if runs and t - runs[-1][-1] <= OUTAGE_JOIN_S:
            runs[-1].append(t)
        else:
            runs.append([t])
    failed = [(_offset(e), e) for e in errors if "FAILED" in e]
    for run in runs:
        first = min(failed, key=lambda f: abs(f[0] - run[0]), default=(0.0, ""))[1]
        ongoing = end - run[-1] <= OUTAGE_JOIN_S
        stop = end if ongoing else run[-1] + interval
        out.append(Outage(round(run[0], 2), round(stop - run[0], 2), len(run), ongoing, cause_of(run[0], first)))
    return out


def _offset(line: str) -> float:
    """The ``+12.345s`` a writer error line starts with (``inf`` when it has none)."""
    try:
        return float(line[1:].split("s ", 1)[0]) if line.startswith("+") else float("inf")
    except ValueError:
        return float("inf")


_TLS_FINDINGS = (
    ("unable to get local issuer certificate",
     "the client does not trust the CA of the leaf the member serves (it trusts <etcd>-ca-bundle)"),
    ("CERTIFICATE_VERIFY_FAILED", "the client rejected the member's certificate"),
    ("unknown certificate authority", "the member does not trust the CA of the client certificate"),
    ("bad certificate", "the member rejected the client certificate"),
    ("certificate required", "the member wants a client certificate"),
)


def error_kind(error: str) -> str:
    """A writer error line reduced to what failed: the exception names and, for TLS, which side refused what."""
    if not error:
        return "no error text kept"
    body = error.split("FAILED: ", 1)[-1]
    kinds = sorted({part.split(": ", 2)[1] for part in body.split(" | ") if part.count(": ") >= 2})
    finding = next((text for needle, text in _TLS_FINDINGS if needle in error), "")
    return ", ".join(kinds) + (f": {finding}" if finding else "")


# --- the run ----------------------------------------------------------------------------------------------------


def _b64(secret: dict[str, Any] | None, key: str) -> bytes | None:
    raw = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(raw) if isinstance(raw, str) else None


class _Sampler:
    """Every ``interval``: CA history, which CA signed each leaf serial (from the Secrets), what members serve."""

    def __init__(self, sc: scenario.Scenario, db: str, mon: monitor.LeaderMonitor, interval: float) -> None:
        self.sc, self.db, self.mon, self.interval = sc, db, mon, interval
        self.started = time.monotonic()
        self.cas: dict[int, bytes] = {}  # serial -> PEM, in the order seen
        self.keys: dict[int, bytes] = {}  # CA serial -> its key, to sign observer identities (never printed)
        self.observers: dict[int, access.TLSIdentity] = {}  # one client identity per CA, trusting every CA seen
        self.signer: dict[int, int] = {}  # leaf serial -> CA serial
        self.served: dict[tuple[str, str], list[int]] = {}  # (member, port) -> distinct leaf serials, in order
        self.ca_first_served: dict[int, float] = {}
        self.mounted: dict[tuple[str, str], list[int]] = {}  # (member, alias) -> leaf serials in its mounted files
        self.ca_first_mounted: dict[int, float] = {}
        self.wire_last_seen = 0.0  # the last time a member's served leaf could be read (a handshake it accepted)
        self.timeline: list[str] = []
        self._task: asyncio.Task[None] | None = None

    def at(self) -> float:
        return time.monotonic() - self.started

    def note(self, text: str) -> None:
        self.timeline.append(f"+{self.at():.1f}s {text}")

    def ca_index(self, serial: int) -> int:
        return list(self.cas).index(serial) + 1 if serial in self.cas else 0

    async def _secrets(self) -> None:
        k, ns = self.sc.k, self.sc.namespace
        ca = await k.get("v1", "Secret", ns, CA_SECRET)
        cert, key = _b64(ca, "tls.crt"), _b64(ca, "tls.key")
        if cert and key:
            serial = pki.cert_info(cert).serial
            if serial not in self.cas:
                self.cas[serial] = cert
                self.keys[serial] = key
                self._observers()
                self.note(f"CA #{len(self.cas)} in {CA_SECRET} (serial {serial:x})")
        for alias in constants.CERT_ALIASES:
            secret = await k.get("v1", "Secret", ns, etcd_api.default_secret_name(self.db, alias))
            leaf_pem = _b64(secret, "tls.crt")
            if not leaf_pem:
                continue
            serial = pki.cert_info(leaf_pem).serial
            if serial not in self.signer:
                self.signer[serial] = next((s for s, pem in self.cas.items() if pki.signed_by(leaf_pem, pem)), 0)
                if alias == "client":
                    self.note(f"{self.db}-client-cert: leaf of CA #{self.ca_index(self.signer[serial])}")

    def _observers(self) -> None:
        """An observer identity per CA, each trusting every CA seen so far; the monitor asks with all of them.
        Whatever the members trust and serve, one of them is accepted (the monitor and the sampler must not go
        blind when the writer does)."""
        trust = pki.bundle(*self.cas.values())
        for i, (serial, cert) in enumerate(self.cas.items(), 1):
            leaf = pki.make_leaf(pki.KeyPair(cert, self.keys[serial]), "soak-observer", usages=("client",))
            self.observers[serial] = access.TLSIdentity(ca_pem=trust, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem,
                                                        name=f"observer-ca{i}")
            self.mon.add_identity(self.observers[serial])

    async def _served_one(self, ep: access.Endpoint, port: str) -> pki.CertInfo | None:
        """The leaf ``ep`` serves on ``port`` now, through the first observer identity the member accepts."""
        number = naming.peer_port("https") if port == "peer" else naming.CLIENT_PORT
        for ident in reversed(list(self.observers.values())):
            try:
                return await etcd_probes.served_certificate(ep.host, number, ep.server_name, identity=ident,
                                                            timeout=1.0)
            except etcd_errors.EtcdError:
                continue
        return None

    async def _served(self) -> None:
        for ep in await self.sc.endpoints(self.db):
            for port in ("client", "peer"):
                info = await self._served_one(ep, port)
                if info is not None:
                    self.wire_last_seen = self.at()
                    seen = self.served.setdefault((ep.name, port), [])
                    if info.serial in seen:
                        continue
                    seen.append(info.serial)
                    ca = self.signer.get(info.serial, 0)
                    if ca and ca not in self.ca_first_served:
                        self.ca_first_served[ca] = self.at()
                        self.note(f"first leaf of CA #{self.ca_index(ca)} served ({ep.name} {port})")

    async def _mounted(self) -> None:
        """The leaves the kubelet delivered into each member's volumes (what etcd serves on its next handshake):
        the fallback when no handshake is accepted any more (members trusting only an expired CA)."""
        for name in naming.pods(self.db, 3):
            pod = await self.sc.k.get("v1", "Pod", self.sc.namespace, name)
            if pod is None:
                continue
            for alias in (constants.ALIAS_SERVER, constants.ALIAS_PEER):
                where = self.sc.sandbox.volume_dir(pod, f"{alias}-tls")
                try:
                    if where is None:
                        continue
                    pem = (where / "tls.crt").read_bytes()
                    serial = pki.cert_info(pem).serial
                except (OSError, ValueError):
                    continue
                seen = self.mounted.setdefault((name, alias), [])
                if serial in seen:
                    continue
                seen.append(serial)
                ca = self.signer.get(serial) or next((c for c, ca_pem in self.cas.items()
                                                      if pki.signed_by(pem, ca_pem)), 0)
                if ca and ca not in self.ca_first_mounted:
                    self.ca_first_mounted[ca] = self.at()
                    self.note(f"first leaf of CA #{self.ca_index(ca)} mounted ({name} {alias})")

    async def sample(self) -> None:
        await self._secrets()
        await self._mounted()
        await self._served()

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except (kube.KubeError, etcd_errors.EtcdError, OSError, ValueError) as exc:
                self.note(f"sampler: {type(exc).__name__}")
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> _Sampler:
        await self.sample()
        self._task = asyncio.create_task(self._run(), name="soak-sampler")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    def cause(self, start: float, first_error: str) -> str:
        """The writer's error and the last certificate event before ``start`` (on the sampler's clock)."""
        before = [line for line in self.timeline if _offset(line) <= start + 0.5]
        event = f"; last certificate event before it: {before[-1]}" if before else ""
        return error_kind(first_error) + event


async def _ca_and_issuer(sc: scenario.Scenario, config: SoakConfig) -> None:
    """SelfSigned Issuer → CA Certificate (isCA, rotationPolicy Always) → CA Issuer on its Secret."""
    ns = sc.namespace
    await sc.k.apply({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                      "metadata": {"name": SELF_SIGNED, "namespace": ns}, "spec": {"selfSigned": {}}})
    await sc.k.apply({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": CA_CERTIFICATE, "namespace": ns},
        "spec": {"isCA": True, "commonName": "soak-ca", "secretName": CA_SECRET,
                 "duration": f"{int(config.ca_lifetime)}s",
                 "privateKey": {"algorithm": "ECDSA", "rotationPolicy": "Always"},
                 "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": SELF_SIGNED}},
    })

    async def ca_secret() -> bool:
        return bool(_b64(await sc.k.get("v1", "Secret", ns, CA_SECRET), "tls.crt"))

    await sc.wait_for(f"CA Secret {CA_SECRET}", ca_secret, timeout=30)
    await sc.k.apply({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                      "metadata": {"name": CA_ISSUER, "namespace": ns}, "spec": {"ca": {"secretName": CA_SECRET}}})


async def _revisions(sc: scenario.Scenario, db: str) -> dict[str, int]:
    out = {}
    for name in (CA_CERTIFICATE, *(naming.certificate(db, a) for a in constants.CERT_ALIASES)):
        cert = await sc.k.get("cert-manager.io/v1", "Certificate", sc.namespace, name)
        out[name] = int(((cert or {}).get("status") or {}).get("revision") or 0)
    return out


LEADER_CHANGES = "etcd_server_leader_changes_seen_total"


async def _leader_changes_seen(sc: scenario.Scenario, db: str) -> dict[str, int]:
    """Each member's ``etcd_server_leader_changes_seen_total`` from its plain-HTTP ``/metrics`` (readable whatever the
    members trust: the cross-check of the monitor when TLS shuts it out)."""
    out = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
        for pod, ip in (await naive.pod_ips(sc, db)).items():
            try:
                async with session.get(f"http://{ip}:{naming.METRICS_PORT}/metrics") as response:
                    text = await response.text()
            except (aiohttp.ClientError, TimeoutError, OSError):
                continue
            for line in text.splitlines():
                if line.startswith(LEADER_CHANGES + " "):
                    out[pod] = int(float(line.split()[1]))
    return out


def changes_between(before: dict[str, int], after: dict[str, int]) -> int | None:
    """The most leader changes any member counted between two readings (None: no member read twice)."""
    deltas = [after[p] - before[p] for p in before if p in after and after[p] >= before[p]]
    return max(deltas) if deltas else None


async def _healthy_members(sc: scenario.Scenario, db: str, *, within: float = 10.0) -> int:
    """How many members answer ``/health`` true, the best count seen within ``within`` seconds."""
    deadline, best = time.monotonic() + within, 0
    while True:
        ips = await naive.pod_ips(sc, db)
        best = max(best, sum(await asyncio.gather(*(naive.member_healthy(ip) for ip in ips.values()))))
        if best == 3 or time.monotonic() >= deadline:
            return best
        await asyncio.sleep(0.3)


async def _read_back(w: writer.Writer, observers: Sequence[access.TLSIdentity]) -> writer.ReadBack | None:
    """Every acknowledged write read back: through the writer's material, else with any observer identity."""
    try:
        return await w.read_back(identities=list(reversed(observers)), check=False)
    except etcd_errors.EtcdError:
        return None


async def run(sc: scenario.Scenario, strategy: Strategy, config: SoakConfig, say: Printer, *,
              db: str = DB) -> SoakResult:
    """One soak on the running scenario ``sc`` (its own CA, Issuers and Etcd ``db``, deleted afterwards)."""
    await _ca_and_issuer(sc, config)
    await strategy.prepare(sc, db, config)
    await sc.wait_ready(db, timeout=120)
    eps = await sc.endpoints(db)
    material = writer.SecretMaterial(sc.k, sc.namespace, db)
    w = await writer.Writer.following(eps, material, keep_errors=500)
    mon = monitor.LeaderMonitor(eps)
    moves_before = await _move_leader_events(sc)
    changes_before = await _leader_changes_seen(sc, db)
    requests_before = {r["metadata"]["name"] for r in await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND,
                                                                          sc.namespace)}
    say(f"soak [{strategy.key}]: {config.duration:.0f}s, CA {config.ca_lifetime:.0f}s, leaves "
        f"{config.leaf_lifetime:.0f}s")
    async with _Sampler(sc, db, mon, config.sample_interval) as sampler, scenario.PidTracker(sc, db) as pids, \
            sc.following_addresses(db, (w, mon), eps):
        await mon.start()
        await w.start()
        started = time.monotonic()
        try:
            await w.wait_ok(5, timeout=20)
            deadline = started + config.duration
            while (left := deadline - time.monotonic()) > 0:
                await asyncio.sleep(min(15.0, left))  # the soak's length, not a synchronisation
                snap = w.snapshot()
                say(f"  +{time.monotonic() - started:.0f}s writes {snap.failed} failed / {snap.ops}, "
                    f"CAs served {len(sampler.ca_first_served)}, material changes {snap.material_changes}")
        finally:
            mres = await mon.stop()
            result = await w.stop()
        offset = started - sampler.started  # writer clock -> sampler clock
        outages = outages_of([t + offset for t in result.failure_offsets],
                             [_shift(e, offset) for e in result.errors], end=result.duration + offset,
                             interval=w.interval, cause_of=sampler.cause)
        stored = await _read_back(w, list(sampler.observers.values()))
        hashes = await consistency.hashkv_agree(await sc.endpoints(db),  # on real nodes: today's pod addresses
                                                [*reversed(list(sampler.observers.values())), None],
                                                timeout=20.0, check=False)
        served = sampler.served
        ca_served = {sampler.signer.get(s, 0) for serials in served.values() for s in serials} - {0}
        restarts = sum(pids.restarts().values())
        mounted = sampler.mounted
        ca_mounted = {sampler.signer.get(s, 0) for serials in mounted.values() for s in serials} - {0}
        wire_blind = max(0.0, sampler.at() - sampler.wire_last_seen)
    requests = [r for r in await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace)
                if r["metadata"]["name"] not in requests_before]
    res = SoakResult(
        control_plane=sc.control_plane,
        strategy=strategy.key, config=config, duration_s=result.duration, writes_ok=result.ok,
        writes_failed=result.failed, max_stall_s=result.max_gap, elections=mres.elections,
        leader_moves=await _move_leader_events(sc) - moves_before, monitor_blind_s=mres.blind_seconds,
        leader_changes_metrics=changes_between(changes_before, await _leader_changes_seen(sc, db)),
        ca_serials_issued=len(sampler.cas),
        ca_serials_served=len(ca_served), leaf_renewals_served=sum(max(0, len(v) - 1) for v in served.values()),
        ca_serials_mounted=len(ca_mounted), leaf_renewals_mounted=sum(max(0, len(v) - 1) for v in mounted.values()),
        wire_blind_s=wire_blind,
        certificate_revisions=await _revisions(sc, db), members_healthy=await _healthy_members(sc, db), members=3,
        member_restarts=restarts, material_changes=result.material_changes, last_acknowledged=result.last_value,
        missing_writes=None if stored is None else stored.missing, outages=tuple(outages),
        timeline=tuple(sampler.timeline), hashkv_agree=hashes.agree, hashkv=hashes.describe(),
        writer_failovers=result.failovers,
        writer_notes=result.errors[:8],
        requests=tuple(f"{r['metadata']['name']} {(r.get('status') or {}).get('phase', '')}" for r in requests),
    )
    for line in res.lines():
        say(line)
    await _cleanup(sc, db)
    return res


def _shift(error: str, offset: float) -> str:
    """A writer error line ``+12.345s ...`` on the sampler's clock."""
    at = _offset(error)
    return error if at == float("inf") else f"+{at + offset:.3f}s {error.split('s ', 1)[1]}"


async def _move_leader_events(sc: scenario.Scenario) -> int:
    events = await sc.k.list("v1", "Event", sc.namespace)
    return sum(1 for e in events if e.get("reason") == "MoveLeader")


async def _cleanup(sc: scenario.Scenario, db: str) -> None:
    ns = sc.namespace
    while _BACKGROUND:
        task = _BACKGROUND.pop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for api, kind, name in ((constants.ETCD_API_VERSION, constants.ETCD_KIND, db),
                            ("cert-manager.io/v1", "Certificate", CA_CERTIFICATE),
                            ("cert-manager.io/v1", "Issuer", CA_ISSUER), ("cert-manager.io/v1", "Issuer", SELF_SIGNED)):
        try:
            await sc.k.delete(api, kind, ns, name)
        except kube.NotFound:
            pass


async def soak(workdir: pathlib.Path, config: SoakConfig, say: Printer, *,
               strategies: Sequence[str] = STRATEGY_KEYS, namespace: str = "soak",
               control_plane: str = "embedded") -> list[SoakResult]:
    """Each strategy in its own fresh sandbox (a broken cluster cannot touch the next run), on ``control_plane``
    (``embedded``, or ``kubernetes``: the real one)."""
    out = []
    for key in strategies:
        strategy = next(s for s in STRATEGIES if s.key == key)
        async with scenario.Scenario(workdir / key, printer=lambda _line: None, namespace=namespace,
                                     control_plane=control_plane) as sc:
            out.append(await run(sc, strategy, config, say))
    return out


async def soak_concurrently(workdir: pathlib.Path, config: SoakConfig, say: Printer, *,
                            strategies: Sequence[str] = STRATEGY_KEYS,
                            control_plane: str = "embedded") -> list[dict[str, Any]]:
    """Every strategy at once, each in its own ``python -m e2e.soak`` child process (its own sandbox and event
    loop: one strategy's load never runs on the other's loop), their output prefixed with the strategy. Returns the
    records (a strategy whose process failed is reported as a record saying so)."""
    workdir.mkdir(parents=True, exist_ok=True)

    async def one(key: str) -> dict[str, Any]:
        out = workdir / f"{key}.json"
        out.unlink(missing_ok=True)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "e2e.soak", "--strategy", key, "--duration", str(config.duration),
            "--ca", str(config.ca_lifetime), "--leaf", str(config.leaf_lifetime), "--dir", str(workdir),
            "--json", str(out), "--control-plane", control_plane,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, limit=1 << 22)
        assert proc.stdout is not None
        tail: list[str] = []
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            tail = [*tail[-20:], line]
            say(f"[{key}] {line}")
        code = await proc.wait()
        if code == 0 and out.exists():
            records: list[dict[str, Any]] = json.loads(out.read_text())
            return records[0]
        strategy = next(s for s in STRATEGIES if s.key == key)
        return {"scenario": "soak", "operation": "CA churn soak", "strategy": key, "method": strategy.label,
                "control_plane": control_plane,
                "held_to_the_bar": strategy.held_to_the_bar,
                "error": f"python -m e2e.soak exited {code}: " + " | ".join(tail[-5:]),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    return list(await asyncio.gather(*(one(k) for k in strategies)))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=SHORT.duration, help="seconds (%(default)s)")
    parser.add_argument("--ca", type=float, default=SHORT.ca_lifetime, help="CA lifetime, s (%(default)s)")
    parser.add_argument("--leaf", type=float, default=SHORT.leaf_lifetime, help="leaf lifetime, s (%(default)s)")
    parser.add_argument("--strategy", action="append", choices=STRATEGY_KEYS, help="(default: all)")
    parser.add_argument("--dir", default=".sandbox/soak", help="working directory (%(default)s)")
    parser.add_argument("--json", metavar="PATH", help="write the records as JSON")
    parser.add_argument("--control-plane", choices=("embedded", "kubernetes"), default="embedded",
                        help="the embedded API server, or the real control plane (make controlplane builds it)")
    args = parser.parse_args(list(argv))
    config = SoakConfig(args.duration, args.ca, args.leaf)
    results = asyncio.run(soak(pathlib.Path(args.dir), config, print, strategies=args.strategy or STRATEGY_KEYS,
                               control_plane=args.control_plane))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps([r.record() for r in results], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
