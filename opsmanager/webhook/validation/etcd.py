"""``/validate-etcd``: KubeDB's ``ValidateCreateOrUpdate`` for an ``Etcd``, then the schema, and our own rules.

KubeDB's: a known version, at least one replica (an even count is allowed with a warning), a storage type, a
deletion policy, an issuer when TLS is on, known and distinct certificate aliases; ``DoNotTerminate`` refuses a
delete; on update, ``spec.storageType`` must not change (:func:`~.objects.precondition_error`).

Ours, bring-your-own Secrets: ``spec.tls.externalSecrets`` excludes ``issuerRef`` and ``certificates``
(``spec.tls.externalSecrets: Forbidden: spec.tls.issuerRef and spec.tls.externalSecrets are mutually exclusive:
...``) and names all three Secrets, none of them one the operator writes.

Ours, the certificate-lifecycle policy: the durations of ``spec.tlsLifecycle`` parse, are positive, and no alert
threshold is listed twice.

Ours, a paused Etcd: while an EtcdOpsRequest holds the Etcd paused, ``spec.tls`` may change only to exactly what
that request's ``UpdateDatabase`` step writes (:func:`paused_tls_errors`); anything else is ``spec.tls: Forbidden:
Etcd <db> is paused by EtcdOpsRequest <req>; ...``. The request owns the TLS until it has finished, so a user's
edit cannot race the engine's.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

import pydantic

from opsmanager.api import conditions, constants, durations, pause, tlschange, tuning
from opsmanager.api.etcd import Etcd, TLSConfig, default_secret_name
from opsmanager.api.opsrequest import EtcdOpsRequest
from opsmanager.webhook.validation import catalog as catalog_rules
from opsmanager.webhook.validation import messages
from opsmanager.webhook.validation.fielderrors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    required,
    schema_errors,
)
from opsmanager.webhook.validation.lookups import EtcdLookup, EtcdLookupError, InMemoryEtcdLookup
from opsmanager.webhook.validation.objects import (
    as_dict,
    is_deleting,
    is_int,
    meta_of,
    name_of,
    precondition_error,
)
from opsmanager.webhook.validation.verdict import Verdict


def version_errors(obj: Mapping[str, Any], lookup: EtcdLookup, old: Mapping[str, Any] | None) -> list[FieldError]:
    """KubeDB's: ``spec.version`` given, and an EtcdVersion of the catalog (:mod:`.catalog`), not deprecated when
    it is chosen (a create, or an update that changes it; ``old``: the object an update changes)."""
    version = as_dict(obj.get("spec")).get("version")
    if version is None or version == "":
        return [required("spec.version", messages.MSG_VERSION_MISSING)]
    if not isinstance(version, str):
        return []  # the schema check reports the type
    chosen = old is None or as_dict(old.get("spec")).get("version") != version
    if not chosen:
        return []
    meta = meta_of(obj)
    problem = catalog_rules.version_problem(version, lookup, new=True, namespace=meta.get("namespace") or "default",
                                            name=name_of(obj))
    return [invalid("spec.version", version, problem)] if problem is not None else []


def etcd_errors(obj: Mapping[str, Any], *, lookup: EtcdLookup | None = None,
                old: Mapping[str, Any] | None = None) -> tuple[list[FieldError], list[str]]:
    """KubeDB's ``ValidateCreateOrUpdate`` for an Etcd, then the schema; returns (errors, warnings). ``lookup``:
    the catalog's reader (None: the catalog the install bundle ships); ``old``: the object an update changes."""
    spec = as_dict(obj.get("spec"))
    warnings: list[str] = []
    errors = version_errors(obj, lookup if lookup is not None else InMemoryEtcdLookup(), old)

    replicas = spec.get("replicas")
    if replicas is None:
        errors.append(required("spec.replicas", messages.MSG_REPLICAS_MISSING))
    elif is_int(replicas) and replicas < 1:
        errors.append(invalid("spec.replicas", replicas, messages.MSG_REPLICAS_TOO_FEW))
    elif is_int(replicas) and replicas % 2 == 0:
        warnings.append(messages.MSG_EVEN_REPLICAS)

    storage_type = spec.get("storageType")
    if storage_type is None or storage_type == "":
        errors.append(required("spec.storageType", messages.MSG_STORAGE_TYPE_EMPTY))
    elif storage_type not in constants.STORAGE_TYPES:
        errors.append(invalid("spec.storageType", storage_type, messages.MSG_STORAGE_TYPE_BAD))

    policy = spec.get("deletionPolicy")
    if policy is None or policy == "":
        errors.append(required("spec.deletionPolicy", messages.MSG_DELETION_POLICY_MISSING))

    tls = spec.get("tls")
    if isinstance(tls, dict):
        external = tls.get("externalSecrets")
        if tls.get("issuerRef") is None and external is None:
            errors.append(required("spec.tls.issuerRef", messages.MSG_TLS_ISSUER_MISSING))
        errors += external_secrets_errors(tls, db=name_of(obj))
        certificates = tls.get("certificates")
        seen: set[str] = set()
        for i, cert in enumerate(certificates if isinstance(certificates, list) else []):
            alias = as_dict(cert).get("alias")
            path = f"spec.tls.certificates[{i}].alias"
            if alias not in constants.CERT_ALIASES:
                errors.append(invalid(path, alias if alias is not None else "", messages.MSG_ALIASES))
                continue
            if alias in seen:
                errors.append(duplicate(path, alias))
            seen.add(alias)

    errors += tls_lifecycle_errors(spec.get("tlsLifecycle"))

    if not errors:
        errors = schema_errors(Etcd, obj)
    if not errors:
        errors = tuning_errors(as_dict(spec.get("configuration")).get("tuning"), "spec.configuration.tuning")
    return errors, warnings


