"""What the certificate steps share (not a step itself): is a Certificate's material complete, is anything in
the way owned by someone else, the trust bundle — the Secret of CAs every member trusts — and the CA probes.

Used by :mod:`~opsmanager.ops.steps.sync_certificates`, :mod:`~opsmanager.ops.steps.issue`,
:mod:`~opsmanager.ops.steps.roll_pass` (the bundle a pass needs), :mod:`~opsmanager.ops.steps.update_database`
(deleting what a removal leaves behind), and — for what a member serves on the wire (:func:`expected_serials`,
:func:`served_problem`) — :mod:`~opsmanager.ops.steps.roll` and :mod:`~opsmanager.ops.steps.verify_served`.
Failures these helpers prevent:

- **a CA change nobody trusts yet** — the trust bundle is widened (old + new CA) before any leaf from the new CA
  exists; the new CA is learned from a probe Certificate issued by the new issuer, so it works for any issuer
  kind that publishes ``ca.crt``.
"""

from __future__ import annotations

import datetime
from typing import Any

from opsmanager import kube, pki
from opsmanager.api import common, conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.etcd import admin
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops import context, plan
from opsmanager.provisioner import gate, material, naming, ownership, release, render, rollover

CERT_API = "cert-manager.io/v1"


async def check_ownership(ctx: context.OpsContext, certs: list[dict[str, Any]]) -> str | None:
    """Why the desired Certificates cannot be applied (a foreign Certificate or Secret in the way), or None.
    The same rules as the provisioner's (:mod:`opsmanager.provisioner.ownership`)."""
    db_uid = ctx.db_obj["metadata"].get("uid")
    where = f"{ctx.namespace}/{ctx.db_name}"
    for cert in certs:
        name = cert["metadata"]["name"]
        live = await ctx.kube.get(CERT_API, "Certificate", ctx.namespace, name)
        if problem := ownership.foreign_owned(live, where, db_uid):
            return problem
        secret = await ctx.secret(cert["spec"]["secretName"])
        if problem := ownership.foreign_secret(secret, where, db_uid, name):
            return problem
        alias = cert["metadata"]["labels"].get(naming.LABEL_COMPONENT, "")
        mounted = await ctx.secret(render.secret_name(ctx.db, ctx.db.spec.tls or ctx.plan.desired_tls, alias))
        if problem := release.foreign_mounted(mounted, ctx.db, alias):
            return problem
    return None


def _issuer_matches(cert: dict[str, Any], secret: dict[str, Any]) -> bool:
    ann = secret["metadata"].get("annotations") or {}
    want = cert["spec"]["issuerRef"]
    name = ann.get("cert-manager.io/issuer-name")
    kind = ann.get("cert-manager.io/issuer-kind")
    return (name is None or name == want["name"]) and (kind is None or kind == want.get("kind", "Issuer"))


async def material_problem(ctx: context.OpsContext, cert: dict[str, Any]) -> str | None:
    """Why the Secret of a desired Certificate is not ready for a member to use (None when it is)."""
    name = cert["metadata"]["name"]
    live = await ctx.kube.get(CERT_API, "Certificate", ctx.namespace, name)
    if live is None:
        return f"Certificate {name} does not exist"
    conds = (live.get("status") or {}).get("conditions") or []
    if not conditions.is_true(conds, "Ready"):
        ready = conditions.get_condition(conds, "Ready")
        detail = f": {ready.get('reason')}: {ready.get('message')}" if ready else ""
        return f"Certificate {name} is not Ready{detail}"
    if conditions.is_true(conds, "Issuing"):
        return f"Certificate {name} is still issuing"
    ready = conditions.get_condition(conds, "Ready") or {}
    generation = live["metadata"].get("generation")
    if generation is not None and ready.get("observedGeneration") not in (None, generation):
        return f"Certificate {name} is Ready for an older spec (generation {ready.get('observedGeneration')})"
    secret_name = cert["spec"]["secretName"]
    secret = await ctx.secret(secret_name)
    verdict = material.check_secret(secret, f"{ctx.namespace}/{secret_name}")
    if not verdict.complete:
        return verdict.problem
    assert secret is not None
    if not _issuer_matches(cert, secret):
        return f"Secret {secret_name} was issued by another issuer than {cert['spec']['issuerRef']['name']}"
    return None


