"""What makes the certificate scan run before its interval: an ops request of that Etcd ended, or one of its
certificates was (re-)issued.

A trigger does not scan. It records "scan wanted after time T" on the Etcd (annotation
``opsmanager.dev/tls-scan-requested``, RFC 3339; :func:`request_scan`), and the scan timer scans once T has come and
is after ``status.tls.lastScanTime`` (:func:`opsmanager.lifecycle.scan.due`). Recorded on the object, a request
survives an operator restart, and many triggers in a row cost one scan (:func:`verdict.merge_scan_request` keeps
the earliest pending time).

- **An ops request ended** (phase ``Successful``, ``Failed`` or ``Skipped``; a watch on EtcdOpsRequests,
  :class:`RequestWatch`): T = the time its terminal condition was set + 1 s (times are kept in whole seconds; a
  scan earlier in the same second must not count as after it). The first scan after the pause is released reports
  what the request left behind — and auto-renew learns that its request failed.
- **A certificate was (re-)issued**: the operator watches only its own cert-manager ``Certificate`` objects (label
  ``app.kubernetes.io/managed-by=opsmanager``, a server-side label selector) and reacts when ``status.revision``
  or ``status.notAfter`` of a ``server`` or ``peer`` certificate changes — cert-manager writes them with the
  Secret. T = now + :data:`SECRET_CHANGE_DELAY`, for the kubelet to deliver the files. Why Certificates and not
  Secrets: the operator has no list/watch on Secrets (``deploy/base/operator/rbac.yaml``: Secrets by name only), and a watch
  on Secrets, even labelled, needs that right on every Secret of the cluster. The trust bundle is the operator's
  own Secret; it changes only inside an ops request, whose end triggers the scan.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Coroutine, Mapping
from typing import Any, Final

from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.lifecycle import scan, verdict

log = logging.getLogger(__name__)

# After a certificate was re-issued, scan this much later: the kubelet's delivery of the new files takes a moment
# (the sandbox's 0.5 s; a real kubelet up to a minute — the delivery grace covers the rest).
SECRET_CHANGE_DELAY: Final = datetime.timedelta(seconds=5)
CERTIFICATE_SELECTOR: Final = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
_SCANNED_ALIASES: Final = frozenset(constants.PORT_ALIAS.values())
_TERMINAL_CONDITIONS: Final = (constants.COND_SUCCESSFUL, constants.COND_FAILED, constants.COND_SKIPPED)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def request_scan(k: kube.Kube, namespace: str, name: str, at: datetime.datetime) -> bool:
    """Record that Etcd ``namespace/name`` should be scanned once ``at`` has come. False when nothing was written
    (no such TLS Etcd, its last scan is already later, or an earlier request is pending)."""
    obj = await k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, name)
    if obj is None or not (obj.get("spec") or {}).get("tls"):
        return False
    wanted = scan.ceil_second(at)
    if verdict.merge_scan_request(pending=scan.scan_requested(obj), last_scan=scan.last_scan(obj),
                                  wanted=wanted) is None:
        return False
    await scan.record_scan_request(k, namespace, name, wanted, pending=scan.scan_requested(obj))
    return True


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


class _Watch:
    """An informer whose handler turns changes into scan requests (each a small task of its own)."""

    what = ""

    def __init__(self, k: kube.Kube, api_version: str, kind: str, *, label_selector: str | None = None,
                 namespace: str | None = None) -> None:
        self.k = k
        # relist_delay: a watch refused (e.g. an older ClusterRole without `watch`) is retried every few seconds,
        # not twice a second; the interval scan still runs meanwhile. ``namespace``: one namespace (an operator
        # with --namespace, whose RBAC may be a Role there), else all of them.
        self.informer = kube.Informer(k, api_version, kind, namespace=namespace, label_selector=label_selector,
                                      relist_delay=5.0)
        self.informer.add_handler(self._changed)
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()

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


class CertificateWatch(_Watch):
    """A labelled watch on the operator's own Certificates that requests a scan of their Etcd, ``delay`` later,
    when one is re-issued. Started and stopped by the kopf startup/cleanup handlers."""

    def __init__(self, k: kube.Kube, *, delay: datetime.timedelta = SECRET_CHANGE_DELAY,
                 namespace: str | None = None) -> None:
        super().__init__(k, "cert-manager.io/v1", "Certificate", label_selector=CERTIFICATE_SELECTOR,
                         namespace=namespace)
        self.delay = delay

    def _changed(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED" or not self.informer.synced.is_set():
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


class RequestWatch(_Watch):
    """A watch on EtcdOpsRequests that requests a scan of the Etcd when one of its requests ends. Its own informer
    rather than a kopf event handler: kopf skips an object's events while it throttles after an error (a Conflict
    of its own patch), so a request's last event could be missed. The first listing requests, per Etcd, a scan
    after its latest ended request (a no-op when the Etcd was scanned since): an operator restarted while a
    request ended misses nothing."""

    def __init__(self, k: kube.Kube, *, namespace: str | None = None) -> None:
        super().__init__(k, constants.OPS_API_VERSION, constants.OPS_KIND, namespace=namespace)
        self._listed: dict[tuple[str, str], datetime.datetime] = {}

    def start(self) -> None:
        super().start()
        self._spawn(self._after_listing())

    async def _after_listing(self) -> None:
        await self.informer.synced.wait()
        listed, self._listed = self._listed, {}
        for (namespace, etcd), at in listed.items():
            await self._request(namespace, etcd, at, "an ops request ended (seen at start)")

    def _changed(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED":
            return
        target = request_target(obj, old)
        if target is None:
            return
        namespace, etcd, at = target
        if not self.informer.synced.is_set():
            key = (namespace, etcd)
            self._listed[key] = max(at, self._listed.get(key, at))
            return
        name = (obj.get("metadata") or {}).get("name")
        self._spawn(self._request(namespace, etcd, at, f"EtcdOpsRequest {name} ended"))
