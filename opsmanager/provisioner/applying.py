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

The ops engine calls :func:`apply_statefulset` (render + apply, ``restartedAt`` preserved or bumped) and
:func:`read_material` (is every Secret complete?) with the same code.

Control flow is a value (:class:`Outcome`), not an exception: "not yet" is ``waiting`` with a delay, which the
handlers turn into ``kopf.TemporaryError(delay=...)``; nothing here sleeps.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import pydantic

from opsmanager import kube, pki
from opsmanager.api import conditions, constants, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render
from opsmanager.provisioner import auth
from opsmanager.tls import gate, material, ownership, release

Obj = dict[str, Any]

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

# Hash of the last StatefulSet spec the operator applied: an unchanged render writes nothing.
ANNOTATION_SPEC_HASH = "opsmanager.dev/spec-hash"
# StatefulSet spec fields Kubernetes does not let an update change; the live values are kept.
STATEFULSET_IMMUTABLE = ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy")

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


def is_subset(want: Any, have: Any) -> bool:
    """True when every field of ``want`` is in ``have`` with the same value (lists: same length, item by item).

    Fields the API server adds (defaults, status, metadata) are ignored, so a rendered object compares equal to
    its live, defaulted copy; so is an empty list or map the render has and the live object lacks (kube-apiserver
    omits empty ``omitempty`` fields such as ``volumes: []``, and a render that kept one would be rewritten on
    every pass).
    """
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            is_subset(v, have[k]) if k in have else v in ([], {}, None) for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(have, list) and len(want) == len(have)
                and all(is_subset(w, h) for w, h in zip(want, have, strict=True)))
    return bool(want == have)


