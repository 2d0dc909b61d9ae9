"""The admission webhook under load: latency p50/p99 with 200 reviews in flight, and a 10,000-review fuzz.

Why: the API server calls the webhook on every create/update of an Etcd or EtcdOpsRequest, with a 10 s timeout and
``failurePolicy: Fail``; a slow webhook is a slow API, and a crashing one (HTTP 500, or a review answered with
code 500, which means a rule raised) blocks users. So the benchmark and ``make test`` send it many reviews at once.

Everything is real: ``opsmanager.webhook.server.WebhookServer`` on loopback HTTPS with a certificate from
:mod:`opsmanager.pki`, clients verifying it, aiohttp keep-alive connections. The fuzz is a seeded mutator
(:func:`fuzz_reviews`): valid reviews of every endpoint with fields dropped, retyped or replaced by junk, random
JSON documents, truncated bodies, and wrong paths — reproducible from its seed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import dataclasses
import gc
import json
import os
import random
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from opsmanager import pki
from opsmanager.api import catalog, crdgen, pause
from opsmanager.webhook import admission, server, validation
from opsmanager_sandbox import children
from opsmanager_sandbox.apiserver import server as apiserver_server
from opsmanager_sandbox.cluster import EMBEDDED, KUBERNETES, Sandbox

API_VERSION = "admission.k8s.io/v1"
NAMESPACE = "demo"
DB_NAME = "etcd-cluster"

DB: dict[str, Any] = {
    "apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd",
    "metadata": {"name": DB_NAME, "namespace": NAMESPACE},
    "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete",
             "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}}},
}
PLAIN_DB: dict[str, Any] = {**copy.deepcopy(DB), "metadata": {"name": "plain", "namespace": NAMESPACE},
                            "spec": {k: v for k, v in DB["spec"].items() if k != "tls"}}

OPS_SPECS: tuple[dict[str, Any], ...] = (
    {"type": "ReconfigureTLS", "databaseRef": {"name": DB_NAME}, "tls": {"rotateCertificates": True}},
    {"type": "ReconfigureTLS", "databaseRef": {"name": DB_NAME}, "tls": {"remove": True}},
    {"type": "ReconfigureTLS", "databaseRef": {"name": DB_NAME},
     "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca-b"}}},
    {"type": "ReconfigureTLS", "databaseRef": {"name": "plain"},
     "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca"}}},
    {"type": "ReconfigureTLS", "databaseRef": {"name": DB_NAME}, "tls": {"remove": True, "rotateCertificates": True}},
    {"type": "ReconfigureTLS", "databaseRef": {"name": "missing"}, "tls": {"remove": True}},
    {"type": "Restart", "databaseRef": {"name": DB_NAME}},
    {"type": "MoveLeader", "databaseRef": {"name": DB_NAME}, "moveLeader": {"newLeader": "etcd-cluster-1"}},
    {"type": "Restart", "databaseRef": {"name": DB_NAME}, "timeout": "20s", "apply": "Always"},
)


def review(request: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}


def ops_request(spec: dict[str, Any], name: str = "op") -> dict[str, Any]:
    return {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": copy.deepcopy(spec)}


def valid_reviews(rng: random.Random, uid: str) -> tuple[str, dict[str, Any]]:
    """A well-formed review of one of the endpoints (its verdict may be allow or deny)."""
    choice = rng.randrange(6)
    if choice <= 2:  # the ops request endpoint is the busy one
        obj = ops_request(rng.choice(OPS_SPECS))
        req = {"uid": uid, "operation": "CREATE", "namespace": NAMESPACE, "name": "op", "object": obj,
               "kind": {"group": "ops.opsmanager.dev", "version": "v1alpha1", "kind": "EtcdOpsRequest"}}
        if choice == 2:
            old = ops_request(rng.choice(OPS_SPECS))
            req.update(operation="UPDATE", oldObject=old)
        return "/validate-etcdopsrequest", review(req)
    db = copy.deepcopy(rng.choice((DB, PLAIN_DB)))
    if rng.random() < 0.3:
        db["spec"]["replicas"] = rng.choice((1, 2, 3, 5, 0, -1))
    req = {"uid": uid, "operation": "CREATE", "namespace": NAMESPACE, "name": db["metadata"]["name"], "object": db,
           "kind": {"group": "opsmanager.dev", "version": "v1alpha1", "kind": "Etcd"}}
    if choice == 3:
        old = copy.deepcopy(DB)
        req.update(operation="UPDATE", oldObject=old)
    if choice == 4:
        req.update(operation="DELETE", object=None, oldObject=db)
    return ("/mutate-etcd" if choice == 5 else "/validate-etcd"), review(req)


# --- the mutator ----------------------------------------------------------------------------------------------

JUNK: tuple[Any, ...] = (None, True, False, 0, -1, 2**63, 1.5, "", "x", "ReconfigureTLS", "10m", "-5s", [], {},
                         [None], {"": None}, "💥", "a" * 300, {"name": 7}, [1, "2", {"3": [4]}])


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice((True, False))
    if kind == 2:
        return rng.randint(-(2**64), 2**64)
    if kind == 3:
        return rng.uniform(-1e300, 1e300)
    if kind == 4:
        return "".join(rng.choice("abcXYZ-_./:09 é\u0000\\\"") for _ in range(rng.randrange(12)))
    if kind in (5, 6):
        keys = ("apiVersion", "kind", "request", "uid", "operation", "object", "spec", "metadata", "tls", "type", "x")
        return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]


def mutate(rng: random.Random, doc: dict[str, Any]) -> dict[str, Any]:
    """1–4 random edits of a review: drop a field, replace it with junk or random JSON, add an unknown one."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 4)):
        paths = _paths(doc)
        if not paths:
            break
        path = rng.choice(paths)
        parent = _parent(doc, path)
        key = path[-1]
        action = rng.randrange(4)
        if action == 0:
            if isinstance(parent, dict):
                parent.pop(key, None)
            else:
                parent.pop(key)
        elif action == 1:
            parent[key] = copy.deepcopy(rng.choice(JUNK))  # never let a later edit change JUNK itself
        elif action == 2:
            parent[key] = random_json(rng)
        elif isinstance(parent, dict):
            parent[rng.choice(("extra", "spec", "tls", "status", "metadata"))] = random_json(rng)
    return doc


