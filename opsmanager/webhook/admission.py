"""AdmissionReview in and out: parse and check the envelope, route to the rules, build the response.

Transport-free, like kopf's ``serve_admission_request``: the aiohttp server (``opsmanager.webhook.server``) only moves
bytes. A malformed envelope (not JSON, not an ``admission.k8s.io/v1`` ``AdmissionReview``, no ``request``, fields
of the wrong type, an object of another kind than the endpoint admits) raises :class:`BadReview`, which the
server answers with HTTP 400 and the message. A well-formed review always gets an ``AdmissionReview`` response:
allowed, or denied with a ``metav1.Status`` (``code`` 422 and the rule's message for an invalid object).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from opsmanager.api import constants
from opsmanager.webhook.validation.defaults import mutate_etcd
from opsmanager.webhook.validation.etcd import validate_etcd
from opsmanager.webhook.validation.lookups import EtcdLookup, EtcdLookupError, NotCached
from opsmanager.webhook.validation.opsrequest import validate_opsrequest
from opsmanager.webhook.validation.verdict import Verdict

API_VERSION: Final = "admission.k8s.io/v1"
OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class BadReview(ValueError):
    """The request body is not a usable AdmissionReview; the message says what is wrong and what is expected."""


@dataclasses.dataclass(frozen=True)
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` the rules need."""

    uid: str
    operation: str
    namespace: str
    name: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool = False


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One webhook path: the kind it admits and the rule that decides."""

    path: str
    group: str
    version: str
    kind: str
    mutating: bool
    decide: Callable[[AdmissionRequest, EtcdLookup], Verdict]


def _validate_opsrequest(req: AdmissionRequest, lookup: EtcdLookup) -> Verdict:
    return validate_opsrequest(
        req.operation, req.object, req.old_object, namespace=req.namespace, lookup=lookup
    )


def _validate_etcd(req: AdmissionRequest, lookup: EtcdLookup) -> Verdict:
    return validate_etcd(req.operation, req.object, req.old_object, lookup=lookup)


def _mutate_etcd(req: AdmissionRequest, lookup: EtcdLookup) -> Verdict:
    return mutate_etcd(req.operation, req.object, lookup=lookup, old=req.old_object)


ENDPOINTS: Final[dict[str, Endpoint]] = {
    e.path: e
    for e in (
        Endpoint("/validate-etcdopsrequest", constants.OPS_GROUP, constants.OPS_VERSION, constants.OPS_KIND,
                 False, _validate_opsrequest),
        Endpoint("/validate-etcd", constants.ETCD_GROUP, constants.ETCD_VERSION, constants.ETCD_KIND,
                 False, _validate_etcd),
        Endpoint("/mutate-etcd", constants.ETCD_GROUP, constants.ETCD_VERSION, constants.ETCD_KIND,
                 True, _mutate_etcd),
    )
}


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _optional_str(request: Mapping[str, Any], key: str) -> str:
    value = request.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadReview(f"request.{key} must be a string, got {_type_name(value)}")
    return value


def _optional_object(request: Mapping[str, Any], key: str, endpoint: Endpoint) -> dict[str, Any] | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadReview(f"request.{key} must be an object or null, got {_type_name(value)}")
    api_version, kind = value.get("apiVersion"), value.get("kind")
    expected = f"{endpoint.group}/{endpoint.version}"
    if (kind is not None and kind != endpoint.kind) or (api_version is not None and api_version != expected):
        raise BadReview(
            f"request.{key} is {api_version}/{kind}; {endpoint.path} admits only {expected} {endpoint.kind}"
        )
    metadata = value.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise BadReview(f"request.{key}.metadata must be an object, got {_type_name(metadata)}")
    return value


def parse_review(body: bytes, endpoint: Endpoint) -> AdmissionRequest:
    """Parse and check an AdmissionReview body for ``endpoint``; raise :class:`BadReview` when malformed."""
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadReview(f"request body is not valid JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadReview(f"request body must be a JSON object (an AdmissionReview), got {_type_name(review)}")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(
            f"expected apiVersion {API_VERSION} and kind AdmissionReview (admissionReviewVersions: [v1]), "
            f"got apiVersion {review.get('apiVersion')!r} and kind {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request object" if request is None
                        else f"AdmissionReview.request must be an object, got {_type_name(request)}")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid must be a non-empty string")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise BadReview(f"request.operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    kind = request.get("kind")
    if kind is not None:
        if not isinstance(kind, dict) or not isinstance(kind.get("kind", ""), str):
            raise BadReview("request.kind must be an object {group, version, kind}")
        if kind.get("kind") and kind.get("kind") != endpoint.kind:
            raise BadReview(f"request.kind is {kind.get('kind')}; {endpoint.path} admits only {endpoint.kind}")
    dry_run = request.get("dryRun", False)
    if dry_run is not None and not isinstance(dry_run, bool):
        raise BadReview(f"request.dryRun must be a boolean, got {_type_name(dry_run)}")
    obj = _optional_object(request, "object", endpoint)
    old = _optional_object(request, "oldObject", endpoint)
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(f"request.object is required for {operation}")
    if operation == "UPDATE" and old is None:
        raise BadReview("request.oldObject is required for UPDATE")
    namespace = _optional_str(request, "namespace")
    name = _optional_str(request, "name")
    source = obj if obj is not None else old
    if source is not None:
        meta = source.get("metadata") or {}
        meta_ns = meta.get("namespace")
        if not namespace and isinstance(meta_ns, str):
            namespace = meta_ns
        if not name and isinstance(meta.get("name"), str):
            name = meta["name"]
    return AdmissionRequest(uid, operation, namespace or "default", name, obj, old, bool(dry_run))


def response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answering request ``uid``."""
    resp: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        resp["status"] = verdict.status()
    if verdict.patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(list(verdict.patch)).encode()).decode()
    if verdict.warnings:
        resp["warnings"] = list(verdict.warnings)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": resp}


