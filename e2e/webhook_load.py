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

import asyncio
import collections
import contextlib
import copy
import dataclasses
import json
import random
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from opsmanager import pki
from opsmanager.webhook import admission, server, validation

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


async def latency(count: int = 4000, *, concurrency: int = 200, seed: int = 11) -> dict[str, Any]:
    """Well-formed reviews only, ``concurrency`` in flight: p50/p99/max in ms and throughput."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        path, doc = valid_reviews(rng, f"lat-{i}")
        items.append((path, json.dumps(doc).encode()))
    async with serve() as (srv, ctx), client(ctx, concurrency) as session:
        # warm-up: open the keep-alive connections (TLS handshakes) and the server's thread pool
        await send_all(session, srv.url, items[:concurrency], concurrency=concurrency)
        started = time.perf_counter()
        answers = await send_all(session, srv.url, items, concurrency=concurrency)
        seconds = time.perf_counter() - started
    ms = [a.seconds * 1000 for a in answers if a.status == 200 and not a.error]
    errors = len(answers) - len(ms)
    return {"reviews": len(answers), "concurrency": concurrency, "p50_ms": round(percentile(ms, 50), 1),
            "p99_ms": round(percentile(ms, 99), 1), "max_ms": round(max(ms), 1),
            "throughput_per_s": round(len(answers) / seconds), "errors": errors,
            "allowed": sum(1 for a in answers if a.allowed), "denied": sum(1 for a in answers if a.allowed is False)}


async def bench(say: Callable[[str], None], *, fuzz_count: int = 10_000) -> list[dict[str, Any]]:
    """The two benchmark records: ``webhook-latency`` and ``webhook-fuzz``."""
    from e2e import bench as bench_module

    lat = await latency()
    say(f"webhook latency, {lat['concurrency']} concurrent: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, "
        f"max {lat['max_ms']} ms, {lat['throughput_per_s']} reviews/s, {lat['errors']} errors")
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
