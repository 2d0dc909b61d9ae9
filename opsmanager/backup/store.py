"""An S3-compatible object store for etcd snapshots: upload, download, head, list, delete, prune — one bucket and
one prefix.

:class:`ObjectStore` is a thin layer over boto3's S3 client (D27.2) that fixes what a backup needs and S3 clients
leave open:

- **Nothing hangs.** Connect and read timeouts, and a bounded number of attempts (botocore's ``standard`` retry
  mode: transient errors and throttling, exponential backoff with jitter), for every call; multipart transfers
  retry each part the same way. A store that does not answer fails within about ``connect_timeout ×
  max_attempts`` plus the backoff, never later.
- **One error family.** Every failure is a :class:`StoreError`; the kinds a user can fix have their own class and a
  message naming the setting and the fix (``spec.backup.destination.endpoint https://…: connection refused; check
  the endpoint and that the store is running``). The botocore exception is chained as ``__cause__``::

      StoreError                  anything else the store answered (the S3 error code is kept in ``code``)
      ├── StoreUnreachable        no connection, no answer in time, the connection dropped  (transient)
      │   └── TLSVerificationFailed   the store's certificate is not from the CA bundle, or names another host
      ├── BucketNotFound          the bucket does not exist
      ├── AccessDenied            the credentials are wrong, or may not do this
      └── ObjectNotFound          no object with that key

- **Credentials never show.** They go to the client and are not kept: not in ``repr``, not in a log line, not in
  an error message (the store's own message is kept, and S3 stores do not echo secrets).
- **Path-style addressing** (``https://host/bucket/key``): S3-compatible stores serve it, and a private endpoint
  needs no wildcard DNS or certificate for ``bucket.host``.
- **Checksums only when required** (``request_checksum_calculation``/``response_checksum_validation``:
  ``when_required``): botocore's default CRC trailers are not understood by every S3-compatible store, and a
  snapshot's integrity is checked end to end anyway — its ``sha256`` metadata and etcd's own trailer.
- **Keys stay under the prefix.** Every key a method takes must start with ``<prefix>/``: a backup tool never
  touches what it was not configured for, least of all when it deletes.

Uploads of files above ``multipart_threshold`` go in parts (s3transfer), with user metadata (``sha256``,
``revision``, …, stored as ``x-amz-meta-*``). Each call is blocking; :class:`AsyncObjectStore` (``store.aio``) runs
them in a worker thread for the asyncio operator. The client is thread-safe; one store may serve many tasks.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime
import logging
import os
import re
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

import boto3
import botocore.config
import botocore.exceptions
import s3transfer.exceptions
from boto3.s3.transfer import TransferConfig, create_transfer_manager

from opsmanager.backup import snapshot

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

DEFAULT_FIELD: Final = "spec.backup.destination"
MIB: Final = 1 << 20
_META_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_META_LIMIT: Final = 2048  # S3: the user metadata of one object, keys and values, at most 2 KB


class StoreError(Exception):
    """Base class. ``operation`` is the S3 call (``PutObject``, ``ListObjectsV2``…), ``key`` the object's key when
    there was one, ``code`` the store's error code (``NoSuchBucket``…) when it answered one."""

    transient: bool = False
    """Would the same call succeed later without anyone changing the configuration?"""

    def __init__(self, message: str, *, operation: str = "", bucket: str = "", key: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        self.bucket = bucket
        self.key = key
        self.code = code


class StoreUnreachable(StoreError):
    """No connection, no answer within the timeouts, or the connection dropped: down, restarting, wrong host or
    port. Transient: the same call may work once the store is back."""

    transient = True


class TLSVerificationFailed(StoreUnreachable):
    """The TLS handshake failed: the store's certificate is not signed by a CA of the bundle, or does not name the
    endpoint's host. Not transient: the CA bundle or the endpoint has to change."""

    transient = False


class BucketNotFound(StoreError):
    """The bucket does not exist (create it, or fix the name)."""


class AccessDenied(StoreError):
    """The store refused the credentials (unknown access key, wrong secret, clock skew) or their permissions."""


class ObjectNotFound(StoreError):
    """No object with that key."""


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """One object: its key, size in bytes, last change (UTC), ETag (``<md5>`` or ``<md5>-<parts>`` for a multipart
    upload) and user metadata (None when not fetched: a listing does not carry it)."""

    key: str
    size: int
    last_modified: datetime.datetime
    etag: str = ""
    metadata: Mapping[str, str] | None = None


_UNREACHABLE_HINT: Final = "check the endpoint and that the store is running"
_CONNECT_REASONS: Final = (
    ("connection refused", "connection refused"),
    ("name or service not known", "the host name does not resolve"),
    ("temporary failure in name resolution", "the host name does not resolve"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "the network is unreachable"),
    ("connection reset", "the connection was reset"),
    ("timed out", "the connection timed out"),
)


def _connect_reason(err: BaseException) -> str:
    """A short cause of a connection failure, from the chain of underlying errors (urllib3, socket)."""
    seen: list[str] = []
    current: BaseException | None = err
    while current is not None and len(seen) < 8:
        seen.append(str(current))
        inner = getattr(current, "kwargs", {}).get("error") if isinstance(current, botocore.exceptions.BotoCoreError) \
            else None
        current = inner if isinstance(inner, BaseException) else (current.__cause__ or current.__context__)
    text = " ".join(seen).lower()
    for needle, reason in _CONNECT_REASONS:
        if needle in text:
            return reason
    return seen[-1] if seen else type(err).__name__


class ObjectStore:
    """One bucket and prefix of an S3-compatible store (see the module docstring).

    ``endpoint``: ``https://host:port`` (or ``http://``); ``ca_bundle``: PEM bytes of the CA(s) to trust for an
    ``https`` endpoint instead of the system's; ``field``: the setting these values came from, named in error
    messages (``<field>.endpoint``, ``<field>.bucket``, ``<field>.credentials``). Close it (or use ``with``) to
    remove the CA bundle's temporary file.
    """

    def __init__(self, endpoint: str, bucket: str, *, access_key_id: str, secret_access_key: str, prefix: str = "",
                 region: str = "us-east-1", ca_bundle: bytes | None = None, field: str = DEFAULT_FIELD,
                 connect_timeout: float = 5.0, read_timeout: float = 60.0, max_attempts: int = 3,
                 multipart_threshold: int = 16 * MIB, multipart_chunksize: int = 8 * MIB,
                 max_concurrency: int = 4) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"{field}.endpoint {endpoint!r}: not an http:// or https:// URL")
        if not bucket:
            raise ValueError(f"{field}.bucket: empty")
        if multipart_chunksize < 5 * MIB:
            raise ValueError(f"multipart_chunksize {multipart_chunksize}: S3 parts are at least 5 MiB")
        self.endpoint = endpoint.rstrip("/")
        self.bucket = bucket
        self.prefix = snapshot.normalize_prefix(prefix)
        self.region = region
        self.field = field
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_attempts = max_attempts
        self._transfer = TransferConfig(multipart_threshold=multipart_threshold,
                                        multipart_chunksize=multipart_chunksize, max_concurrency=max_concurrency,
                                        num_download_attempts=max_attempts, use_threads=True)
        verify: bool | str = True
        self._ca_file: weakref.finalize[[str], ObjectStore] | None = None  # botocore takes a CA bundle as a file only
        if ca_bundle is not None:
            if not ca_bundle.strip().startswith(b"-----BEGIN CERTIFICATE-----"):
                raise ValueError(f"{field}.caBundle: not a PEM certificate bundle")
            fd, verify = tempfile.mkstemp(prefix="opsmanager-store-ca-", suffix=".pem")
            with os.fdopen(fd, "wb") as f:
                f.write(ca_bundle)
            self._ca_file = weakref.finalize(self, _remove, verify)
        config = botocore.config.Config(
            region_name=region, signature_version="s3v4",
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required", response_checksum_validation="when_required",
            max_pool_connections=max(10, max_concurrency * 2),
        )
        session = boto3.session.Session()  # a session of its own: no profile, no environment credentials
        self._client: S3Client = session.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key, aws_session_token=None, verify=verify, config=config)

    def __repr__(self) -> str:
        return f"ObjectStore({self.endpoint!r}, bucket={self.bucket!r}, prefix={self.prefix!r}, region={self.region!r})"

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()
        if self._ca_file is not None:
            self._ca_file()  # removes the file, once

    @property
    def aio(self) -> AsyncObjectStore:
        """The same store, each call a coroutine run in a worker thread."""
        return AsyncObjectStore(self)

    # -- keys ------------------------------------------------------------------------------------------------------

    def key(self, *parts: str) -> str:
        """``<prefix>/<parts…>`` (no empty part)."""
        if not parts or any(not p or p.startswith("/") or p.endswith("/") for p in parts):
            raise ValueError(f"key parts {parts!r}: each must be non-empty, without a leading or trailing '/'")
        return "/".join((self.prefix, *parts) if self.prefix else parts)

    def _check_key(self, key: str) -> str:
        if not key or key.endswith("/"):
            raise ValueError(f"{key!r} is not an object key")
        if self.prefix and not key.startswith(self.prefix + "/"):
            raise ValueError(f"{key!r} is not under the store's prefix {self.prefix!r}/")
        return key

    # -- calls -----------------------------------------------------------------------------------------------------

    def check(self) -> None:
        """That the bucket exists and the credentials may list it (a cheap call for a readiness or status check)."""
        with self._errors("ListObjectsV2"):
            self._client.list_objects_v2(Bucket=self.bucket, Prefix=self._list_root(), MaxKeys=1)

    def upload(self, path: str | Path, key: str, *, metadata: Mapping[str, str] | None = None,
               content_type: str = "application/octet-stream") -> ObjectInfo:
        """Upload a file (in parts above ``multipart_threshold``) with user metadata; returns the stored object's
        head, whose size is checked against the file's."""
        key = self._check_key(key)
        meta = _check_metadata(metadata or {})
        size = Path(path).stat().st_size
        log.debug("uploading %s (%d bytes) to %s/%s", path, size, self.bucket, key)
        with self._errors("PutObject", key), create_transfer_manager(self._client, self._transfer) as manager:
            manager.upload(str(path), self.bucket, key,
                           extra_args={"Metadata": dict(meta), "ContentType": content_type}).result()
        info = self.head(key)
        if info.size != size:
            raise StoreError(f"{self.bucket}/{key}: the store holds {info.size} bytes after uploading {size}",
                             operation="PutObject", bucket=self.bucket, key=key)
        return info

    def download(self, key: str, path: str | Path) -> ObjectInfo:
        """Download an object to ``path`` (written under a temporary name and renamed: a failed download leaves no
        partial file at ``path``); returns its head (with metadata)."""
        key = self._check_key(key)
        info = self.head(key)
        log.debug("downloading %s/%s (%d bytes) to %s", self.bucket, key, info.size, path)
        with self._errors("GetObject", key), create_transfer_manager(self._client, self._transfer) as manager:
            manager.download(self.bucket, key, str(path)).result()
        got = Path(path).stat().st_size
        if got != info.size:
            raise StoreError(f"{self.bucket}/{key}: downloaded {got} bytes of {info.size}", operation="GetObject",
                             bucket=self.bucket, key=key)
        return info

    def head(self, key: str) -> ObjectInfo:
        """Size, last change, ETag and user metadata of one object; :class:`ObjectNotFound` if there is none."""
        key = self._check_key(key)
        with self._errors("HeadObject", key):
            r = self._client.head_object(Bucket=self.bucket, Key=key)
        return ObjectInfo(key, int(r["ContentLength"]), r["LastModified"].astimezone(datetime.UTC),
                          r.get("ETag", "").strip('"'), dict(r.get("Metadata", {})))

    def list(self, under: str = "", *, metadata: bool = False) -> builtins.list[ObjectInfo]:
        """Every object under ``<prefix>/<under>`` (``under`` ends at a '/' boundary, e.g. ``ns/etcd``), in key
        order; ``metadata=True`` fetches each object's user metadata (one HEAD per object)."""
        root = self._list_root(under)
        found: builtins.list[ObjectInfo] = []
        with self._errors("ListObjectsV2"):
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=root):
                for o in page.get("Contents", []):
                    found.append(ObjectInfo(o["Key"], int(o["Size"]), o["LastModified"].astimezone(datetime.UTC),
                                            o.get("ETag", "").strip('"')))
        if metadata:
            found = [self.head(o.key) for o in found]
        return sorted(found, key=lambda o: o.key)

    def delete(self, key: str) -> None:
        """Delete one object (no error when it does not exist: S3's DELETE is idempotent)."""
        key = self._check_key(key)
        log.debug("deleting %s/%s", self.bucket, key)
        with self._errors("DeleteObject", key):
            self._client.delete_object(Bucket=self.bucket, Key=key)

    def prune(self, namespace: str, etcd: str, keep: int) -> builtins.list[str]:
        """Delete all but the ``keep`` newest snapshots of one cluster (:func:`snapshot.to_prune`: objects under
        its folder that are not snapshot keys are left alone); returns the deleted keys, oldest first."""
        folder = snapshot.cluster_prefix(self.prefix, namespace, etcd)
        doomed = snapshot.to_prune((o.key for o in self.list(folder.removeprefix(self.prefix).strip("/"))), keep)
        for key in doomed:
            self.delete(key)
        return doomed

    # -- errors ----------------------------------------------------------------------------------------------------

    def _list_root(self, under: str = "") -> str:
        parts = [p for p in (self.prefix, under.strip("/")) if p]
        return "/".join(parts) + "/" if parts else ""

    @contextlib.contextmanager
    def _errors(self, operation: str, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except s3transfer.exceptions.RetriesExceededError as err:  # a download's attempts ran out
            last = err.last_exception
            self._raise(operation, key, last if isinstance(last, Exception) else err, err)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
            self._raise(operation, key, err, err)

    def _raise(self, operation: str, key: str | None, err: Exception, cause: Exception) -> NoReturn:
        where = f"{self.bucket}/{key}" if key else self.bucket
        common: dict[str, Any] = {"operation": operation, "bucket": self.bucket, "key": key}
        endpoint = f"{self.field}.endpoint {self.endpoint}"
        if isinstance(err, botocore.exceptions.SSLError):
            raise TLSVerificationFailed(
                f"{endpoint}: TLS verification failed ({_connect_reason(err)}); check that {self.field}.caBundle "
                "holds the CA that signed the store's certificate and that the certificate names the endpoint's host",
                **common) from cause
        if isinstance(err, (botocore.exceptions.ConnectTimeoutError, botocore.exceptions.ReadTimeoutError)):
            timeout = self.connect_timeout if isinstance(err, botocore.exceptions.ConnectTimeoutError) \
                else self.read_timeout
            what = "no connection" if isinstance(err, botocore.exceptions.ConnectTimeoutError) else "no answer"
            raise StoreUnreachable(f"{endpoint}: {what} within {timeout:g}s ({self.max_attempts} attempts); "
                                   f"{_UNREACHABLE_HINT}", **common) from cause
        if isinstance(err, (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)):
            raise StoreUnreachable(f"{endpoint}: {_connect_reason(err)} ({self.max_attempts} attempts); "
                                   f"{_UNREACHABLE_HINT}", **common) from cause
        if isinstance(err, botocore.exceptions.ClientError):
            error = err.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            said = str(error.get("Message", "")) or code or f"HTTP {status}"
            common["code"] = code or str(status)
            if code == "NoSuchBucket" or (operation == "HeadBucket" and status == 404):
                raise BucketNotFound(f"{self.field}.bucket {self.bucket!r}: no such bucket at {self.endpoint}; "
                                     "create it or fix the bucket name", **common) from cause
            if code in ("NoSuchKey", "NotFound") or (operation == "HeadObject" and status == 404):
                if operation == "HeadObject" and not self._bucket_exists():
                    raise BucketNotFound(f"{self.field}.bucket {self.bucket!r}: no such bucket at {self.endpoint}; "
                                         "create it or fix the bucket name", **common) from cause
                raise ObjectNotFound(f"{where}: no such object", **common) from cause
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
                        "AuthorizationHeaderMalformed"):
                raise AccessDenied(f"{self.field}.credentials: {self.endpoint} refused them ({code}: {said}); check "
                                   "the access key and the secret key", **common) from cause
            if code == "RequestTimeTooSkewed":
                raise AccessDenied(f"{self.field}.endpoint {self.endpoint}: the request's time is too far from the "
                                   f"store's ({said}); check this machine's clock", **common) from cause
            if code in ("AccessDenied", "AllAccessDisabled", "Forbidden") or status == 403:
                raise AccessDenied(f"{self.field}.credentials: {operation} on {where} is not allowed "
                                   f"({code or status}: {said}); grant these credentials read, write and list on the "
                                   "bucket", **common) from cause
            raise StoreError(f"{operation} {where} at {self.endpoint}: {code or status}: {said}", **common) from cause
        raise StoreError(f"{operation} {where} at {self.endpoint}: {err}", **common) from cause

    def _bucket_exists(self) -> bool:
        """Whether HEAD on the bucket finds it (a HEAD's 404 has no body to tell a missing key from a missing
        bucket); True when that cannot be told."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as err:
            return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)) != 404
        except botocore.exceptions.BotoCoreError:
            return True
        return True


def _check_metadata(metadata: Mapping[str, str]) -> Mapping[str, str]:
    """User metadata as S3 stores it: lower-case keys (``[a-z0-9-]``), printable ASCII values, 2 KB in all."""
    total = 0
    for k, v in metadata.items():
        if not _META_KEY.match(k):
            raise ValueError(f"metadata key {k!r}: lower-case letters, digits and '-' only")
        if not isinstance(v, str) or not v.isascii() or not v.isprintable():
            raise ValueError(f"metadata {k!r}: the value must be printable ASCII text")
        total += len(k) + len(v)
    if total > _META_LIMIT:
        raise ValueError(f"metadata is {total} bytes: S3 keeps at most {_META_LIMIT}")
    return metadata


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class AsyncObjectStore:
    """:class:`ObjectStore`'s calls as coroutines (``asyncio.to_thread``): the event loop never blocks on the store.
    Cancelling the coroutine does not stop a transfer already running in its thread; the timeouts bound it."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"AsyncObjectStore({self.store!r})"

    async def check(self) -> None:
        await asyncio.to_thread(self.store.check)

    async def upload(self, path: str | Path, key: str, *, metadata: Mapping[str, str] | None = None,
                     content_type: str = "application/octet-stream") -> ObjectInfo:
        return await asyncio.to_thread(self.store.upload, path, key, metadata=metadata, content_type=content_type)

    async def download(self, key: str, path: str | Path) -> ObjectInfo:
        return await asyncio.to_thread(self.store.download, key, path)

    async def head(self, key: str) -> ObjectInfo:
        return await asyncio.to_thread(self.store.head, key)

    async def list(self, under: str = "", *, metadata: bool = False) -> builtins.list[ObjectInfo]:
        return await asyncio.to_thread(self.store.list, under, metadata=metadata)

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self.store.delete, key)

    async def prune(self, namespace: str, etcd: str, keep: int) -> builtins.list[str]:
        return await asyncio.to_thread(self.store.prune, namespace, etcd, keep)
