"""``/validate-etcdopsrequest``: KubeDB's checks for an ``EtcdOpsRequest``, in KubeDB's order, with its messages.

The order on create:

1. ``spec.type`` is supported, else ``defined OpsRequestType <t> is not supported, supported types for Etcd are
   Restart, ReconfigureTLS, MoveLeader`` (stop);
2. the Etcd exists, else ``spec.databaseRef <ns>/<name> is invalid or not found`` (stop);
3. the schema (our addition: the models, strictly; KubeDB gets this from Go decoding);
4. per type, ``ReconfigureTLS``: ``spec.tls is nil, ...``; count remove / rotate / cert-update: none → ``at least one
   of Remove, RotateCertificates, IssuerRef, or Certificates must be specified``, more than one → ``only one TLS
   reconfiguration operation is allowed at a time``; remove → ok; rotate without ``issuerRef`` on the Etcd →
   ``rotateCertificates requires TLS to already be enabled with issuerRef on Etcd``; cert-update without any
   issuer → ``tls.issuerRef is required for Etcd ReconfigureTLS``. ``UpdateVersion``: ``spec.updateVersion is nil,
   ...``, ``... targetVersion can not be empty`` (the upgrade path is the engine's, at run time, as in KubeDB).
   ``VerticalScaling``: ``spec.verticalScaling is nil, ...``, ``at least one of ... etcd or ... exporter must be
   specified``. ``Reconfigure``: ``spec.configuration is nil, ...``, ``... tuning must be specified, ...``, ``... applyConfig and
   ... configSecret are not supported for Etcd, ...``; then ours, etcd's own rules on the flags the members will
   run with (the request's over the Etcd's), each naming its field.
   ``HorizontalScaling``: ``spec.horizontalScaling
   is nil, ...``, ``... replicas can not be empty``, ``... replicas must be at least 1``; an even count is
   allowed with a warning. ``Compact``: nil, negative revision. ``RotateAuth`` with
   ``authentication.secretRef``: ``... secretRef.name can not be empty`` (KubeDB's checks of the Secret itself are
   the request's first step: this webhook reads no Secret). ``Restart``, ``MoveLeader``, ``Defragment``: nothing
   more.

On update only the precondition runs (:func:`~.objects.precondition_error`): ``spec`` must not change. As in
KubeDB, the "value" of an ops-request error is the request's name.

Ours, bring-your-own Secrets: a ``ReconfigureTLS`` with ``rotateCertificates`` on an Etcd that runs on
``spec.tls.externalSecrets`` is refused (the user rotates their own Secrets); one with ``tls.issuerRef`` is the
handover to cert-manager and is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opsmanager.api import conditions, constants
from opsmanager.api.opsrequest import EtcdOpsRequest
from opsmanager.webhook.validation import etcd as etcd_rules
from opsmanager.webhook.validation import messages
from opsmanager.webhook.validation.fielderrors import FieldError, go_value, invalid, schema_errors
from opsmanager.webhook.validation.lookups import EtcdLookup, EtcdLookupError
from opsmanager.webhook.validation.objects import as_dict, name_of, precondition_error
from opsmanager.webhook.validation.verdict import Verdict


def _db_has_issuer(db: Mapping[str, Any]) -> bool:
    tls = as_dict(db.get("spec")).get("tls")
    return isinstance(tls, dict) and tls.get("issuerRef") is not None


def _db_has_external_secrets(db: Mapping[str, Any]) -> bool:
    tls = as_dict(db.get("spec")).get("tls")
    return isinstance(tls, dict) and tls.get("externalSecrets") is not None


def reconfigure_tls_error(tls: Any, db: Mapping[str, Any]) -> str | None:
    """KubeDB's ``validateEtcdReconfigureTLSOpsRequest`` on a (schema-valid) ``spec.tls`` and the Etcd object."""
    if tls is None:
        return messages.MSG_TLS_NIL
    tls = as_dict(tls)
    cert_update = tls.get("issuerRef") is not None or bool(tls.get("certificates"))
    remove = tls.get("remove") is True
    rotate = tls.get("rotateCertificates") is True
    count = int(remove) + int(rotate) + int(cert_update)
    if count == 0:
        return messages.MSG_TLS_NONE
    if count > 1:
        return messages.MSG_TLS_MANY
    if remove:
        return None
    if rotate:
        if _db_has_external_secrets(db):  # ours: the user rotates their own Secrets
            return messages.MSG_TLS_ROTATE_EXTERNAL.format(db=name_of(db))
        return None if _db_has_issuer(db) else messages.MSG_TLS_ROTATE_NO_ISSUER
    if tls.get("issuerRef") is None and not _db_has_issuer(db):
        if _db_has_external_secrets(db):
            return messages.MSG_TLS_ISSUER_REQUIRED_EXTERNAL.format(db=name_of(db))
        return messages.MSG_TLS_ISSUER_REQUIRED
    return None  # an issuerRef on an externalSecrets Etcd is the handover to cert-manager: allowed