def tuning_errors(raw: Any, path: str, current: Any = None, *, db: Mapping[str, Any] | None = None) -> list[FieldError]:
    """etcd's rules (:func:`opsmanager.api.tuning.problems`) on ``raw`` applied over ``current`` (schema-valid
    tuning objects, or None); ``db``: the Etcd, whose last storage scan a new quota is checked against."""
    if not isinstance(raw, Mapping):
        return []
    merged = tuning.merge(tuning.TuningConfig.model_validate(current) if isinstance(current, Mapping) else None,
                          tuning.TuningConfig.model_validate(raw))
    members = as_dict(as_dict(as_dict((db or {}).get("status")).get("storage")).get("members"))
    sizes = [m["dbSizeBytes"] for m in members.values() if isinstance(m, Mapping) and is_int(m.get("dbSizeBytes"))]
    return [invalid(field, value, message)
            for field, value, message in tuning.problems(merged, path, largest_db_bytes=max(sizes, default=0))]


_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def external_secrets_errors(tls: Mapping[str, Any], *, db: str = "") -> list[FieldError]:
    """Ours: ``spec.tls.externalSecrets`` — not with ``issuerRef``, not with ``certificates``, and a
    Secret name for each of ``server``, ``peer`` and ``client`` that is none of the Secrets the operator writes
    for the Etcd ``db`` (mounted, sources, trust bundle: the operator never writes a user's Secret, so the names
    must differ). Empty when ``externalSecrets`` is not set."""
    external = tls.get("externalSecrets")
    if external is None:
        return []
    base = "spec.tls.externalSecrets"
    errors: list[FieldError] = []
    if tls.get("issuerRef") is not None:
        errors.append(forbidden(base, messages.MSG_TLS_ISSUER_AND_EXTERNAL))
    if tls.get("certificates"):
        errors.append(forbidden("spec.tls.certificates", messages.MSG_TLS_EXTERNAL_CERTIFICATES))
    if not isinstance(external, dict):
        return errors  # the schema check reports the type
    for alias in ("server", "peer", "client"):
        name = external.get(alias)
        if name is None or name == "":
            errors.append(required(f"{base}.{alias}", messages.MSG_TLS_EXTERNAL_ALIAS_MISSING.format(alias=alias)))
        elif isinstance(name, str) and (len(name) > 253 or not _SECRET_NAME.fullmatch(name)):
            errors.append(invalid(f"{base}.{alias}", name, messages.MSG_TLS_EXTERNAL_BAD_NAME))
        elif db and name in _operator_secrets(db):
            errors.append(invalid(f"{base}.{alias}", name, messages.MSG_TLS_EXTERNAL_OPERATOR_NAME))
    return errors


