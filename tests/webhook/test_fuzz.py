"""Fuzz: 2,000 generated AdmissionReview bodies through the real HTTPS server never get a 500 nor crash it.

We test these aspects: for any body on any path the answer is 200 (an AdmissionReview answering the same uid), 400
(a JSON error naming the problem) or 404 (unknown path) — never a 5xx; a well-formed envelope around an arbitrary
object is always answered 200, and a denial then carries a 422 (or 503) code, never the 500 that means a rule
crashed; the server still answers ``/healthz`` afterwards. One keep-alive connection, verified TLS.
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opsmanager import pki
from opsmanager.webhook import admission, server, validation
from tests.webhook import conftest

# Seconds, not milliseconds: kept out of `make test-fast`, run by `make test`.
pytestmark = pytest.mark.slow

PATHS = [*admission.ENDPOINTS, "/nope", "/validate-etcd/extra"]

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes anything at all."""
    return st.one_of(strategy, strategy, strategy, json_values)


issuer_refs = st.fixed_dictionaries(
    {"name": maybe(st.sampled_from(["ca", ""]))},
    optional={"kind": maybe(st.sampled_from(["Issuer", "ClusterIssuer", "Bogus"])),
              "apiGroup": maybe(st.just("cert-manager.io"))},
)
certificates = st.lists(
    st.fixed_dictionaries(
        {"alias": maybe(st.sampled_from(["server", "client", "peer", "metrics-exporter"]))},
        optional={"subject": maybe(st.fixed_dictionaries({"organizations": maybe(st.lists(st.text(max_size=5)))})),
                  "duration": maybe(st.sampled_from(["2160h", "90d", "1h30m", ""])),
                  "issuerRef": issuer_refs, "dnsNames": maybe(st.lists(st.text(max_size=8), max_size=3))},
    ),
    max_size=4,
)
tls_specs = st.fixed_dictionaries(
    {},
    optional={"remove": maybe(st.booleans()), "rotateCertificates": maybe(st.booleans()),
              "issuerRef": maybe(issuer_refs), "certificates": maybe(certificates)},
)
ops_specs = st.fixed_dictionaries(
    {},
    optional={
        "type": maybe(st.sampled_from(["ReconfigureTLS", "Restart", "MoveLeader", "UpdateVersion", ""])),
        "databaseRef": maybe(st.fixed_dictionaries({"name": maybe(st.sampled_from(["etcd-cluster", "plain", "x"]))})),
        "tls": maybe(tls_specs),
        "restart": maybe(st.just({})),
        "moveLeader": maybe(st.fixed_dictionaries({}, optional={"newLeader": st.text(max_size=8)})),
        "timeout": maybe(st.sampled_from(["10m", "0s", "1h30m", "ten", "", "1.5h"])),
        "apply": maybe(st.sampled_from(["IfReady", "Always", "Never"])),
    },
)
etcd_specs = st.fixed_dictionaries(
    {},
    optional={
        "version": maybe(st.sampled_from(["3.5.1", "3.4.0", ""])),
        "replicas": maybe(st.integers(-2, 7)),
        "storageType": maybe(st.sampled_from(["Durable", "Ephemeral", "Durabel", ""])),
        "deletionPolicy": maybe(st.sampled_from(["Delete", "WipeOut", "DoNotTerminate", "Halt"])),
        "halted": maybe(st.booleans()),
        "tls": maybe(st.fixed_dictionaries({}, optional={"issuerRef": issuer_refs, "certificates": certificates})),
        "storage": maybe(st.fixed_dictionaries({}, optional={
            "resources": st.fixed_dictionaries({"requests": st.dictionaries(
                st.sampled_from(["storage", "cpu"]), st.one_of(st.integers(), st.text(max_size=5)), max_size=2)})})),
        "podTemplate": maybe(st.fixed_dictionaries({}, optional={
            "spec": st.fixed_dictionaries({}, optional={"terminationGracePeriodSeconds": maybe(st.integers(-5, 60))}),
        })),
    },
)


@st.composite
def objects(draw: st.DrawFn, path: str) -> dict[str, Any] | None:
    ops = path == "/validate-etcdopsrequest"
    if draw(st.integers(0, 9)) == 0:
        return None
    obj: dict[str, Any] = {
        "metadata": draw(maybe(st.fixed_dictionaries(
            {"name": maybe(st.sampled_from(["r", "etcd-cluster", ""])), "namespace": st.just("demo")},
            optional={"labels": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
                      "deletionTimestamp": st.just("2026-01-01T00:00:00Z")},
        )).filter(lambda m: isinstance(m, dict))),
        "spec": draw(maybe(ops_specs if ops else etcd_specs)),
    }
    if draw(st.booleans()):
        obj["apiVersion"] = "ops.opsmanager.dev/v1alpha1" if ops else "opsmanager.dev/v1alpha1"
        obj["kind"] = "EtcdOpsRequest" if ops else "Etcd"
    if draw(st.integers(0, 4)) == 0:
        obj["status"] = draw(json_values)
    return obj


