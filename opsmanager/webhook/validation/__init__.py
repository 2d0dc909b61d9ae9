"""Admission rules for ``Etcd`` and ``EtcdOpsRequest``: KubeDB's checks, in KubeDB's order, with its messages.

Transport-free (no HTTP, no Kubernetes client): each rule takes plain object dicts and returns a
:class:`~.verdict.Verdict`. The only outside knowledge — "does this Etcd exist and what is its spec", "is the
EtcdOpsRequest holding this Etcd paused still running, and what will it write", and "what does the catalog's
EtcdVersion of this version say" — comes through the
:class:`~.lookups.EtcdLookup` protocol; :class:`~.lookups.InMemoryEtcdLookup` serves unit tests,
``opsmanager.webhook.lookup`` the real API.

One module per concern, so that a rule, a message or the wire format can be read and changed on its own:

- :mod:`.messages` — every text a denial can carry (KubeDB's verbatim, and ours);
- :mod:`.fielderrors` — field errors as Go's ``field.Error`` prints them, and the models' schema check as such errors;
- :mod:`.verdict` — the outcome of one decision and its ``metav1.Status``;
- :mod:`.lookups` — where the rules read other objects (the protocol, its errors, the in-memory one);
- :mod:`.objects` — tolerant reading of raw objects, and the update precondition both kinds share;
- :mod:`.opsrequest` — ``/validate-etcdopsrequest``;
- :mod:`.etcd` — ``/validate-etcd``;
- :mod:`.defaults` — ``/mutate-etcd``, KubeDB's defaulting with the models' default values;
- :mod:`.catalog` — the version catalog's rules (an Etcd's ``spec.version``, an UpdateVersion's target).

Sources: ``kubedb/apimachinery pkg/webhooks/ops/v1alpha1/etcd.go`` and ``pkg/webhooks/kubedb/v1alpha2/etcd.go``
(summarised in ``shared/reference/kubedb-etcd-ops.md`` §4).

This ``__init__`` re-exports the public names of those modules for the callers outside the webhook (tests, the
sandbox, tools); inside the webhook, modules import the module that defines a name.
"""

from __future__ import annotations

from opsmanager.webhook.validation.defaults import DefaultingError, JsonPatch, etcd_defaults, mutate_etcd
from opsmanager.webhook.validation.etcd import (
    engine_tls_write,
    etcd_errors,
    external_secrets_errors,
    paused_tls_errors,
    tls_lifecycle_errors,
    validate_etcd,
)
from opsmanager.webhook.validation.fielderrors import (
    ErrorType,
    FieldError,
    duplicate,
    forbidden,
    go_value,
    invalid,
    invalid_message,
    not_supported,
    required,
    schema_errors,
)
from opsmanager.webhook.validation.lookups import (
    EtcdLookup,
    EtcdLookupError,
    FetchingEtcdLookup,
    InMemoryEtcdLookup,
    NotCached,
)
from opsmanager.webhook.validation.messages import (
    MSG_ALERT_DUPLICATE,
    MSG_ALIASES,
    MSG_DATABASE_NOT_FOUND,
    MSG_DEFAULT_CANT_HALT,
    MSG_DEFAULT_VERSION_MISSING,
    MSG_DEFAULT_VERSION_UNKNOWN,
    MSG_DELETION_POLICY_MISSING,
    MSG_DO_NOT_TERMINATE,
    MSG_DURATION_INVALID,
    MSG_DURATION_NOT_POSITIVE,
    MSG_EVEN_REPLICAS,
    MSG_PRECONDITION,
    MSG_REPLICAS_MISSING,
    MSG_REPLICAS_TOO_FEW,
    MSG_STORAGE_TYPE_BAD,
    MSG_STORAGE_TYPE_EMPTY,
    MSG_TLS_EXTERNAL_ALIAS_MISSING,
    MSG_TLS_EXTERNAL_BAD_NAME,
    MSG_TLS_EXTERNAL_CERTIFICATES,
    MSG_TLS_EXTERNAL_OPERATOR_NAME,
    MSG_TLS_ISSUER_AND_EXTERNAL,
    MSG_TLS_ISSUER_MISSING,
    MSG_TLS_ISSUER_REQUIRED,
    MSG_TLS_ISSUER_REQUIRED_EXTERNAL,
    MSG_TLS_MANY,
    MSG_TLS_NIL,
    MSG_TLS_NONE,
    MSG_TLS_PAUSED,
    MSG_TLS_ROTATE_EXTERNAL,
    MSG_TLS_ROTATE_NO_ISSUER,
    MSG_TYPE_NOT_SUPPORTED,
    MSG_UPDATE_NOT_SUPPORTED,
    MSG_UPDATE_TARGET_DEPRECATED,
    MSG_VERSION_BROKEN,
    MSG_VERSION_DEPRECATED,
    MSG_VERSION_MISSING,
    MSG_VERSION_NOT_RUN,
    MSG_VERSION_UNKNOWN,
)
from opsmanager.webhook.validation.objects import precondition_error
from opsmanager.webhook.validation.opsrequest import (
    opsrequest_errors,
    validate_opsrequest,
)
from opsmanager.webhook.validation.verdict import Operation, Verdict