def _operator_secrets(db: str) -> set[str]:
    """The Secrets the operator writes for the Etcd ``db`` with the default names (``<db>-<alias>-cert``,
    ``<db>-<alias>-issued``, ``<db>-ca-bundle``; the provisioner's ``naming`` module, which the webhook may not
    import, spells the same)."""
    names = {default_secret_name(db, a) for a in constants.CERT_ALIASES}
    return names | {f"{db}-{a}-issued" for a in constants.CERT_ALIASES} | {f"{db}-ca-bundle"}


def _duration_error(path: str, value: Any) -> FieldError | None:
    """The error of one policy duration: unparsable, or zero / negative. None when it is fine."""
    try:
        delta = durations.parse(value)
    except ValueError:
        return invalid(path, value, messages.MSG_DURATION_INVALID)
    if delta <= datetime.timedelta(0):
        return invalid(path, value, messages.MSG_DURATION_NOT_POSITIVE)
    return None


def tls_lifecycle_errors(policy: Any) -> list[FieldError]:
    """Ours: the durations of ``spec.tlsLifecycle`` parse and are positive, ``alertBefore`` has no two
    equal thresholds (``24h`` and ``1440m`` are equal). In field order; a wrong shape is left to the schema check."""
    if not isinstance(policy, dict):
        return []
    base = "spec.tlsLifecycle"
    errors: list[FieldError | None] = []
    if policy.get("scanInterval") is not None:
        errors.append(_duration_error(f"{base}.scanInterval", policy["scanInterval"]))
    raw = policy.get("alertBefore")
    alert_before: list[Any] = raw if isinstance(raw, list) else []
    seen: dict[datetime.timedelta, int] = {}
    for i, value in enumerate(alert_before):
        path = f"{base}.alertBefore[{i}]"
        error = _duration_error(path, value)
        if error is not None:
            errors.append(error)
            continue
        delta = durations.parse(value)
        if delta in seen:
            first = seen[delta]
            errors.append(FieldError("FieldValueDuplicate", path, messages.MSG_ALERT_DUPLICATE.format(
                other=f"{base}.alertBefore[{first}]", value=json.dumps(alert_before[first]),
            ), value))
        else:
            seen[delta] = i
    auto_renew = policy.get("autoRenew")
    if isinstance(auto_renew, dict):
        for key in ("before", "retryAfterFailure"):
            if auto_renew.get(key) is not None:
                errors.append(_duration_error(f"{base}.autoRenew.{key}", auto_renew[key]))
    return [e for e in errors if e is not None]


def _normal_tls(tls: Any) -> Any:
    """``spec.tls`` as the models read it (defaults filled in, camelCase, no nulls), so that two spellings of the
    same TLS compare equal; a value the models cannot read is returned as it is (the schema check reports it)."""
    if tls is None:
        return None
    try:
        return TLSConfig.model_validate(tls).to_dict()
    except pydantic.ValidationError:
        return tls


def engine_tls_write(old: Mapping[str, Any], request: Mapping[str, Any]) -> Any:
    """The ``spec.tls`` that ``request``'s ``UpdateDatabase`` step writes to the Etcd ``old`` (normalised; None
    for a removal): the request's ``spec.tls`` folded into the Etcd's TLS as the engine recorded it when the
    request started (``tlschange.tls_before``), else as it is now — the engine's own rule, from the API layer.
    A request that writes nothing (not ``ReconfigureTLS``, or one the engine cannot plan) leaves it as it is."""
    current = as_dict(old.get("spec")).get("tls")
    before = tlschange.tls_before(request)
    start = before if before is not None else current
    try:
        spec = EtcdOpsRequest.model_validate(request).spec
        base = TLSConfig.model_validate(start) if start is not None else None
    except pydantic.ValidationError:
        return _normal_tls(current)
    if spec.type != constants.OPS_TYPE_RECONFIGURE_TLS or spec.tls is None:
        return _normal_tls(current)
    desired = tlschange.desired_tls(base, spec.tls)
    return desired.to_dict() if desired is not None else None