def fuzz_reviews(count: int, *, seed: int = 7) -> list[tuple[str, bytes]]:
    """``count`` (path, body) pairs, reproducible from ``seed``: 20 % valid reviews, 60 % mutated ones, 10 % random
    JSON, 5 % broken bytes, 5 % on a wrong path."""
    rng = random.Random(seed)
    paths = list(admission.ENDPOINTS)
    out = []
    for i in range(count):
        path, doc = valid_reviews(rng, f"fuzz-{i}")
        roll = rng.random()
        if roll < 0.2:
            body = json.dumps(doc).encode()
        elif roll < 0.8:
            body = json.dumps(mutate(rng, doc)).encode()
        elif roll < 0.9:
            body = json.dumps(random_json(rng)).encode()
        elif roll < 0.95:
            raw = json.dumps(doc).encode()
            body = rng.choice((raw[: rng.randrange(len(raw))], b"\xff\xfe" + raw, b"", b"{" * 2000, raw + b"}"))
        else:
            path = rng.choice(("/nope", "/validate-etcd/extra", "/"))
            body = json.dumps(doc).encode()
        if rng.random() < 0.1:
            path = rng.choice(paths)  # a review sent to another endpoint
        out.append((path, body))
    return out


# --- the server and the client --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[tuple[server.WebhookServer, ssl.SSLContext]]:
    """A webhook server on a loopback port with a fresh CA, and a client context trusting that CA."""
    ca = pki.make_ca("webhook-bench-ca")
    leaf = pki.make_leaf(ca, "opsmanager-webhook", dns_names=["localhost"], ip_addresses=["127.0.0.1"],
                         usages=["server"])
    with tempfile.TemporaryDirectory(prefix="opsmanager-webhook-bench-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        key.write_bytes(leaf.key_pem)
        cert.write_bytes(leaf.cert_pem)
        lookup = validation.InMemoryEtcdLookup([DB, PLAIN_DB])
        srv = server.WebhookServer(cert_file=cert, key_file=key, lookup=lookup, reload_interval=60)
        await srv.start()
        try:
            yield srv, ssl.create_default_context(cadata=ca.cert_pem.decode())
        finally:
            await srv.stop()


@dataclasses.dataclass(frozen=True)
class Answer:
    path: str
    status: int  # HTTP status, 0 when the request itself failed
    code: int | None  # response.status.code of a denied review
    allowed: bool | None
    seconds: float
    error: str = ""


def client(ssl_context: ssl.SSLContext, concurrency: int, *, timeout: float = 30.0) -> aiohttp.ClientSession:
    """A session with up to ``concurrency`` keep-alive connections, verifying the webhook's certificate."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context, limit=concurrency),
                                 timeout=aiohttp.ClientTimeout(total=timeout))


async def send_all(session: aiohttp.ClientSession, url: str, items: Sequence[tuple[str, bytes]], *,
                   concurrency: int) -> list[Answer]:
    """POST every (path, body) with ``concurrency`` requests in flight."""
    queue: collections.deque[tuple[str, bytes]] = collections.deque(items)
    answers: list[Answer] = []

    async def worker() -> None:
        while queue:
            path, body = queue.popleft()
            started = time.perf_counter()
            try:
                async with session.post(url + path, data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    raw = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError) as err:
                answers.append(Answer(path, 0, None, None, time.perf_counter() - started,
                                      f"{type(err).__name__}: {err}"))
                continue
            code, allowed = None, None
            if status == 200:
                try:
                    resp = json.loads(raw)["response"]
                    allowed = bool(resp["allowed"])
                    code = (resp.get("status") or {}).get("code") if not allowed else None
                except (ValueError, KeyError, TypeError) as err:
                    answers.append(Answer(path, status, None, None, time.perf_counter() - started,
                                          f"unparseable 200 answer: {err}"))
                    continue
            answers.append(Answer(path, status, code, allowed, time.perf_counter() - started))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answers


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) by linear interpolation between the closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


@dataclasses.dataclass(frozen=True)
class FuzzResult:
    reviews: int
    http_status: dict[int, int]
    denial_codes: dict[int, int]
    transport_errors: tuple[str, ...]
    bad_answers: tuple[str, ...]  # a 200 whose body is not an AdmissionReview answer
    seconds: float

    @property
    def http_500(self) -> int:
        return sum(n for status, n in self.http_status.items() if status >= 500)

    @property
    def body_500(self) -> int:
        return sum(n for code, n in self.denial_codes.items() if code is not None and code >= 500)


def summarize_fuzz(answers: Sequence[Answer], seconds: float) -> FuzzResult:
    return FuzzResult(
        reviews=len(answers),
        http_status=dict(sorted(collections.Counter(a.status for a in answers).items())),
        denial_codes=dict(sorted(collections.Counter(a.code for a in answers if a.code is not None).items())),
        transport_errors=tuple(a.error for a in answers if a.status == 0)[:20],
        bad_answers=tuple(a.error for a in answers if a.status == 200 and a.error)[:20],
        seconds=seconds,
    )


async def fuzz(count: int = 10_000, *, concurrency: int = 50, seed: int = 7) -> FuzzResult:
    items = fuzz_reviews(count, seed=seed)
    async with serve() as (srv, ctx), client(ctx, concurrency) as session:
        started = time.perf_counter()
        answers = await send_all(session, srv.url, items, concurrency=concurrency)
        seconds = time.perf_counter() - started
        health = await send_health(srv.url, ctx)
    result = summarize_fuzz(answers, seconds)
    if not health:
        raise RuntimeError("the webhook stopped answering /healthz after the fuzz")
    return result


async def send_health(url: str, ctx: ssl.SSLContext) -> bool:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        async with session.get(url + "/healthz") as response:
            return response.status == 200 and (await response.text()) == "ok"


# --- open-loop latency: the webhook in its own process, a fixed arrival rate from this one ----------------------

HOLDER = "hold-tls"  # the EtcdOpsRequest holding PAUSED_DB paused, in the API server (and so in the webhook's cache)


def _paused_db() -> dict[str, Any]:
    db = copy.deepcopy(DB)
    db["metadata"]["name"] = "paused"
    db["status"] = pause.pause({}, HOLDER)
    return db


@dataclasses.dataclass(frozen=True)
class Probe:
    """One review of the open-loop mix and the answer it must get. ``body`` holds ``UID`` where the review's uid
    goes; ``message`` is a fragment the denial's ``status.message`` must contain (denials are code 422)."""

    name: str
    path: str
    body: bytes
    allowed: bool
    message: str = ""


UID = "@@uid@@"


def _probe(name: str, path: str, request: dict[str, Any], allowed: bool, message: str = "") -> Probe:
    return Probe(name, path, json.dumps(review({"uid": UID, **request})).encode(), allowed, message)


def _ops_probe(name: str, spec: dict[str, Any], allowed: bool, message: str = "") -> Probe:
    return _probe(name, "/validate-etcdopsrequest",
                  {"operation": "CREATE", "namespace": NAMESPACE, "name": "op", "object": ops_request(spec),
                   "kind": {"group": "ops.opsmanager.dev", "version": "v1alpha1", "kind": "EtcdOpsRequest"}},
                  allowed, message)


def _etcd_probe(name: str, path: str, obj: dict[str, Any], allowed: bool, message: str = "", *,
                old: dict[str, Any] | None = None) -> Probe:
    request = {"operation": "UPDATE" if old is not None else "CREATE", "namespace": NAMESPACE,
               "name": obj["metadata"]["name"], "object": obj, "oldObject": old,
               "kind": {"group": "opsmanager.dev", "version": "v1alpha1", "kind": "Etcd"}}
    return _probe(name, path, request, allowed, message)


def open_loop_probes() -> list[Probe]:
    """The mix, sent round-robin: seven EtcdOpsRequest CREATEs (each looks up its Etcd in the webhook's cache:
    allowed, and denied by a rule that reads the Etcd), then two Etcd reviews, one of them an update of a paused
    Etcd (the webhook looks up the EtcdOpsRequest holding it), and one defaulting. The expected answers are written
    here, not computed by the rules under test. The requests naming an issuer look it up too (``ca`` exists, so no
    warning; the cache answers either way). No review names a missing Etcd or request: the mix measures the cache
    path (misses have their tests)."""
    zero = copy.deepcopy(DB)
    zero["spec"]["replicas"] = 0
    paused = _paused_db()
    changed = copy.deepcopy(paused)
    changed["spec"]["tls"] = {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "other"}}
    return [
        _ops_probe("rotate", OPS_SPECS[0], True),
        _ops_probe("issuer-on-plain", OPS_SPECS[3], True),
        _ops_probe("two-tls-operations", OPS_SPECS[4], False, "only one TLS reconfiguration operation is allowed"),
        _ops_probe("rotate-plain", {**OPS_SPECS[0], "databaseRef": {"name": "plain"}}, False,
                   "rotateCertificates requires TLS to already be enabled with issuerRef on Etcd"),
        _ops_probe("restart", OPS_SPECS[6], True),
        _ops_probe("move-leader", OPS_SPECS[7], True),
        _ops_probe("restart-options", OPS_SPECS[8], True),
        _etcd_probe("zero-replicas", "/validate-etcd", zero, False, "number of replicas can not be less than 1"),
        _etcd_probe("paused-tls-change", "/validate-etcd", changed, False,
                    f"Etcd paused is paused by EtcdOpsRequest {HOLDER}", old=paused),
        _etcd_probe("defaults", "/mutate-etcd", DB, True),
    ]


