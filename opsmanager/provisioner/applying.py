"""Reconcile: make the objects of an ``Etcd`` exist, in order, with the renderer's content — and no more.

What it does, each pass (the kopf handlers call :func:`reconcile` on create/resume/update and on a timer):

1. **Paused?** While the Etcd carries ``Paused=True`` (an EtcdOpsRequest owns the cluster) nothing is created,
   changed or deleted; the outcome says so and the status is still reported by the caller.
2. **TLS** (``spec.tls`` set): create the missing cert-manager Certificates (each writes a *source* Secret,
   ``<db>-<alias>-issued``; a legacy Certificate still writing the mounted Secret is repointed there), create the
   trust-bundle Secret ``<db>-ca-bundle`` from the sources' ``ca.crt`` when it is missing (a new cluster), then
   release each source into the Secret members and clients mount (``<db>-<alias>-cert``) through the material
   gate (:mod:`.gate`, :mod:`.release`) against the CAs every member has loaded. A source that fails is held back
   and reported (``TLSMaterialReady``, one Event per source and reason); no StatefulSet is created before every
   mounted Secret exists (etcd exits at start on a missing file). The trust bundle is created once and never
   rewritten here: widening and narrowing it during a CA change is the ops engine's job.
3. **Services** ``<db>-pods`` (headless) and ``<db>``, the **PDB**: created when missing, updated when they
   drift from the render.
4. **StatefulSet** last: created when missing; otherwise updated (PUT with the live ``resourceVersion``) only when
   the render changed — keeping the immutable fields as they are and the live
   ``opsmanager.dev/restartedAt`` template annotation, which the ops engine bumps to restart members.

Never adopted: a Certificate, Secret, Service, PDB or StatefulSet with our name that another controller (or a
person) owns stops the pass with a ``blocked`` outcome naming the object and the fix (:mod:`.ownership`).
Never switched here: TLS on a running cluster. When ``spec.tls`` and the live StatefulSet disagree about TLS, only
``replicas`` is kept in step and the outcome asks for an ``EtcdOpsRequest`` of type ``ReconfigureTLS`` (flipping
the flags of an ``OnDelete`` StatefulSet would let the next crashed member return with the other scheme and split
the cluster).

The StatefulSet's render-and-apply (``restartedAt`` preserved or bumped) is :mod:`opsmanager.cluster.statefulset`'s,
which the ops engine uses too: the engine never imports the provisioner.

Control flow is a value (:class:`Outcome`), not an exception: "not yet" is ``waiting`` with a delay, which the
handlers turn into ``kopf.TemporaryError(delay=...)``; nothing here sleeps.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from opsmanager import kube, pki
from opsmanager.api import conditions, constants, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render, statefulset
from opsmanager.provisioner import auth
from opsmanager.tls import gate, material, ownership, release

Obj = kube.Obj

WAITING_DELAY = 2.0  # seconds between looks at a Secret cert-manager has not filled yet
BLOCKED_DELAY = 30.0  # a foreign object needs a person: look again now and then

# Reasons of the Reconciled condition (and of events).
DONE = "done"
WAITING = "waiting"
BLOCKED = "blocked"
PAUSED = "paused"

REASON_RECONCILED = "Reconciled"
REASON_PAUSED = "Paused"
REASON_WAITING_FOR_CERTIFICATES = "WaitingForCertificates"
ISSUER_API = "cert-manager.io/v1"
# Why cert-manager has not issued (the cause named instead of "the Secret does not exist yet"): a person acts on these.
REASON_ISSUER_NOT_FOUND = "IssuerNotFound"
REASON_ISSUER_NOT_READY = "IssuerNotReady"
REASON_CERTIFICATE_NOT_READY = "CertificateNotReady"
WARNING_REASONS = (REASON_ISSUER_NOT_FOUND, REASON_ISSUER_NOT_READY, REASON_CERTIFICATE_NOT_READY)
REASON_FOREIGN_OBJECT = "ForeignObject"
REASON_INVALID_SPEC = "InvalidSpec"
REASON_TLS_CHANGE = "TLSChangeNeedsOpsRequest"
REASON_WAITING_FOR_PODS = "WaitingForPodsToStop"
REASON_DO_NOT_TERMINATE = constants.DELETION_DO_NOT_TERMINATE
REASON_DELETED = "Deleted"

CERTIFICATE_API = "cert-manager.io/v1"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one reconcile (or finalize) pass ended with.

    ``state``: ``done``, ``waiting`` (retry after ``delay``), ``blocked`` (a person must act; ``message`` says
    what), ``paused`` (an ops request owns the cluster). ``reason`` is CamelCase for the condition and events;
    ``changed`` lists the objects written in this pass (``Kind name``); ``held`` the sources the gate holds back
    (empty: all released; None: not looked at in this pass).
    """

    state: str
    reason: str
    message: str
    delay: float = 0.0
    changed: tuple[str, ...] = ()
    held: tuple[gate.Problem, ...] | None = None  # the gate's problems; None when TLS material was not looked at

    @property
    def ok(self) -> bool:
        return self.state == DONE


