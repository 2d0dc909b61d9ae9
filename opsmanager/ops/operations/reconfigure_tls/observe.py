"""What the engine observes to choose a plan's variant once, when a request starts: for a rotate, whether a CA
was renewed that not every member has loaded (CA rollover); for any TLS request, which served leaves and loaded CAs
have already expired (rescue). Decided by expiry, never by reachability.

:func:`variant` is the type's ``observe`` (recorded in ``status.origin``); :func:`expired` is what the queue asks
before it starts a rescue on an Etcd that is not Ready."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import Any

from opsmanager import kube, pki
from opsmanager.api import conditions, constants, tlschange
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import render
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context
from opsmanager.ops.operations.reconfigure_tls import plans
from opsmanager.tls import gate, release, rollover

log = logging.getLogger("opsmanager.ops")


async def observe_rotation(client: kube.Kube, db: etcd_api.Etcd) -> plans.RotateObservation:
    """What decides a rotate's plan (:func:`plans.rotate_variant`): the sources the gate holds as ``UntrustedCA``
    against the CAs every member has loaded, and whether a CA Issuer signs with a CA not loaded by every member."""
    tls = db.spec.tls
    if tls is None:
        return plans.RotateObservation()
    loaded = await release.loaded(client, db)
    ns = db.metadata.namespace or "default"
    untrusted = []
    for alias in constants.CERT_ALIASES:
        name = render.source_secret_name(db, tls, alias)
        verdict = gate.check(await client.get("v1", "Secret", ns, name), f"{ns}/{name}",
                             dns_names=render.member_dns_names(db, alias), loaded=loaded, now=_now())
        if any(p.code == gate.UNTRUSTED_CA for p in verdict.problems):
            untrusted.append(verdict.secret)
    issuers = await rollover.issuer_cas(client, db, tls)
    unloaded = bool(rollover.renewed_cas(issuers, loaded, _now()))
    return plans.RotateObservation(tuple(untrusted), unloaded)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _status_not_after(db_obj: dict[str, Any], member: str, port: str) -> datetime.datetime | None:
    """The notAfter the last scan saw ``member`` serve on ``port`` (``status.tls``), None when it saw none."""
    for entry in (((db_obj.get("status") or {}).get("tls") or {}).get("members")) or []:
        if entry.get("name") == member:
            raw = (entry.get(port) or {}).get("notAfter")
            try:
                return conditions.parse_rfc3339(raw) if isinstance(raw, str) else None
            except ValueError:
                return None
    return None


async def _status_is_current(ctx: context.OpsContext) -> bool:
    """Is the last scan (``status.tls.lastScanTime``) later than the end of every other request on this Etcd? A
    scan from before a request that restarted the members says nothing about what they serve now — a rescue just
    finished leaves its expired entries there until the next scan (1 s after the request ends), and a member still
    starting then would make the next rotate rescue a cluster that no longer needs it."""
    raw = ((ctx.db_obj.get("status") or {}).get("tls") or {}).get("lastScanTime")
    try:
        scanned = conditions.parse_rfc3339(raw) if isinstance(raw, str) else None
    except ValueError:
        scanned = None
    if scanned is None:
        return False
    for other in await ctx.kube.list(constants.OPS_API_VERSION, constants.OPS_KIND, ctx.namespace):
        if other["metadata"].get("name") == ctx.name or \
                ((other.get("spec") or {}).get("databaseRef") or {}).get("name") != ctx.db_name:
            continue
        for cond in (other.get("status") or {}).get("conditions") or ():
            if cond.get("type") in (constants.COND_SUCCESSFUL, constants.COND_FAILED) and \
                    cond.get("status") == constants.TRUE:
                try:
                    ended = conditions.parse_rfc3339(cond.get("lastTransitionTime") or "")
                except ValueError:
                    continue
                if ended >= scanned:
                    return False
    return True


async def observe_expiry(ctx: context.OpsContext) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The expired leaves members serve (``"<member> <port> notAfter <t>"``) and, when every CA the members have
    loaded has expired, those CAs. A leaf is read by a fresh handshake that does not verify the chain (it only reads
    what is served: an expired chain is never trusted for anything); a member that does not answer is judged by the
    last scan's ``status.tls`` — so an unreachable member with a valid leaf adds nothing (reachability never
    chooses the rescue) — when that scan is later than the end of every other request on the Etcd
    (:func:`_status_is_current`); otherwise such a member adds nothing either."""
    now = ctx.now
    expired: list[str] = []
    pods = await ctx.pods()
    status_current: bool | None = None
    async with await ctx.etcd(pods) as client:
        reachable = {ep.name for ep in client.endpoints}
        for member in ctx.pod_names():
            for port in constants.TLS_PORTS:
                not_after: datetime.datetime | None
                try:
                    if member not in reachable:  # no pod, or no address yet: judged like a member not answering
                        raise etcd_errors.MemberUnreachable(f"{member}: no pod address")
                    not_after = (await client.served_certificate(member, port=port, timeout=2.0)).not_after
                except etcd_errors.EtcdError:
                    if status_current is None:
                        status_current = await _status_is_current(ctx)
                    not_after = _status_not_after(ctx.db_obj, member, port) if status_current else None
                if not_after is not None and not_after < now:
                    expired.append(f"{member} {port} notAfter {conditions.rfc3339(not_after)}")
    loaded = pki.split_pem(await release.loaded(ctx.kube, ctx.db))
    infos = [pki.cert_info(ca) for ca in loaded]
    cas: tuple[str, ...] = ()
    if infos and all(i.not_after < now for i in infos):
        cas = tuple(f"{i.subject} notAfter {conditions.rfc3339(i.not_after)}" for i in infos)
    return tuple(expired), cas