def check_answer(probe: Probe, uid: str, status: int, raw: bytes) -> str:
    """"" when ``raw`` is the answer ``probe`` must get, else what is wrong."""
    if status != 200:
        return f"{probe.name}: HTTP {status}"
    try:
        doc = json.loads(raw)
        resp = doc["response"]
        allowed, got_uid = resp["allowed"], resp["uid"]
    except (ValueError, KeyError, TypeError) as err:
        return f"{probe.name}: not an AdmissionReview answer: {err}"
    if doc.get("kind") != "AdmissionReview" or got_uid != uid:
        return f"{probe.name}: answer for uid {got_uid!r}, kind {doc.get('kind')!r} (sent uid {uid!r})"
    if allowed is not probe.allowed:
        return f"{probe.name}: allowed={allowed}, expected {probe.allowed}: {resp.get('status')}"
    if not allowed:
        message, code = (resp.get("status") or {}).get("message", ""), (resp.get("status") or {}).get("code")
        if code != 422 or probe.message not in message:
            return f"{probe.name}: denied with code {code} and {message!r}, expected 422 and {probe.message!r}"
    return ""


@dataclasses.dataclass(frozen=True)
class OpenLoopRun:
    """One open-loop run: ``reviews`` sent at ``rate``/s for ``seconds``; latency of each from its *scheduled*
    send time to its parsed answer (so a late send counts against the webhook: no coordinated omission)."""

    rate: float
    seconds: float
    reviews: int
    latencies_ms: tuple[float, ...]  # of the correct answers
    errors: tuple[str, ...]  # transport failures and wrong answers, in send order
    send_lag_ms: tuple[float, ...]  # actual send start minus scheduled time, per review
    wall_s: float  # scheduled start of the first review to the last answer

    @property
    def achieved_per_s(self) -> float:
        return len(self.latencies_ms) / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        ms = self.latencies_ms or (float("nan"),)
        return {"rate_per_s": self.rate, "seconds": self.seconds, "reviews": self.reviews,
                "p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2),
                "max_ms": round(max(ms), 2), "achieved_per_s": round(self.achieved_per_s, 1),
                "errors": len(self.errors), "first_errors": list(self.errors[:5]),
                "send_lag_p99_ms": round(percentile(self.send_lag_ms, 99), 2) if self.send_lag_ms else None}


