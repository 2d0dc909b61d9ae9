"""Pod volumes on disk: Secret/ConfigMap/downwardAPI/projected files with the kubelet's atomic ``..data`` swap,
emptyDir, hostPath (a directory of the sandbox "node") and PersistentVolumeClaims (a directory per claim).

Secret and ConfigMap volumes are laid out exactly like the real kubelet's ``AtomicWriter``
(k8s.io/kubernetes pkg/volume/util/atomic_writer.go)::

    <volume>/..2026_11_29_14_44_21.123456789/tls.crt   the payload, in a fresh timestamped directory
    <volume>/..data -> ..2026_11_29_14_44_21.123456789 swapped with one rename(2) per update
    <volume>/tls.crt -> ..data/tls.crt                  what the container opens

so a process that opens ``tls.crt`` and then ``tls.key`` sees either the old pair or the new one for each
open, never a half-written file; the old timestamped directory is removed after the swap. An unchanged
payload is not rewritten. The kubelet applies updates after a configurable delay (the real kubelet takes up
to its sync period plus the cache TTL, about a minute; the sandbox default is 0.5 s).

PVC directories live under ``<sandbox>/pvc/<namespace>/<claim>-<uid8>`` and are keyed by the claim's UID:
they survive pod deletion and re-creation (StatefulSet members keep their data) and a claim deleted and
created again with the same name starts empty, as with a dynamically provisioned volume whose reclaim policy
is Delete.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

DATA_DIR = "..data"
DATA_TMP = "..data_tmp"
DEFAULT_MODE = 0o644


class VolumeError(Exception):
    """A volume cannot be set up yet (missing object or key); the message is the kubelet's FailedMount text."""


@dataclasses.dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int = DEFAULT_MODE


Payload = dict[str, FileProjection]


def decode_secret(secret: Obj) -> dict[str, bytes]:
    out = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    for k, v in (secret.get("stringData") or {}).items():  # a server stores these in data; be lenient
        out.setdefault(k, str(v).encode())
    return out


def decode_configmap(cm: Obj) -> dict[str, bytes]:
    out = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return out


def _check_path(path: str, what: str) -> str:
    norm = os.path.normpath(path)
    if path.startswith("/") or norm.startswith("..") or norm == "." or path.split("/")[0].startswith(".."):
        raise VolumeError(f"{what}: invalid path {path!r} (must be relative, without '..')")
    return norm


def project_keys(data: Mapping[str, bytes] | None, items: list[Obj] | None, default_mode: int | None, *,
                 kind: str, name: str, optional: bool) -> Payload:
    """Payload of a Secret/ConfigMap volume (or projection): all keys, or the listed ``items``."""
    mode = DEFAULT_MODE if default_mode is None else int(default_mode)
    if data is None:
        if optional:
            return {}
        raise VolumeError(f'{kind} "{name}" not found')
    out: Payload = {}
    if not items:
        for key, value in data.items():
            out[_check_path(key, f"{kind} {name}")] = FileProjection(value, mode)
        return out
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if optional:
                continue
            raise VolumeError(f"{kind.lower()} references non-existent {kind.lower()} key: {key}")
        out[_check_path(item.get("path") or key, f"{kind} {name}")] = FileProjection(
            data[key], int(item["mode"]) if item.get("mode") is not None else mode)
    return out


class AtomicWriter:
    """Writes payloads into ``target`` with the kubelet's ``..data`` symlink swap."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def _current(self) -> Payload | None:
        data_link = self.target / DATA_DIR
        if not data_link.is_symlink():
            return None
        base = self.target / os.readlink(data_link)
        out: Payload = {}
        for dirpath, _, files in os.walk(base):
            for f in files:
                p = Path(dirpath) / f
                out[str(p.relative_to(base))] = FileProjection(p.read_bytes(), p.stat().st_mode & 0o7777)
        return out

    def write(self, payload: Payload) -> bool:
        """Project ``payload``; returns False when it equals what is already there (nothing written)."""
        self.target.mkdir(parents=True, exist_ok=True)
        if self._current() == payload:
            return False
        old_dir = os.readlink(self.target / DATA_DIR) if (self.target / DATA_DIR).is_symlink() else None
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("..%Y_%m_%d_%H_%M_%S.") + f"{now.microsecond * 1000 + (os.getpid() % 1000):09d}"
        ts_dir = self.target / stamp
        n = 0
        while ts_dir.exists():
            n += 1
            ts_dir = self.target / f"{stamp}{n}"
        ts_dir.mkdir(mode=0o755)
        for rel, proj in payload.items():
            path = ts_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(proj.data)
            os.chmod(path, proj.mode)
        tmp_link = self.target / DATA_TMP
        if tmp_link.is_symlink() or tmp_link.exists():
            tmp_link.unlink()
        os.symlink(ts_dir.name, tmp_link)
        os.rename(tmp_link, self.target / DATA_DIR)  # the atomic swap
        tops = {rel.split("/", 1)[0] for rel in payload}
        for top in tops:
            link = self.target / top
            if not link.is_symlink():
                if link.exists():
                    shutil.rmtree(link) if link.is_dir() else link.unlink()
                os.symlink(f"{DATA_DIR}/{top}", link)
        for entry in os.listdir(self.target):
            if entry.startswith("..") or entry in tops:
                continue
            stale = self.target / entry
            if stale.is_symlink():
                stale.unlink()
        if old_dir and old_dir != ts_dir.name:
            shutil.rmtree(self.target / old_dir, ignore_errors=True)
        return True


def downward_payload(items: list[Obj], pod: Obj, pod_ip: str, default_mode: int | None) -> Payload:
    """Payload of a downwardAPI volume (fieldRef items: metadata name/namespace/uid/labels/annotations)."""
    meta = pod.get("metadata") or {}
    mode = DEFAULT_MODE if default_mode is None else int(default_mode)
    out: Payload = {}
    for item in items:
        ref = (item.get("fieldRef") or {}).get("fieldPath", "")
        if ref in ("metadata.labels", "metadata.annotations"):
            values = meta.get(ref.split(".")[1]) or {}
            text = "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
        elif ref == "metadata.name":
            text = meta.get("name", "")
        elif ref == "metadata.namespace":
            text = meta.get("namespace", "")
        elif ref == "metadata.uid":
            text = meta.get("uid", "")
        elif ref.startswith("metadata.labels['") or ref.startswith("metadata.annotations['"):
            field, key = ref[len("metadata."):].split("['", 1)
            text = str((meta.get(field) or {}).get(key.rstrip("']"), ""))
        elif ref == "status.podIP":
            text = pod_ip
        else:
            raise VolumeError(f"downwardAPI item {item.get('path')!r}: fieldPath {ref!r} is not supported")
        path = _check_path(item.get("path", ""), "downwardAPI")
        out[path] = FileProjection(text.encode(), int(item["mode"]) if item.get("mode") is not None else mode)
    return out


def decoded(obj: Obj | None, fn: Callable[[Obj], dict[str, bytes]]) -> dict[str, bytes] | None:
    """``fn(obj)`` (a decoder of a Secret's or ConfigMap's data), None for a missing object."""
    return None if obj is None else fn(obj)


def configmap_strings(cm: Obj | None) -> dict[str, str] | None:
    """A ConfigMap's data and binaryData as text, None for a missing ConfigMap."""
    if cm is None:
        return None
    return {k: v.decode(errors="replace") for k, v in decode_configmap(cm).items()}