class _Fetched:
    """``lookup`` with the answers :func:`decide` fetched for the objects it did not have in memory."""

    def __init__(self, lookup: EtcdLookup) -> None:
        self.lookup = lookup
        self.answers: dict[tuple[str, str, str], dict[str, Any] | None | EtcdLookupError] = {}

    def _get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        key = (kind, namespace, name)
        if key not in self.answers:
            if kind == constants.ETCDVERSION_KIND:
                return self.lookup.get_etcdversion(name)
            if kind == constants.STORAGE_CLASS_KIND:
                return self.lookup.get_storage_class(name)
            return (self.lookup.get_etcd(namespace, name) if kind == constants.ETCD_KIND
                    else self.lookup.get_opsrequest(namespace, name))
        answer = self.answers[key]
        if isinstance(answer, EtcdLookupError):
            raise answer
        return answer

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(constants.ETCD_KIND, namespace, name)

    def get_opsrequest(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(constants.OPS_KIND, namespace, name)

    def get_etcdversion(self, name: str) -> dict[str, Any] | None:
        return self._get(constants.ETCDVERSION_KIND, "", name)
    def get_storage_class(self, name: str) -> dict[str, Any] | None:
        return self._get(constants.STORAGE_CLASS_KIND, "", name)


async def decide(endpoint: Endpoint, request: AdmissionRequest, lookup: EtcdLookup) -> Verdict:
    """:func:`rule_verdict`, and for an object it allows that names a cert-manager issuer not named before, a
    warning for each issuer that does not exist yet (:func:`issuer_warnings`)."""
    verdict = await rule_verdict(endpoint, request, lookup)
    if not verdict.allowed or endpoint.mutating:
        return verdict
    warnings = await issuer_warnings(endpoint, request, lookup)
    return dataclasses.replace(verdict, warnings=(*verdict.warnings, *warnings)) if warnings else verdict


def _issuer_refs(endpoint: Endpoint, obj: Mapping[str, Any] | None) -> dict[tuple[str, str], str]:
    """``(kind, name) -> field`` of the cert-manager issuers an Etcd's ``spec.tls`` or an EtcdOpsRequest's
    ``spec.tls`` names (the first field naming each)."""
    tls = ((obj or {}).get("spec") or {}).get("tls")
    if not isinstance(tls, Mapping):
        return {}
    refs: dict[tuple[str, str], str] = {}
    candidates = [("spec.tls.issuerRef", tls.get("issuerRef"))]
    certificates = tls.get("certificates")
    if isinstance(certificates, list):
        candidates += [(f"spec.tls.certificates[{i}].issuerRef", c.get("issuerRef"))
                       for i, c in enumerate(certificates) if isinstance(c, Mapping)]
    for field, ref in candidates:
        if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) and ref.get("name"):
            kind = ref.get("kind") if ref.get("kind") in constants.ISSUER_KINDS else constants.ISSUER_KIND
            refs.setdefault((str(kind), str(ref["name"])), field)
    return refs