async def open_loop(url: str, ssl_context: ssl.SSLContext, *, rate: float, seconds: float,
                    probes: Sequence[Probe] | None = None, connections: int = 64,
                    timeout: float = 10.0) -> OpenLoopRun:
    """Send ``rate × seconds`` reviews at the fixed times ``t0 + i/rate``, whatever is outstanding, over up to
    ``connections`` keep-alive HTTPS connections (the client verifies the webhook's certificate); parse and check
    every answer (:func:`check_answer`). The connections are opened before ``t0``."""
    mix = list(probes) if probes is not None else open_loop_probes()
    count = int(rate * seconds)
    latencies: list[float | None] = [None] * count
    errors: list[str | None] = [None] * count
    lags: list[float] = [0.0] * count
    last_done = 0.0
    async with client(ssl_context, connections, timeout=timeout) as session:
        await asyncio.gather(*(send_health_on(session, url) for _ in range(connections)))

        async def send(i: int, scheduled: float) -> None:
            nonlocal last_done
            probe = mix[i % len(mix)]
            uid = f"ol-{i}"
            lags[i] = (time.perf_counter() - scheduled) * 1000
            try:
                async with session.post(url + probe.path, data=probe.body.replace(UID.encode(), uid.encode()),
                                        headers={"Content-Type": "application/json"}) as response:
                    raw = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError) as err:
                problem = f"{probe.name}: {type(err).__name__}: {err}"
            else:
                problem = check_answer(probe, uid, status, raw)
            done = time.perf_counter()
            last_done = max(last_done, done)
            if problem:
                errors[i] = problem
            else:
                latencies[i] = (done - scheduled) * 1000

        tasks: set[asyncio.Task[None]] = set()
        gc.collect()
        gc.disable()  # the generator's own cycle collections would delay sends; collected after the run
        t0 = time.perf_counter() + 0.05
        i = 0
        while i < count:
            now = time.perf_counter()
            while i < count and t0 + i / rate <= now:  # everything due, even if the loop woke late
                task = asyncio.create_task(send(i, t0 + i / rate))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                i += 1
            if i < count:
                await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))  # the schedule, not a sync
        if tasks:
            await asyncio.wait(set(tasks))
        gc.enable()
    return OpenLoopRun(rate, seconds, count, tuple(x for x in latencies if x is not None),
                       tuple(e for e in errors if e is not None), tuple(lags), last_done - t0)


