"""Pieces shared by both kinds: the model base class, object metadata, cert-manager references, conditions.

Every model is pydantic v2 with camelCase aliases, so a Kubernetes object dict parses as is
(``Etcd.model_validate(obj)``) and dumps back with :func:`to_dict`. The field descriptions are not decoration:
they flow into the CRD schema (``opsmanager crds``) and into ``docs/api.md``.

Spec models forbid unknown fields, so a typo (``issuerref``) is an error naming the field rather than a silently
ignored setting. Metadata allows unknown fields (uid, managedFields, ...), so objects read back from the API
round-trip. Timestamps stay RFC 3339 strings, exactly as the API returns them.
"""

from __future__ import annotations

import datetime
import decimal
import re
from typing import Annotated, Any, Literal

import pydantic
from pydantic import alias_generators

from opsmanager.api import constants, durations

# --- Go-style durations ----------------------------------------------------------------------------------------

# The pattern also goes into the CRD, so the API server rejects "10 minutes" before any webhook runs.
DURATION_PATTERN = r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$"


def parse_duration(text: str) -> datetime.timedelta:
    """Parse a Go ``time.Duration`` string (``10m``, ``90s``, ``1h30m``, ``1.5h``, ``250ms``) into a timedelta.

    The form of the fields whose CRD schema carries :data:`DURATION_PATTERN` (a request's ``timeout``): Go's syntax
    without a sign or a bare leading/trailing dot (a negative timeout makes no sense here); a bare ``0`` is accepted
    as Go does. The arithmetic is :func:`opsmanager.api.durations.parse`, the one parser. Raises ``ValueError``
    naming the bad input and the accepted form.
    """
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string such as '10m' or '1h30m', got {type(text).__name__}")
    if text != "0" and re.fullmatch(DURATION_PATTERN, text) is None:
        raise ValueError(
            f"invalid duration {text!r}: use a Go duration such as '90s', '10m' or '1h30m' "
            "(units ns, us, ms, s, m, h)"
        )
    return durations.parse(text)


def format_duration(delta: datetime.timedelta) -> str:
    """Format a timedelta the way Go prints a Duration, for whole seconds: ``1h30m0s``, ``10m0s``, ``45s``."""
    total = int(delta.total_seconds())
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _check_duration(text: str) -> str:
    parse_duration(text)
    return text


def _check_positive_duration(text: str) -> str:
    if parse_duration(text) <= datetime.timedelta(0):
        raise ValueError(f"duration {text!r} must be greater than zero")
    return text


Duration = Annotated[
    str,
    pydantic.AfterValidator(_check_duration),
    pydantic.Field(json_schema_extra={"pattern": DURATION_PATTERN}),
]
PositiveDuration = Annotated[
    str,
    pydantic.AfterValidator(_check_positive_duration),
    pydantic.Field(json_schema_extra={"pattern": DURATION_PATTERN}),
]

# A Kubernetes resource.Quantity: "1Gi", "500m" or a plain integer. int-or-string in the CRD.
Quantity = Annotated[
    int | str,
    pydantic.Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]

# --- base classes ----------------------------------------------------------------------------------------------


class Model(pydantic.BaseModel):
    """Base of every spec model: camelCase aliases, unknown fields rejected, dumps by alias."""

    model_config = pydantic.ConfigDict(
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
    )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OpenModel(Model):
    """A model that keeps fields it does not know (metadata, status written by newer code)."""

    model_config = pydantic.ConfigDict(extra="allow")


