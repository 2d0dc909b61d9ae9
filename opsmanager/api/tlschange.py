"""What a ``ReconfigureTLS`` request makes of the Etcd's ``spec.tls`` — one rule, pure.

The ops engine writes the result back to the Etcd in its last step (``UpdateDatabase``), and the admission
webhook lets exactly that write through while the request holds the Etcd paused (any other edit of ``spec.tls``
then is refused). Both must compute the same value, so the rule lives here, below both of them: the engine
(``opsmanager.ops.operations.reconfigure_tls``) may not be imported by the webhook.

The request's ``status.origin`` belongs to the same contract: the engine records there the Etcd's ``spec.tls`` as
it was when the request started, and folds the request into *that* (so its own write cannot change its plan). The
webhook reads the same record to compute the same value. Requests started by an older engine carry the record as
annotations (``constants.LEGACY_*``); they are read as before and never written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opsmanager.api import common, constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api


def desired_tls(current: etcd_api.TLSConfig | None, req: ops_api.ReconfigureTLSSpec) -> etcd_api.TLSConfig | None:
    """The Etcd's ``spec.tls`` after the request: certificates merged by alias, issuerRef replaced when given.

    An issuerRef on an Etcd that runs on the user's own Secrets (``externalSecrets``) is the handover to
    cert-manager: afterwards the issuer is set and ``externalSecrets`` is gone."""
    if req.remove:
        return None
    if req.rotate_certificates:
        return current
    base = current.model_copy(deep=True) if current is not None else etcd_api.TLSConfig()
    if req.issuer_ref is not None:
        base.issuer_ref = req.issuer_ref.model_copy(deep=True)
        base.external_secrets = None  # the handover: cert-manager's from now on
    merged: dict[str, common.CertificateSpec] = {c.alias: c for c in base.certificates or []}
    for cert in req.certificates or []:
        old = merged.get(cert.alias)
        if old is None:
            merged[cert.alias] = cert.model_copy(deep=True)
        else:
            update = cert.model_dump(exclude_unset=True, exclude_none=True)
            merged[cert.alias] = old.model_copy(update={k: getattr(cert, k) for k in update}, deep=True)
    base.certificates = [merged[a] for a in sorted(merged, key=alias_order)] or None
    return base


def alias_order(alias: str) -> int:
    """Where an alias sorts in ``spec.tls.certificates``: the order of ``constants.CERT_ALIASES``, unknown last."""
    return constants.CERT_ALIASES.index(alias) if alias in constants.CERT_ALIASES else len(constants.CERT_ALIASES)


def origin(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's ``status.origin`` (what the engine saw when it started), None before the engine recorded it."""
    value = (request.get("status") or {}).get("origin")
    return value if isinstance(value, dict) else None


def _legacy(request: Mapping[str, Any], name: str) -> str | None:
    value = ((request.get("metadata") or {}).get("annotations") or {}).get(name)
    return value if isinstance(value, str) else None


def recorded_tls(request: Mapping[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    """``(recorded, tls)``: has the engine recorded the Etcd's ``spec.tls`` as it was when ``request`` started, and
    what it was (None: TLS was off, or the record cannot be read)."""
    record = origin(request)
    if record is not None:
        tls = record.get("tls")
        return True, tls if isinstance(tls, dict) else None
    raw = _legacy(request, constants.LEGACY_TLS_BEFORE)
    if raw is None:
        return False, None
    try:
        value = json.loads(raw)
    except ValueError:
        return True, None
    return True, value if isinstance(value, dict) else None


def tls_before(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Etcd's ``spec.tls`` (a raw dict) the engine recorded on ``request`` when it started; None when it has
    not recorded one yet, recorded none (TLS was off), or the record cannot be read. As in the engine, None
    means: fold the request into the Etcd's ``spec.tls`` as it is now."""
    return recorded_tls(request)[1]


def recorded_plan(request: Mapping[str, Any]) -> str | None:
    """The plan variant the engine observed when a rotate started (``status.origin.plan``), None before."""
    record = origin(request)
    if record is not None:
        return record["plan"] if isinstance(record.get("plan"), str) else None
    return _legacy(request, constants.LEGACY_PLAN)


def rescue_reason(request: Mapping[str, Any]) -> str | None:
    """Why the engine chose a rescue plan for ``request`` (``status.origin.rescueReason``), None when it did not."""
    record = origin(request)
    if record is not None:
        return record["rescueReason"] if isinstance(record.get("rescueReason"), str) else None
    return _legacy(request, constants.LEGACY_RESCUE_REASON)