async def issuer_warnings(endpoint: Endpoint, request: AdmissionRequest, lookup: Any) -> list[str]:
    """Admission warnings (kubectl prints them) for each issuer a created or updated object names anew that does
    not exist yet: allowed — it may be created next — but an Etcd waits in Provisioning and a request waits for
    cert-manager until it does. An issuer that cannot be read (no rights, API down) gives no warning."""
    aissuer = getattr(lookup, "aissuer", None)
    if aissuer is None or request.operation not in ("CREATE", "UPDATE"):
        return []
    refs = _issuer_refs(endpoint, request.object)
    for key in _issuer_refs(endpoint, request.old_object):
        refs.pop(key, None)
    waits = ("the Etcd waits in Provisioning until cert-manager can issue from it"
             if endpoint.kind == constants.ETCD_KIND else
             "the request waits for cert-manager until it does, and fails after spec.timeout")
    out = []
    for (kind, name), field in refs.items():
        try:
            found = await aissuer(kind, request.namespace, name)
        except EtcdLookupError:
            continue
        if found is None:
            where = name if kind == constants.CLUSTER_ISSUER_KIND else f"{request.namespace}/{name}"
            out.append(f"{field}: {kind} {where} does not exist yet; {waits}")
    return out


async def rule_verdict(endpoint: Endpoint, request: AdmissionRequest, lookup: EtcdLookup) -> Verdict:
    """``endpoint.decide`` on the caller's event loop: the rules run inline and read ``lookup`` from memory.

    When the lookup does not have an object (:class:`~opsmanager.webhook.validation.lookups.NotCached`), its
    ``afetch`` reads it (a failure is kept as the answer, for the rules to report) and the rules run again with
    that answer; a rule reads at most a few objects (the Etcd, a request, two EtcdVersions), so this ends. A lookup without ``afetch`` that raises
    ``NotCached`` is a bug and raises. Any other exception of a rule propagates."""
    fetched = _Fetched(lookup)
    while True:
        try:
            return endpoint.decide(request, fetched)
        except NotCached as miss:
            key = (miss.kind, miss.namespace, miss.name)
            afetch = getattr(lookup, "afetch", None)
            if afetch is None or key in fetched.answers:
                raise
            try:
                fetched.answers[key] = await afetch(miss.kind, miss.namespace, miss.name)
            except EtcdLookupError as exc:
                fetched.answers[key] = exc


def review(path: str, body: bytes, lookup: EtcdLookup) -> dict[str, Any]:
    """Decide one AdmissionReview body posted to ``path``; raises :class:`BadReview` or ``KeyError`` (no path)."""
    endpoint = ENDPOINTS[path]
    request = parse_review(body, endpoint)
    return response(request.uid, endpoint.decide(request, lookup))
