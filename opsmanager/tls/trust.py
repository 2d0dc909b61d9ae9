"""The trust of a cluster's TLS: the trust bundle (the Secret of CAs every member and client trusts), the CA
probes that learn a new issuer's CA before any leaf from it exists, the release of sources into the mounted
Secrets through the gate, and whether a Certificate's material is ready to use.

Failures this prevents:

- **a CA change nobody trusts yet** — the trust bundle is widened (old + new CA) before any leaf from the new CA
  exists; the new CA is learned from a probe Certificate issued by the new issuer, so it works for any issuer
  kind that publishes ``ca.crt``;
- **a member handed a leaf its peers do not trust** — sources reach the mounted Secrets only through the gate
  (:mod:`.release`), against the CAs every member has loaded;
- **the old CA dropped while a mounted leaf still needs it** — the bundle narrows to the CAs that sign a mounted
  leaf or that a CA Issuer signs with now.

Functions take a :class:`Target` — the Etcd and how to read and write its objects — which the ops engine's
context provides; an answer that must wait is a :class:`Waiting`, one that cannot succeed a :class:`Refused`.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Protocol

from opsmanager import kube, pki
from opsmanager.api import common, conditions, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render
from opsmanager.tls import gate, material, ownership, release, rollover

CERT_API = "cert-manager.io/v1"


class Target(Protocol):
    """The Etcd whose TLS is worked on, and how to reach its objects."""

    @property
    def kube(self) -> kube.Kube: ...

    @property
    def namespace(self) -> str: ...

    @property
    def db_name(self) -> str: ...

    @property
    def db(self) -> etcd_api.Etcd: ...

    @property
    def db_obj(self) -> dict[str, Any]: ...

    @property
    def now(self) -> datetime.datetime: ...

    async def secret(self, name: str) -> dict[str, Any] | None: ...


@dataclasses.dataclass(frozen=True)
class Waiting:
    """Not yet: ``message`` says what is awaited; look again after ``delay`` seconds."""

    message: str
    delay: float = 0.5


@dataclasses.dataclass(frozen=True)
class Refused:
    """This cannot work as configured: ``message`` names the fix, ``reason`` is the condition's reason."""

    message: str
    reason: str


async def check_ownership(ctx: Target, certs: list[dict[str, Any]], tls: etcd_api.TLSConfig) -> str | None:
    """Why the desired Certificates cannot be applied (a foreign Certificate or Secret in the way), or None.
    The same rules as the provisioner's (:mod:`opsmanager.tls.ownership`); ``tls`` names the mounted Secrets when
    the Etcd has no TLS yet."""
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
        mounted = await ctx.secret(render.secret_name(ctx.db, ctx.db.spec.tls or tls, alias))
        if problem := release.foreign_mounted(mounted, ctx.db, alias):
            return problem
    return None


def _issuer_matches(cert: dict[str, Any], secret: dict[str, Any]) -> bool:
    ann = secret["metadata"].get("annotations") or {}
    want = cert["spec"]["issuerRef"]
    name = ann.get("cert-manager.io/issuer-name")
    kind = ann.get("cert-manager.io/issuer-kind")
    return (name is None or name == want["name"]) and (kind is None or kind == want.get("kind", "Issuer"))


async def material_problem(ctx: Target, cert: dict[str, Any]) -> str | None:
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


async def desired_cas(ctx: Target, tls: etcd_api.TLSConfig) -> bytes:
    """The CAs of the (complete) Secrets of ``tls``."""
    cas = []
    for alias in constants.CERT_ALIASES:
        ca = material.secret_bytes(await ctx.secret(render.secret_name(ctx.db_name, tls, alias)), "ca.crt")
        if ca:
            cas.append(ca)
    return pki.bundle(*cas)


async def current_bundle(ctx: Target) -> bytes:
    secret = await ctx.secret(naming.trust_bundle_secret(ctx.db_name))
    return material.secret_bytes(secret, naming.TRUST_BUNDLE_KEY) or b""


async def write_bundle(ctx: Target, pems: bytes) -> bool:
    """Write the trust bundle (and the record of when each CA entered it); True when it changed."""
    return await release.write_bundle(ctx.kube, ctx.db, pems, now=ctx.now)


async def release_all(ctx: Target, tls: etcd_api.TLSConfig, allowed: bytes | None) -> str | None:
    """Release the source of every alias into its mounted Secret through the gate (:mod:`opsmanager.provisioner
    .release`) with the CAs this phase allows (None: no member serves TLS yet). What is held back, or None."""
    held = []
    for alias in constants.CERT_ALIASES:
        result = await release.release(ctx.kube, ctx.db, tls, alias, allowed=allowed, now=ctx.now)
        if result.blocked:
            held.append(result.blocked)
        held += [p.message for p in result.verdict.problems]
    return "; ".join(held) if held else None