def _held_by_request(obj: Mapping[str, Any]) -> str | None:
    """``pause.held_by_request`` of ``obj``'s status, whatever its shape (a review may carry anything)."""
    conds = as_dict(obj.get("status")).get("conditions")
    return pause.held_by_request({"conditions": [c for c in conds if isinstance(c, dict)]
                                  if isinstance(conds, list) else None})


def paused_tls_errors(obj: Mapping[str, Any], old: Mapping[str, Any], lookup: EtcdLookup) -> list[FieldError]:
    """Ours: while an EtcdOpsRequest holds the Etcd paused (``pause.held_by_request``), ``spec.tls``
    changes only to exactly what that request's ``UpdateDatabase`` step writes (:func:`engine_tls_write`): the
    request owns the TLS until it has finished. A pause held by anyone else is not this rule's business, and a
    request that no longer exists, is being deleted or has finished holds nothing (``pause.request_holds``; the
    engine heals such a pause away). Raises :class:`EtcdLookupError` when the request cannot be read."""
    holder = _held_by_request(old)
    if holder is None:
        return []
    new_tls = _normal_tls(as_dict(obj.get("spec")).get("tls"))
    if new_tls == _normal_tls(as_dict(old.get("spec")).get("tls")):
        return []
    request = lookup.get_opsrequest(meta_of(old).get("namespace") or "default", holder)
    if not pause.request_holds(request) or new_tls == engine_tls_write(old, as_dict(request)):
        return []
    return [forbidden("spec.tls", messages.MSG_TLS_PAUSED.format(etcd=name_of(old), request=holder))]


def _scaled_by(obj: Mapping[str, Any]) -> tuple[str, str]:
    """The request that writes ``obj``'s member count and the count it writes (as text): from ``status.scaledBy``,
    else from the ``ops.opsmanager.dev/scaled-by: <request>/<count>`` annotation older operators wrote with the count
    (the engine drops it with its next write; this fallback can go once no Etcd carries that annotation)."""
    scaled_by = as_dict(obj.get("status")).get("scaledBy")
    if isinstance(scaled_by, dict):
        request, count = scaled_by.get("request"), scaled_by.get("replicas")
        return (request if isinstance(request, str) else "",
                str(count) if isinstance(count, int) and not isinstance(count, bool) else "")
    legacy = as_dict(meta_of(obj).get("annotations")).get(constants.ANNOTATION_SCALED_BY)
    holder, _, count_text = legacy.rpartition("/") if isinstance(legacy, str) else ("", "", "")
    return holder, count_text


def replicas_errors(obj: Mapping[str, Any], old: Mapping[str, Any], lookup: EtcdLookup) -> list[FieldError]:
    """Ours: a provisioned Etcd's ``spec.replicas`` changes by one at a time, written by the active HorizontalScaling
    request its ``status.scaledBy`` names. A hand edit would start members nobody added to the cluster (or leave
    removed ones in it). Raises :class:`EtcdLookupError` when the request cannot be read."""
    new, before = as_dict(obj.get("spec")).get("replicas"), as_dict(old.get("spec")).get("replicas")
    if new == before or not isinstance(new, int) or not isinstance(before, int):
        return []
    if not conditions.is_true(as_dict(old.get("status")).get("conditions"), constants.COND_PROVISIONED):
        return []  # not running yet: nothing to add members to
    # The engine names the count it writes, so a ±1 edit by anyone else while the request runs (a GitOps tool
    # putting its own count back) does not pass on what the engine recorded. The status of an update of the Etcd
    # is the stored one (the API server ignores a status sent to the main resource), so only a writer of the
    # status subresource names a count.
    holder, count = _scaled_by(obj)
    request = lookup.get_opsrequest(meta_of(old).get("namespace") or "default", holder) if holder else None
    spec = as_dict((request or {}).get("spec"))
    if (pause.request_holds(request) and spec.get("type") == constants.OPS_TYPE_HORIZONTAL_SCALING
            and as_dict(spec.get("databaseRef")).get("name") == name_of(old) and abs(new - before) == 1
            and count == str(new)):
        return []
    return [forbidden("spec.replicas", messages.MSG_REPLICAS_BY_REQUEST.format(replicas=new))]