async def send_health_on(session: aiohttp.ClientSession, url: str) -> None:
    async with session.get(url + "/healthz") as response:
        await response.read()


@dataclasses.dataclass
class WebhookWorld:
    """The webhook as ``opsmanager webhook serve`` in a child process, looking Etcds and EtcdOpsRequests up through
    its watch cache in an API server: the sandbox's in this process, or a real kube-apiserver."""

    url: str
    ssl_context: ssl.SSLContext
    webhook: children.Child
    reads: Callable[[], int]
    control_plane: str = EMBEDDED

    def cpu_seconds(self) -> float:
        """User + system CPU time the webhook process has used so far (``/proc/<pid>/stat``)."""
        fields = Path(f"/proc/{self.webhook.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def api_reads(self) -> int:
        """Every request the API server has answered the webhook but its informers' watches: its reads (a miss's
        GET, an informer's list), of any kind, Issuers included. On the real control plane kube-apiserver's audit
        log counts them (the webhook has a user of its own there)."""
        return self.reads()


def _world_objects() -> list[dict[str, Any]]:
    """What the webhook's answers are about: the namespace, the Issuer ``ca``, the Etcds ``etcd-cluster``, ``plain``
    and ``paused``, and the EtcdOpsRequest holding ``paused``."""
    holder = ops_request({"type": "ReconfigureTLS", "databaseRef": {"name": "paused"},
                          "tls": {"rotateCertificates": True}}, name=HOLDER)
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "ca", "namespace": NAMESPACE},
             "spec": {"ca": {"secretName": "ca-keypair"}}},
            copy.deepcopy(DB), copy.deepcopy(PLAIN_DB), _paused_db(), holder]