async def desired_cas(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> bytes:
    """The CAs of the (complete) Secrets of ``tls``."""
    cas = []
    for alias in constants.CERT_ALIASES:
        ca = material.secret_bytes(await ctx.secret(render.secret_name(ctx.db_name, tls, alias)), "ca.crt")
        if ca:
            cas.append(ca)
    return pki.bundle(*cas)


async def current_bundle(ctx: context.OpsContext) -> bytes:
    secret = await ctx.secret(naming.trust_bundle_secret(ctx.db_name))
    return material.secret_bytes(secret, naming.TRUST_BUNDLE_KEY) or b""


async def write_bundle(ctx: context.OpsContext, pems: bytes) -> bool:
    """Write the trust bundle (and the record of when each CA entered it); True when it changed."""
    return await release.write_bundle(ctx.kube, ctx.db, pems, now=ctx.now)


async def release_all(ctx: context.OpsContext, tls: etcd_api.TLSConfig, allowed: bytes | None) -> str | None:
    """Release the source of every alias into its mounted Secret through the gate (:mod:`opsmanager.provisioner
    .release`) with the CAs this phase allows (None: no member serves TLS yet). What is held back, or None."""
    held = []
    for alias in constants.CERT_ALIASES:
        result = await release.release(ctx.kube, ctx.db, tls, alias, allowed=allowed, now=ctx.now)
        if result.blocked:
            held.append(result.blocked)
        held += [p.message for p in result.verdict.problems]
    return "; ".join(held) if held else None


# --- the new CA, before any leaf from it exists ---------------------------------------------------------------


def _probe_certificates(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> list[dict[str, Any]]:
    """One small Certificate per distinct issuer of ``tls``, issued only to learn that issuer's CA."""
    issuers: dict[tuple[str, str, str], common.IssuerRef] = {}
    for alias in constants.CERT_ALIASES:
        issuer = render.issuer_of(tls, alias)
        if issuer is not None:
            issuers.setdefault((issuer.api_group, issuer.kind, issuer.name), issuer)
    return [render.render_ca_probe(ctx.db, i, issuer) for i, issuer in enumerate(issuers.values())]


async def probe_cas(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> bytes | context.Progress | context.Fail:
    """The CA certificates of the issuers of ``tls``, via probe Certificates."""
    pems = []
    for probe in _probe_certificates(ctx, tls):
        await ctx.kube.apply(probe)
        if problem := await material_problem(ctx, probe):
            return context.Progress(f"waiting for the new issuer's CA: {problem}")
        ca = material.secret_bytes(await ctx.secret(probe["spec"]["secretName"]), "ca.crt")
        if not ca:
            return context.Fail(
                f"issuer {probe['spec']['issuerRef']['name']} does not publish ca.crt; the operator cannot learn "
                "its CA to trust it before the switch. Use a CA issuer (or one that fills ca.crt)",
                reason="IssuerWithoutCA")
        pems.append(ca)
    return pki.bundle(*pems)


async def delete_probes(ctx: context.OpsContext, tls: etcd_api.TLSConfig | None) -> None:
    if tls is None:
        return
    for probe in _probe_certificates(ctx, tls):
        await ctx.kube.delete(CERT_API, "Certificate", ctx.namespace, probe["metadata"]["name"])
        await ctx.kube.delete("v1", "Secret", ctx.namespace, probe["spec"]["secretName"])


async def trust_for(ctx: context.OpsContext, step: plan.Step) -> bytes | context.Progress | context.Fail | None:
    """The trust bundle a pass needs (None: keep it as it is)."""
    if step.trust is plan.Trust.KEEP:
        return None
    assert step.tls is not None
    if step.trust is plan.Trust.CURRENT_AND_RENEWED:
        return await renewed_bundle(ctx, step.tls)
    if step.trust is plan.Trust.IN_USE:
        return await in_use_bundle(ctx, step.tls)
    if step.trust is plan.Trust.CURRENT_AND_DESIRED:
        new = await probe_cas(ctx, step.tls)
        if not isinstance(new, bytes):
            return new
        return pki.bundle(await current_bundle(ctx), new)
    return await desired_cas(ctx, step.tls)


async def handover_same_ca(ctx: context.OpsContext, step: plan.Step) -> bool | context.Progress | context.Fail:
    """Handover: is the CA of the new issuer (learned from a probe) the CA of the user's Secrets? Both are
    stable through the handover (the user's Secrets are never written), so the answer survives an operator crash."""
    assert step.tls is not None and step.handover_from is not None
    new = await probe_cas(ctx, step.tls)
    if not isinstance(new, bytes):
        return new
    cas = []
    for alias in constants.CERT_ALIASES:
        secret = await ctx.secret(render.source_secret_name(ctx.db_name, step.handover_from, alias))
        cas.append(material.secret_bytes(secret, "ca.crt") or b"")
    user = pki.bundle(*cas)
    return bool(user) and {c.strip() for c in pki.split_pem(new)} == {c.strip() for c in pki.split_pem(user)}


async def delete_certificates(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> None:
    """Remove TLS: delete the Certificates, the mounted Secrets the operator wrote, the sources our Certificates
    issued, and the bundle."""
    db_uid = ctx.db_obj["metadata"].get("uid")
    for cert in render.render_certificates(ctx.db, tls):
        name = cert["metadata"]["name"]
        live = await ctx.kube.get(CERT_API, "Certificate", ctx.namespace, name)
        if live is not None and ownership.is_controlled_by(live, db_uid):
            await ctx.kube.delete(CERT_API, "Certificate", ctx.namespace, name)
    for alias in constants.CERT_ALIASES:
        await release.delete_released(ctx.kube, ctx.db, tls, alias)
    await ctx.kube.delete("v1", "Secret", ctx.namespace, naming.trust_bundle_secret(ctx.db_name))


# --- what a member serves on the wire ---------------------------------------------------------------------------


async def expected_serials(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> dict[str, int]:
    """The serial each TLS port must serve (``constants.PORT_ALIAS``): that of the leaf in the port's alias Secret."""
    out = {}
    for port, alias in constants.PORT_ALIAS.items():
        secret = await ctx.secret(render.secret_name(ctx.db_name, tls, alias))
        cert = material.secret_bytes(secret, "tls.crt")
        if cert:
            out[port] = pki.cert_info(cert).serial
    return out


async def served_problem(client: admin.EtcdAdmin, member: str, expected: dict[str, int]) -> str | None:
    """What is wrong with what ``member`` serves (a fresh TLS handshake per port), or None when every port serves
    the serial ``expected`` names for it."""
    for port, serial in expected.items():
        alias = constants.PORT_ALIAS[port]
        try:
            served = await client.served_certificate(member, port=port)
        except etcd_errors.EtcdError as err:
            return f"reading the {alias} certificate {member} serves: {err}"
        if served.serial != serial:
            return f"{member} serves {alias} certificate serial {served.serial_hex}, expected {serial:x}"
    return None


# --- CA rollover ------------------------------------------------------------------------------------------------


async def observe_rotation(client: kube.Kube, db: etcd_api.Etcd) -> plan.RotateObservation:
    """What decides a rotate's plan (:func:`plan.rotate_variant`): the sources the gate holds as ``UntrustedCA``
    against the CAs every member has loaded, and whether a CA Issuer signs with a CA not loaded by every member."""
    tls = db.spec.tls
    if tls is None:
        return plan.RotateObservation()
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
    return plan.RotateObservation(tuple(untrusted), unloaded)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def renewed_bundle(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> bytes:
    """CA rollover, widen: the bundle now, plus the CA of every source whose leaf it signs, plus the CA each CA
    Issuer signs with now. Only ever grows while the pass runs (a CA renewed again meanwhile is added; the gate's
    loaded rule then says which members have it)."""
    seen = [*await rollover.source_cas(ctx.kube, ctx.db, tls), *await rollover.issuer_cas(ctx.kube, ctx.db, tls)]
    return pki.bundle(await current_bundle(ctx), *(pem for pem, _ in seen))


async def in_use_bundle(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> bytes | context.Progress:
    """CA rollover, narrow: the CAs of the bundle that sign a mounted leaf (what members serve — verified by
    handshake in the step before — and what ``<db>-client-cert`` hands to clients) or that a CA Issuer signs with
    now (its next leaves). The old CA drops out once no mounted leaf needs it."""
    current = await current_bundle(ctx)
    leaves = [material.secret_bytes(await ctx.secret(render.secret_name(ctx.db_name, tls, a)), "tls.crt")
              for a in constants.CERT_ALIASES]
    issuers = {gate.fingerprint(ca) for pems, _ in await rollover.issuer_cas(ctx.kube, ctx.db, tls)
               for ca in pki.split_pem(pems)}
    keep = [ca for ca in pki.split_pem(current)
            if gate.fingerprint(ca) in issuers or any(leaf and pki.signed_by(leaf, ca) for leaf in leaves)]
    unsigned = [a for a, leaf in zip(constants.CERT_ALIASES, leaves, strict=True)
                if not leaf or not pki.signed_by(leaf, pki.bundle(*keep) if keep else b"")]
    if unsigned or not keep:
        return context.Progress(f"a mounted leaf ({', '.join(unsigned)}) chains to no CA of the bundle; not "
                                "narrowing it", delay=1.0)
    return pki.bundle(*keep)


async def release_loaded(ctx: context.OpsContext, tls: etcd_api.TLSConfig) -> str | None:
    """Release every source the gate passes against the CAs every member has loaded now; what is held, or None."""
    return await release_all(ctx, tls, await release.loaded(ctx.kube, ctx.db))


async def entry_settling(ctx: context.OpsContext) -> float:
    """Seconds until the latest CA entry of the bundle's record is a whole second in the past (0: it is)."""
    secret = await ctx.secret(naming.trust_bundle_secret(ctx.db_name))
    record = gate.decode_record(((secret or {}).get("metadata") or {}).get("annotations", {}).get(
        naming.ANNOTATION_CA_ENTERED)) or {}
    times = [t for t in (gate.parse_stamp(v) for v in record.values()) if t is not None]
    if not times:
        return 0.0
    settled = max(times) + datetime.timedelta(seconds=1)
    return max(0.0, (settled - ctx.now).total_seconds())
# --- rescue: what has expired — by expiry, never by reachability -----------------------------------


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