def to_dict(model: pydantic.BaseModel) -> dict[str, Any]:
    """Dump any of our models back to a Kubernetes object dict (camelCase, no ``None`` fields)."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- metadata --------------------------------------------------------------------------------------------------


class ObjectMeta(OpenModel):
    """The subset of `metav1.ObjectMeta` the operator reads; other metadata fields are kept as they are."""

    name: str | None = pydantic.Field(default=None, description="Name of the object, unique in its namespace.")
    namespace: str | None = pydantic.Field(default=None, description="Namespace of the object.")
    uid: str | None = pydantic.Field(default=None, description="UID assigned by the API server.")
    resource_version: str | None = pydantic.Field(
        default=None, description="Opaque version used for optimistic concurrency."
    )
    generation: int | None = pydantic.Field(default=None, description="Incremented on every change of spec.")
    creation_timestamp: str | None = pydantic.Field(default=None, description="RFC 3339 creation time.")
    deletion_timestamp: str | None = pydantic.Field(default=None, description="RFC 3339 time deletion began.")
    labels: dict[str, str] | None = pydantic.Field(default=None, description="Labels of the object.")
    annotations: dict[str, str] | None = pydantic.Field(default=None, description="Annotations of the object.")
    finalizers: list[str] | None = pydantic.Field(default=None, description="Finalizers blocking deletion.")
    owner_references: list[dict[str, Any]] | None = pydantic.Field(
        default=None, description="Owners of the object."
    )


class LocalObjectReference(Model):
    """A reference to an object in the same namespace."""

    name: str = pydantic.Field(min_length=1, description="Name of the referenced object.")


# --- cert-manager references -----------------------------------------------------------------------------------


class IssuerRef(Model):
    """The cert-manager issuer that signs the certificates (`TypedLocalObjectReference`)."""

    api_group: str = pydantic.Field(
        default=constants.CERT_MANAGER_GROUP,
        description="API group of the issuer; cert-manager's is `cert-manager.io`.",
    )
    kind: Literal["Issuer", "ClusterIssuer"] = pydantic.Field(
        default=constants.ISSUER_KIND,
        description="`Issuer` (namespaced, same namespace as the Etcd) or `ClusterIssuer` (cluster-wide).",
    )
    name: str = pydantic.Field(min_length=1, description="Name of the issuer.")


class X509Subject(Model):
    """Subject fields of an X.509 certificate, as in cert-manager's `X509Subject`."""

    organizations: list[str] | None = pydantic.Field(default=None, description="Organizations (O).")
    countries: list[str] | None = pydantic.Field(default=None, description="Countries (C).")
    organizational_units: list[str] | None = pydantic.Field(default=None, description="Organizational units (OU).")
    localities: list[str] | None = pydantic.Field(default=None, description="Localities / cities (L).")
    provinces: list[str] | None = pydantic.Field(default=None, description="States or provinces (ST).")
    street_addresses: list[str] | None = pydantic.Field(default=None, description="Street addresses.")
    postal_codes: list[str] | None = pydantic.Field(default=None, description="Postal codes.")
    serial_number: str | None = pydantic.Field(default=None, description="Subject serial number.")


class PrivateKey(Model):
    """Options for the certificate's private key."""

    encoding: Literal["PKCS1", "PKCS8"] | None = pydantic.Field(
        default=None, description="PEM encoding of the private key: `PKCS1` or `PKCS8`."
    )


class CertificateSpec(Model):
    """One certificate of the cluster, keyed by `alias`; fields given here override the operator's defaults."""

    alias: Literal["server", "client", "peer"] = pydantic.Field(
        description=(
            "Which certificate: `server` (client API, port 2379), `client` (the operator's own client "
            "certificate, CN=root) or `peer` (Raft traffic, port 2380, always mutual TLS)."
        )
    )
    issuer_ref: IssuerRef | None = pydantic.Field(
        default=None, description="Issuer for this certificate only; defaults to the TLS spec's `issuerRef`."
    )
    secret_name: str | None = pydantic.Field(
        default=None,
        description="Secret holding `tls.crt`, `tls.key` and `ca.crt`; default `<etcd-name>-<alias>-cert`.",
    )
    subject: X509Subject | None = pydantic.Field(default=None, description="X.509 subject of the certificate.")
    duration: Duration | None = pydantic.Field(
        default=None, description="Requested validity, a Go duration such as `2160h`."
    )
    renew_before: Duration | None = pydantic.Field(
        default=None,
        description=(
            "How long before expiry cert-manager renews (the Certificate's `renewBefore`; default: cert-manager's "
            "2/3 of the lifetime). etcd serves a renewed leaf on its next handshake, no restart needed; the "
            "operator's scan verifies each member serves it (`spec.tlsLifecycle`)."
        ),
    )
    dns_names: list[str] | None = pydantic.Field(
        default=None, description="Extra DNS SANs, merged with the operator's defaults (not replacing them)."
    )
    ip_addresses: list[str] | None = pydantic.Field(
        default=None, description="Extra IP SANs, merged with the operator's defaults."
    )
    uris: list[str] | None = pydantic.Field(default=None, description="URI SANs.")
    email_addresses: list[str] | None = pydantic.Field(default=None, description="E-mail SANs.")
    private_key: PrivateKey | None = pydantic.Field(default=None, description="Private key options.")