def _probe_certificates(ctx: Target, tls: etcd_api.TLSConfig) -> list[dict[str, Any]]:
    """One small Certificate per distinct issuer of ``tls``, issued only to learn that issuer's CA."""
    issuers: dict[tuple[str, str, str], common.IssuerRef] = {}
    for alias in constants.CERT_ALIASES:
        issuer = render.issuer_of(tls, alias)
        if issuer is not None:
            issuers.setdefault((issuer.api_group, issuer.kind, issuer.name), issuer)
    return [render.render_ca_probe(ctx.db, i, issuer) for i, issuer in enumerate(issuers.values())]


async def probe_cas(ctx: Target, tls: etcd_api.TLSConfig) -> bytes | Waiting | Refused:
    """The CA certificates of the issuers of ``tls``, via probe Certificates."""
    pems = []
    for probe in _probe_certificates(ctx, tls):
        await ctx.kube.apply(probe)
        if problem := await material_problem(ctx, probe):
            return Waiting(f"waiting for the new issuer's CA: {problem}")
        ca = material.secret_bytes(await ctx.secret(probe["spec"]["secretName"]), "ca.crt")
        if not ca:
            return Refused(
                f"issuer {probe['spec']['issuerRef']['name']} does not publish ca.crt; the operator cannot learn "
                "its CA to trust it before the switch. Use a CA issuer (or one that fills ca.crt)",
                reason="IssuerWithoutCA")
        pems.append(ca)
    return pki.bundle(*pems)


async def delete_probes(ctx: Target, tls: etcd_api.TLSConfig | None) -> None:
    if tls is None:
        return
    for probe in _probe_certificates(ctx, tls):
        await ctx.kube.delete(CERT_API, "Certificate", ctx.namespace, probe["metadata"]["name"])
        await ctx.kube.delete("v1", "Secret", ctx.namespace, probe["spec"]["secretName"])


async def handover_same_ca(ctx: Target, tls: etcd_api.TLSConfig,
                           handover_from: etcd_api.TLSConfig) -> bool | Waiting | Refused:
    """Handover: is the CA of the new issuer (learned from a probe) the CA of the user's Secrets? Both are
    stable through the handover (the user's Secrets are never written), so the answer survives an operator crash."""
    new = await probe_cas(ctx, tls)
    if not isinstance(new, bytes):
        return new
    cas = []
    for alias in constants.CERT_ALIASES:
        secret = await ctx.secret(render.source_secret_name(ctx.db_name, handover_from, alias))
        cas.append(material.secret_bytes(secret, "ca.crt") or b"")
    user = pki.bundle(*cas)
    return bool(user) and {c.strip() for c in pki.split_pem(new)} == {c.strip() for c in pki.split_pem(user)}


async def delete_certificates(ctx: Target, tls: etcd_api.TLSConfig) -> None:
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


async def renewed_bundle(ctx: Target, tls: etcd_api.TLSConfig) -> bytes:
    """CA rollover, widen: the bundle now, plus the CA of every source whose leaf it signs, plus the CA each CA
    Issuer signs with now. Only ever grows while the pass runs (a CA renewed again meanwhile is added; the gate's
    loaded rule then says which members have it)."""
    seen = [*await rollover.source_cas(ctx.kube, ctx.db, tls), *await rollover.issuer_cas(ctx.kube, ctx.db, tls)]
    return pki.bundle(await current_bundle(ctx), *(pem for pem, _ in seen))


async def in_use_bundle(ctx: Target, tls: etcd_api.TLSConfig) -> bytes | Waiting:
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
        return Waiting(f"a mounted leaf ({', '.join(unsigned)}) chains to no CA of the bundle; not "
                                "narrowing it", delay=1.0)
    return pki.bundle(*keep)


async def release_loaded(ctx: Target, tls: etcd_api.TLSConfig) -> str | None:
    """Release every source the gate passes against the CAs every member has loaded now; what is held, or None."""
    return await release_all(ctx, tls, await release.loaded(ctx.kube, ctx.db))


async def entry_settling(ctx: Target) -> float:
    """Seconds until the latest CA entry of the bundle's record is a whole second in the past (0: it is)."""
    secret = await ctx.secret(naming.trust_bundle_secret(ctx.db_name))
    record = gate.decode_record(((secret or {}).get("metadata") or {}).get("annotations", {}).get(
        naming.ANNOTATION_CA_ENTERED)) or {}
    times = [t for t in (gate.parse_stamp(v) for v in record.values()) if t is not None]
    if not times:
        return 0.0
    settled = max(times) + datetime.timedelta(seconds=1)
    return max(0.0, (settled - ctx.now).total_seconds())
