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
   ...``, ``... targetVersion can not be empty``; then the catalog (:mod:`.catalog`): the target an EtcdVersion,
   not deprecated, a path etcd can take (3.5 → 3.7 goes through 3.6), allowed by the current EtcdVersion's
   ``updateConstraints`` (``update version from <current> to <target> is not supported``).
   ``VerticalScaling``: ``spec.verticalScaling is nil, ...``, ``at least one of ... etcd or ... exporter must be
   specified``. ``Reconfigure``: ``spec.configuration is nil, ...``, ``... tuning must be specified, ...``, ``... applyConfig and
   ... configSecret are not supported for Etcd, ...``; then ours, etcd's own rules on the flags the members will
   run with (the request's over the Etcd's), each naming its field.
   ``HorizontalScaling``: ``spec.horizontalScaling
   is nil, ...``, ``... replicas can not be empty``, ``... replicas must be at least 1``; an even count is
   allowed with a warning. ``Compact``: nil, negative revision. ``RotateAuth`` with
   ``authentication.secretRef``: ``... secretRef.name can not be empty`` (KubeDB's checks of the Secret itself are
   the request's first step: this webhook reads no Secret). ``VolumeExpansion``: ``spec.volumeExpansion is nil,
   ...``, ``... etcd can not be empty``, the mode, ``storage not configured for etcd`` (ephemeral), ``desired etcd
   storage size must be greater than current storage. Current storage: <size>``, then the Etcd's StorageClass
   (read through the lookup) exists and allows expansion. ``StorageMigration``: ``spec.migration is required for
   StorageMigration type``, ``spec.migration.storageClassName is required``, ours: ``storage not configured for
   etcd`` and a class other than the Etcd's; ``spec.timeout is required for Storage Migration ops request, ...``;
   then the target class (read through the lookup) exists (``storage class <x> not found``) and binds
   ``WaitForFirstConsumer`` (``volume binding mode should be WaitForFirstConsumer for <x> storageClass``).
   ``Restart``, ``MoveLeader``, ``Defragment``: nothing more.

The rules on the request itself (and on the few facts of the Etcd they read) are written once, in
:mod:`opsmanager.api.rules`: the plan builders refuse with the same functions, so a request created without this
webhook fails with the same words. Only the rules that read the Etcd's status (a recovery's) are this module's own.

On update only the precondition runs (:func:`~.objects.precondition_error`): ``spec`` must not change. As in
KubeDB, the "value" of an ops-request error is the request's name.

Ours, bring-your-own Secrets: a ``ReconfigureTLS`` with ``rotateCertificates`` on an Etcd that runs on
``spec.tls.externalSecrets`` is refused (the user rotates their own Secrets); one with ``tls.issuerRef`` is the
handover to cert-manager and is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from opsmanager.api import conditions, constants, rules
from opsmanager.api import opsrequest as ops_api
from opsmanager.webhook.validation import catalog as catalog_rules
from opsmanager.webhook.validation import etcd as etcd_rules
from opsmanager.webhook.validation import messages
from opsmanager.webhook.validation.fielderrors import FieldError, go_value, invalid, schema_errors
from opsmanager.webhook.validation.lookups import EtcdLookup, EtcdLookupError
from opsmanager.webhook.validation.objects import as_dict, name_of, precondition_error
from opsmanager.webhook.validation.verdict import Verdict


def etcd_facts(db: Mapping[str, Any]) -> rules.EtcdFacts:
    """What the request rules read of the Etcd, from the raw object the lookup returned."""
    meta, spec = as_dict(db.get("metadata")), as_dict(db.get("spec"))
    tls = spec.get("tls")
    storage = as_dict(spec.get("storage"))
    size = as_dict(as_dict(storage.get("resources")).get("requests")).get("storage")
    storage_class = storage.get("storageClassName")
    return rules.EtcdFacts(namespace=str(meta.get("namespace") or "default"), name=name_of(db),
                           tls_issuer=isinstance(tls, dict) and tls.get("issuerRef") is not None,
                           external_secrets=isinstance(tls, dict) and tls.get("externalSecrets") is not None,
                           backup=isinstance(spec.get("backup"), Mapping),
                           durable=spec.get("storageType", constants.STORAGE_DURABLE) == constants.STORAGE_DURABLE,
                           storage_size=str(size) if isinstance(size, (str, int)) and size != "" else
                           constants.DEFAULT_STORAGE_SIZE,
                           storage_class=storage_class if isinstance(storage_class, str) and storage_class else None)


