"""opsmanager.backup.store against a real S3 server: SeaweedFS's ``weed mini`` on loopback
(tests/fixtures/objectstore.py), plain HTTP and HTTPS with a CA of its own.

Round trip of a 20 MB file in parts with metadata, listing, deleting and pruning; then every failure a user can cause
and must be told how to fix: wrong credentials, a missing bucket, nothing listening, a store that never answers, the
wrong CA — each one error class, with a message naming the setting, and each bounded in time.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsmanager.backup import snapshot, store
from opsmanager_sandbox.objectstore import ObjectStoreServer

pytestmark = pytest.mark.slow

MIB = 1 << 20


def make_store(server: ObjectStoreServer, *, bucket: str = "backups", prefix: str = "backups",
               **kwargs: object) -> store.ObjectStore:
    options: dict[str, object] = {"access_key_id": server.access_key, "secret_access_key": server.secret_key,
                                  "prefix": prefix, "multipart_threshold": 8 * MIB, "multipart_chunksize": 8 * MIB,
                                  "connect_timeout": 2.0, "read_timeout": 10.0, "max_attempts": 2}
    if server.tls:
        options["ca_bundle"] = server.ca_pem
    options.update(kwargs)
    return store.ObjectStore(server.endpoint, bucket, **options)  # type: ignore[arg-type]


@pytest.fixture
def s3(object_store: ObjectStoreServer) -> Iterator[store.ObjectStore]:
    with make_store(object_store) as st:
        yield st


def test_round_trip_of_a_multipart_upload_with_metadata(s3: store.ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "snap.db"
    source.write_bytes(os.urandom(20 * MIB + 4321))
    digest = snapshot.sha256_file(source)
    key = s3.key("demo", "etcd", "20261202T160455Z-rev42.db")
    meta = {"sha256": digest, "revision": "42", "etcd-version": "3.6.16"}
    uploaded = s3.upload(source, key, metadata=meta)
    assert uploaded.key == key and uploaded.size == source.stat().st_size
    assert uploaded.etag.endswith("-3"), uploaded.etag  # three 8 MiB parts: it went multipart
    assert uploaded.metadata == meta
    assert abs(uploaded.last_modified - datetime.datetime.now(datetime.UTC)) < datetime.timedelta(minutes=5)

    back = tmp_path / "back.db"
    downloaded = s3.download(key, back)
    assert downloaded.metadata == meta and downloaded.size == uploaded.size
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest

    listed = s3.list("demo/etcd")
    assert [(o.key, o.size, o.metadata) for o in listed] == [(key, uploaded.size, None)]
    assert s3.list("demo/etcd", metadata=True)[0].metadata == meta
    assert s3.head(key) == downloaded

    s3.delete(key)
    s3.delete(key)  # idempotent
    assert s3.list("demo/etcd") == []
    with pytest.raises(store.ObjectNotFound, match=f"backups/{key}: no such object") as caught:
        s3.head(key)
    assert caught.value.operation == "HeadObject" and caught.value.key == key and not caught.value.transient
    with pytest.raises(store.ObjectNotFound):
        s3.download(key, tmp_path / "gone.db")
    assert not (tmp_path / "gone.db").exists()


def test_prune_keeps_the_newest_and_leaves_strangers(s3: store.ObjectStore, tmp_path: Path) -> None:
    small = tmp_path / "small.db"
    small.write_bytes(b"x" * 100)
    start = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    keys = [snapshot.object_key(s3.prefix, "demo", "pruned", start + datetime.timedelta(hours=h), 100 + h)
            for h in range(5)]
    for key in reversed(keys):
        s3.upload(small, key)
    stranger = s3.key("demo", "pruned", "notes.txt")
    other = snapshot.object_key(s3.prefix, "demo", "other", start, 1)
    s3.upload(small, stranger)
    s3.upload(small, other)

    assert s3.prune("demo", "pruned", keep=2) == keys[:3]
    assert [o.key for o in s3.list("demo/pruned")] == sorted([*keys[3:], stranger])
    assert [o.key for o in s3.list("demo/other")] == [other]
    assert s3.prune("demo", "pruned", keep=2) == []
    with pytest.raises(ValueError, match="keep must be at least 1"):
        s3.prune("demo", "pruned", keep=0)


async def test_the_async_face(s3: store.ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    source.write_bytes(b"async" * 1000)
    key = s3.key("demo", "async", "20261202T000000Z-rev1.db")
    aio = s3.aio
    await aio.check()
    assert (await aio.upload(source, key, metadata={"revision": "1"})).size == 5000
    assert (await aio.head(key)).metadata == {"revision": "1"}
    assert [o.key for o in await aio.list("demo/async")] == [key]
    await aio.download(key, tmp_path / "b.db")
    assert (tmp_path / "b.db").read_bytes() == source.read_bytes()
    assert await aio.prune("demo", "async", keep=1) == []
    await aio.delete(key)
    with pytest.raises(store.ObjectNotFound):
        await aio.head(key)


def test_keys_stay_under_the_prefix_and_metadata_is_checked(s3: store.ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "f"
    source.write_bytes(b"1")
    for bad in ("elsewhere/x.db", "backupsx/x.db", "backups/dir/"):
        with pytest.raises(ValueError):
            s3.delete(bad)
    with pytest.raises(ValueError, match="metadata key 'Sha256'"):
        s3.upload(source, s3.key("m"), metadata={"Sha256": "x"})
    with pytest.raises(ValueError, match="printable ASCII"):
        s3.upload(source, s3.key("m"), metadata={"note": "naïve"})


def test_wrong_credentials_are_access_denied(object_store: ObjectStoreServer, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    source = tmp_path / "f"
    source.write_bytes(b"1")
    wrong_secret = "not-the-secret-" + "z" * 20
    caplog.set_level(logging.DEBUG)
    for access_key, secret in ((object_store.access_key, wrong_secret), ("AKUNKNOWN0000000", wrong_secret)):
        with make_store(object_store, access_key_id=access_key, secret_access_key=secret) as st:
            for call in (st.check, lambda: st.upload(source, st.key("x.db")), lambda: st.list()):
                with pytest.raises(store.AccessDenied) as caught:
                    call()
                message = str(caught.value)
                assert message.startswith(f"spec.backup.destination.credentials: {object_store.endpoint} refused them")
                assert message.endswith("check the access key and the secret key")
                assert secret not in message and access_key not in message and not caught.value.transient
            assert secret not in repr(st) and access_key not in repr(st)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert wrong_secret not in logged and object_store.secret_key not in logged
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("opsmanager")]
    assert all(object_store.access_key not in m for m in ours)


def test_a_missing_bucket(object_store: ObjectStoreServer, tmp_path: Path) -> None:
    source = tmp_path / "f"
    source.write_bytes(b"1")
    with make_store(object_store, bucket="no-such-bucket") as st:
        for call in (st.check, lambda: st.list(), lambda: st.upload(source, st.key("x.db")),
                     lambda: st.head(st.key("x.db"))):
            with pytest.raises(store.BucketNotFound) as caught:
                call()
            assert str(caught.value) == (f"spec.backup.destination.bucket 'no-such-bucket': no such bucket at "
                                         f"{object_store.endpoint}; create it or fix the bucket name")


def test_nothing_listening_is_unreachable_quickly() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago, and nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with store.ObjectStore(endpoint, "backups", access_key_id="a", secret_access_key="b", connect_timeout=1.0,
                           max_attempts=3) as st:
        started = time.monotonic()
        with pytest.raises(store.StoreUnreachable) as caught:
            st.list()
        took = time.monotonic() - started
    assert str(caught.value) == (f"spec.backup.destination.endpoint {endpoint}: connection refused (3 attempts); "
                                 "check the endpoint and that the store is running")
    assert caught.value.transient and took < 10, took


def test_a_store_that_never_answers_times_out() -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does), never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with store.ObjectStore(endpoint, "backups", access_key_id="a", secret_access_key="b", read_timeout=0.5,
                               max_attempts=2) as st:
            started = time.monotonic()
            with pytest.raises(store.StoreUnreachable, match=r"no answer within 0.5s \(2 attempts\); check the "
                                                             "endpoint and that the store is running"):
                st.check()
            took = time.monotonic() - started
    assert took < 8, took


def test_tls_with_the_right_ca(object_store_tls: ObjectStoreServer, tmp_path: Path) -> None:
    assert object_store_tls.endpoint.startswith("https://127.0.0.1:")
    source = tmp_path / "f"
    source.write_bytes(b"tls" * 100)
    with make_store(object_store_tls) as st:
        st.check()
        key = st.key("demo", "tls", "20261202T000000Z-rev3.db")
        assert st.upload(source, key, metadata={"revision": "3"}).size == 300
        st.download(key, tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == source.read_bytes()
        st.delete(key)


def test_tls_with_the_wrong_ca_fails_clearly(object_store_tls: ObjectStoreServer) -> None:
    from opsmanager import pki

    other_ca = pki.make_ca("some-other-ca")
    with make_store(object_store_tls, ca_bundle=other_ca.cert_pem) as st:
        started = time.monotonic()
        with pytest.raises(store.TLSVerificationFailed) as caught:
            st.check()
        assert time.monotonic() - started < 10
    message = str(caught.value)
    assert message.startswith(f"spec.backup.destination.endpoint {object_store_tls.endpoint}: TLS verification "
                              "failed (")
    assert "certificate verify failed" in message
    assert message.endswith("check that spec.backup.destination.caBundle holds the CA that signed the store's "
                            "certificate and that the certificate names the endpoint's host")
    assert isinstance(caught.value, store.StoreUnreachable) and not caught.value.transient
    with pytest.raises(store.TLSVerificationFailed):  # the system's CAs do not know the sandbox's either
        with make_store(object_store_tls, ca_bundle=None) as st:
            st.check()


def test_a_ca_bundle_file_lives_as_long_as_the_store(object_store_tls: ObjectStoreServer) -> None:
    st = make_store(object_store_tls)
    assert st._ca_file is not None
    path = Path(st._ca_file.peek()[2][0])  # type: ignore[index]
    assert path.read_bytes() == object_store_tls.ca_pem
    st.close()
    assert not path.exists()
    with pytest.raises(ValueError, match="caBundle: not a PEM certificate bundle"):
        make_store(object_store_tls, ca_bundle=b"garbage")