@contextlib.asynccontextmanager
async def _api_server(directory: Path, control_plane: str) -> AsyncIterator[tuple[Path, Callable[[], int]]]:
    """An API server holding the CRDs (cert-manager's too), the version catalog and :func:`_world_objects`: the
    webhook's kubeconfig, and how many requests but watches it has answered that kubeconfig's user."""
    if control_plane == KUBERNETES:
        from opsmanager_sandbox import realcp

        async with Sandbox(directory / "sandbox", control_plane=KUBERNETES) as sandbox:
            assert sandbox.client is not None
            for obj in _world_objects():
                created = await sandbox.client.create({k: v for k, v in obj.items() if k != "status"})
                if "status" in obj:  # a create drops the status of a kind with a status subresource
                    await sandbox.client.patch(obj["apiVersion"], obj["kind"], NAMESPACE,
                                               created["metadata"]["name"], {"status": obj["status"]},
                                               subresource="status")

            def audited() -> int:
                return sum(1 for r in sandbox.audit.records(user=realcp.OPERATOR_USER) if r.verb != "watch")

            yield sandbox.operator_kubeconfig, audited
        return
    api = apiserver_server.APIServer()
    await api.start()
    try:
        await api.apply_objects([crdgen.crd(spec) for spec in crdgen.CRDS])
        await api.apply_objects(catalog.objects())  # the install bundle's version catalog: admission reads it
        await api.apply_objects(_world_objects())

        def served() -> int:
            return sum(1 for _method, path, _ in api.requests if "watch=" not in path)

        yield api.write_kubeconfig(directory / "kubeconfig"), served
    finally:
        await api.stop()