def rotate_auth_error(authentication: Any) -> str | None:
    """KubeDB's first RotateAuth check: a ``secretRef`` needs a name. Its other three (the Secret exists, has a
    non-empty ``password``, and ``username`` ``root``) read the Secret, and this webhook reads no Secret: the
    request's first step makes them, with KubeDB's words, before anything changes (docs/decisions.md D27.3)."""
    ref = as_dict(authentication).get("secretRef")
    if ref is not None and not as_dict(ref).get("name"):
        return messages.MSG_AUTH_SECRET_NAME_EMPTY
    return None


def recovery_errors(spec: Mapping[str, Any], db: Mapping[str, Any], name: str) -> list[FieldError]:
    """RecoverFromQuorumLoss: ``recoverFromQuorumLoss`` with ``confirmMember``, ``spec.timeout`` given, the Etcd
    reporting ``QuorumLost=True``, ``member`` (when given) among the members that answer, and ``confirmMember``
    equal to the member that would be kept (``member``, else the Etcd's ``status.quorumLoss.survivor``)."""
    field = "spec.recoverFromQuorumLoss"
    recover = spec.get("recoverFromQuorumLoss")
    if not isinstance(recover, Mapping):
        return [invalid(field, name, messages.MSG_RECOVER_NIL)]
    out: list[FieldError] = []
    confirm = recover.get("confirmMember")
    if not confirm:
        out.append(invalid(field, name, messages.MSG_RECOVER_CONFIRM_EMPTY))
    if not spec.get("timeout"):
        out.append(invalid("spec.timeout", name, messages.MSG_RECOVER_TIMEOUT))
    status = as_dict(db.get("status"))
    meta = as_dict(db.get("metadata"))
    if not conditions.is_true(status.get("conditions") if isinstance(status.get("conditions"), list) else None,
                              constants.COND_QUORUM_LOST):
        out.append(invalid(field, name, messages.MSG_RECOVER_NOT_LOST.format(
            namespace=meta.get("namespace") or "default", name=meta.get("name"))))
        return out
    loss = as_dict(status.get("quorumLoss"))
    answering = as_dict(loss.get("answering"))
    member = recover.get("member")
    if member and member not in answering:
        out.append(invalid(field, name, messages.MSG_RECOVER_MEMBER_SILENT.format(
            member=member, answering=", ".join(sorted(answering)) or "none")))
        return out
    kept = member or loss.get("survivor")
    why = "named by spec.recoverFromQuorumLoss.member" if member else "the highest raft committed index of the members that answer"
    if confirm and kept and confirm != kept:
        out.append(invalid(field, name, messages.MSG_RECOVER_CONFIRM_MISMATCH.format(confirm=confirm, survivor=kept,
                                                                                      why=why)))
    return out