def _annotations(template_or_obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(((template_or_obj.get("metadata") or {}).get("annotations")) or {})


def live_restarted_at(sts: Mapping[str, Any] | None) -> str | None:
    """The ``opsmanager.dev/restartedAt`` template annotation of a live StatefulSet, if any."""
    if not sts:
        return None
    template = (sts.get("spec") or {}).get("template") or {}
    return _annotations(template).get(naming.ANNOTATION_RESTARTED_AT)


def spec_hash(spec: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def desired_statefulset(rendered: Obj, live: Mapping[str, Any] | None, *, restarted_at: str | None = None) -> Obj:
    """The rendered StatefulSet adjusted to a live one: the live ``restartedAt`` kept (``restarted_at`` overrides
    it), the immutable fields taken from the live object, and the spec hash annotation set."""
    want = copy.deepcopy(rendered)
    template_meta = want["spec"]["template"].setdefault("metadata", {})
    keep = restarted_at if restarted_at is not None else live_restarted_at(live)
    if keep:
        template_meta.setdefault("annotations", {})[naming.ANNOTATION_RESTARTED_AT] = keep
    if live is not None:
        live_spec = live.get("spec") or {}
        for field in STATEFULSET_IMMUTABLE:
            if field in live_spec:
                want["spec"][field] = copy.deepcopy(live_spec[field])
            else:
                want["spec"].pop(field, None)
    # The hash leaves the immutable fields out: the API server defaults inside them (volumeClaimTemplates), and
    # they are never updated anyway.
    hashed = {k: v for k, v in want["spec"].items() if k not in STATEFULSET_IMMUTABLE}
    want["metadata"].setdefault("annotations", {})[ANNOTATION_SPEC_HASH] = spec_hash(hashed)
    return want


def statefulset_update(rendered: Obj, live: Mapping[str, Any], *, restarted_at: str | None = None) -> Obj | None:
    """The body to PUT so ``live`` becomes the render, or None when nothing would change.

    A change is detected two ways: the spec hash annotation differs from the render's (the render changed, even by
    removing a field), or a rendered field differs from the live value (someone edited the StatefulSet).
    """
    want = desired_statefulset(rendered, live, restarted_at=restarted_at)
    live_meta = live.get("metadata") or {}
    same_hash = _annotations(live).get(ANNOTATION_SPEC_HASH) == want["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
    labels_ok = is_subset(want["metadata"].get("labels") or {}, live_meta.get("labels") or {})
    owners_ok = is_subset(want["metadata"].get("ownerReferences") or [], live_meta.get("ownerReferences") or [])
    if same_hash and labels_ok and owners_ok and is_subset(want["spec"], live.get("spec") or {}):
        return None
    body = copy.deepcopy(dict(live))
    body.pop("status", None)
    meta = body.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **(want["metadata"].get("labels") or {})}
    meta["annotations"] = {**(meta.get("annotations") or {}), **want["metadata"]["annotations"]}
    if "ownerReferences" in want["metadata"]:
        meta["ownerReferences"] = want["metadata"]["ownerReferences"]
    body["spec"] = want["spec"]
    return body


def tls_mounted(sts: Mapping[str, Any]) -> bool:
    """Whether a live StatefulSet runs its members with TLS files (any ``--cert-file``/``--peer-cert-file``)."""
    for arg in _etcd_args(sts):
        if arg.startswith(("--cert-file=", "--peer-cert-file=")):
            return True
    return False


def _etcd_args(sts: Mapping[str, Any]) -> list[str]:
    containers = ((((sts.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
    for c in containers:
        if c.get("name") == naming.CONTAINER_NAME:
            return [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
    return []


def client_schemes(sts: Mapping[str, Any]) -> tuple[str, ...]:
    """The schemes a live StatefulSet's members serve on the client port (from ``--listen-client-urls``),
    https first; ``("http",)`` when the flag is absent (etcd's default)."""
    for arg in _etcd_args(sts):
        if arg.startswith("--listen-client-urls="):
            schemes = {u.split("://", 1)[0] for u in arg.split("=", 1)[1].split(",") if "://" in u}
            return tuple(s for s in ("https", "http") if s in schemes) or ("http",)
    return ("http",)


def pvc_names(pvcs: Sequence[Mapping[str, Any]], db: str) -> list[str]:
    """The data PVCs of the members (``data-<db>-<ordinal>``, as the StatefulSet names them)."""
    pattern = re.compile(rf"^{re.escape(naming.DATA_VOLUME)}-{re.escape(naming.statefulset(db))}-\d+$")
    return sorted(p["metadata"]["name"] for p in pvcs if pattern.match((p.get("metadata") or {}).get("name", "")))


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


# --- reads the ops engine also uses ----------------------------------------------------------------------------


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


async def apply_statefulset(k: kube.Kube, db: etcd_api.Etcd, wiring: render.Wiring | None = None, *,
                            restarted_at: str | None = None,
                            before_write: Callable[[], Awaitable[None]] | None = None) -> Obj:
    """Render the StatefulSet (``wiring`` defaults to the steady state of ``spec.tls``) and apply it: create it
    when missing, else PUT it when anything changed, keeping the live ``restartedAt`` unless ``restarted_at`` is
    given (the ops engine passes a new value to make a restart visible as a new revision). Returns the live
    object. Raises ``kube.Conflict`` when the StatefulSet changed underneath (re-read and call again).
    ``before_write`` is awaited right before a create or a PUT (not when nothing changes)."""
    ns, name = db.metadata.namespace or "default", naming.statefulset(db.metadata.name or "")
    live = await k.get("apps/v1", "StatefulSet", ns, name)
    inputs = _render_inputs(db, wiring, restarted_at)
    if live is not None and _IN_SYNC.get((ns, name)) == (inputs, live["metadata"].get("uid"),
                                                          live["metadata"].get("resourceVersion")):
        return live  # this very live object was found equal to this very render: nothing to compare again
    rendered = render.render_statefulset(db, wiring)
    if live is None:
        if before_write is not None:
            await before_write()
        return await k.create(desired_statefulset(rendered, None, restarted_at=restarted_at))
    body = statefulset_update(rendered, live, restarted_at=restarted_at)
    if body is None:
        _remember_in_sync(ns, name, inputs, live)
        return live
    if before_write is not None:
        await before_write()
    return await k.replace(body)


# (namespace, StatefulSet) → (render inputs, live uid, live resourceVersion) last found in sync. The ops engine
# applies its pass's StatefulSet on every reconcile of the pass (the apply is its idempotent record); rendering and
# comparing it each time is costly and almost always finds it in sync. Any change of the Etcd, the
# wiring, the restart token or the live object (a new resourceVersion) misses, and the full render and compare run.
_IN_SYNC: collections.OrderedDict[tuple[str, str], tuple[str, str | None, str | None]] = collections.OrderedDict()
_IN_SYNC_MAX = 4096


def _render_inputs(db: etcd_api.Etcd, wiring: render.Wiring | None, restarted_at: str | None) -> str:
    """Everything :func:`render.render_statefulset` and :func:`statefulset_update` read, as one string."""
    return f"{db.model_dump_json()}|{wiring!r}|{restarted_at}"


def _remember_in_sync(ns: str, name: str, inputs: str, live: Obj) -> None:
    _IN_SYNC[(ns, name)] = (inputs, live["metadata"].get("uid"), live["metadata"].get("resourceVersion"))
    _IN_SYNC.move_to_end((ns, name))
    while len(_IN_SYNC) > _IN_SYNC_MAX:
        _IN_SYNC.popitem(last=False)


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
    elif update and not (is_subset(obj.get("spec") or {}, live.get("spec") or {})
                         and is_subset(meta.get("labels") or {}, (live.get("metadata") or {}).get("labels") or {})):
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
    tls_drift = live_sts is not None and tls_mounted(live_sts) != (db.spec.tls is not None)

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

    rendered = render.render_statefulset(db)
    if live_sts is None:
        try:
            await k.create(desired_statefulset(rendered, None))
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
        body = statefulset_update(rendered, live_sts)
        if body is not None:
            try:
                await k.replace(body)
                changed.append(_ref(rendered))
            except kube.Conflict:
                return Outcome(WAITING, "StatefulSetChanged", "the StatefulSet changed while being updated; "
                               "looking again", delay=WAITING_DELAY, changed=tuple(changed))
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
    for pvc in pvc_names(await k.list("v1", "PersistentVolumeClaim", ns), name):
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