@contextlib.asynccontextmanager
async def webhook_world(directory: Path, *, ready_timeout: float = 60.0,
                        control_plane: str = EMBEDDED) -> AsyncIterator[WebhookWorld]:
    """An API server (:func:`_api_server`: the sandbox's, or the real control plane with ``control_plane``
    ``"kubernetes"``) and the webhook in its own process, serving once its caches synced."""
    child: children.Child | None = None
    async with _api_server(directory, control_plane) as (kubeconfig, reads):
        try:
            ca = pki.make_ca("webhook-bench-ca")
            leaf = pki.make_leaf(ca, "opsmanager-webhook", dns_names=["localhost"], ip_addresses=["127.0.0.1"],
                                 usages=["server"])
            cert, key = directory / "tls.crt", directory / "tls.key"
            key.touch(mode=0o600)
            key.write_bytes(leaf.key_pem)
            cert.write_bytes(leaf.cert_pem)
            port = children.free_port()
            child = await children.Child.start(
                "the admission webhook", children.product_argv(
                    "webhook", "serve", "--host", "127.0.0.1", "--port", str(port), "--tls-cert", str(cert),
                    "--tls-key", str(key), "--kubeconfig", str(kubeconfig), "--reload-interval", "60"),
                log_path=directory / "webhook.log")
            ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
            url = f"https://127.0.0.1:{port}"

            async def healthy() -> bool:
                try:
                    return await send_health(url, ctx)
                except (aiohttp.ClientError, OSError):
                    return False

            await child.wait_ready(healthy, timeout=ready_timeout)
            yield WebhookWorld(url, ctx, child, reads, control_plane)
        finally:
            if child is not None:
                await child.stop()


def machine_load() -> str:
    """The 1/5/15-minute load averages and the core count, for the record."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"


async def saturation(world: WebhookWorld, say: Callable[[str], None], *, start: int = 500, step: int = 500,
                     seconds: float = 5.0, p99_bound_ms: float = 50.0, limit: int = 6000) -> tuple[int, list[dict[str, Any]]]:
    """Step the rate up from ``start`` by ``step`` until p99 > ``p99_bound_ms``, the achieved rate < 95 % of the
    target, or an error; the highest rate that held (0 when none did) and every step's summary."""
    held, steps = 0, []
    for rate in range(start, limit + 1, step):
        run = await open_loop(world.url, world.ssl_context, rate=rate, seconds=seconds)
        summary = run.summary()
        steps.append(summary)
        ok = not run.errors and summary["p99_ms"] <= p99_bound_ms and run.achieved_per_s >= 0.95 * rate
        say(f"  {rate}/s for {seconds:g}s: p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, achieved "
            f"{summary['achieved_per_s']}/s, {summary['errors']} errors -> {'held' if ok else 'saturated'}")
        if not ok:
            break
        held = rate
    return held, steps


async def measured(world: WebhookWorld, *, rate: float, seconds: float) -> dict[str, Any]:
    """One open-loop run's summary with the webhook's API reads and CPU time per review, and this process's."""
    reads, cpu, own = world.api_reads(), world.cpu_seconds(), time.process_time()
    run = await open_loop(world.url, world.ssl_context, rate=rate, seconds=seconds)
    return {**run.summary(), "api_reads": world.api_reads() - reads,
            "webhook_cpu_ms_per_review": round((world.cpu_seconds() - cpu) * 1000 / run.reviews, 3),
            "generator_cpu_ms_per_review": round((time.process_time() - own) * 1000 / run.reviews, 3),
            "machine_load": machine_load()}