def backup_errors(spec: Mapping[str, Any], db: Mapping[str, Any], name: str) -> list[FieldError]:
    """Backup: the Etcd must have ``spec.backup``. Restore: ``spec.restore`` with a ``source``, ``spec.timeout``
    given (KubeDB's rule: a restore takes as long as the data), and ``spec.backup`` on the Etcd."""
    out: list[FieldError] = []
    field = "spec.backup"
    if spec.get("type") == constants.OPS_TYPE_RESTORE:
        field = "spec.restore"
        restore = spec.get("restore")
        if not isinstance(restore, Mapping):
            return [invalid(field, name, messages.MSG_RESTORE_NIL)]
        if not restore.get("source"):
            out.append(invalid(field, name, messages.MSG_RESTORE_SOURCE_EMPTY))
        if not spec.get("timeout"):
            out.append(invalid("spec.timeout", name, messages.MSG_RESTORE_TIMEOUT))
    if not isinstance(as_dict(db.get("spec")).get("backup"), Mapping):
        meta = as_dict(db.get("metadata"))
        out.append(invalid(field, name, messages.MSG_NO_BACKUP_POLICY.format(
            namespace=meta.get("namespace") or "default", name=meta.get("name"))))
    return out


def opsrequest_errors(obj: Mapping[str, Any], namespace: str, lookup: EtcdLookup) -> list[FieldError]:
    """Create-time rules for an EtcdOpsRequest, in KubeDB's order (the first two stop at once).

    Raises :class:`EtcdLookupError` when the Etcd's existence cannot be determined.
    """
    name = name_of(obj)
    spec = as_dict(obj.get("spec"))
    type_ = spec.get("type")
    if type_ not in constants.OPS_TYPES:
        shown = type_ if isinstance(type_, str) else ("" if type_ is None else go_value(type_))
        msg = messages.MSG_TYPE_NOT_SUPPORTED.format(type=shown, types=", ".join(constants.OPS_TYPES))
        return [invalid("spec.type", name, msg)]
    db_name = as_dict(spec.get("databaseRef")).get("name")
    db = lookup.get_etcd(namespace, db_name) if isinstance(db_name, str) and db_name else None
    if db is None:
        shown_db = db_name if isinstance(db_name, str) else ""
        not_found = messages.MSG_DATABASE_NOT_FOUND.format(namespace=namespace, name=shown_db)
        return [invalid("spec.databaseRef", name, not_found)]
    errors = schema_errors(EtcdOpsRequest, obj)
    if errors:
        return errors
    if type_ == constants.OPS_TYPE_RECONFIGURE_TLS:
        message = reconfigure_tls_error(spec.get("tls"), db)
        if message:
            errors.append(invalid("spec.tls", name, message))
    if type_ == constants.OPS_TYPE_UPDATE_VERSION:
        update = spec.get("updateVersion")
        if not isinstance(update, Mapping):
            errors.append(invalid("spec.updateVersion", name, messages.MSG_UPDATE_VERSION_NIL))
        elif not update.get("targetVersion"):
            errors.append(invalid("spec.updateVersion", name, messages.MSG_UPDATE_VERSION_EMPTY))
    if type_ == constants.OPS_TYPE_VERTICAL_SCALING:
        scaling = spec.get("verticalScaling")
        if not isinstance(scaling, Mapping):
            errors.append(invalid("spec.verticalScaling", name, messages.MSG_VERTICAL_NIL))
        elif scaling.get("etcd") is None and scaling.get("exporter") is None:
            errors.append(invalid("spec.verticalScaling", name, messages.MSG_VERTICAL_EMPTY))
    if type_ == constants.OPS_TYPE_RECONFIGURE:
        configuration = spec.get("configuration")
        if not isinstance(configuration, Mapping):
            errors.append(invalid("spec.configuration", name, messages.MSG_CONFIGURATION_NIL))
        elif configuration.get("tuning") is None:
            errors.append(invalid("spec.configuration", name, messages.MSG_CONFIGURATION_TUNING))
        elif configuration.get("applyConfig") is not None or configuration.get("configSecret") is not None:
            errors.append(invalid("spec.configuration", name, messages.MSG_CONFIGURATION_NOT_SUPPORTED))
        else:  # ours: etcd's own rules on the flags the members will run with
            current = as_dict(as_dict(db.get("spec")).get("configuration")).get("tuning")
            errors += etcd_rules.tuning_errors(configuration["tuning"], "spec.configuration.tuning", current, db=db)
    if type_ == constants.OPS_TYPE_HORIZONTAL_SCALING:
        scaling = spec.get("horizontalScaling")
        if not isinstance(scaling, Mapping):
            errors.append(invalid("spec.horizontalScaling", name, messages.MSG_HORIZONTAL_NIL))
        elif scaling.get("replicas") is None:
            errors.append(invalid("spec.horizontalScaling", name, messages.MSG_HORIZONTAL_REPLICAS_EMPTY))
        elif isinstance(scaling.get("replicas"), int) and scaling["replicas"] < 1:
            errors.append(invalid("spec.horizontalScaling", name, messages.MSG_HORIZONTAL_REPLICAS_TOO_FEW))
    if type_ == constants.OPS_TYPE_ROTATE_AUTH:
        message = rotate_auth_error(spec.get("authentication"))
        if message:
            errors.append(invalid("spec.authentication", name, message))
    if type_ == constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS:
        errors += recovery_errors(spec, db, name)
    if type_ in (constants.OPS_TYPE_BACKUP, constants.OPS_TYPE_RESTORE):
        errors += backup_errors(spec, db, name)
    if type_ == constants.OPS_TYPE_COMPACT:
        compact = spec.get("compact")
        if not isinstance(compact, Mapping):
            errors.append(invalid("spec.compact", name, messages.MSG_COMPACT_NIL))
        elif isinstance(compact.get("revision"), int) and compact["revision"] < 0:
            errors.append(invalid("spec.compact", name, messages.MSG_COMPACT_NEGATIVE))
    return errors