def auth_secret_errors(obj: Mapping[str, Any], old: Mapping[str, Any], lookup: EtcdLookup) -> list[FieldError]:
    """Ours: ``spec.authSecret`` may be added (the provisioner then turns etcd's authentication on), but never
    removed (etcd's authentication stays on), and renamed only by the RotateAuth request holding the Etcd whose
    ``authentication.secretRef`` names the new Secret (it moved the root password there first). Raises
    :class:`EtcdLookupError` when that request cannot be read."""
    before = as_dict(as_dict(old.get("spec")).get("authSecret")).get("name")
    after = as_dict(as_dict(obj.get("spec")).get("authSecret")).get("name")
    if not before or after == before:
        return []
    if not after:
        return [forbidden("spec.authSecret", messages.MSG_AUTH_SECRET_REMOVED)]
    holder = _held_by_request(old)
    request = lookup.get_opsrequest(meta_of(old).get("namespace") or "default", holder) if holder else None
    spec = as_dict((request or {}).get("spec"))
    moved_to = as_dict(as_dict(spec.get("authentication")).get("secretRef")).get("name")
    if pause.request_holds(request) and spec.get("type") == constants.OPS_TYPE_ROTATE_AUTH and moved_to == after:
        return []
    return [forbidden("spec.authSecret.name", messages.MSG_AUTH_SECRET_RENAMED.format(old=before, new=after))]


def validate_etcd(
    operation: str, obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None, *, lookup: EtcdLookup
) -> Verdict:
    """The verdict of ``/validate-etcd`` for one admission request (CREATE, UPDATE and DELETE). ``lookup`` reads
    the EtcdVersion a chosen ``spec.version`` names, and the EtcdOpsRequest holding the Etcd paused on an UPDATE
    that changes what that request owns."""
    kind, group = constants.ETCD_KIND, constants.ETCD_GROUP
    if operation == "DELETE":
        if old is not None and as_dict(old.get("spec")).get("deletionPolicy") == constants.DELETION_DO_NOT_TERMINATE:
            error = invalid("spec.deletionPolicy", name_of(old), messages.MSG_DO_NOT_TERMINATE)
            return Verdict.invalid(kind, group, name_of(old), [error])
        return Verdict.allow()
    if operation not in ("CREATE", "UPDATE") or obj is None or is_deleting(obj):
        return Verdict.allow()
    try:
        errors, warnings = etcd_errors(obj, lookup=lookup, old=old if operation == "UPDATE" else None)
    except EtcdLookupError as exc:
        return Verdict.deny(
            f"could not validate {kind} {meta_of(obj).get('namespace') or 'default'}/{name_of(obj)}: looking up "
            f"EtcdVersion {as_dict(obj.get('spec')).get('version')} failed: {exc}; retry when the API server is "
            "reachable", code=503, reason="ServiceUnavailable")
    if operation == "UPDATE" and old is not None:
        message = precondition_error(old, obj, ["spec.storageType"])
        if message:
            errors.append(invalid("spec", name_of(obj), message))
        try:
            errors += paused_tls_errors(obj, old, lookup)
            errors += replicas_errors(obj, old, lookup)
            errors += auth_secret_errors(obj, old, lookup)
        except EtcdLookupError as exc:
            return Verdict.deny(
                f"could not validate {kind} {meta_of(old).get('namespace') or 'default'}/{name_of(old)}: it is paused "
                f"by EtcdOpsRequest {_held_by_request(old)} and looking that request up failed: {exc}; retry when "
                "the API server is reachable",
                code=503, reason="ServiceUnavailable",
            )
    if errors:
        return Verdict.invalid(kind, group, name_of(obj), errors, warnings=warnings)
    return Verdict.allow(warnings=warnings)