async def latency(directory: Path, say: Callable[[str], None], *, rate: float = 500, seconds: float = 20,
                  step_seconds: float = 5.0, p99_bound_ms: float = 50.0,
                  control_plane: str = EMBEDDED) -> dict[str, Any]:
    """The ``webhook-latency`` record: ``rate``/s for ``seconds`` open loop, then the saturation steps, with the
    webhook's caches fed by ``control_plane``'s API server."""
    load = machine_load()
    async with webhook_world(directory, control_plane=control_plane) as world:
        await open_loop(world.url, world.ssl_context, rate=rate, seconds=2)  # warm-up, not counted
        main = await measured(world, rate=rate, seconds=seconds)
        say(f"webhook open loop ({control_plane} control plane) {rate:g}/s for {seconds:g}s: p50 {main['p50_ms']} ms, "
            f"p99 {main['p99_ms']} ms, max {main['max_ms']} ms, achieved {main['achieved_per_s']}/s, {main['errors']} errors, "
            f"{main['api_reads']} API reads, webhook CPU {main['webhook_cpu_ms_per_review']} ms/review ({load})")
        held, steps = await saturation(world, say, start=int(rate), step=int(rate), seconds=step_seconds,
                                       p99_bound_ms=p99_bound_ms)
    return {**main, "control_plane": control_plane, "machine_load_before": load, "connections": 64,
            "mix": [p.name for p in open_loop_probes()],
            "saturation_per_s": held, "saturation_p99_bound_ms": p99_bound_ms,
            "saturation_step_s": step_seconds, "saturation_steps": steps,
            "method": "open loop from a separate process"}


async def bench(say: Callable[[str], None], *, fuzz_count: int = 10_000,
                control_plane: str = EMBEDDED) -> list[dict[str, Any]]:
    """The two benchmark records: ``webhook-latency`` (open loop, the caches fed by ``control_plane``'s API
    server) and ``webhook-fuzz``."""
    from e2e import bench as bench_module

    with tempfile.TemporaryDirectory(prefix="opsmanager-webhook-bench-") as tmp:
        lat = await latency(Path(tmp), say, control_plane=control_plane)
    result = await fuzz(fuzz_count)
    say(f"webhook fuzz: {result.reviews} reviews in {result.seconds:.1f}s; HTTP {result.http_status}; denial codes "
        f"{result.denial_codes}; {result.http_500} HTTP 5xx, {result.body_500} reviews with code 500")
    when = bench_module.now_text()
    return [
        {"scenario": "webhook-latency", "strategy": "opsmanager", "measured_at": when, **lat},
        {"scenario": "webhook-fuzz", "strategy": "opsmanager", "measured_at": when, "reviews": result.reviews,
         "concurrency": 50, "http_status": {str(k): v for k, v in result.http_status.items()},
         "denial_codes": {str(k): v for k, v in result.denial_codes.items()}, "http_500": result.http_500,
         "body_500": result.body_500, "transport_errors": len(result.transport_errors),
         "seconds": round(result.seconds, 1)},
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m e2e.webhook_load [--rate R] [--seconds S] [--saturation]``: one open-loop run, printed as JSON."""
    parser = argparse.ArgumentParser(prog="python -m e2e.webhook_load", description=main.__doc__)
    parser.add_argument("--rate", type=float, default=500, help="reviews per second (default 500)")
    parser.add_argument("--seconds", type=float, default=20, help="duration (default 20)")
    parser.add_argument("--saturation", action="store_true", help="then step the rate up until it saturates")
    args = parser.parse_args(argv)

    async def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="opsmanager-webhook-load-") as tmp:
            if args.saturation:
                return await latency(Path(tmp), print, rate=args.rate, seconds=args.seconds)
            async with webhook_world(Path(tmp)) as world:
                await open_loop(world.url, world.ssl_context, rate=args.rate, seconds=2)
                return await measured(world, rate=args.rate, seconds=args.seconds)

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # like Ctrl-C: the webhook child is stopped too
    print(json.dumps(asyncio.run(run()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
