"""The one filer of the requests the operator files by itself: an ``EtcdOpsRequest`` once per episode.

Four parts of the operator file requests on their own — CA rollover (:mod:`opsmanager.tls.rollover`), auto-renew,
auto-defragment and the backup schedule (:mod:`opsmanager.lifecycle`). Each decides *whether* and for *which
episode* (a new CA, an expiry, a reclaimable share over the policy, a schedule slot); this module files:

- **a deterministic name per episode**: the caller derives the request's name from the episode, so a restarted
  operator that decides again creates the same name and gets AlreadyExists (= filed already);
- **the trigger label and the owner** are in the body (:func:`opsmanager.api.opsrequest.filed_request`);
- **created first, remembered second**: the episode and the request are recorded in the Etcd's
  ``status.lifecycle.filed`` (one entry per trigger, :class:`Remember`) after the create, through the one status
  writer. A crash in between leaves no record; the next decision files the same name, gets AlreadyExists and records
  it then. An episode already recorded is not filed again — unless the caller asks to re-file a request someone
  deleted (CA rollover: deleting a failed rollover request is how a person retries it).

Why the status and not the name alone: the name makes a second create harmless, the record makes it unnecessary
(one read of the Etcd instead of a create per pass), and it tells a reader what each filer filed last and why.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from opsmanager import kube
from opsmanager.api import conditions, constants, lifecycle
from opsmanager.cluster import etcdstatus


@dataclasses.dataclass(frozen=True)
class Filing:
    """One request to file: ``trigger`` (its label), ``episode`` (what it is for), ``body`` (the request, named
    from the episode). ``refile_if_deleted``: file it again when the episode is recorded but the request is gone."""

    trigger: lifecycle.Trigger
    episode: str
    body: Mapping[str, Any]
    refile_if_deleted: bool = False

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


@dataclasses.dataclass(frozen=True)
class Remember:
    """Record ``record`` as its trigger's latest filing (an entry for the same episode and request is kept as is,
    so its ``filedAt`` stays the first one)."""

    record: lifecycle.FiledRequest

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        memory = lifecycle.LifecycleMemory.of(status)
        known = memory.filed_by(self.record.trigger)
        if known is not None and (known.episode, known.request) == (self.record.episode, self.record.request):
            return status
        others = [f for f in memory.filed or () if f.trigger != self.record.trigger]
        return memory.model_copy(update={"filed": [*others, self.record]}).into(status)


def filed_for(status: Mapping[str, Any] | None, trigger: lifecycle.Trigger, episode: str) -> str | None:
    """The request ``trigger`` filed for ``episode``, as the Etcd's status records it; None when it has not."""
    known = lifecycle.LifecycleMemory.of(status).filed_by(trigger)
    return known.request if known is not None and known.episode == episode else None


async def file(k: kube.Kube, etcd: Mapping[str, Any], filing: Filing, *also: etcdstatus.Change,
               now: datetime.datetime | None = None) -> bool:
    """File ``filing`` for the Etcd ``etcd`` unless its episode was filed already; True when this call created
    the request. ``also``: the caller's own status changes, written in the same transaction as the record (and
    written when nothing is filed, too)."""
    meta = etcd.get("metadata") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name") or ""
    if filed_for(etcd.get("status"), filing.trigger, filing.episode) == filing.name and not (
            filing.refile_if_deleted
            and await k.get(constants.OPS_API_VERSION, constants.OPS_KIND, ns, filing.name) is None):
        if also:
            await etcdstatus.write(k, ns, name, *also)
        return False
    try:
        await k.create(dict(filing.body))
        created = True
    except kube.AlreadyExists:
        created = False  # filed before a crash, or by another replica: the same episode, the same name
    record = lifecycle.FiledRequest(trigger=filing.trigger, episode=filing.episode,
                                    request=filing.name, filed_at=conditions.rfc3339(
                                        now or datetime.datetime.now(datetime.UTC)))
    await etcdstatus.write(k, ns, name, Remember(record), *also)
    return created
