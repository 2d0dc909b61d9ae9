"""What makes the certificate scan run before its interval: an ops request of that Etcd ended, or one of its
certificates was (re-)issued.

A trigger does not scan. It records "scan wanted after time T" on the Etcd (annotation
``opsmanager.dev/tls-scan-requested``, RFC 3339; :func:`request_scan`), and the scan timer scans once T has come and
is after ``status.tls.lastScanTime`` (:func:`opsmanager.lifecycle.scan.due`). Recorded on the object, a request
survives an operator restart, and many triggers in a row cost one scan (:func:`verdict.merge_scan_request` keeps
the earliest pending time).

- **An ops request ended** (phase ``Successful``, ``Failed`` or ``Skipped``; :class:`RequestTrigger`): T = the
  time its terminal condition was set + 1 s (times are kept in whole seconds; a scan earlier in the same second
  must not count as after it). The first scan after the pause is released reports what the request left behind —
  and auto-renew learns that its request failed.
- **A certificate was (re-)issued** (:class:`CertificateTrigger`): the operator's own cert-manager ``Certificate``
  objects only (label ``app.kubernetes.io/managed-by=opsmanager``), when ``status.revision`` or
  ``status.notAfter`` of a ``server`` or ``peer`` certificate changes — cert-manager writes them with the Secret.
  T = now + :data:`SECRET_CHANGE_DELAY`, for the kubelet to deliver the files. Certificates rather than their
  Secrets: a Certificate's status says that a new certificate was issued, a Secret's change could be anything.
  The trust bundle is the operator's own Secret; it changes only inside an ops request, whose end triggers the
  scan.

Neither watches: both subscribe to the operator client's caches of their kind
(:meth:`opsmanager.kube.CachedKube.subscribe`: the labelled cache of Certificates, the cache of EtcdOpsRequests
that kopf's watch feeds), so each kind is watched once per process (docs/decisions.md D25.6). They see what
those caches see: the operator's namespaces (``--namespace``) or all of them, the same label selection.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Collection, Coroutine, Mapping
from typing import Any, Final

from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.lifecycle import scan, verdict

log = logging.getLogger(__name__)

# After a certificate was re-issued, scan this much later: the kubelet's delivery of the new files takes a moment
# (the sandbox's 0.5 s; a real kubelet up to a minute — the delivery grace covers the rest).
SECRET_CHANGE_DELAY: Final = datetime.timedelta(seconds=5)
CERT_MANAGER_API: Final = "cert-manager.io/v1"
CERTIFICATE_SELECTOR: Final = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
_SCANNED_ALIASES: Final = frozenset(constants.PORT_ALIAS.values())
_TERMINAL_CONDITIONS: Final = (constants.COND_SUCCESSFUL, constants.COND_FAILED, constants.COND_SKIPPED)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def request_scan(k: kube.Kube, namespace: str, name: str, at: datetime.datetime) -> bool:
    """Record that Etcd ``namespace/name`` should be scanned once ``at`` has come. False when nothing was written
    (no such TLS Etcd, its last scan is already later, or an earlier request is pending)."""
    for attempt in range(scan.PATCH_ATTEMPTS):
        obj = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, name)
        if obj is None or not (obj.get("spec") or {}).get("tls"):
            return False
        wanted = verdict.merge_scan_request(pending=scan.scan_requested(obj), last_scan=scan.last_scan(obj),
                                            wanted=scan.ceil_second(at))
        if wanted is None:
            return False
        # Optimistic lock: the merge was decided on this version (another trigger may have written meanwhile).
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        try:
            await k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, name,
                          {"metadata": {"resourceVersion": rv,
                                        "annotations": {scan.ANNOTATION_SCAN_REQUESTED: conditions.rfc3339(wanted)}}})
            return True
        except kube.Conflict:
            if attempt == scan.PATCH_ATTEMPTS - 1:
                raise
            await asyncio.sleep(0.1 * (attempt + 1))  # back-off before re-reading, not a synchronisation
    return False


def request_ended_at(body: Mapping[str, Any]) -> datetime.datetime | None:
    """When an EtcdOpsRequest ended: the time of its terminal condition; None while it has not ended."""
    status = body.get("status") or {}
    if status.get("phase") not in constants.TERMINAL_OPS_PHASES:
        return None
    times = [scan.parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or ()
             if isinstance(c, Mapping) and c.get("type") in _TERMINAL_CONDITIONS]
    known = [t for t in times if t is not None]
    return max(known) if known else _now()


def certificate_target(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """``(namespace, etcd)`` whose scan a change of this Certificate calls for: a ``server`` or ``peer``
    certificate of an Etcd whose revision or notAfter changed. None otherwise."""
    meta = new.get("metadata") or {}
    labels = meta.get("labels") or {}
    etcd = labels.get(naming.LABEL_INSTANCE)
    if not etcd or labels.get(naming.LABEL_COMPONENT) not in _SCANNED_ALIASES:
        return None

    def issued(obj: Mapping[str, Any] | None) -> tuple[object, object]:
        status = (obj or {}).get("status") or {}
        return status.get("revision"), status.get("notAfter")

    if issued(new) == issued(old) or issued(new) == (None, None):
        return None
    return meta.get("namespace") or "default", etcd


class _Trigger:
    """A subscriber to the client's cache of one kind (:meth:`opsmanager.kube.CachedKube.subscribe`: no watch of
    its own) whose handler turns changes into scan requests, each a small task of its own. It subscribes when made,
    before the client starts, so that it sees the first listing; :meth:`start` and :meth:`stop` are the kopf
    startup and cleanup handlers' (the client's own cleanup stops the caches)."""

    def __init__(self, k: kube.CachedKube, api_version: str, kind: str, *, label_selector: str | None = None,
                 namespaces: Collection[str] = ()) -> None:
        self.k = k
        # ``namespaces``: the operator's (--namespace, whose RBAC may be a Role there); none: all of them.
        self.sources = k.subscribe(api_version, kind, self._event, namespaces=[*namespaces] or [None],
                                   label_selector=label_selector)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False

    def start(self) -> None:
        self._stopped = False

    async def stop(self) -> None:
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()

    def listed(self, namespace: str) -> bool:
        """Has the cache serving ``namespace`` listed it once? Until then its events are what already was."""
        return any(source.synced.is_set() for source in self.sources if source.namespace in (None, namespace))

    def _event(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if not self._stopped:
            self._changed(etype, obj, old)

    def _changed(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _request(self, namespace: str, etcd: str, at: datetime.datetime, why: str) -> None:
        try:
            if await request_scan(self.k, namespace, etcd, at):
                log.info("TLS scan of %s/%s requested for %s: %s", namespace, etcd, conditions.rfc3339(at), why)
        except kube.KubeError as err:
            log.info("TLS scan request for %s/%s (%s): %s; the interval scan covers it", namespace, etcd, why, err)


class CertificateTrigger(_Trigger):
    """Subscribed to the cache of the operator's own Certificates (label :data:`CERTIFICATE_SELECTOR`); requests a
    scan of their Etcd, ``delay`` later, when one is re-issued."""

    def __init__(self, k: kube.CachedKube, *, delay: datetime.timedelta = SECRET_CHANGE_DELAY,
                 namespaces: Collection[str] = ()) -> None:
        super().__init__(k, CERT_MANAGER_API, "Certificate", label_selector=CERTIFICATE_SELECTOR,
                         namespaces=namespaces)
        self.delay = delay

    def _changed(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED" or not self.listed(kube.key_of(obj)[0]):
            return  # the first listing is what already was: no change to react to
        target = certificate_target(obj, old)
        if target is not None:
            self._spawn(self._request(*target, _now() + self.delay, "a certificate was re-issued"))


def request_target(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> tuple[str, str, datetime.datetime] | None:
    """``(namespace, etcd, scan at)`` when this change of an EtcdOpsRequest is its end (it was not terminal before,
    or is seen for the first time already ended); None otherwise. Scan at = the end + 1 s: condition times are
    whole seconds, and a scan earlier in the same second as the end carries the same ``lastScanTime``."""
    at = request_ended_at(new)
    if at is None or (old is not None and request_ended_at(old) is not None):
        return None
    etcd = ((new.get("spec") or {}).get("databaseRef") or {}).get("name")
    if not isinstance(etcd, str) or not etcd:
        return None
    return (new.get("metadata") or {}).get("namespace") or "default", etcd, at + datetime.timedelta(seconds=1)


class RequestTrigger(_Trigger):
    """Subscribed to the cache of EtcdOpsRequests; requests a scan of the Etcd when one of its requests ends.

    The end is seen at once when this operator writes it (the cache takes in the client's own writes), else from
    the watch that feeds the cache (kopf's, D25.6). kopf holds back an object's events while it throttles after an
    error; the end is then seen late, not lost: the cache compares each version with the one it holds, and lists
    again when kopf lists and every few minutes. The first listing requests, per Etcd, a scan after its latest
    ended request (a no-op when the Etcd was scanned since): an operator restarted while a request ended misses
    nothing."""

    def __init__(self, k: kube.CachedKube, *, namespaces: Collection[str] = ()) -> None:
        super().__init__(k, constants.OPS_API_VERSION, constants.OPS_KIND, namespaces=namespaces)
        self._listed: dict[tuple[str, str], datetime.datetime] = {}

    def start(self) -> None:
        super().start()
        for source in dict.fromkeys(self.sources):  # one cache may serve several namespaces
            self._spawn(self._after_listing(source))

    async def _after_listing(self, source: kube.Informer) -> None:
        await source.synced.wait()
        mine = [key for key in self._listed if source.namespace in (None, key[0])]
        listed = [(key, self._listed.pop(key)) for key in mine]
        for (namespace, etcd), at in listed:
            await self._request(namespace, etcd, at, "an ops request ended (seen at start)")

    def _changed(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED":
            return
        target = request_target(obj, old)
        if target is None:
            return
        namespace, etcd, at = target
        if not self.listed(kube.key_of(obj)[0]):
            key = (namespace, etcd)
            self._listed[key] = max(at, self._listed.get(key, at))
            return
        name = (obj.get("metadata") or {}).get("name")
        self._spawn(self._request(namespace, etcd, at, f"EtcdOpsRequest {name} ended"))
