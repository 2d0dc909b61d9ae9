"""How a line of etcd's JSON gateway watch stream is read (:func:`e2e.gateway.parse`): as a gRPC watch response.

We test: the confirmation and events (64-bit numbers as strings, keys and values in base64, PUT left out as the
default type); a watch cancelled below a compaction and an error line raise what a gRPC watch raises; the create
request covers the prefix.
"""

from __future__ import annotations

import base64
import json

import pytest

from e2e import gateway
from opsmanager.etcd import errors


def _line(doc: object) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


HEADER = {"cluster_id": "14841639068965178418", "member_id": "10276657743932975437", "revision": "42",
          "raft_term": "3"}


def test_the_confirmation_names_the_cluster_and_has_no_event() -> None:
    batch = gateway.parse(_line({"result": {"header": HEADER, "created": True}}), label="m0", start_revision=1)
    assert (batch.events, batch.revision, batch.cluster_id) == ((), 42, 14841639068965178418)
    assert batch.member_id == 10276657743932975437


def test_events_are_decoded_with_put_as_the_default_type() -> None:
    line = _line({"result": {"header": HEADER, "events": [
        {"kv": {"key": _b64("/p/k1"), "value": _b64("c0-1"), "mod_revision": "41", "version": "2"}},
        {"type": "DELETE", "kv": {"key": _b64("/p/k2"), "mod_revision": "42"}}]}})
    batch = gateway.parse(line, label="m0", start_revision=1)
    assert [(e.kind, e.key, e.value, e.mod_revision, e.version) for e in batch.events] == [
        ("put", b"/p/k1", b"c0-1", 41, 2), ("delete", b"/p/k2", b"", 42, 0)]


def test_a_watch_cancelled_below_the_compaction_raises_compacted_with_its_revision() -> None:
    line = _line({"result": {"header": HEADER, "canceled": True, "compact_revision": "30"}})
    with pytest.raises(errors.Compacted, match="revision 5 is compacted") as caught:
        gateway.parse(line, label="m0", start_revision=5)
    assert caught.value.compact_revision == 30


def test_an_error_line_ends_the_stream_as_a_transport_error() -> None:
    line = _line({"error": {"grpc_code": 14, "http_code": 503, "message": "etcdserver: no leader"}})
    with pytest.raises(errors.MemberUnreachable, match="gRPC code 14: etcdserver: no leader"):
        gateway.parse(line, label="m0", start_revision=1)
    with pytest.raises(errors.EtcdServerError, match="not JSON"):
        gateway.parse(b"<html>\n", label="m0", start_revision=1)


def test_the_create_request_covers_exactly_the_prefix() -> None:
    body = gateway.create_request("/p/", 7)["create_request"]
    assert base64.b64decode(body["key"]) == b"/p/" and base64.b64decode(body["range_end"]) == b"/p0"
    assert body["start_revision"] == 7