@dataclasses.dataclass(frozen=True)
class Checked:
    """A request that passed the schema: its typed spec, its raw spec, the Etcd it names (raw), its name (the
    value of every error, as in KubeDB), and where the catalog is read."""

    spec: ops_api.EtcdOpsRequestSpec
    raw: Mapping[str, Any]
    db: Mapping[str, Any]
    name: str
    lookup: EtcdLookup | None = None  # for a rule that reads another object (the catalog, a StorageClass)

    def errors(self, *found: rules.Violation | None) -> list[FieldError]:
        """The rules' violations as field errors."""
        return [invalid(v.field, self.name, v.message) for v in found if v is not None]


def update_version_errors(c: Checked) -> list[FieldError]:
    """KubeDB's UpdateVersion checks (the options given, with a target), then the catalog's
    (:func:`opsmanager.webhook.validation.catalog.update_problem`): the target an EtcdVersion, not deprecated, a
    move etcd can make from the Etcd's version, and one the current EtcdVersion's updateConstraints allow."""
    errors = c.errors(rules.update_version(c.spec.update_version))
    if errors or c.spec.update_version is None or not c.spec.update_version.target_version or c.lookup is None:
        return errors
    current = as_dict(c.db.get("spec")).get("version")
    problem = catalog_rules.update_problem(current, c.spec.update_version.target_version, c.lookup)
    return [invalid("spec.updateVersion.targetVersion", c.name, problem)] if problem is not None else []


def reconfigure_errors(c: Checked) -> list[FieldError]:
    """KubeDB's Reconfigure checks, then ours: etcd's own rules on the flags the members will run with (the
    request's over the Etcd's), each naming its field."""
    errors = c.errors(rules.configuration(c.spec.configuration))
    if errors:
        return errors
    current = as_dict(as_dict(c.db.get("spec")).get("configuration")).get("tuning")
    tuning = as_dict(c.raw.get("configuration"))["tuning"]
    return etcd_rules.tuning_errors(tuning, "spec.configuration.tuning", current, db=c.db)


def quorum_loss_errors(recover: ops_api.RecoverFromQuorumLossSpec, db: Mapping[str, Any],
                       name: str) -> list[FieldError]:
    """RecoverFromQuorumLoss against the Etcd's status: it reports ``QuorumLost=True``, ``member`` (when given) is
    among the members that answer, and ``confirmMember`` is the member that would be kept (``member``, else the
    Etcd's ``status.quorumLoss.survivor``)."""
    field = "spec.recoverFromQuorumLoss"
    status = as_dict(db.get("status"))
    meta = as_dict(db.get("metadata"))
    if not conditions.is_true(status.get("conditions") if isinstance(status.get("conditions"), list) else None,
                              constants.COND_QUORUM_LOST):
        return [invalid(field, name, messages.MSG_RECOVER_NOT_LOST.format(
            namespace=meta.get("namespace") or "default", name=meta.get("name")))]
    loss = as_dict(status.get("quorumLoss"))
    answering = as_dict(loss.get("answering"))
    member, confirm = recover.member, recover.confirm_member
    if member and member not in answering:
        return [invalid(field, name, messages.MSG_RECOVER_MEMBER_SILENT.format(
            member=member, answering=", ".join(sorted(answering)) or "none"))]
    kept = member or loss.get("survivor")
    why = "named by spec.recoverFromQuorumLoss.member" if member else "the highest raft committed index of the members that answer"
    if confirm and kept and confirm != kept:
        return [invalid(field, name, messages.MSG_RECOVER_CONFIRM_MISMATCH.format(confirm=confirm, survivor=kept,
                                                                                   why=why))]
    return []


def recovery_errors(c: Checked) -> list[FieldError]:
    """RecoverFromQuorumLoss: the request's own rules (:func:`opsmanager.api.rules.recovery`), then the Etcd's
    status (:func:`quorum_loss_errors`)."""
    errors = c.errors(*rules.recovery(c.spec))
    recover = c.spec.recover_from_quorum_loss
    return errors if recover is None else errors + quorum_loss_errors(recover, c.db, c.name)


def volume_expansion_errors(c: Checked) -> list[FieldError]:
    """VolumeExpansion: KubeDB's rules on the request and the Etcd's size (:func:`opsmanager.api.rules.
    volume_expansion`), then the Etcd's StorageClass allows expansion. An Etcd naming no class uses the cluster's
    default, which the API server's own resize admission checks when the claims are patched (the step then fails
    with its words)."""
    facts = etcd_facts(c.db)
    errors = c.errors(rules.volume_expansion(c.spec.volume_expansion, facts))
    if errors or facts.storage_class is None or c.lookup is None:
        return errors
    return c.errors(rules.storage_class_expandable(facts.storage_class,
                                                   c.lookup.get_storage_class(facts.storage_class)))


