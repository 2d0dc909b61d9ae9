"""After an operation: did every member end up with the same data, and is every acknowledged write there?

Two checks, run by the end-to-end tests (:meth:`e2e.scenario.Scenario.assert_no_loss`) and the benchmark after
every operation, once the live writer has stopped:

* **read-back** (:meth:`e2e.writer.Writer.read_back`): a linearizable range read of the writer's prefix; every
  acknowledged sequence number must be stored;
* **HashKV** (:func:`hashkv_agree`): wait until every member reports the same revision (a follower applies the
  last entries a little after the leader), then ask each member for ``HashKV`` at that one revision; the hashes must
  be equal. A disagreement names the members and their hashes. Members are asked with whichever client identity
  (or plain http) they accept, member by member — after a CA change they may accept only the new one.

``check(w, endpoints, identities)`` runs both and returns a :class:`Consistency`, the record the benchmark keeps
(``read_back_ok``, ``missing_writes``, ``hashkv_agree``); :meth:`Consistency.problems` is what a test asserts empty.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from e2e import writer
from opsmanager.etcd import access, errors, maintenance
from opsmanager.etcd import client as etcd_client


@dataclasses.dataclass(frozen=True)
class HashKV:
    """The members' HashKV at one revision: ``agree`` when every member answered with the same hash."""

    agree: bool
    revision: int
    hashes: dict[str, str]  # member -> hash (hex)
    problem: str = ""  # why not: members that disagree, or never reached one revision / never answered

    def describe(self) -> str:
        views = ", ".join(f"{k}={v}" for k, v in sorted(self.hashes.items()))
        return f"HashKV at revision {self.revision}: {views}" + (f" — {self.problem}" if self.problem else "")


class HashKVDisagree(AssertionError):
    """Members disagree on HashKV at one revision (or could not be compared): the message names them."""


async def _one_status(clients: Sequence[etcd_client.EtcdClient], ep: access.Endpoint,
                      timeout: float) -> tuple[etcd_client.EtcdClient, etcd_client.MemberStatus] | str:
    """The first client (identity) ``ep`` answers Status for, or the last error."""
    last = "no client"
    for c in clients:
        try:
            return c, await c.maintenance.status(ep.name, timeout=timeout)
        except errors.EtcdError as err:
            last = f"{type(err).__name__}: {err}"
    return last


async def hashkv_agree(endpoints: Sequence[access.Endpoint], identities: Sequence[access.TLSIdentity | None], *,
                       timeout: float = 30.0, check: bool = True, expected: int | None = None,
                       credentials: access.Credentials | None = None) -> HashKV:
    """Wait (up to ``timeout`` s) until every member answers at one revision, then compare their HashKV there.
    With ``check`` a disagreement (or no common revision in time) raises :class:`HashKVDisagree`. ``expected``:
    how many members there should be (fewer endpoints — pods without an address — cannot agree)."""
    if not endpoints or (expected is not None and len(endpoints) < expected):
        result = HashKV(agree=False, revision=0, hashes={},
                        problem=f"{len(endpoints)} member(s) reachable, expected {expected or 'at least one'}")
        if check:
            raise HashKVDisagree(result.describe())
        return result
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # Plain http needs no identity: the no-identity client gets the http scheme only.
    clients = [etcd_client.EtcdClient([e if i is not None else e.with_schemes("http") for e in endpoints], tls=i,
                                      timeout=2.0, credentials=credentials) for i in identities]
    try:
        while True:
            found = await asyncio.gather(*(_one_status(clients, ep, 2.0) for ep in endpoints))
            problem = ""
            answered = {ep.name: f for ep, f in zip(endpoints, found, strict=True) if not isinstance(f, str)}
            silent = {ep.name: f for ep, f in zip(endpoints, found, strict=True) if isinstance(f, str)}
            revisions = {name: st.revision for name, (_c, st) in answered.items()}
            if silent:
                problem = "no answer from " + "; ".join(f"{n}: {e}" for n, e in sorted(silent.items()))
            elif len(set(revisions.values())) > 1:
                problem = "members at different revisions: " + ", ".join(
                    f"{n}={r}" for n, r in sorted(revisions.items()))
            else:
                revision = next(iter(revisions.values()))
                try:
                    hashes = await asyncio.gather(*(c.hash_kv(name, revision=revision, timeout=5.0)
                                                    for name, (c, _st) in answered.items()))
                except errors.EtcdError as err:  # a member went away between Status and HashKV: look again
                    hashes, problem = [], f"HashKV at revision {revision}: {type(err).__name__}: {err}"
            if not problem:
                views = {h.endpoint: f"{h.hash:08x}" for h in hashes}
                problems = maintenance.inconsistent_hashes(hashes)
                result = HashKV(agree=not problems, revision=revision, hashes=views,
                                problem="members disagree: " + "; ".join(problems) if problems else "")
                if check and not result.agree:
                    raise HashKVDisagree(result.describe())
                return result
            if loop.time() >= deadline:
                result = HashKV(agree=False, revision=max(revisions.values(), default=0), hashes={},
                                problem=f"{problem} (after {timeout:.0f}s)")
                if check:
                    raise HashKVDisagree(result.describe())
                return result
            await asyncio.sleep(0.1)
    finally:
        for c in clients:
            await c.close()


@dataclasses.dataclass(frozen=True)
class Consistency:
    """Both checks after one operation."""

    read_back: writer.ReadBack | None  # None: no target could read the prefix (``read_back_error`` says why)
    read_back_error: str
    hashkv: HashKV

    @property
    def read_back_ok(self) -> bool:
        return self.read_back is not None and self.read_back.ok

    @property
    def missing_writes(self) -> int | None:
        return None if self.read_back is None else len(self.read_back.missing)

    def problems(self) -> list[str]:
        out = []
        if self.read_back is None:
            out.append(f"read-back failed: {self.read_back_error}")
        elif not self.read_back.ok:
            out.append(self.read_back.describe())
        if not self.hashkv.agree:
            out.append(self.hashkv.describe())
        return out

    def record(self) -> dict[str, Any]:
        """The benchmark's fields."""
        return {"read_back_ok": self.read_back_ok, "missing_writes": self.missing_writes,
                "missing_write_seqs": list(self.read_back.missing[:50]) if self.read_back is not None else [],
                "acknowledged_writes": self.read_back.acknowledged if self.read_back is not None else None,
                "read_back_error": self.read_back_error, "hashkv_agree": self.hashkv.agree,
                "hashkv_revision": self.hashkv.revision, "hashkv": self.hashkv.describe()}


async def check(w: writer.Writer, endpoints: Sequence[access.Endpoint],
                identities: Sequence[access.TLSIdentity | None], *, timeout: float = 30.0,
                expected: int | None = None, credentials: access.Credentials | None = None) -> Consistency:
    """Read-back and HashKV after ``w`` stopped; never raises for a failed check (see :meth:`Consistency.problems`)."""
    read: writer.ReadBack | None = None
    error = ""
    try:
        read = await w.read_back(identities=[i for i in identities if i is not None], check=False)
    except errors.EtcdError as err:
        error = f"{type(err).__name__}: {err}"
    try:
        hashes = await hashkv_agree(endpoints, identities, timeout=timeout, check=False, expected=expected,
                                    credentials=credentials)
    except (errors.EtcdError, ValueError) as err:  # a member answered Status, then not HashKV
        hashes = HashKV(agree=False, revision=0, hashes={}, problem=f"{type(err).__name__}: {err}")
    return Consistency(read, error, hashes)
