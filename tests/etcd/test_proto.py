"""The committed gRPC code is current, and our hand-written proto matches the etcd we run, field by field.

We test:
* regenerating into a temp dir gives the committed ``_pb`` files (modulo tool-version stamps);
* the generated modules import as a package (``from opsmanager.etcd._pb import rpc_pb2_grpc``);
* every message, field (number, type, label, name) and RPC we declare exists identically in the ``rpc.proto`` /
  ``kv.proto`` descriptors compiled into the etcd 3.5.1 binary (Go embeds them gzipped) — the wire contract is
  checked against the server itself, not against a table.
"""

from __future__ import annotations

import pathlib
import zlib

import pytest
from google.protobuf import descriptor_pb2

from e2e import localcluster
from opsmanager.etcd import protogen
from opsmanager.etcd._pb import rpc_pb2, rpc_pb2_grpc
from opsmanager_sandbox import realcp


def test_generated_code_is_current(tmp_path: pathlib.Path) -> None:
    protogen.generate(tmp_path)
    for name in protogen.GENERATED:
        fresh = protogen.normalise((tmp_path / name).read_text())
        committed = protogen.normalise((protogen.OUT_DIR / name).read_text())
        assert fresh == committed, f"{name} is stale: run python -m opsmanager.etcd.protogen"
    assert protogen.stale_files() == []


def test_check_mode_reports_a_stale_file(tmp_path: pathlib.Path) -> None:
    protogen.generate(tmp_path)
    (tmp_path / "rpc_pb2_grpc.py").write_text((tmp_path / "rpc_pb2_grpc.py").read_text() + "\n# edited\n")
    assert protogen.main(["--check", "--out", str(tmp_path)]) == 1
    assert protogen.stale_files(tmp_path) == ["rpc_pb2_grpc.py"]


def test_generated_grpc_module_imports_its_messages_from_the_package() -> None:
    source = pathlib.Path(rpc_pb2_grpc.__file__).read_text()
    assert "from opsmanager.etcd._pb import rpc_pb2" in source
    assert rpc_pb2_grpc.MaintenanceStub is not None


def _etcd_descriptors(binary: pathlib.Path) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    data = binary.read_bytes()
    found: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    magic = b"\x1f\x8b\x08\x00\x00\x00\x00\x00"  # gzip, no mtime: how Go embeds file descriptors
    at = data.find(magic)
    while at >= 0:
        try:
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[at:at + 1_000_000])
            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
            if fd.package in ("etcdserverpb", "mvccpb"):
                found[f"{fd.package}/{fd.name}"] = fd
        except Exception:  # noqa: BLE001 - most gzip-looking byte runs are not descriptors
            pass
        at = data.find(magic, at + 1)
    return found


def _binaries() -> list[tuple[str, pathlib.Path]]:
    """The etcd of the embedded tier (3.5.1), and the 3.6 build when the control plane has been built."""
    found = [("3.5.1", localcluster.etcd_binary())]
    try:
        found.append(("3.6", realcp.binary("etcd-3.6", "etcd")))
    except realcp.NotBuilt:
        pass
    return found


# Declared by us, added in etcd 3.6: checked against the 3.6 build, absent from 3.5.1.
SINCE_3_6 = {("StatusResponse", 11), ("StatusResponse", 12), ("StatusResponse", 13), ("DowngradeInfo", 1),
             ("DowngradeInfo", 2)}


@pytest.fixture(scope="module", params=_binaries(), ids=lambda b: b[0])
def etcd_messages(request: pytest.FixtureRequest) -> dict[str, descriptor_pb2.DescriptorProto]:
    version, binary = request.param
    fds = _etcd_descriptors(binary)
    assert "etcdserverpb/rpc.proto" in fds, f"rpc.proto descriptor not found in the etcd binary: {sorted(fds)}"
    messages = {}
    for fd in fds.values():
        for msg in fd.message_type:
            messages[f".{fd.package}.{msg.name}"] = msg
    messages["services"] = fds["etcdserverpb/rpc.proto"]  # type: ignore[assignment]
    messages["version"] = version  # type: ignore[assignment]
    return messages


def _ours() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto()
    rpc_pb2.DESCRIPTOR.CopyToProto(fd)
    return fd


# declared in our package; mvccpb in etcd
ETCD_NAME = {".etcdserverpb.KeyValue": ".mvccpb.KeyValue", ".etcdserverpb.Event": ".mvccpb.Event",
             ".etcdserverpb.Event.EventType": ".mvccpb.Event.EventType"}


def test_every_field_we_declare_matches_etcd(etcd_messages: dict[str, descriptor_pb2.DescriptorProto]) -> None:
    ours = _ours()
    checked = 0
    older = etcd_messages["version"] == "3.5.1"
    for msg in ours.message_type:
        full = f".etcdserverpb.{msg.name}"
        theirs = etcd_messages.get(ETCD_NAME.get(full, full))
        if theirs is None and older and all((msg.name, f.number) in SINCE_3_6 for f in msg.field):
            continue
        assert theirs is not None, f"etcd has no message {full}"
        by_number = {f.number: f for f in theirs.field}
        for field in msg.field:
            if older and (msg.name, field.number) in SINCE_3_6:
                continue
            other = by_number.get(field.number)
            assert other is not None, f"{msg.name}.{field.name} = {field.number}: no such field number in etcd"
            assert (field.name, field.type, field.label) == (other.name, other.type, other.label), \
                f"{msg.name}.{field.name} = {field.number} differs from etcd's {other.name}"
            if field.type_name:
                assert ETCD_NAME.get(field.type_name, field.type_name) == other.type_name, \
                    f"{msg.name}.{field.name}: type {field.type_name} vs etcd {other.type_name}"
            checked += 1
    assert checked >= 60  # all of them, not a lucky few


def test_every_rpc_we_declare_exists_in_etcd(etcd_messages: dict[str, descriptor_pb2.DescriptorProto]) -> None:
    theirs = etcd_messages["services"]
    services = {s.name: {m.name: m for m in s.method} for s in theirs.service}  # type: ignore[attr-defined]
    for service in _ours().service:
        for method in service.method:
            other = services[service.name].get(method.name)
            assert other is not None, f"etcd has no /etcdserverpb.{service.name}/{method.name}"
            assert (method.input_type, method.output_type) == (other.input_type, other.output_type)