# --- pure helpers ----------------------------------------------------------------------------------------------


def _ref(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']} {obj['metadata']['name']}"


def _where(db: etcd_api.Etcd) -> str:
    return f"{db.metadata.namespace}/{db.metadata.name}"


def parse(obj: Mapping[str, Any]) -> etcd_api.Etcd:
    """The Etcd model of an object dict; raises ``ValueError`` naming the bad field (kopf's body is read-only)."""
    try:
        plain = json.loads(json.dumps(dict(obj), default=lambda o: dict(o) if isinstance(o, Mapping) else str(o)))
        return etcd_api.Etcd.model_validate(plain)
    except pydantic.ValidationError as exc:
        errs = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise ValueError(f"the Etcd cannot be read: {errs}") from None


# --- reads ------------------------------------------------------------------------------------------------------


async def read_material(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig | None = None,
                        aliases: Sequence[str] = constants.CERT_ALIASES) -> dict[str, material.Material]:
    """The material verdict of each alias's Secret for ``tls`` (default ``spec.tls``), by alias."""
    tls = tls if tls is not None else db.spec.tls
    if tls is None:
        raise ValueError("read_material: no TLS config (spec.tls is unset and none was given)")
    ns = db.metadata.namespace or "default"
    out: dict[str, material.Material] = {}
    for alias in aliases:
        name = render.secret_name(db, tls, alias)
        out[alias] = material.check_secret(await k.get("v1", "Secret", ns, name), f"{ns}/{name}")
    return out


# --- reconcile -------------------------------------------------------------------------------------------------


async def _create(k: kube.Kube, obj: Obj, changed: list[str]) -> None:
    try:
        await k.create(obj)
        changed.append(_ref(obj))
    except kube.Conflict:
        pass  # created concurrently (another pass, a restarted operator); the next pass checks who owns it


async def _ensure_owned(k: kube.Kube, db: etcd_api.Etcd, obj: Obj, changed: list[str], *,
                        update: bool = True) -> Outcome | None:
    """Create ``obj`` when missing; update it when ours and drifted (if ``update``); block when foreign."""
    meta = obj["metadata"]
    live = await k.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    why = ownership.foreign_owned(live, _where(db), db.metadata.uid)
    if why:
        return Outcome(BLOCKED, REASON_FOREIGN_OBJECT, why, delay=BLOCKED_DELAY)
    if live is None:
        await _create(k, obj, changed)
    elif update and not (statefulset.is_subset(obj.get("spec") or {}, live.get("spec") or {})
                         and statefulset.is_subset(meta.get("labels") or {}, (live.get("metadata") or {}).get("labels") or {})):
        await k.apply(obj)
        changed.append(_ref(obj))
    return None


async def _migrate_certificate(k: kube.Kube, cert: Obj, changed: list[str]) -> None:
    """A Certificate from before the gated layout writes the mounted Secret itself: point it at its source
    Secret. cert-manager issues a fresh leaf from the same issuer there, and the gate releases it into the mounted
    Secret (members hot-reload it; nothing restarts). The one Certificate edit the provisioner makes."""
    meta = cert["metadata"]
    live = await k.get(cert["apiVersion"], cert["kind"], meta["namespace"], meta["name"])
    if live is None:
        return
    want, template = cert["spec"]["secretName"], cert["spec"]["secretTemplate"]
    live_spec = live.get("spec") or {}
    if live_spec.get("secretName") == want and live_spec.get("secretTemplate") == template:
        return
    await k.patch(cert["apiVersion"], cert["kind"], meta["namespace"], meta["name"],
                  {"spec": {"secretName": want, "secretTemplate": template}})
    # A Certificate from before the source labels gets them too (cert-manager puts them on its Secret).
    changed.append(f"Certificate {meta['name']} (source Secret {want})")


async def _ensure_tls(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig, changed: list[str],
                      initial: bool) -> tuple[Outcome | None, tuple[gate.Problem, ...]]:
    """Certificates, sources, trust bundle and the release of each source through the gate.

    Returns a stopping outcome (None: go on) and the problems of the sources held back."""
    ns, name, where = db.metadata.namespace or "default", db.metadata.name or "", _where(db)
    # 1. Certificates: create the missing ones. Existing ones are left alone (changing a Certificate of a live
    #    cluster is a ReconfigureTLS), except a legacy one that still writes the mounted Secret: repointed.
    for cert in render.render_certificates(db, tls):
        blocked = await _ensure_owned(k, db, cert, changed, update=False)
        if blocked:
            return blocked, ()
        await _migrate_certificate(k, cert, changed)
    # 2. Neither a source nor a mounted Secret written by someone else.
    #    (User-provided sources are the user's by definition: read, never owned, never written.)
    external = tls.external_secrets is not None
    for alias in constants.CERT_ALIASES:
        why = None
        if not external:
            source = await k.get("v1", "Secret", ns, render.source_secret_name(db, tls, alias))
            why = ownership.foreign_secret(source, where, db.metadata.uid, naming.certificate(name, alias))
        why = why or release.foreign_mounted(await k.get("v1", "Secret", ns, render.secret_name(db, tls, alias)),
                                             db, alias)
        if why:
            return Outcome(BLOCKED, REASON_FOREIGN_OBJECT, why, delay=BLOCKED_DELAY), ()
    # 3. The trust bundle: created once, before any member exists, from the sources' CAs (when every source passes
    #    the gate but for trust); never rewritten here — widening and narrowing it is the ops engine's job.
    bundle_name = naming.trust_bundle_secret(name)
    live_bundle = await k.get("v1", "Secret", ns, bundle_name)
    why = ownership.foreign_owned(live_bundle, where, db.metadata.uid)
    if why:
        return Outcome(BLOCKED, REASON_FOREIGN_OBJECT, why, delay=BLOCKED_DELAY), ()
    if live_bundle is None:
        verdicts = []
        for alias in constants.CERT_ALIASES:
            source_name = render.source_secret_name(db, tls, alias)
            verdicts.append(gate.check(await k.get("v1", "Secret", ns, source_name), f"{ns}/{source_name}",
                                       dns_names=render.member_dns_names(db, alias), loaded=None, now=_now()))
        problems = tuple(p for v in verdicts for p in v.problems)
        if problems:
            return await _waiting(k, db, tls, problems[0]), problems
        await release.write_bundle(k, db, pki.bundle(*(v.data["ca.crt"] for v in verdicts)), initial=initial)
        changed.append(f"Secret {bundle_name}")
    # 4. Release every source that passes the gate against the CAs every member has loaded.
    allowed = await release.loaded(k, db)
    held: list[gate.Problem] = []
    missing: list[gate.Problem] = []
    for alias in constants.CERT_ALIASES:
        result = await release.release(k, db, tls, alias, allowed=allowed)
        if result.blocked:
            return Outcome(BLOCKED, REASON_FOREIGN_OBJECT, result.blocked, delay=BLOCKED_DELAY), tuple(held)
        if result.changed:
            changed.append(f"Secret {render.secret_name(db, tls, alias)} (released)")
        held += result.verdict.problems
        if not result.verdict.passed and await k.get("v1", "Secret", ns, render.secret_name(db, tls, alias)) is None:
            missing.append(result.verdict.problems[0])
    if missing:  # a new cluster: etcd exits at start on a missing file, so no StatefulSet before its Secrets
        return await _waiting(k, db, tls, missing[0]), tuple(held)
    return None, tuple(held)


async def _waiting(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig, problem: gate.Problem) -> Outcome:
    """Waiting for certificates: for a source cert-manager has not written, the cause it gives
    (:func:`issuance_blocker`); else the problem of the material itself (the gate's words say more)."""
    if tls.external_secrets is None and problem.code == gate.SOURCE_MISSING:
        blocker = await issuance_blocker(k, db, tls)
        if blocker is not None:
            reason, message = blocker
            return Outcome(WAITING, reason, f"waiting for cert-manager: {message}", delay=WAITING_DELAY)
    return Outcome(WAITING, REASON_WAITING_FOR_CERTIFICATES, f"{_waiting_for(tls)}: {problem.message}",
                   delay=WAITING_DELAY)


def _ready(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``Ready`` condition of a cert-manager object."""
    return conditions.get_condition(((obj or {}).get("status") or {}).get("conditions"), "Ready")


async def issuance_blocker(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig) -> tuple[str, str] | None:
    """Why cert-manager has not issued an alias's certificate, as ``(reason, message)``: its Issuer or
    ClusterIssuer does not exist or is not Ready, or its Certificate says it is not Ready (its own reason and
    message). None when nothing says so (it is probably issuing now)."""
    ns = db.metadata.namespace or "default"
    seen: set[tuple[str, str]] = set()
    for alias in constants.CERT_ALIASES:
        ref = render.issuer_of(tls, alias)
        if ref is None or (ref.kind, ref.name) in seen:
            continue
        seen.add((ref.kind, ref.name))
        cluster = ref.kind == constants.CLUSTER_ISSUER_KIND
        where = ref.name if cluster else f"{ns}/{ref.name}"
        issuer = await k.get(ISSUER_API, ref.kind, None if cluster else ns, ref.name)
        if issuer is None:
            return REASON_ISSUER_NOT_FOUND, (
                f"{ref.kind} {where} (spec.tls.issuerRef) does not exist — create it, or point spec.tls.issuerRef "
                "at an existing Issuer or ClusterIssuer")
        ready = _ready(issuer)
        if ready is not None and ready.get("status") != constants.TRUE:
            return REASON_ISSUER_NOT_READY, (f"{ref.kind} {where} is not Ready ({ready.get('reason') or 'no reason'}: "
                                             f"{ready.get('message') or 'no message'})")
    for alias in constants.CERT_ALIASES:
        name = naming.certificate(db.metadata.name or "", alias)
        ready = _ready(await k.get(ISSUER_API, "Certificate", ns, name))
        if ready is not None and ready.get("status") == constants.FALSE and ready.get("reason") != "DoesNotExist":
            return REASON_CERTIFICATE_NOT_READY, (f"Certificate {ns}/{name} is not Ready "
                                                  f"({ready.get('reason') or 'no reason'}: "
                                                  f"{ready.get('message') or 'no message'})")
    return None


def _waiting_for(tls: etcd_api.TLSConfig) -> str:
    return "waiting for valid user-provided Secrets" if tls.external_secrets is not None else "waiting for cert-manager"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def _apply_statefulset(k: kube.Kube, db: etcd_api.Etcd, live_sts: dict[str, Any] | None, tls_drift: bool,
                             changed: list[str]) -> Outcome | None:
    """The members' StatefulSet created or brought up to date; an outcome when the pass ends here (a TLS switch
    the provisioner does not make, or a concurrent change), None when it goes on."""
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    rendered = render.render_statefulset(db)
    if live_sts is None:
        try:
            await k.create(statefulset.desired_statefulset(rendered, None))
            changed.append(_ref(rendered))
        except kube.Conflict:
            return Outcome(WAITING, "StatefulSetCreatedConcurrently", "the StatefulSet appeared meanwhile; "
                           "looking again", delay=WAITING_DELAY, changed=tuple(changed))
    elif tls_drift:
        want = rendered["spec"]["replicas"]
        if (live_sts.get("spec") or {}).get("replicas") != want:
            await k.patch("apps/v1", "StatefulSet", ns, name, {"spec": {"replicas": want}})
            changed.append(f"StatefulSet {name} (replicas={want})")
        state = "on" if db.spec.tls is not None else "off"
        return Outcome(BLOCKED, REASON_TLS_CHANGE,
                       f"spec.tls turns TLS {state} but the running members are "
                       f"{'plaintext' if state == 'on' else 'on TLS'}; the provisioner does not switch TLS on a live "
                       "cluster. Create an EtcdOpsRequest of type ReconfigureTLS (or restore spec.tls)",
                       delay=BLOCKED_DELAY, changed=tuple(changed))
    else:
        body = statefulset.statefulset_update(rendered, live_sts)
        if body is not None:
            try:
                await k.replace(body)
                changed.append(_ref(rendered))
            except kube.Conflict:
                return Outcome(WAITING, "StatefulSetChanged", "the StatefulSet changed while being updated; "
                               "looking again", delay=WAITING_DELAY, changed=tuple(changed))
    return None


async def reconcile(k: kube.Kube, obj: Mapping[str, Any]) -> Outcome:
    """One reconcile pass over the Etcd object ``obj`` (as read from the API). Idempotent; see the module doc."""
    status = dict(obj.get("status") or {})
    if pause.is_paused(status):
        by = pause.holder(status)
        return Outcome(PAUSED, REASON_PAUSED,
                       f"EtcdOpsRequest {by or '(unnamed)'} owns the cluster (Paused=True): nothing is changed "
                       "until it ends")
    try:
        db = parse(obj)
    except ValueError as exc:
        return Outcome(BLOCKED, REASON_INVALID_SPEC, f"{exc}; fix the Etcd spec", delay=BLOCKED_DELAY)
    if not db.metadata.uid or not db.metadata.name:
        raise ValueError("reconcile needs an Etcd read from the API (metadata.name and metadata.uid)")
    ns, name = db.metadata.namespace or "default", db.metadata.name
    changed: list[str] = []

    live_sts = await k.get("apps/v1", "StatefulSet", ns, naming.statefulset(name))
    why = ownership.foreign_owned(live_sts, _where(db), db.metadata.uid)
    if why:
        return Outcome(BLOCKED, REASON_FOREIGN_OBJECT, why, delay=BLOCKED_DELAY)
    tls_drift = live_sts is not None and statefulset.tls_mounted(live_sts) != (db.spec.tls is not None)

    held: tuple[gate.Problem, ...] | None = None
    if db.spec.tls is not None and not tls_drift:
        outcome, held = await _ensure_tls(k, db, db.spec.tls, changed, initial=live_sts is None)
        if outcome is not None:
            return dataclasses.replace(outcome, changed=tuple(changed), held=held)

    await auth.ensure_secret(k, db, changed)
    for manifest in [*render.render_services(db), render.render_pdb(db)]:
        outcome = await _ensure_owned(k, db, manifest, changed)
        if outcome is not None:
            return dataclasses.replace(outcome, changed=tuple(changed))

    outcome = await _apply_statefulset(k, db, live_sts, tls_drift, changed)
    if outcome is not None:
        return outcome
    summary = ", ".join(changed) if changed else "nothing to change"
    return Outcome(DONE, REASON_RECONCILED, f"all objects exist and match spec ({summary})", changed=tuple(changed),
                   held=held)


# --- deletion --------------------------------------------------------------------------------------------------


async def _delete_if_ours(k: kube.Kube, db: etcd_api.Etcd, api_version: str, kind: str, name: str,
                          changed: list[str]) -> None:
    ns = db.metadata.namespace or "default"
    live = await k.get(api_version, kind, ns, name)
    if live is None or not ownership.is_controlled_by(live, db.metadata.uid):
        return
    if await k.delete(api_version, kind, ns, name, uid=live["metadata"].get("uid")):
        changed.append(f"{kind} {name}")


async def finalize(k: kube.Kube, obj: Mapping[str, Any]) -> Outcome:
    """Deletion of the Etcd, by ``spec.deletionPolicy`` (KubeDB's meaning):

    - ``DoNotTerminate``: nothing is deleted; ``blocked`` (the handler keeps the finalizer and says why). The
      webhook refuses such a deletion up front; this is the second line when the webhook is not installed;
    - ``Delete``: the objects the operator created (StatefulSet, Services, PDB, Certificates, trust bundle) and,
      once the member pods are gone, the members' data volumes; the certificate source Secrets cert-manager
      wrote are kept (the mounted ones carry the Etcd's ownerReference and go with it);
    - ``WipeOut``: the same, and the certificate Secrets too (mounted and sources).
    """
    db = parse(obj)
    if db.spec.deletion_policy == constants.DELETION_DO_NOT_TERMINATE:
        return Outcome(BLOCKED, REASON_DO_NOT_TERMINATE,
                       f"Etcd {_where(db)} has spec.deletionPolicy DoNotTerminate, so it is kept; to delete it, set "
                       "spec.deletionPolicy to Delete or WipeOut", delay=10.0)
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    changed: list[str] = []
    await _delete_if_ours(k, db, "apps/v1", "StatefulSet", naming.statefulset(name), changed)
    await _delete_if_ours(k, db, "policy/v1", "PodDisruptionBudget", naming.pdb(name), changed)
    for svc in (naming.client_service(name), naming.headless_service(name)):
        await _delete_if_ours(k, db, "v1", "Service", svc, changed)
    for alias in constants.CERT_ALIASES:
        await _delete_if_ours(k, db, CERTIFICATE_API, "Certificate", naming.certificate(name, alias), changed)
    await _delete_if_ours(k, db, "v1", "Secret", naming.trust_bundle_secret(name), changed)
    # Volumes only once no member runs on them.
    pods = await k.list("v1", "Pod", ns, label_selector=naming.label_selector(name))
    if pods:
        return Outcome(WAITING, REASON_WAITING_FOR_PODS,
                       f"waiting for {len(pods)} member pod(s) to stop before deleting their volumes",
                       delay=WAITING_DELAY, changed=tuple(changed))
    for pvc in statefulset.pvc_names(await k.list("v1", "PersistentVolumeClaim", ns), name):
        if await k.delete("v1", "PersistentVolumeClaim", ns, pvc):
            changed.append(f"PersistentVolumeClaim {pvc}")
    if db.spec.deletion_policy != constants.DELETION_WIPE_OUT:
        return Outcome(DONE, REASON_DELETED, "members and their volumes deleted; certificate Secrets kept",
                       changed=tuple(changed))
    tls = db.spec.tls
    for alias in constants.CERT_ALIASES:
        changed += await release.delete_released(k, db, tls, alias)
    changed += await auth.delete_generated(k, db)
    return Outcome(DONE, REASON_DELETED, "members, their volumes and the certificate Secrets deleted",
                   changed=tuple(changed))