def opsrequest_warnings(obj: Mapping[str, Any]) -> list[str]:
    """What an accepted request is admitted with but should know: an even member count."""
    spec = as_dict(obj.get("spec"))
    replicas = as_dict(spec.get("horizontalScaling")).get("replicas")
    if spec.get("type") == constants.OPS_TYPE_HORIZONTAL_SCALING and isinstance(replicas, int) and replicas % 2 == 0:
        return [messages.MSG_HORIZONTAL_EVEN.format(replicas=replicas, below=replicas - 1)]
    return []


def validate_opsrequest(
    operation: str,
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    *,
    namespace: str,
    lookup: EtcdLookup,
) -> Verdict:
    """The verdict of ``/validate-etcdopsrequest`` for one admission request."""
    kind, group = constants.OPS_KIND, constants.OPS_GROUP
    if operation == "CREATE" and obj is not None:
        try:
            errors = opsrequest_errors(obj, namespace, lookup)
        except EtcdLookupError as exc:
            db_name = as_dict(as_dict(obj.get("spec")).get("databaseRef")).get("name")
            return Verdict.deny(
                f"could not validate {kind} {namespace}/{name_of(obj)}: looking up Etcd {namespace}/{db_name} failed: "
                f"{exc}; retry when the API server is reachable",
                code=503, reason="ServiceUnavailable",
            )
        if errors:
            return Verdict.invalid(kind, group, name_of(obj), errors)
        return Verdict.allow(warnings=opsrequest_warnings(obj))
    if operation == "UPDATE" and obj is not None and old is not None:
        message = precondition_error(old, obj, ["spec"])
        if message:
            return Verdict.invalid(kind, group, name_of(obj), [invalid("spec", name_of(obj), message)])
    return Verdict.allow()