__all__ = [
    "DefaultingError",
    "ErrorType",
    "EtcdLookup",
    "EtcdLookupError",
    "FetchingEtcdLookup",
    "FieldError",
    "InMemoryEtcdLookup",
    "JsonPatch",
    "MSG_ALERT_DUPLICATE",
    "MSG_ALIASES",
    "MSG_DATABASE_NOT_FOUND",
    "MSG_DEFAULT_CANT_HALT",
    "MSG_DEFAULT_VERSION_MISSING",
    "MSG_DEFAULT_VERSION_UNKNOWN",
    "MSG_DELETION_POLICY_MISSING",
    "MSG_DO_NOT_TERMINATE",
    "MSG_DURATION_INVALID",
    "MSG_DURATION_NOT_POSITIVE",
    "MSG_EVEN_REPLICAS",
    "MSG_PRECONDITION",
    "MSG_REPLICAS_MISSING",
    "MSG_REPLICAS_TOO_FEW",
    "MSG_STORAGE_TYPE_BAD",
    "MSG_STORAGE_TYPE_EMPTY",
    "MSG_TLS_EXTERNAL_ALIAS_MISSING",
    "MSG_TLS_EXTERNAL_BAD_NAME",
    "MSG_TLS_EXTERNAL_CERTIFICATES",
    "MSG_TLS_EXTERNAL_OPERATOR_NAME",
    "MSG_TLS_ISSUER_AND_EXTERNAL",
    "MSG_TLS_ISSUER_MISSING",
    "MSG_TLS_ISSUER_REQUIRED",
    "MSG_TLS_ISSUER_REQUIRED_EXTERNAL",
    "MSG_TLS_MANY",
    "MSG_TLS_NIL",
    "MSG_TLS_NONE",
    "MSG_TLS_PAUSED",
    "MSG_TLS_ROTATE_EXTERNAL",
    "MSG_TLS_ROTATE_NO_ISSUER",
    "MSG_TYPE_NOT_SUPPORTED",
    "MSG_VERSION_MISSING",
    "MSG_UPDATE_NOT_SUPPORTED",
    "MSG_UPDATE_TARGET_DEPRECATED",
    "MSG_VERSION_BROKEN",
    "MSG_VERSION_DEPRECATED",
    "MSG_VERSION_NOT_RUN",
    "MSG_VERSION_UNKNOWN",
    "NotCached",
    "Operation",
    "Verdict",
    "duplicate",
    "engine_tls_write",
    "etcd_defaults",
    "etcd_errors",
    "external_secrets_errors",
    "forbidden",
    "go_value",
    "invalid",
    "invalid_message",
    "mutate_etcd",
    "not_supported",
    "opsrequest_errors",
    "paused_tls_errors",
    "precondition_error",
    "required",
    "schema_errors",
    "tls_lifecycle_errors",
    "validate_etcd",
    "validate_opsrequest",
]