def storage_migration_errors(c: Checked) -> list[FieldError]:
    """StorageMigration: KubeDB's rules on the request (:func:`opsmanager.api.rules.storage_migration_request`: the
    options, the class, ``spec.timeout``; ours: durable storage, another class than the Etcd's), then the target
    StorageClass exists and binds ``WaitForFirstConsumer`` (read through the lookup)."""
    errors = c.errors(*rules.storage_migration_request(c.spec, etcd_facts(c.db)))
    target = c.spec.migration.storage_class_name if c.spec.migration is not None else None
    if errors or not target or c.lookup is None:
        return errors
    return c.errors(rules.storage_class_bindable(target, c.lookup.get_storage_class(target)))


# The rules of each type after the schema, in KubeDB's order; a type without an entry has none (Restart,
# MoveLeader, Defragment).
TYPE_RULES: dict[str, Callable[[Checked], list[FieldError]]] = {
    constants.OPS_TYPE_RECONFIGURE_TLS: lambda c: c.errors(rules.reconfigure_tls(c.spec.tls, etcd_facts(c.db))),
    constants.OPS_TYPE_UPDATE_VERSION: update_version_errors,
    constants.OPS_TYPE_VERTICAL_SCALING: lambda c: c.errors(rules.vertical_scaling(c.spec.vertical_scaling)),
    constants.OPS_TYPE_RECONFIGURE: reconfigure_errors,
    constants.OPS_TYPE_HORIZONTAL_SCALING: lambda c: c.errors(rules.horizontal_scaling(c.spec.horizontal_scaling)),
    constants.OPS_TYPE_ROTATE_AUTH: lambda c: c.errors(rules.rotate_auth(c.spec.authentication)),
    constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS: recovery_errors,
    constants.OPS_TYPE_BACKUP: lambda c: c.errors(rules.backup_policy(etcd_facts(c.db), "spec.backup")),
    constants.OPS_TYPE_RESTORE: lambda c: c.errors(*rules.restore(c.spec, etcd_facts(c.db))),
    constants.OPS_TYPE_COMPACT: lambda c: c.errors(rules.compact(c.spec.compact)),
    constants.OPS_TYPE_VOLUME_EXPANSION: volume_expansion_errors,
    constants.OPS_TYPE_STORAGE_MIGRATION: storage_migration_errors,
}


def _type_error(type_: Any, name: str) -> FieldError | None:
    """KubeDB's first check: a supported ``spec.type``."""
    if type_ in constants.OPS_TYPES:
        return None
    shown = type_ if isinstance(type_, str) else ("" if type_ is None else go_value(type_))
    msg = messages.MSG_TYPE_NOT_SUPPORTED.format(type=shown, types=", ".join(constants.OPS_TYPES))
    return invalid("spec.type", name, msg)


def _database(spec: Mapping[str, Any], namespace: str, name: str,
              lookup: EtcdLookup) -> tuple[Mapping[str, Any] | None, FieldError | None]:
    """KubeDB's second check: the Etcd ``spec.databaseRef`` names exists; ``(the Etcd, None)`` or
    ``(None, the error)``."""
    db_name = as_dict(spec.get("databaseRef")).get("name")
    db = lookup.get_etcd(namespace, db_name) if isinstance(db_name, str) and db_name else None
    if db is not None:
        return db, None
    shown_db = db_name if isinstance(db_name, str) else ""
    not_found = messages.MSG_DATABASE_NOT_FOUND.format(namespace=namespace, name=shown_db)
    return None, invalid("spec.databaseRef", name, not_found)


def opsrequest_errors(obj: Mapping[str, Any], namespace: str, lookup: EtcdLookup) -> list[FieldError]:
    """Create-time rules for an EtcdOpsRequest, in KubeDB's order (the first two stop at once).

    Raises :class:`EtcdLookupError` when the Etcd's existence cannot be determined.
    """
    name = name_of(obj)
    spec = as_dict(obj.get("spec"))
    if (wrong_type := _type_error(spec.get("type"), name)) is not None:
        return [wrong_type]
    db, not_found = _database(spec, namespace, name, lookup)
    if db is None:
        return [not_found] if not_found is not None else []
    errors = schema_errors(ops_api.EtcdOpsRequest, obj)
    if errors:
        return errors
    request = ops_api.EtcdOpsRequest.model_validate(obj, strict=True, by_alias=True, by_name=False)
    rule = TYPE_RULES.get(request.spec.type)
    return rule(Checked(request.spec, spec, db, name, lookup)) if rule is not None else []


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