async def _expired_or_nothing(ctx: context.OpsContext) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:func:`observe_expiry`, or nothing expired when no member can be asked at all (then judged by ``status.tls``
    alone, as a member that does not answer)."""
    try:
        return await observe_expiry(ctx)
    except etcd_errors.EtcdError as err:
        log.info("EtcdOpsRequest %s/%s: reading served leaves: %s", ctx.namespace, ctx.name, err)
        return (), ()


async def expired(ctx: context.OpsContext) -> str:
    """What expired (the rescue's reason), when the Etcd's certificates expired and nothing else keeps it from
    Ready (every member's pod exists); ``""`` otherwise."""
    pods = await ctx.pods()
    missing = [p for p in ctx.pod_names() if p not in pods or pods[p]["metadata"].get("deletionTimestamp")]
    if ctx.db.spec.tls is None or missing:  # a member missing is more than expiry
        return ""
    leaves, cas = await _expired_or_nothing(ctx)
    if not leaves and not cas:
        return ""
    return plans.rescue_reason(plans.RotateObservation(expired_leaves=leaves, expired_cas=cas))


async def variant(ctx: context.OpsContext) -> plans.RotateVariant:
    """Which rotate plan this request runs: observed once, when it starts (no step condition yet), and recorded in
    ``status.origin`` with the TLS it started from — the plan never changes mid-run. A request that is not a
    rotate, or started before the record existed, is ``HOT_RELOAD``."""
    spec = ctx.spec
    if spec.tls is None or not spec.tls.rotate_certificates:
        return plans.RotateVariant.HOT_RELOAD
    raw = tlschange.recorded_plan(ctx.request)
    if raw is not None:
        try:
            return plans.RotateVariant(raw)
        except ValueError:
            return plans.RotateVariant.HOT_RELOAD
    if any(c.get("type") != constants.COND_PENDING for c in ctx.conditions) or ctx.db.spec.tls is None:
        return plans.RotateVariant.HOT_RELOAD
    seen = await observe_rotation(ctx.kube, ctx.db)
    leaves, cas = await _expired_or_nothing(ctx)
    seen = dataclasses.replace(seen, expired_leaves=leaves, expired_cas=cas)
    chosen = plans.rotate_variant(seen)
    # A request an older engine started has no origin yet: its record (an annotation) carries over with the plan.
    origin = ctx.records.origin or ops_api.RequestOrigin(observed_at=conditions.rfc3339(ctx.now), tls=ctx.tls_before)
    origin = origin.model_copy(update={"plan": chosen.value})
    if reason := plans.rescue_reason(seen):
        origin = origin.model_copy(update={"rescue_reason": reason})
        log.info("EtcdOpsRequest %s/%s: %s", ctx.namespace, ctx.name, reason)
    ctx.record(origin=origin)
    await ctx.flush()  # on record before any step acts on it
    return chosen