# --- conditions ------------------------------------------------------------------------------------------------


class Condition(OpenModel):
    """A `kmapi.Condition`: one step or fact, keyed by `type`, kept in first-insertion order."""

    type: str = pydantic.Field(
        min_length=1,
        description="CamelCase condition type, e.g. `CertificateSynced`, or `<Step>--<pod>` for a per-pod step.",
    )
    status: Literal["True", "False", "Unknown"] = pydantic.Field(
        description="`True` done, `False` in flight or failed, `Unknown` not known."
    )
    reason: str | None = pydantic.Field(
        default=None, description="CamelCase reason; may be empty on per-pod conditions."
    )
    message: str | None = pydantic.Field(default=None, description="Human-readable detail.")
    observed_generation: int | None = pydantic.Field(
        default=None, description="The `metadata.generation` the condition was written for."
    )
    severity: Literal["Error", "Warning", "Info"] | None = pydantic.Field(
        default=None, description="Only when `status` is `False`: how bad it is."
    )
    last_transition_time: str = pydantic.Field(
        description="RFC 3339 time of the last change of `status`; a `False` step's timeout counts from it."
    )


_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX: dict[str | None, decimal.Decimal] = {
    None: decimal.Decimal(1), "n": decimal.Decimal("1e-9"), "u": decimal.Decimal("1e-6"), "m": decimal.Decimal("1e-3"),
    **{s: decimal.Decimal(10) ** (3 * (i + 1)) for i, s in enumerate("kMGTPE")},
    **{s: decimal.Decimal(2) ** (10 * (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def quantity_value(quantity: str | int | float) -> decimal.Decimal:
    """The number a Kubernetes quantity stands for (``500m`` → 0.5, ``1Gi`` → 1073741824): the API server writes
    quantities back in its own canonical form (``0.5`` → ``500m``), so equal quantities compare by value."""
    found = _QUANTITY.match(str(quantity).strip())
    if found is None:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity (e.g. 500m, 256Mi, 2)")
    return decimal.Decimal(found.group(1)) * _SUFFIX[found.group(2)]


def same_resources(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Are two ``{requests, limits}`` equal quantity by quantity (absent and empty alike)?"""
    def values(r: dict[str, Any] | None) -> dict[str, dict[str, decimal.Decimal]]:
        return {kind: {k: quantity_value(v) for k, v in ((r or {}).get(kind) or {}).items()}
                for kind in ("requests", "limits") if (r or {}).get(kind)}
    return values(a) == values(b)


def replacing_resources(current: dict[str, Any] | None, want: dict[str, Any]) -> dict[str, Any]:
    """The patch value (JSON merge or strategic merge) that turns ``{requests, limits}`` ``current`` into exactly
    ``want``: a request or limit ``current`` has and ``want`` leaves out is removed (null), not kept."""
    out: dict[str, Any] = {}
    for kind in ("requests", "limits"):
        have, new = (current or {}).get(kind) or {}, want.get(kind) or {}
        if not new and have:
            out[kind] = None
        elif new:
            out[kind] = {**{k: None for k in have if k not in new}, **new}
    return out
