"""``/mutate-etcd``: KubeDB's ``Default`` for an ``Etcd`` — its checks and their order, with the default values
the models declare, so that the webhook, the CRD and the provisioner cannot disagree on them.

The result is a JSON Patch (RFC 6902) built as the defaults are filled in, not by diffing two copies. Defaulting
errors are returned bare, as KubeDB's ``Default`` does: ``'spec.version' is missing``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from opsmanager.api import constants
from opsmanager.api.common import IssuerRef
from opsmanager.api.etcd import EtcdSpec
from opsmanager.webhook.validation import messages
from opsmanager.webhook.validation.fielderrors import go_value
from opsmanager.webhook.validation.lookups import EtcdLookup, EtcdLookupError, InMemoryEtcdLookup
from opsmanager.webhook.validation.objects import as_dict, is_deleting
from opsmanager.webhook.validation.verdict import Verdict


class DefaultingError(ValueError):
    """The object cannot be defaulted (KubeDB's ``Default`` returned an error)."""


def etcd_defaults(obj: Mapping[str, Any], *, lookup: EtcdLookup | None = None) -> dict[str, Any]:
    """KubeDB's ``Default`` for an Etcd: the defaulted copy of ``obj``. Raises :class:`DefaultingError`.

    KubeDB's checks and order are written here; the default values are the models' (``api.etcd.EtcdSpec``,
    ``api.common.IssuerRef``), so the webhook, the CRD and the provisioner cannot disagree on them. ``obj`` is never
    modified: the dicts on the way to a default are copied, the rest is shared with ``obj``. ``lookup``: where the
    EtcdVersion ``spec.version`` names is read (None: the catalog the install bundle ships)."""
    return _defaulted(obj, lookup if lookup is not None else InMemoryEtcdLookup(), None)[0]


JsonPatch = list[dict[str, Any]]


def _defaulted(obj: Mapping[str, Any], lookup: EtcdLookup,
               old: Mapping[str, Any] | None) -> tuple[dict[str, Any], JsonPatch]:
    """:func:`etcd_defaults` and the JSON Patch (RFC 6902) that turns ``obj`` into it, built as the defaults are
    filled in (``add`` for an absent key, ``replace`` for a blank one) rather than by diffing two copies. The
    EtcdVersion is looked up when the version is chosen (``old`` is None or had another one): one deleted from the
    catalog later does not lock the Etcds on it."""
    out = dict(obj)
    patch: JsonPatch = []
    if is_deleting(out) or not isinstance(out.get("spec"), dict):
        return out, patch
    spec = out["spec"] = dict(out["spec"])
    version = spec.get("version")
    if version is None or version == "":
        raise DefaultingError(messages.MSG_DEFAULT_VERSION_MISSING)
    if spec.get("halted") is True and spec.get("deletionPolicy") == constants.DELETION_DO_NOT_TERMINATE:
        raise DefaultingError(messages.MSG_DEFAULT_CANT_HALT)
    _fill_default(spec, EtcdSpec, "replicas", patch, "/spec")
    chosen = old is None or as_dict(old.get("spec")).get("version") != version
    if chosen and (not isinstance(version, str) or lookup.get_etcdversion(version) is None):
        raise DefaultingError(messages.MSG_DEFAULT_VERSION_UNKNOWN.format(version=go_value(version)))
    _fill_default(spec, EtcdSpec, "storage_type", patch, "/spec", blank=(None, ""))
    _fill_default(spec, EtcdSpec, "deletion_policy", patch, "/spec", blank=(None, ""))
    _fill_default(spec, EtcdSpec, "halted", patch, "/spec")
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
    _fill_default(out, IssuerRef, "api_group", patch, at, blank=())
    _fill_default(out, IssuerRef, "kind", patch, at, blank=())
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


def mutate_etcd(operation: str, obj: Mapping[str, Any] | None, *, lookup: EtcdLookup | None = None,
                old: Mapping[str, Any] | None = None) -> Verdict:
    """The verdict of ``/mutate-etcd``: allowed with a JSONPatch of the defaults, or denied with KubeDB's text.
    ``lookup``: the catalog's reader (None: the catalog the install bundle ships); ``old``: the object an UPDATE
    changes."""
    if operation not in ("CREATE", "UPDATE") or obj is None:
        return Verdict.allow()
    try:
        _, patch = _defaulted(obj, lookup if lookup is not None else InMemoryEtcdLookup(), old)
    except DefaultingError as exc:
        return Verdict.deny(str(exc))
    except EtcdLookupError as exc:
        version = as_dict(obj.get("spec")).get("version")
        return Verdict.deny(f"could not default Etcd: looking up EtcdVersion {version} failed: {exc}; retry when "
                            "the API server is reachable", code=503, reason="ServiceUnavailable")
    return Verdict.allow(patch=patch)