@st.composite
def well_formed(draw: st.DrawFn) -> tuple[str, bytes, bool]:
    """A valid envelope around a generated object: must always be answered 200."""
    path = draw(st.sampled_from(list(admission.ENDPOINTS)))
    operation = draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]))
    obj = draw(objects(path))
    old = draw(objects(path))
    if operation in ("CREATE", "UPDATE") and obj is None:
        obj = {"metadata": {"name": "r"}, "spec": {}}
    if operation == "UPDATE" and old is None:
        old = {"metadata": {"name": "r"}, "spec": {}}
    request: dict[str, Any] = {"uid": draw(st.text(min_size=1, max_size=10)), "operation": operation,
                               "object": obj, "oldObject": old}
    if draw(st.booleans()):
        request["namespace"] = "demo"
    if draw(st.booleans()):
        request["dryRun"] = draw(st.booleans())
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return path, json.dumps(body).encode(), True


@st.composite
def anything(draw: st.DrawFn) -> tuple[str, bytes, bool]:
    """Garbage of every kind: bytes, any JSON, envelopes with broken fields, unknown paths."""
    path = draw(st.sampled_from(PATHS))
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return path, draw(st.binary(max_size=64)), False
    if choice == 1:
        return path, json.dumps(draw(json_values)).encode(), False
    review = {"apiVersion": draw(maybe(st.just("admission.k8s.io/v1"))),
              "kind": draw(maybe(st.just("AdmissionReview"))),
              "request": draw(maybe(st.fixed_dictionaries(
                  {"uid": maybe(st.just("u"))},
                  optional={"operation": maybe(st.sampled_from(["CREATE", "UPDATE", "DELETE"])),
                            "object": maybe(objects(path if path in admission.ENDPOINTS else "/validate-etcd")),
                            "oldObject": maybe(objects(path if path in admission.ENDPOINTS else "/validate-etcd")),
                            "namespace": json_values, "name": json_values, "kind": json_values,
                            "dryRun": json_values},
              )))}
    if choice == 3:
        review = {k: v for k, v in review.items() if draw(st.booleans())}
    return path, json.dumps(review).encode(), False


@pytest.fixture(scope="module")
def threaded_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[server.WebhookServer, ssl.SSLContext]]:
    """The real server on its own event loop in a thread, so the (synchronous) hypothesis test can drive it."""
    ca = pki.make_ca("fuzz-ca")
    directory: pathlib.Path = tmp_path_factory.mktemp("fuzz-certs")
    conftest.write_serving_pair(ca, directory)
    plain = {"metadata": {"name": "plain", "namespace": "demo"}, "spec": {"version": "3.5.1"}}
    lookup = validation.InMemoryEtcdLookup([conftest.DB, plain])
    srv = server.WebhookServer(cert_file=directory / "tls.crt", key_file=directory / "tls.key", lookup=lookup)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzz-webhook-loop", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
        yield srv, ssl.create_default_context(cadata=ca.cert_pem.decode())
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def check_answer(path: str, body: bytes, must_be_200: bool, status: int, data: bytes) -> None:
    assert status < 500, (status, data[:300])
    if path not in admission.ENDPOINTS:
        assert status == 404
        return
    if must_be_200:
        assert status == 200, (status, data[:300])
    assert status in (200, 400), status
    answer = json.loads(data)
    if status == 400:
        assert isinstance(answer["error"], str) and answer["error"]
        return
    request_uid = json.loads(body)["request"]["uid"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == request_uid
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] in (422, 503), response  # 500 would mean a rule crashed
        assert isinstance(response["status"]["message"], str) and response["status"]["message"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"])), list)


def test_fuzzed_reviews_never_get_a_500(threaded_webhook: tuple[server.WebhookServer, ssl.SSLContext]) -> None:
    srv, ctx = threaded_webhook
    pool = urllib3.HTTPSConnectionPool("127.0.0.1", srv.port, ssl_context=ctx, maxsize=1, retries=False,
                                       timeout=urllib3.Timeout(10))
    seen = {200: 0, 400: 0, 404: 0}

    @settings(max_examples=2000, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(case=st.one_of(well_formed(), anything()))
    def run(case: tuple[str, bytes, bool]) -> None:
        path, body, must_be_200 = case
        resp = pool.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        check_answer(path, body, must_be_200, resp.status, resp.data)
        seen[resp.status] = seen.get(resp.status, 0) + 1

    try:
        run()
        health = pool.request("GET", "/healthz")
        assert health.status == 200 and health.data == b"ok"
    finally:
        pool.close()
    assert seen[200] > 200 and seen[400] > 100 and seen[404] > 20, seen  # the generator reached every outcome
