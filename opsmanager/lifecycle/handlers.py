"""kopf wiring of the certificate and storage lifecycles: a timer on every Etcd (storage:
:mod:`opsmanager.lifecycle.storage`, every ``spec.storageLifecycle.scanInterval``), a timer on every Etcd with TLS, scanning when its
``spec.tlsLifecycle.scanInterval`` has passed since ``status.tls.lastScanTime`` or a requested scan time has come
(:func:`opsmanager.lifecycle.scan.due`), then deciding auto-renew (:mod:`opsmanager.lifecycle.autorenew`); and the
scan triggers (:mod:`opsmanager.lifecycle.triggers`), subscribed to the client's caches rather than watching: one
requests a scan when an EtcdOpsRequest ends, one when one of the operator's Certificates is re-issued.

The timer ticks often (``tick`` seconds) and scans rarely: a per-object interval cannot be a kopf timer's own
interval (that is one number for every object), and "has the interval passed" read from status survives an
operator restart. Registered explicitly by :func:`register` from ``opsmanager.operator.build_registry``, with the
operator process's one Kubernetes client.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Collection
from typing import Any

import kopf

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.etcd import errors as etcd_errors
from opsmanager.etcd import pool
from opsmanager.lifecycle import autorenew, backups, metrics, scan, storage, triggers

RESOURCE = (constants.ETCD_GROUP, constants.ETCD_VERSION, constants.ETCD_PLURAL)
DEFAULT_TICK = 5.0

Logger = logging.Logger | logging.LoggerAdapter[Any]


def _has_backup(spec: Any, **_: Any) -> bool:
    return bool((spec or {}).get("backup"))


def _has_tls(spec: Any, **_: Any) -> bool:
    return bool((spec or {}).get("tls"))


def register(registry: kopf.OperatorRegistry, client: kube.CachedKube, *, tick: float = DEFAULT_TICK,
             delivery_grace: float = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT,
             namespaces: Collection[str] = ()) -> None:
    """Add the scan timer and its triggers to ``registry``; they use ``client``, whose caches the triggers subscribe
    to now (before it starts). ``delivery_grace``: seconds a member may serve its previous leaf after its Secret
    changed before the scan calls it a mismatch. ``namespaces``: the operator's (``--namespace``); the triggers
    then see those only, else every namespace."""
    register_triggers(registry, client, namespaces=namespaces)

    @kopf.timer(*RESOURCE, registry=registry, id="tls-scan", interval=tick, when=_has_tls)
    async def tls_scan(body: kopf.Body, logger: Logger, **_: Any) -> None:
        obj = dict(body)
        if not scan.due(obj, now=datetime.datetime.now(datetime.UTC)):
            return
        try:
            result = await scan.scan_once(client, obj, delivery_grace=delivery_grace)
            if result is not None:
                fresh = await client.get(constants.ETCD_API_VERSION, constants.ETCD_KIND,
                                         body.get("metadata", {}).get("namespace"), body.get("metadata", {}).get("name"))
                decision = await autorenew.after_scan(client, fresh or obj, result)
                if decision is not None:
                    logger.debug("auto-renew: %s: %s", decision.verdict.value, decision.reason)
        except (kube.KubeError, etcd_errors.EtcdError) as err:
            metrics.scan_failed()
            logger.info("TLS scan of %s/%s: %s; next tick retries", body.get("metadata", {}).get("namespace"),
                        body.get("metadata", {}).get("name"), err)

    @kopf.timer(*RESOURCE, registry=registry, id="storage-scan", interval=tick)
    async def storage_scan(body: kopf.Body, logger: Logger, **_: Any) -> None:
        obj = dict(body)
        now = datetime.datetime.now(datetime.UTC)
        if not storage.due(obj, now):
            return
        try:
            decision = await storage.scan_once(client, obj, now=now)
            if decision is not None:
                logger.debug("storage: %s", decision.reason)
        except (kube.KubeError, etcd_errors.EtcdError) as err:
            logger.info("storage scan of %s/%s: %s; next tick retries", body.get("metadata", {}).get("namespace"),
                        body.get("metadata", {}).get("name"), err)

    @kopf.timer(*RESOURCE, registry=registry, id="backup-schedule", interval=tick, when=_has_backup)
    async def backup_schedule(body: kopf.Body, logger: Logger, **_: Any) -> None:
        try:
            filed = await backups.tick(client, dict(body), now=datetime.datetime.now(datetime.UTC))
            if filed:
                logger.info("backup schedule: filed %s", filed)
        except kube.KubeError as err:
            logger.info("backup schedule of %s/%s: %s; next tick retries",
                        body.get("metadata", {}).get("namespace"), body.get("metadata", {}).get("name"), err)

    @kopf.on.delete(*RESOURCE, registry=registry, id="tls-scan-forget", optional=True)
    async def forget(body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata", {})
        metrics.forget(meta.get("namespace") or "default", meta.get("name") or "")
        metrics.forget_storage(meta.get("namespace") or "default", meta.get("name") or "")
        metrics.forget_backup(meta.get("namespace") or "default", meta.get("name") or "")
        await pool.shared.forget(meta.get("namespace") or "default", meta.get("name") or "")  # its etcd clients


def register_triggers(registry: kopf.OperatorRegistry, client: kube.CachedKube, *,
                      namespaces: Collection[str] = ()) -> None:
    """The scan triggers: subscribed to ``client``'s caches now, before it starts, so that they see its first
    listing; started and stopped by kopf's startup and cleanup handlers."""
    scan_triggers = [triggers.CertificateTrigger(client, namespaces=namespaces),
                     triggers.RequestTrigger(client, namespaces=namespaces)]

    @kopf.on.startup(registry=registry, id="tls-scan-triggers")
    async def start_triggers(**_: Any) -> None:
        for trigger in scan_triggers:
            trigger.start()

    @kopf.on.cleanup(registry=registry, id="tls-scan-triggers-stop")
    async def stop_triggers(**_: Any) -> None:
        for trigger in scan_triggers:
            await trigger.stop()
