"""Admission rules for ``Etcd`` and ``EtcdOpsRequest``: KubeDB's checks, in KubeDB's order, with its messages.

Transport-free (no HTTP, no Kubernetes client): each function takes plain object dicts and returns a
:class:`Verdict`. The only outside knowledge — "does this Etcd exist and what is its spec", and "is the
EtcdOpsRequest holding this Etcd paused still running, and what will it write" — comes through the
:class:`EtcdLookup` protocol; :class:`InMemoryEtcdLookup` serves unit tests, ``opsmanager.webhook.lookup`` the real API.

Ours, beyond KubeDB: on an Etcd update, while an EtcdOpsRequest holds the Etcd paused, ``spec.tls`` may
change only to exactly what that request's ``UpdateDatabase`` step writes (:func:`paused_tls_errors`); anything else
is ``spec.tls: Forbidden: Etcd <db> is paused by EtcdOpsRequest <req>; ...``.

Ours, bring-your-own Secrets: ``spec.tls.externalSecrets`` excludes ``issuerRef`` and ``certificates``
(``spec.tls.externalSecrets: Forbidden: spec.tls.issuerRef and spec.tls.externalSecrets are mutually exclusive:
...``) and names all three Secrets; a ``ReconfigureTLS`` with ``rotateCertificates`` on such an Etcd is refused (the
user rotates their own Secrets), one with ``tls.issuerRef`` is the handover to cert-manager and is allowed.

Sources: ``kubedb/apimachinery pkg/webhooks/ops/v1alpha1/etcd.go`` and ``pkg/webhooks/kubedb/v1alpha2/etcd.go``
(summarised in ``shared/reference/kubedb-etcd-ops.md`` §4). The order of checks for an ``EtcdOpsRequest``:

1. ``spec.type`` is supported, else ``defined OpsRequestType <t> is not supported, supported types for Etcd are
   Restart, ReconfigureTLS, MoveLeader`` (stop);
2. the Etcd exists, else ``spec.databaseRef <ns>/<name> is invalid or not found`` (stop);
3. the schema (our addition: the models, strictly; KubeDB gets this from Go decoding);
4. per type, ``ReconfigureTLS``: ``spec.tls is nil, ...``; count remove / rotate / cert-update: none → ``at least one
   of Remove, RotateCertificates, IssuerRef, or Certificates must be specified``, more than one → ``only one TLS
   reconfiguration operation is allowed at a time``; remove → ok; rotate without ``issuerRef`` on the Etcd →
   ``rotateCertificates requires TLS to already be enabled with issuerRef on Etcd``; cert-update without any
   issuer → ``tls.issuerRef is required for Etcd ReconfigureTLS``. ``Restart`` and ``MoveLeader``: nothing more.

On update only the precondition runs (as in KubeDB): ``apiVersion``, ``kind``, ``name``, ``namespace`` and
``spec`` must not change. Status and other metadata may.

Message format. Every denial carries the Kubernetes ``NewInvalid`` text, ``<Kind>.<group> "<name>" is invalid:
<field error>`` (several errors: ``[<e1>, <e2>]``), where a field error reads like Go's ``field.Error``, e.g.
``spec.tls: Invalid value: "my-op": only one TLS reconfiguration operation is allowed at a time``. As in KubeDB,
the "value" of an ops-request error is the request's name. KubeDB returns its type/databaseRef checks and the
ops-request precondition bare (HTTP 403 via controller-runtime); we wrap them the same way as the rest (422) so a
client sees one format. The rule text itself is always contained verbatim. Defaulting errors (mutating webhook)
are returned bare, as KubeDB's ``Default`` does: ``'spec.version' is missing``.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import decimal
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import pydantic

from opsmanager import mergepatch
from opsmanager.api import common, constants, durations, etcd, opsrequest, pause, tlschange

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]

# --- messages (KubeDB's, verbatim; only the lists of types/aliases/versions are ours) --------------------------

MSG_TYPE_NOT_SUPPORTED: Final = "defined OpsRequestType {type} is not supported, supported types for Etcd are {types}"
MSG_DATABASE_NOT_FOUND: Final = "spec.databaseRef {namespace}/{name} is invalid or not found"
MSG_TLS_NIL: Final = "spec.tls is nil, not supported in ReconfigureTLS type"
MSG_TLS_NONE: Final = "at least one of Remove, RotateCertificates, IssuerRef, or Certificates must be specified"
MSG_TLS_MANY: Final = "only one TLS reconfiguration operation is allowed at a time"
MSG_TLS_ROTATE_NO_ISSUER: Final = "rotateCertificates requires TLS to already be enabled with issuerRef on Etcd"
MSG_TLS_ISSUER_REQUIRED: Final = "tls.issuerRef is required for Etcd ReconfigureTLS"
MSG_PRECONDITION: Final = "precondition failed for: {patch}.At least one of the following was changed:\n\t{keys}"

MSG_VERSION_MISSING: Final = "spec.version is missing"
# Ours: KubeDB looks the version up in its EtcdVersion catalog (StrictValidation); we have a fixed list.
MSG_VERSION_UNKNOWN: Final = 'etcdversions "{version}" not found; supported versions are {supported}'
MSG_REPLICAS_MISSING: Final = "spec.replicas has to be defined"
MSG_REPLICAS_TOO_FEW: Final = "number of replicas can not be less than 1"
MSG_STORAGE_TYPE_EMPTY: Final = "spec.storageType can not be empty"
MSG_STORAGE_TYPE_BAD: Final = "spec.storageType should be either Durable or Ephemeral"
MSG_DELETION_POLICY_MISSING: Final = "spec.deletionPolicy is missing"
MSG_TLS_ISSUER_MISSING: Final = "spec.tls.issuerRef is missing"
MSG_ALIASES: Final = "supported aliases are " + ", ".join(f'"{a}"' for a in constants.CERT_ALIASES[:-1]) + \
    f' and "{constants.CERT_ALIASES[-1]}"'
MSG_DO_NOT_TERMINATE: Final = 'can not delete as deletionPolicy is set to "DoNotTerminate"'
MSG_EVEN_REPLICAS: Final = (
    "even replica count buys no extra fault tolerance for a Raft quorum; an odd number is recommended"
)
# Ours: the certificate-lifecycle policy, spec.tlsLifecycle.
MSG_DURATION_INVALID: Final = (
    'not a duration: write a Go duration such as "90s", "10m", "1h30m" or "720h" (units ns, us, ms, s, m, h)'
)
MSG_DURATION_NOT_POSITIVE: Final = 'must be greater than zero: write a positive Go duration such as "24h"'
MSG_ALERT_DUPLICATE: Final = "the same duration as {other} ({value}); list each threshold once"
# Ours: spec.tls of an Etcd that an EtcdOpsRequest holds paused belongs to that request.
# Ours: bring-your-own Secrets, spec.tls.externalSecrets (the texts shared with the CRD live in the model).
MSG_TLS_ISSUER_AND_EXTERNAL: Final = etcd.MSG_TLS_ISSUER_AND_EXTERNAL
MSG_TLS_EXTERNAL_CERTIFICATES: Final = etcd.MSG_TLS_EXTERNAL_CERTIFICATES
MSG_TLS_EXTERNAL_ALIAS_MISSING: Final = (
    "name the Secret of the {alias} certificate (keys tls.crt, tls.key and ca.crt, in the Etcd's namespace); "
    "externalSecrets needs all three of server, peer and client"
)
MSG_TLS_EXTERNAL_BAD_NAME: Final = (
    "not a Secret name: use a lowercase RFC 1123 subdomain (letters, digits, '-' and '.'; at most 253 characters)"
)
MSG_TLS_EXTERNAL_OPERATOR_NAME: Final = (
    "names a Secret the operator writes (<db>-<alias>-cert, <db>-<alias>-issued, <db>-ca-bundle); "
    "give your own Secrets other names"
)
MSG_TLS_ROTATE_EXTERNAL: Final = (
    "rotateCertificates does not apply to Etcd {db}: it runs on spec.tls.externalSecrets, which you rotate yourself "
    "by updating tls.crt and tls.key in your Secrets; to have cert-manager rotate them, hand the Etcd over with "
    "tls.issuerRef"
)
MSG_TLS_ISSUER_REQUIRED_EXTERNAL: Final = (
    MSG_TLS_ISSUER_REQUIRED + ": Etcd {db} runs on spec.tls.externalSecrets, whose certificates cert-manager does not "
    "issue; set tls.issuerRef to hand it over to cert-manager (tls.certificates may come with it)"
)
MSG_TLS_PAUSED: Final = (
    "Etcd {etcd} is paused by EtcdOpsRequest {request}; spec.tls can change only through an EtcdOpsRequest "
    "once {request} has finished"
)

MSG_DEFAULT_VERSION_MISSING: Final = "'spec.version' is missing"
MSG_DEFAULT_CANT_HALT: Final = "can't halt, since deletion policy is 'DoNotTerminate'"
MSG_DEFAULT_VERSION_UNKNOWN: Final = 'failed to get EtcdVersion "{version}": supported versions are {supported}'


# --- the Etcd lookup -------------------------------------------------------------------------------------------


class EtcdLookup(Protocol):
    """Where the webhook reads the objects its rules need: Etcds (an EtcdOpsRequest's ``databaseRef``) and
    EtcdOpsRequests (the request holding an Etcd paused).

    Synchronous, called on the server's event loop: an implementation answers from memory. One that may need I/O
    for an answer (an object not in its cache) raises :class:`NotCached` instead and offers
    :meth:`FetchingEtcdLookup.afetch`; :func:`opsmanager.webhook.admission.decide` awaits that and decides again.
    The rules never modify what a lookup returns, so a lookup may hand out its cached objects without copying."""

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Etcd object dict, or None when it does not exist. Raise :class:`EtcdLookupError` when unknown."""
        ...

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The EtcdOpsRequest object dict, or None when it does not exist. Raise :class:`EtcdLookupError` when
        unknown."""
        ...


class FetchingEtcdLookup(EtcdLookup, Protocol):
    """An :class:`EtcdLookup` whose ``get_*`` may raise :class:`NotCached`; :meth:`afetch` then reads the object."""

    async def afetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object of ``kind`` (Etcd or EtcdOpsRequest), None when it does not exist; raise
        :class:`EtcdLookupError` when that cannot be told."""
        ...


class EtcdLookupError(Exception):
    """The lookup could not tell whether the object exists (API unreachable, forbidden, ...)."""


class NotCached(RuntimeError):
    """A lookup cannot answer from memory: the object is not in its cache (or the cache has not synced yet), and
    reading it needs I/O, which a synchronous call on the event loop must not do. Not an answer: the caller awaits
    the lookup's ``afetch(kind, namespace, name)`` and asks again (:func:`opsmanager.webhook.admission.decide`).
    A ``RuntimeError`` because anywhere else it is a misuse: a blocking lookup called on the loop."""

    def __init__(self, kind: str, namespace: str, name: str, why: str) -> None:
        super().__init__(f"{kind} {namespace}/{name}: {why}")
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.why = why


class InMemoryEtcdLookup:
    """An :class:`EtcdLookup` over a dict, for unit tests and the in-process sandbox."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: Mapping[str, Any]) -> None:
        """Add or replace an object (keyed by its kind — Etcd when not given —, namespace and name); a copy is
        kept, so the caller may go on changing ``obj``."""
        meta = obj.get("metadata") or {}
        key = (obj.get("kind") or constants.ETCD_KIND, meta.get("namespace") or "default", meta["name"])
        self._objects[key] = copy.deepcopy(dict(obj))

    def delete(self, namespace: str, name: str, *, kind: str = constants.ETCD_KIND) -> None:
        self._objects.pop((kind, namespace, name), None)

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((constants.ETCD_KIND, namespace, name))  # not copied: the rules only read

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((constants.OPS_KIND, namespace, name))


# --- field errors, formatted like k8s.io/apimachinery's field.Error --------------------------------------------

ErrorType = Literal[
    "FieldValueInvalid", "FieldValueRequired", "FieldValueDuplicate", "FieldValueNotSupported", "FieldValueForbidden",
]
_TYPE_TEXT: Final[dict[str, str]] = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
}
_NO_VALUE: Final = object()


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float64 (``strconv.FormatFloat(f, 'g', -1, 64)``): 3, 1.5, 1e+06, 1e-05."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    digs = "".join(map(str, digits))
    point = len(digs) + exponent  # position of the decimal point
    exp = point - 1
    neg = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mantissa = digs[0] + ("." + digs[1:] if len(digs) > 1 else "")
        return f"{neg}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{digs}"
    if point >= len(digs):
        return f"{neg}{digs}{'0' * (point - len(digs))}"
    return f"{neg}{digs[:point]}.{digs[point:]}"


def go_value(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value (``map[string]interface{}`` and friends), map keys sorted."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_float(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{go_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, Sequence):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    return str(value)


def _bad_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_float(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One field error; ``str()`` is the text of Go's ``field.Error.Error()``."""

    type: ErrorType
    field: str
    detail: str = ""
    value: Any = _NO_VALUE

    @property
    def body(self) -> str:
        """``ErrorBody()``: the text after ``<field>: ``, also the ``message`` of a StatusCause."""
        text = _TYPE_TEXT[self.type]
        if self.type not in ("FieldValueRequired", "FieldValueForbidden") and self.value is not _NO_VALUE:
            text += f": {_bad_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"

    def cause(self) -> dict[str, str]:
        """The ``metav1.StatusCause`` of this error."""
        return {"reason": self.type, "message": self.body, "field": self.field}


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, detail, value)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, "", value)


