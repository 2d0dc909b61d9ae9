"""The members' StatefulSet: what the operator applies (the render adjusted to the live object), how a change is
detected, and the apply itself with its render cache. The provisioner creates and updates it on every pass; the ops
engine applies it with a new restart token to restart members, and reads the live one (its TLS flags, its schemes,
its claims). Both use this one module, so the cluster layer owns the StatefulSet and the engine never imports the
provisioner.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from opsmanager import kube
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render

Obj = kube.Obj

# Hash of the last StatefulSet spec the operator applied: an unchanged render writes nothing.
ANNOTATION_SPEC_HASH = "opsmanager.dev/spec-hash"
# StatefulSet spec fields Kubernetes does not let an update change; the live values are kept.
STATEFULSET_IMMUTABLE = ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy")


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
