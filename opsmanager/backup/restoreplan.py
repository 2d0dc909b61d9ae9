"""The restore plan: what the engine writes into a ConfigMap and every member's ``restore`` init container
(:mod:`opsmanager.backup.restore`, ``opsmanager restore-member``) follows. Pure (a model and its validation): the engine
builds one without importing the init container's program.
"""

from __future__ import annotations

import re
from pathlib import Path

import pydantic

from opsmanager.backup import snapshot

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?$")
_URL = re.compile(r"^https?://[^\s,=]+$")


class PlanError(ValueError):
    """The plan file is not a valid restore plan (the message names the field)."""


class RestorePlan(pydantic.BaseModel):
    """One restore of an Etcd, the same for every member (each picks its own peer URL by its name). JSON keys are
    camelCase (``initialCluster``, ``peerURLs``, ``dataDir``, ``etcdVersion``, ``caFile``); :meth:`to_json` and
    :meth:`from_json` convert."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True)

    id: str = pydantic.Field(description="This restore (e.g. the EtcdOpsRequest's UID): the marker holds it.")
    bucket: str = pydantic.Field(min_length=1)
    key: str = pydantic.Field(min_length=1, description="The snapshot's object key (under ``prefix``).")
    endpoint: str = pydantic.Field(pattern=r"^https?://", description="The S3 endpoint URL.")
    region: str = "us-east-1"
    prefix: str = ""
    ca_file: str | None = pydantic.Field(default=None, alias="caFile",
                                         description="A mounted PEM bundle to trust for an https endpoint.")
    sha256: str = pydantic.Field(description="The SHA-256 of the whole object (hex), as the backup recorded it.")
    revision: int = pydantic.Field(ge=0, description="The revision inside the snapshot, as the backup recorded it.")
    initial_cluster: str = pydantic.Field(alias="initialCluster", description="``name=peerURL,…`` of every member.")
    token: str = pydantic.Field(
        min_length=1, description="The new cluster's ``--initial-cluster-token``: with the peer URLs it makes the "
                                  "cluster and member IDs, so it must differ from the old cluster's (e.g. name the "
                                  "restore) for the restored cluster to be a new one.")
    peer_urls: dict[str, str] = pydantic.Field(alias="peerURLs", description="Member name → its peer URL.")
    data_dir: str = pydantic.Field(alias="dataDir", description="The member's ``--data-dir``.")
    etcd_version: str = pydantic.Field(alias="etcdVersion", description="The etcd version (``3.6.16``).")
    root_password_file: str | None = pydantic.Field(
        default=None, alias="rootPasswordFile",
        description="A mounted file holding the root password the restored members must take (the auth Secret's "
                    "``password``); None for an Etcd without authentication.")

    @pydantic.field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"{value!r}: 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value

    @pydantic.field_validator("sha256")
    @classmethod
    def _sha(cls, value: str) -> str:
        if not _SHA256.match(value):
            raise ValueError(f"{value!r} is not 64 lower-case hex digits")
        return value

    @pydantic.field_validator("etcd_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError(f"{value!r} is not an etcd version such as 3.6.16")
        return value

    @pydantic.field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: str) -> str:
        path = Path(value)
        if not path.is_absolute() or path.parent == path or ".." in path.parts:
            raise ValueError(f"{value!r}: an absolute path below a directory (e.g. /var/lib/etcd/data)")
        return value

    @pydantic.field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return snapshot.normalize_prefix(value)

    @pydantic.model_validator(mode="after")
    def _members(self) -> RestorePlan:
        cluster = self.initial_cluster_map
        if not self.peer_urls:
            raise ValueError("peerURLs is empty")
        for name, url in self.peer_urls.items():
            if not _URL.match(url):
                raise ValueError(f"peerURLs[{name!r}] {url!r} is not an http(s) URL")
            if cluster.get(name) != [url]:  # etcdutl compares the two as strings first (no DNS lookup if equal)
                raise ValueError(f"peerURLs[{name!r}] is {url!r}, initialCluster lists {name!r} with "
                                 f"{cluster.get(name, [])}: they must be the same one URL")
        if set(cluster) != set(self.peer_urls):
            raise ValueError(f"initialCluster names {sorted(cluster)}, peerURLs {sorted(self.peer_urls)}")
        prefix = self.prefix
        if prefix and not self.key.startswith(prefix + "/"):
            raise ValueError(f"key {self.key!r} is not under prefix {prefix!r}")
        return self

    @property
    def initial_cluster_map(self) -> dict[str, list[str]]:
        """``initialCluster`` parsed: name → its peer URLs (a name may be listed with several)."""
        out: dict[str, list[str]] = {}
        for part in self.initial_cluster.split(","):
            name, sep, url = part.strip().partition("=")
            if not sep or not name or not _URL.match(url):
                raise ValueError(f"initialCluster {self.initial_cluster!r}: {part!r} is not name=http(s)://host:port")
            out.setdefault(name, []).append(url)
        return out

    @property
    def etcd_minor(self) -> tuple[int, int]:
        match = _VERSION.match(self.etcd_version)
        assert match is not None  # validated
        return int(match.group(1)), int(match.group(2))

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> RestorePlan:
        """The plan in ``text``; :class:`PlanError` naming each bad field."""
        try:
            return cls.model_validate_json(text)
        except pydantic.ValidationError as err:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {e['msg']}" for e in err.errors())
            raise PlanError(problems) from None