def not_supported(field: str, value: Any, supported: Sequence[str]) -> FieldError:
    detail = "supported values: " + ", ".join(json.dumps(s) for s in supported) if supported else ""
    return FieldError("FieldValueNotSupported", field, detail, value)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, detail)


def invalid_message(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> str:
    """``apierrors.NewInvalid(...).Error()``: ``Kind.group "name" is invalid: <aggregate>``."""
    texts = list(dict.fromkeys(str(e) for e in errors))  # ToAggregate drops exact duplicates
    head = f"{kind}.{group} {json.dumps(name, ensure_ascii=False)} is invalid"
    if not texts:
        return head
    return f"{head}: {texts[0]}" if len(texts) == 1 else f"{head}: [{', '.join(texts)}]"


# --- verdicts --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of one admission decision, independent of the wire format."""

    allowed: bool
    message: str = ""
    code: int = 200
    reason: str = ""
    errors: tuple[FieldError, ...] = ()
    kind: str = ""
    group: str = ""
    name: str = ""
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def allow(cls, *, patch: Sequence[dict[str, Any]] = (), warnings: Sequence[str] = ()) -> Verdict:
        return cls(True, patch=tuple(patch), warnings=tuple(warnings))

    @classmethod
    def invalid(
        cls, kind: str, group: str, name: str, errors: Sequence[FieldError], *, warnings: Sequence[str] = ()
    ) -> Verdict:
        return cls(
            False, invalid_message(kind, group, name, errors), 422, "Invalid", tuple(errors), kind, group, name,
            warnings=tuple(warnings),
        )

    @classmethod
    def deny(cls, message: str, *, code: int = 422, reason: str = "Invalid") -> Verdict:
        return cls(False, message, code, reason)

    def status(self) -> dict[str, Any]:
        """The ``metav1.Status`` for ``response.status`` of a denial."""
        status: dict[str, Any] = {
            "metadata": {}, "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code,
        }
        if self.errors or self.kind:
            status["details"] = {
                "name": self.name, "group": self.group, "kind": self.kind,
                "causes": [e.cause() for e in self.errors],
            }
        return status


# --- small helpers on raw dicts --------------------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata"))


def _name(obj: Mapping[str, Any]) -> str:
    name = _meta(obj).get("name")
    return name if isinstance(name, str) else ""


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def schema_errors(model: type[pydantic.BaseModel], obj: Mapping[str, Any]) -> list[FieldError]:
    """Check ``obj`` against the CRD's model, strictly and by camelCase names only, as the API server would."""
    try:
        model.model_validate(obj, strict=True, by_alias=True, by_name=False)
    except pydantic.ValidationError as exc:
        errors = []
        for err in exc.errors(include_url=False):
            path = _path(err["loc"])
            kind = err["type"]
            if kind == "missing":
                errors.append(required(path))
            elif kind == "extra_forbidden":
                errors.append(forbidden(path, "unknown field; check its spelling (`kubectl explain`)"))
            elif kind in ("literal_error", "enum"):
                expected = _QUOTED.findall(str((err.get("ctx") or {}).get("expected", "")))
                errors.append(not_supported(path, err.get("input"), expected))
            else:
                message = err["msg"].removeprefix("Value error, ")
                errors.append(invalid(path, err.get("input"), message))
        return errors
    return []


def precondition_error(old: Mapping[str, Any], new: Mapping[str, Any], chains: Sequence[str]) -> str | None:
    """KubeDB's ``CreateStrategicPatch`` precondition: apiVersion, kind, metadata name/namespace and ``chains``
    (dotted paths such as ``spec`` or ``spec.storageType``) must be unchanged. Returns its message or None.

    The patch in the message is printed the way Go prints a ``map[string]interface{}``; we compute it as a JSON
    merge patch (a strategic patch differs only for lists with merge keys, which never matter for the verdict).
    """

    def at(obj: Any, dotted: str) -> Any:
        for part in dotted.split("."):
            obj = obj.get(part) if isinstance(obj, dict) else None
        return obj

    keys = ["apiVersion", "kind", "metadata.name", "metadata.namespace", *chains]
    if all(at(old, k) == at(new, k) for k in keys):
        return None
    names = sorted({"apiVersion", "kind", "name", "namespace", *chains})
    return MSG_PRECONDITION.format(patch=go_value(mergepatch.diff(dict(old), dict(new))), keys="\n\t".join(names))


# --- EtcdOpsRequest --------------------------------------------------------------------------------------------


def _db_has_issuer(db: Mapping[str, Any]) -> bool:
    tls = _dict(db.get("spec")).get("tls")
    return isinstance(tls, dict) and tls.get("issuerRef") is not None


def _db_has_external_secrets(db: Mapping[str, Any]) -> bool:
    tls = _dict(db.get("spec")).get("tls")
    return isinstance(tls, dict) and tls.get("externalSecrets") is not None


def reconfigure_tls_error(tls: Any, db: Mapping[str, Any]) -> str | None:
    """KubeDB's ``validateEtcdReconfigureTLSOpsRequest`` on a (schema-valid) ``spec.tls`` and the Etcd object."""
    if tls is None:
        return MSG_TLS_NIL
    tls = _dict(tls)
    cert_update = tls.get("issuerRef") is not None or bool(tls.get("certificates"))
    remove = tls.get("remove") is True
    rotate = tls.get("rotateCertificates") is True
    count = int(remove) + int(rotate) + int(cert_update)
    if count == 0:
        return MSG_TLS_NONE
    if count > 1:
        return MSG_TLS_MANY
    if remove:
        return None
    if rotate:
        if _db_has_external_secrets(db):  # ours: the user rotates their own Secrets
            return MSG_TLS_ROTATE_EXTERNAL.format(db=_name(db))
        return None if _db_has_issuer(db) else MSG_TLS_ROTATE_NO_ISSUER
    if tls.get("issuerRef") is None and not _db_has_issuer(db):
        if _db_has_external_secrets(db):
            return MSG_TLS_ISSUER_REQUIRED_EXTERNAL.format(db=_name(db))
        return MSG_TLS_ISSUER_REQUIRED
    return None  # an issuerRef on an externalSecrets Etcd is the handover to cert-manager: allowed


def opsrequest_errors(obj: Mapping[str, Any], namespace: str, lookup: EtcdLookup) -> list[FieldError]:
    """Create-time rules for an EtcdOpsRequest, in KubeDB's order (the first two stop at once).

    Raises :class:`EtcdLookupError` when the Etcd's existence cannot be determined.
    """
    name = _name(obj)
    spec = _dict(obj.get("spec"))
    type_ = spec.get("type")
    if type_ not in constants.OPS_TYPES:
        shown = type_ if isinstance(type_, str) else ("" if type_ is None else go_value(type_))
        msg = MSG_TYPE_NOT_SUPPORTED.format(type=shown, types=", ".join(constants.OPS_TYPES))
        return [invalid("spec.type", name, msg)]
    db_name = _dict(spec.get("databaseRef")).get("name")
    db = lookup.get_etcd(namespace, db_name) if isinstance(db_name, str) and db_name else None
    if db is None:
        shown_db = db_name if isinstance(db_name, str) else ""
        return [invalid("spec.databaseRef", name, MSG_DATABASE_NOT_FOUND.format(namespace=namespace, name=shown_db))]
    errors = schema_errors(opsrequest.EtcdOpsRequest, obj)
    if errors:
        return errors
    if type_ == constants.OPS_TYPE_RECONFIGURE_TLS:
        message = reconfigure_tls_error(spec.get("tls"), db)
        if message:
            errors.append(invalid("spec.tls", name, message))
    return errors


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
            db_name = _dict(_dict(obj.get("spec")).get("databaseRef")).get("name")
            return Verdict.deny(
                f"could not validate {kind} {namespace}/{_name(obj)}: looking up Etcd {namespace}/{db_name} failed: "
                f"{exc}; retry when the API server is reachable",
                code=503, reason="ServiceUnavailable",
            )
        return Verdict.invalid(kind, group, _name(obj), errors) if errors else Verdict.allow()
    if operation == "UPDATE" and obj is not None and old is not None:
        message = precondition_error(old, obj, ["spec"])
        if message:
            return Verdict.invalid(kind, group, _name(obj), [invalid("spec", _name(obj), message)])
    return Verdict.allow()


# --- Etcd ------------------------------------------------------------------------------------------------------


def etcd_errors(obj: Mapping[str, Any]) -> tuple[list[FieldError], list[str]]:
    """KubeDB's ``ValidateCreateOrUpdate`` for an Etcd, then the schema; returns (errors, warnings)."""
    spec = _dict(obj.get("spec"))
    errors: list[FieldError] = []
    warnings: list[str] = []

    version = spec.get("version")
    if version is None or version == "":
        errors.append(required("spec.version", MSG_VERSION_MISSING))
    elif isinstance(version, str) and version not in constants.SUPPORTED_ETCD_VERSIONS:
        errors.append(invalid("spec.version", version, MSG_VERSION_UNKNOWN.format(
            version=version, supported=", ".join(f'"{v}"' for v in constants.SUPPORTED_ETCD_VERSIONS),
        )))

    replicas = spec.get("replicas")
    if replicas is None:
        errors.append(required("spec.replicas", MSG_REPLICAS_MISSING))
    elif _is_int(replicas) and replicas < 1:
        errors.append(invalid("spec.replicas", replicas, MSG_REPLICAS_TOO_FEW))
    elif _is_int(replicas) and replicas % 2 == 0:
        warnings.append(MSG_EVEN_REPLICAS)

    storage_type = spec.get("storageType")
    if storage_type is None or storage_type == "":
        errors.append(required("spec.storageType", MSG_STORAGE_TYPE_EMPTY))
    elif storage_type not in constants.STORAGE_TYPES:
        errors.append(invalid("spec.storageType", storage_type, MSG_STORAGE_TYPE_BAD))

    policy = spec.get("deletionPolicy")
    if policy is None or policy == "":
        errors.append(required("spec.deletionPolicy", MSG_DELETION_POLICY_MISSING))

    tls = spec.get("tls")
    if isinstance(tls, dict):
        external = tls.get("externalSecrets")
        if tls.get("issuerRef") is None and external is None:
            errors.append(required("spec.tls.issuerRef", MSG_TLS_ISSUER_MISSING))
        errors += external_secrets_errors(tls, db=_name(obj))
        certificates = tls.get("certificates")
        seen: set[str] = set()
        for i, cert in enumerate(certificates if isinstance(certificates, list) else []):
            alias = _dict(cert).get("alias")
            path = f"spec.tls.certificates[{i}].alias"
            if alias not in constants.CERT_ALIASES:
                errors.append(invalid(path, alias if alias is not None else "", MSG_ALIASES))
                continue
            if alias in seen:
                errors.append(duplicate(path, alias))
            seen.add(alias)

    errors += tls_lifecycle_errors(spec.get("tlsLifecycle"))

    if not errors:
        errors = schema_errors(etcd.Etcd, obj)
    return errors, warnings


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
        errors.append(forbidden(base, MSG_TLS_ISSUER_AND_EXTERNAL))
    if tls.get("certificates"):
        errors.append(forbidden("spec.tls.certificates", MSG_TLS_EXTERNAL_CERTIFICATES))
    if not isinstance(external, dict):
        return errors  # the schema check reports the type
    for alias in ("server", "peer", "client"):
        name = external.get(alias)
        if name is None or name == "":
            errors.append(required(f"{base}.{alias}", MSG_TLS_EXTERNAL_ALIAS_MISSING.format(alias=alias)))
        elif isinstance(name, str) and (len(name) > 253 or not _SECRET_NAME.fullmatch(name)):
            errors.append(invalid(f"{base}.{alias}", name, MSG_TLS_EXTERNAL_BAD_NAME))
        elif db and name in _operator_secrets(db):
            errors.append(invalid(f"{base}.{alias}", name, MSG_TLS_EXTERNAL_OPERATOR_NAME))
    return errors


def _operator_secrets(db: str) -> set[str]:
    """The Secrets the operator writes for the Etcd ``db`` with the default names (``<db>-<alias>-cert``,
    ``<db>-<alias>-issued``, ``<db>-ca-bundle``; the provisioner's ``naming`` module, which the webhook may not
    import, spells the same)."""
    names = {etcd.default_secret_name(db, a) for a in constants.CERT_ALIASES}
    return names | {f"{db}-{a}-issued" for a in constants.CERT_ALIASES} | {f"{db}-ca-bundle"}


def _duration_error(path: str, value: Any) -> FieldError | None:
    """The error of one policy duration: unparsable, or zero / negative. None when it is fine."""
    try:
        delta = durations.parse(value)
    except ValueError:
        return invalid(path, value, MSG_DURATION_INVALID)
    if delta <= datetime.timedelta(0):
        return invalid(path, value, MSG_DURATION_NOT_POSITIVE)
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
            errors.append(FieldError("FieldValueDuplicate", path, MSG_ALERT_DUPLICATE.format(
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
        return etcd.TLSConfig.model_validate(tls).to_dict()
    except pydantic.ValidationError:
        return tls


def engine_tls_write(old: Mapping[str, Any], request: Mapping[str, Any]) -> Any:
    """The ``spec.tls`` that ``request``'s ``UpdateDatabase`` step writes to the Etcd ``old`` (normalised; None
    for a removal): the request's ``spec.tls`` folded into the Etcd's TLS as the engine recorded it when the
    request started (``tlschange.tls_before``), else as it is now — the engine's own rule, from the API layer.
    A request that writes nothing (not ``ReconfigureTLS``, or one the engine cannot plan) leaves it as it is."""
    current = _dict(old.get("spec")).get("tls")
    before = tlschange.tls_before(request)
    start = before if before is not None else current
    try:
        spec = opsrequest.EtcdOpsRequest.model_validate(request).spec
        base = etcd.TLSConfig.model_validate(start) if start is not None else None
    except pydantic.ValidationError:
        return _normal_tls(current)
    if spec.type != constants.OPS_TYPE_RECONFIGURE_TLS or spec.tls is None:
        return _normal_tls(current)
    desired = tlschange.desired_tls(base, spec.tls)
    return desired.to_dict() if desired is not None else None


def _held_by_request(obj: Mapping[str, Any]) -> str | None:
    """``pause.held_by_request`` of ``obj``'s status, whatever its shape (a review may carry anything)."""
    conds = _dict(obj.get("status")).get("conditions")
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
    new_tls = _normal_tls(_dict(obj.get("spec")).get("tls"))
    if new_tls == _normal_tls(_dict(old.get("spec")).get("tls")):
        return []
    request = lookup.get_opsrequest(_meta(old).get("namespace") or "default", holder)
    if not pause.request_holds(request) or new_tls == engine_tls_write(old, _dict(request)):
        return []
    return [forbidden("spec.tls", MSG_TLS_PAUSED.format(etcd=_name(old), request=holder))]


def validate_etcd(
    operation: str, obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None, *, lookup: EtcdLookup
) -> Verdict:
    """The verdict of ``/validate-etcd`` for one admission request (CREATE, UPDATE and DELETE). ``lookup`` reads
    the EtcdOpsRequest holding the Etcd paused, on an UPDATE that changes ``spec.tls`` only."""
    kind, group = constants.ETCD_KIND, constants.ETCD_GROUP
    if operation == "DELETE":
        if old is not None and _dict(old.get("spec")).get("deletionPolicy") == constants.DELETION_DO_NOT_TERMINATE:
            return Verdict.invalid(
                kind, group, _name(old), [invalid("spec.deletionPolicy", _name(old), MSG_DO_NOT_TERMINATE)]
            )
        return Verdict.allow()
    if operation not in ("CREATE", "UPDATE") or obj is None or _deleting(obj):
        return Verdict.allow()
    errors, warnings = etcd_errors(obj)
    if operation == "UPDATE" and old is not None:
        message = precondition_error(old, obj, ["spec.storageType"])
        if message:
            errors.append(invalid("spec", _name(obj), message))
        try:
            errors += paused_tls_errors(obj, old, lookup)
        except EtcdLookupError as exc:
            return Verdict.deny(
                f"could not validate {kind} {_meta(old).get('namespace') or 'default'}/{_name(old)}: it is paused "
                f"by EtcdOpsRequest {_held_by_request(old)} and looking that request up failed: {exc}; retry when "
                "the API server is reachable",
                code=503, reason="ServiceUnavailable",
            )
    if errors:
        return Verdict.invalid(kind, group, _name(obj), errors, warnings=warnings)
    return Verdict.allow(warnings=warnings)


class DefaultingError(ValueError):
    """The object cannot be defaulted (KubeDB's ``Default`` returned an error)."""


def etcd_defaults(obj: Mapping[str, Any]) -> dict[str, Any]:
    """KubeDB's ``Default`` for an Etcd: the defaulted copy of ``obj``. Raises :class:`DefaultingError`.

    KubeDB's checks and order are written here; the default values are the models' (``etcd.EtcdSpec``,
    ``common.IssuerRef``), so the webhook, the CRD and the provisioner cannot disagree on them. ``obj`` is never
    modified: the dicts on the way to a default are copied, the rest is shared with ``obj``."""
    return _defaulted(obj)[0]


JsonPatch = list[dict[str, Any]]


def _defaulted(obj: Mapping[str, Any]) -> tuple[dict[str, Any], JsonPatch]:
    """:func:`etcd_defaults` and the JSON Patch (RFC 6902) that turns ``obj`` into it, built as the defaults are
    filled in (``add`` for an absent key, ``replace`` for a blank one) rather than by diffing two copies."""
    out = dict(obj)
    patch: JsonPatch = []
    if _deleting(out) or not isinstance(out.get("spec"), dict):
        return out, patch
    spec = out["spec"] = dict(out["spec"])
    version = spec.get("version")
    if version is None or version == "":
        raise DefaultingError(MSG_DEFAULT_VERSION_MISSING)
    if spec.get("halted") is True and spec.get("deletionPolicy") == constants.DELETION_DO_NOT_TERMINATE:
        raise DefaultingError(MSG_DEFAULT_CANT_HALT)
    _fill_default(spec, etcd.EtcdSpec, "replicas", patch, "/spec")
    if version not in constants.SUPPORTED_ETCD_VERSIONS:
        raise DefaultingError(MSG_DEFAULT_VERSION_UNKNOWN.format(
            version=go_value(version), supported=", ".join(f'"{v}"' for v in constants.SUPPORTED_ETCD_VERSIONS),
        ))
    _fill_default(spec, etcd.EtcdSpec, "storage_type", patch, "/spec", blank=(None, ""))
    _fill_default(spec, etcd.EtcdSpec, "deletion_policy", patch, "/spec", blank=(None, ""))
    _fill_default(spec, etcd.EtcdSpec, "halted", patch, "/spec")
    if isinstance(spec.get("tls"), dict):
        tls = spec["tls"] = dict(spec["tls"])
        if isinstance(tls.get("issuerRef"), dict):
            tls["issuerRef"] = _default_issuer_ref(tls["issuerRef"], patch, "/spec/tls/issuerRef")
        if isinstance(tls.get("certificates"), list):
            certificates = tls["certificates"] = list(tls["certificates"])
            for i, cert in enumerate(certificates):
                if isinstance(cert, dict) and isinstance(cert.get("issuerRef"), dict):
                    certificates[i] = {**cert, "issuerRef": _default_issuer_ref(
                        cert["issuerRef"], patch, f"/spec/tls/certificates/{i}/issuerRef")}
    return out, patch


def _default_issuer_ref(ref: dict[str, Any], patch: JsonPatch, at: str) -> dict[str, Any]:
    out = dict(ref)
    _fill_default(out, common.IssuerRef, "api_group", patch, at, blank=())
    _fill_default(out, common.IssuerRef, "kind", patch, at, blank=())
    return out


def _fill_default(
    obj: dict[str, Any], model: type[pydantic.BaseModel], field: str, patch: JsonPatch, at: str, *,
    blank: tuple[object, ...] = (None,),
) -> None:
    """Set ``field`` of the raw ``obj`` (under its camelCase name; ``obj`` is at the JSON Pointer ``at``) to the
    default that ``model`` declares, when the key is absent or holds one of ``blank`` (``None``, ``""``), and record
    the change in ``patch``. The models are the one place defaults are written."""
    info = model.model_fields[field]
    key = info.alias or field
    value = obj.get(key)
    if key not in obj or any(value is b or (isinstance(value, str) and value == b) for b in blank):
        default = info.get_default(call_default_factory=True)
        if key not in obj:
            patch.append({"op": "add", "path": f"{at}/{key}", "value": default})
        elif value != default or type(value) is not type(default):
            patch.append({"op": "replace", "path": f"{at}/{key}", "value": default})
        obj[key] = default


def mutate_etcd(operation: str, obj: Mapping[str, Any] | None) -> Verdict:
    """The verdict of ``/mutate-etcd``: allowed with a JSONPatch of the defaults, or denied with KubeDB's text."""
    if operation not in ("CREATE", "UPDATE") or obj is None:
        return Verdict.allow()
    try:
        _, patch = _defaulted(obj)
    except DefaultingError as exc:
        return Verdict.deny(str(exc))
    return Verdict.allow(patch=patch)
