"""The generic request semantics of kube-apiserver for every kind: create, read, list, update, patch and
delete, with the per-kind "strategy" rules a client can observe.

What this module guarantees (each is a contract test): uid/creationTimestamp/global resourceVersion;
``generation`` bumped only on spec changes (everything but metadata, and but status where a status
subresource exists); namespace from the URL; generateName; 409 on a stale resourceVersion; the status
subresource separated both ways (status ignored on create and on main-endpoint writes, only status taken
from ``/status`` writes); finalizers and deletionTimestamp; graceful pod deletion (a pod bound to a node
stays with deletionTimestamp until deleted with grace 0, as the kubelet does); no-op updates do not bump
the resourceVersion; CRD schema defaults, pruning, validation and ``self == oldSelf`` rules; admission
webhooks (mutating, then validating) around every write.

All store mutations happen synchronously on the event loop; the only awaits are admission calls, after
which the write is re-checked against the current resourceVersion (and retried for patches, like the real
server's GuaranteedUpdate).
"""

from __future__ import annotations

import base64
import builtins
import copy
import datetime
import json
import random
import re
import uuid
from collections.abc import Callable
from typing import Any

# Served copies and controller writes: marshal copies JSON documents in C, several times faster than
# ``copy.deepcopy`` (which was the API server's largest cost, every answer and watch event being a copy).
from opsmanager.kube import selectors as label_selectors
from opsmanager.kube.cache import copy_json
from opsmanager_sandbox.apiserver import (
    admission,
    defaults,
    disruption,
    errors,
    rbac,
    resources,
    schema,
    selectors,
    store,
)

Obj = dict[str, Any]
Mutator = Callable[[Obj], Obj]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                "namespace", "name", "selfLink")
_RETURNS_DELETED_OBJECT = {("", "pods"), ("", "namespaces")}
_PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def stamp(when: datetime.datetime | None = None) -> str:
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- conversion between the stored form and the served version ----------------------------------------------

_EVENT_FIELDS = {"involvedObject": "regarding", "related": "related", "message": "note", "reason": "reason",
                 "type": "type", "source": "deprecatedSource", "firstTimestamp": "deprecatedFirstTimestamp",
                 "lastTimestamp": "deprecatedLastTimestamp", "count": "deprecatedCount", "eventTime": "eventTime",
                 "series": "series", "reportingComponent": "reportingController",
                 "reportingInstance": "reportingInstance", "action": "action"}


def external(rt: resources.ResourceType, obj: Obj) -> Obj:
    """A deep copy of a stored object as served by ``rt`` (its apiVersion; events.k8s.io field names)."""
    out = copy_json(obj)
    if rt.storage is not None and rt.group == "events.k8s.io":
        converted = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": out["metadata"]}
        for core_name, v1_name in _EVENT_FIELDS.items():
            if core_name in out:
                converted[v1_name] = out[core_name]
        return converted
    out.pop("apiVersion", None)
    out.pop("kind", None)
    return {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": out.pop("metadata", {}), **out}


def internal(rt: resources.ResourceType, obj: Obj) -> Obj:
    if rt.storage is not None and rt.group == "events.k8s.io":
        converted = {"apiVersion": "v1", "kind": "Event", "metadata": obj.get("metadata", {})}
        for core_name, v1_name in _EVENT_FIELDS.items():
            if v1_name in obj:
                converted[core_name] = obj[v1_name]
        return converted
    return obj


# -- helpers ------------------------------------------------------------------------------------------------

def _strip_for_generation(obj: Obj, has_status: bool) -> Obj:
    return {k: v for k, v in obj.items() if k != "metadata" and not (has_status and k == "status")}


def _same_ignoring_rv(a: Obj, b: Obj) -> bool:
    ma = {k: v for k, v in a.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    mb = {k: v for k, v in b.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return ma == mb and {k: v for k, v in a.items() if k != "metadata"} == \
        {k: v for k, v in b.items() if k != "metadata"}


# The name rule of a kind: its pattern, its longest length and the apiserver's wording of what it must be.
_LABEL_RULE = (_LABEL, 63,
               "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
               "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
               "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_RULE = (_SUBDOMAIN, 253,
                   "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                   "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _validate_name(rt: resources.ResourceType, name: str) -> list[dict[str, str]]:
    if rt.group == rbac.GROUP and not rt.custom:  # RBAC names are path segments: "system:discovery" is fine
        if name in (".", "..") or "/" in name or "%" in name:
            return [{"reason": "FieldValueInvalid", "field": "metadata.name",
                     "message": f'Invalid value: "{name}": may not be \'.\' or \'..\' and may not contain '
                                f"'/' or '%'"}]
        return []
    pattern, longest, rule = _LABEL_RULE if rt.kind in ("Namespace", "Service") else _SUBDOMAIN_RULE
    if not pattern.match(name) or len(name) > longest:
        return [{"reason": "FieldValueInvalid", "field": "metadata.name",
                 "message": f'Invalid value: "{name}": {rule}'}]
    return []


def _crd_defaults(crd: Obj) -> None:
    spec = crd.setdefault("spec", {})
    spec.setdefault("scope", "Namespaced")
    names = spec.setdefault("names", {})
    if "kind" in names:
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})
    for v in spec.get("versions") or []:
        v.setdefault("served", True)
        v.setdefault("storage", False)


def _crd_validate(crd: Obj) -> list[dict[str, str]]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes = []
    for field in ("group",):
        if not spec.get(field):
            causes.append({"reason": "FieldValueRequired", "field": f"spec.{field}", "message": "Required value"})
    for field in ("plural", "kind"):
        if not names.get(field):
            causes.append({"reason": "FieldValueRequired", "field": f"spec.names.{field}",
                           "message": "Required value"})
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if crd["metadata"]["name"] != expected:
        causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                       "message": f'Invalid value: "{crd["metadata"]["name"]}": must be spec.names.plural+"."+'
                                  f"spec.group"})
    versions = spec.get("versions") or []
    if not versions:
        causes.append({"reason": "FieldValueRequired", "field": "spec.versions", "message": "Required value"})
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append({"reason": "FieldValueInvalid", "field": "spec.versions",
                       "message": "Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: must have "
                                  "exactly one version marked as storage version"})
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append({"reason": "FieldValueNotSupported", "field": "spec.scope",
                       "message": f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", '
                                  f'"Namespaced"'})
    return causes


def _crd_status(crd: Obj, old: Obj | None) -> Obj:
    spec = crd["spec"]
    names = dict(spec["names"])
    storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    stored = list(((old or {}).get("status") or {}).get("storedVersions") or [])
    for v in storage:
        if v not in stored:
            stored.append(v)
    then = ((old or {}).get("status") or {}).get("conditions") or []
    since = next((c.get("lastTransitionTime") for c in then if c.get("type") == "Established"), None) or stamp()
    conditions = [
        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found",
         "lastTransitionTime": since},
        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
         "message": "the initial names have been accepted", "lastTransitionTime": since},
    ]
    if crd["metadata"].get("deletionTimestamp"):
        conditions.append({"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress",
                           "message": "CustomResource deletion is in progress", "lastTransitionTime": stamp()})
    return {"conditions": conditions, "acceptedNames": names, "storedVersions": stored}



class _FromObject:
    """Sentinel: take the precondition from the mutated object's ``metadata.resourceVersion``."""


FROM_OBJECT = _FromObject

class Cluster:
    """The object semantics behind the HTTP routes; ``server.py`` is only transport."""

    def __init__(self, registry: resources.Registry, objects: store.Store,
                 webhooks: admission.Admission) -> None:
        self.registry = registry
        self.store = objects
        self.admission = webhooks
        objects.listeners.append(self._install_crds)

    def _install_crds(self, change: store.Change) -> None:
        """A CRD's kind is served from the moment the CRD is stored, and gone when it is removed."""
        if change.key != CRD_KEY:
            return
        if change.type == "DELETED":
            self.registry.unregister_crd(change.obj["metadata"]["name"])
        else:
            self.registry.register_crd(change.obj)

    # -- reading -------------------------------------------------------------------------------------------

    def lookup(self, rt: resources.ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt.storage_key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return obj

    def get(self, rt: resources.ResourceType, namespace: str, name: str) -> Obj:
        return external(rt, self.lookup(rt, namespace, name))

    def list(self, rt: resources.ResourceType, namespace: str | None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None,
             continue_token: str | None = None) -> tuple[builtins.list[Obj], str, str, int | None]:
        """Matching objects, the list resourceVersion, the next continue token and the remaining count."""
        match_labels = selectors.parse_label_selector(label_selector)
        match_fields = selectors.parse_field_selector(field_selector)
        list_rv = str(self.store.rv)
        start: builtins.list[str] | None = None
        if continue_token:
            try:
                token = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start, token_rv = token["start"], int(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                                         "(version meta.k8s.io/v1)") from None
            if token_rv < self.store.compacted_rv:
                raise errors.gone("The provided continue parameter is too old to display a consistent list "
                                  "result. You can start a new list without the continue parameter.")
            list_rv = str(token_rv)
        items = []
        for obj in self.store.list(rt.storage_key, namespace if rt.namespaced else None):
            meta = obj["metadata"]
            if start is not None and [meta.get("namespace") or "", meta["name"]] <= start:
                continue
            view = external(rt, obj)
            if match_labels(meta.get("labels") or {}) and match_fields(view):
                items.append(view)
        if limit and limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"rv": int(list_rv), "start": [last.get("namespace") or "", last["name"]]}
            next_token = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            return items[:limit], list_rv, next_token, len(items) - limit
        return items, list_rv, "", None

    # -- creating ------------------------------------------------------------------------------------------

    def _check_namespace(self, rt: resources.ResourceType, namespace: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get(("", "namespaces"), "", namespace)
        if ns is None:
            raise errors.not_found("", "namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(rt.group, rt.plural, "",
                                   f"unable to create new content in namespace {namespace} because it is being "
                                   f"terminated")

    def _default_and_prune(self, rt: resources.ResourceType, obj: Obj, validation: str) -> builtins.list[str]:
        if not rt.custom:
            defaults.apply(rt.kind, obj)
            if rt.storage_key == CRD_KEY:
                _crd_defaults(obj)
            return []
        if not rt.schema:
            return []
        schema.default(rt.schema, obj)
        unknown = schema.prune(rt.schema, obj)
        if unknown and validation == "Strict":
            shown = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise errors.bad_request(f"strict decoding error: {shown}")
        if unknown and validation != "Ignore":
            return [f'unknown field "{u}"' for u in unknown]
        return []

    def _validate(self, rt: resources.ResourceType, obj: Obj, old: Obj | None) -> None:
        causes = _validate_name(rt, obj["metadata"]["name"]) if old is None else []
        if rt.custom and rt.schema:
            invalid = schema.validate(rt.schema, obj)
            causes += invalid
            if invalid and schema.has_rules(rt.schema):
                causes.append(schema.RULES_NOT_CHECKED)  # kube-apiserver runs no CEL rule on an invalid object
            elif old is not None:
                causes += schema.transition_rules(rt.schema, obj, old)
        if rt.storage_key == CRD_KEY:
            causes += _crd_validate(obj)
        if rt.group == rbac.GROUP and not rt.custom:
            causes += rbac.validate(rt.kind, obj, old)
        if old is not None:
            added = [f for f in obj["metadata"].get("finalizers") or []
                     if f not in (old["metadata"].get("finalizers") or [])]
            if old["metadata"].get("deletionTimestamp") and added:
                causes.append({"reason": "FieldValueForbidden", "field": "metadata.finalizers",
                               "message": f"Forbidden: no new finalizers can be added if the object is being "
                                          f"deleted, found new finalizers {json.dumps(added)}"})
        if causes:
            raise errors.invalid(rt.group, rt.kind, obj["metadata"]["name"], causes)

    async def create(self, rt: resources.ResourceType, namespace: str, body: Any, *, dry_run: bool = False,
                     validation: str = "") -> tuple[Obj, builtins.list[str]]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        obj = copy.deepcopy(body)
        if obj.get("apiVersion") not in (None, rt.api_version):
            raise errors.bad_request(f"the API version in the data ({obj['apiVersion']}) does not match the "
                                     f"expected API version ({rt.api_version})")
        if obj.get("kind") not in (None, rt.kind):
            raise errors.bad_request(f"the kind in the data ({obj['kind']}) does not match the expected kind "
                                     f"({rt.kind})")
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        self._check_namespace(rt, namespace)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(rt.group, rt.kind, "", [{
                    "reason": "FieldValueRequired", "field": "metadata.name",
                    "message": "Required value: name or generateName is required"}])
            meta["name"] = meta["generateName"] + "".join(random.choices(_SUFFIX_CHARS, k=5))
        for key in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                    "selfLink", "managedFields"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = stamp()
        if rt.has_generation:
            meta["generation"] = 1
        if rt.has_status:
            initial = None if rt.custom else defaults.initial_status(rt.kind, obj)
            if initial is None:
                obj.pop("status", None)
            else:
                obj["status"] = initial
        obj = internal(rt, obj)
        warnings = self._default_and_prune(rt, obj, validation)
        if rt.storage_key == CRD_KEY:
            meta.setdefault("finalizers", [])
            if CRD_CLEANUP not in meta["finalizers"]:
                meta["finalizers"].append(CRD_CLEANUP)
        obj, more = await self._admit(rt, "CREATE", obj, None, namespace, None, dry_run, validation)
        warnings += more
        if rt.storage_key == CRD_KEY:
            obj["status"] = _crd_status(obj, None)
        if self.store.get(rt.storage_key, meta.get("namespace", ""), obj["metadata"]["name"]) is not None:
            raise errors.already_exists(rt.group, rt.plural, obj["metadata"]["name"])
        self._check_namespace(rt, namespace)
        if not dry_run:
            obj = self.store.put(rt.storage_key, obj, event="ADDED")
        return external(rt, obj), warnings

    async def _admit(self, rt: resources.ResourceType, operation: str, obj: Obj, old: Obj | None,
                     namespace: str, subresource: str | None, dry_run: bool,
                     validation: str) -> tuple[Obj, builtins.list[str]]:
        """Mutating webhooks, re-defaulting, schema validation, validating webhooks."""
        warnings: builtins.list[str] = []
        mutated, w = await self.admission.mutate(rt, operation, external(rt, obj),
                                                 external(rt, old) if old else None, namespace, subresource,
                                                 dry_run)
        warnings += w
        if mutated is not None:
            obj = internal(rt, mutated)
            warnings += self._default_and_prune(rt, obj, validation)
        self._validate(rt, obj, old)
        warnings += await self.admission.validate(rt, operation, external(rt, obj),
                                                  external(rt, old) if old else None, namespace, subresource,
                                                  dry_run)
        return obj, warnings

    # -- updating ------------------------------------------------------------------------------------------

    async def update(self, rt: resources.ResourceType, namespace: str, name: str, mutate: Mutator, *,
                     subresource: str | None = None, dry_run: bool = False, validation: str = "",
                     require_rv: bool = False,
                     precondition: str | None | type[_FromObject] = _FromObject) -> tuple[Obj, builtins.list[str]]:
        """Read-modify-write with ``mutate`` (given the served form of the current object).

        ``precondition``: the resourceVersion the client required (a PATCH names it in its body, or does not);
        by default the one in the mutated object (a PUT sends the whole object). Without one, a write that raced
        another is applied again on the latest version, as kube-apiserver's GuaranteedUpdate does — a merge patch
        carries the current object's resourceVersion through, which is not a precondition the client asked for."""
        for _ in range(20):
            old = self.lookup(rt, namespace, name)
            new = internal(rt, mutate(external(rt, old)))
            if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
                raise errors.bad_request("the body of the request must be a JSON object with object metadata")
            new.setdefault("metadata", {})
            client_rv = new["metadata"].get("resourceVersion") if precondition is _FromObject else precondition
            if new["metadata"].get("name") not in (None, name):
                raise errors.bad_request(f"the name of the object ({new['metadata']['name']}) does not match "
                                         f"the name on the URL ({name})")
            if rt.namespaced and new["metadata"].get("namespace") not in (None, "", namespace):
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            if require_rv and rt.custom and not client_rv:
                raise errors.invalid(rt.group, rt.kind, name, [{
                    "reason": "FieldValueInvalid", "field": "metadata.resourceVersion",
                    "message": "Invalid value: 0x0: must be specified for an update"}])
            if client_rv and client_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name, errors.STALE)
            if new["metadata"].get("uid") not in (None, old["metadata"]["uid"]):
                raise errors.conflict(rt.group, rt.plural, name,
                                      f"Precondition failed: UID in precondition: {new['metadata']['uid']}, "
                                      f"UID in object meta: {old['metadata']['uid']}")
            new = self._merge_update(rt, old, new, subresource)
            warnings = self._default_and_prune(rt, new, validation) if subresource != "status" else []
            new, more = await self._admit(rt, "UPDATE", new, old, namespace, subresource, dry_run, validation)
            warnings += more
            current = self.store.get(rt.storage_key, namespace if rt.namespaced else "", name)
            if current is None:
                raise errors.not_found(rt.group, rt.plural, name)
            if current["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]:
                if client_rv:
                    raise errors.conflict(rt.group, rt.plural, name, errors.STALE)
                continue  # someone wrote meanwhile: re-apply on the latest version
            return external(rt, self.commit_update(rt, old, new, dry_run=dry_run)), warnings
        raise errors.conflict(rt.group, rt.plural, name, errors.STALE)

    def _merge_update(self, rt: resources.ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
        if subresource == "resize":
            return _resized(old, new)
        if subresource == "status":
            merged: Obj = copy_json(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            return merged
        new = copy_json(new)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        if rt.has_status:
            if "status" in old:
                new["status"] = copy_json(old["status"])
            else:
                new.pop("status", None)
        meta = new["metadata"]
        for key in _SYSTEM_META:
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        return new

    def commit_update(self, rt: resources.ResourceType, old: Obj, new: Obj, *, dry_run: bool = False) -> Obj:
        """Store ``new`` over ``old`` (already validated): generation, no-op, finalizer-driven deletion."""
        key = rt.storage_key
        if rt.storage_key == CRD_KEY:
            new["status"] = _crd_status(new, old)
        if rt.has_generation:
            if _strip_for_generation(old, rt.has_status) != _strip_for_generation(new, rt.has_status):
                new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if _same_ignoring_rv(old, new) or dry_run:
            return new if dry_run else old
        meta, old_meta = new["metadata"], old["metadata"]
        if (old_meta.get("deletionTimestamp") and not meta.get("finalizers")
                and not old_meta.get("deletionGracePeriodSeconds")
                and not (rt.kind == "Namespace" and (new.get("spec") or {}).get("finalizers"))):
            return self.store.remove(key, meta.get("namespace") or "", meta["name"], last=new)
        return self.store.put(key, new, event="MODIFIED")

    def write_internal(self, key: store.Key, old: Obj, new: Obj) -> Obj:
        """A controller's write (GC, namespace and CRD cleanup, PDB status): no admission, no validation."""
        rt = self.registry.primary(key)
        return self.commit_update(rt, old, new) if rt else self.store.put(key, new, event="MODIFIED")

    # -- deleting ------------------------------------------------------------------------------------------

    async def delete(self, rt: resources.ResourceType, namespace: str, name: str,
                     options: Obj) -> tuple[int, Obj]:
        obj = self.lookup(rt, namespace, name)
        pre = options.get("preconditions") or {}
        # kube-apiserver's rest.BeforeDelete: the kind (not the plural) names the object in these two messages
        if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
            raise errors.conflict(rt.group, rt.kind, name,
                                  f"the UID in the precondition ({pre['uid']}) does not match the UID in record "
                                  f"({obj['metadata']['uid']}). The object might have been deleted and then recreated")
        if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.group, rt.kind, name,
                                  f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match "
                                  f"the ResourceVersion in record ({obj['metadata']['resourceVersion']}). The object "
                                  "might have been modified")
        if rt.kind == "Namespace" and rt.group == "" and name in _PROTECTED_NAMESPACES:
            raise errors.forbidden("", "namespaces", name, "this namespace may not be deleted")
        dry_run = bool(options.get("dryRun"))
        await self.admission.validate(rt, "DELETE", None, external(rt, obj), namespace, None, dry_run,
                                      options=options)
        if dry_run:
            return 200, external(rt, obj)
        obj = self.lookup(rt, namespace, name)
        deleted, result = self.delete_now(rt, obj, options)
        if deleted and not (rt.custom or rt.storage_key in _RETURNS_DELETED_OBJECT):
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "details": {"name": name, "group": rt.group, "kind": rt.plural,
                                     "uid": obj["metadata"]["uid"]}}
        return 200, external(rt, result)

    def delete_now(self, rt: resources.ResourceType, obj: Obj, options: Obj) -> tuple[bool, Obj]:
        """Delete or start deleting ``obj``; returns (removed, resulting object)."""
        key = rt.storage_key
        meta = obj["metadata"]
        ns, name = meta.get("namespace") or "", meta["name"]
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        grace = 0
        if key == ("", "pods"):
            spec, phase = obj.get("spec") or {}, (obj.get("status") or {}).get("phase")
            requested = options.get("gracePeriodSeconds")
            if requested is None:
                requested = spec.get("terminationGracePeriodSeconds", 30)
            grace = max(0, int(requested))
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        new = copy_json(obj)
        new_meta = new["metadata"]
        finalizers = list(new_meta.get("finalizers") or [])
        for wanted, policy_name in (("foregroundDeletion", "Foreground"), ("orphan", "Orphan")):
            if policy == policy_name and wanted not in finalizers:
                finalizers.append(wanted)
        if key == ("", "namespaces"):
            if not meta.get("deletionTimestamp"):
                new_meta["deletionTimestamp"] = stamp()
                new.setdefault("status", {})["phase"] = "Terminating"
                return False, self.store.put(key, new, event="MODIFIED")
            return False, obj
        if meta.get("deletionTimestamp"):
            current_grace = meta.get("deletionGracePeriodSeconds") or 0
            if grace < current_grace:
                new_meta["deletionGracePeriodSeconds"] = grace
                new_meta["deletionTimestamp"] = stamp(now() + datetime.timedelta(seconds=grace))
                if grace == 0 and not new_meta.get("finalizers"):
                    return True, self.store.remove(key, ns, name)
                return False, self.store.put(key, new, event="MODIFIED")
            if current_grace == 0 and not meta.get("finalizers"):
                return True, self.store.remove(key, ns, name)
            return False, obj
        if finalizers or grace > 0:
            new_meta["finalizers"] = finalizers
            new_meta["deletionTimestamp"] = stamp(now() + datetime.timedelta(seconds=grace))
            new_meta["deletionGracePeriodSeconds"] = grace
            if rt.has_generation:
                new_meta["generation"] = int(meta.get("generation", 1)) + 1
            if key == CRD_KEY:
                new["status"] = _crd_status(new, obj)
            return False, self.store.put(key, new, event="MODIFIED")
        return True, self.store.remove(key, ns, name)

    # -- subresources --------------------------------------------------------------------------------------

    def scale_of(self, rt: resources.ResourceType, obj: Obj) -> Obj:
        paths = rt.scale or {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                             "labelSelectorPath": None}
        spec_replicas = selectors.lookup(obj, paths["specReplicasPath"].lstrip("."))
        status_replicas = selectors.lookup(obj, (paths.get("statusReplicasPath") or ".status.replicas").lstrip("."))
        if rt.kind in ("StatefulSet", "Deployment") and not rt.custom:
            selector = str(label_selectors.from_object((obj.get("spec") or {}).get("selector"), none_matches=False))
        elif paths.get("labelSelectorPath"):
            selector = selectors.lookup(obj, paths["labelSelectorPath"].lstrip(".")) or ""
        else:
            selector = ""
        meta = obj["metadata"]
        scale_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                      if k in meta}
        status: Obj = {"replicas": int(status_replicas or 0)}
        if selector:
            status["selector"] = selector
        return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale_meta,
                "spec": {"replicas": int(spec_replicas or 0)}, "status": status}

    def scale_mutator(self, rt: resources.ResourceType, change: Callable[[Obj], Obj]) -> Mutator:
        def mutate(current: Obj) -> Obj:
            scale = change(self.scale_of(rt, current))
            replicas = (scale.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise errors.invalid("autoscaling", "Scale", current["metadata"]["name"], [{
                    "reason": "FieldValueInvalid", "field": "spec.replicas",
                    "message": f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0"}])
            path = ((rt.scale or {}).get("specReplicasPath") or ".spec.replicas").lstrip(".").split(".")
            target = current
            for part in path[:-1]:
                target = target.setdefault(part, {})
            target[path[-1]] = replicas
            current["metadata"]["resourceVersion"] = (scale.get("metadata") or {}).get("resourceVersion") \
                or current["metadata"]["resourceVersion"]
            return current
        return mutate

    async def evict(self, namespace: str, name: str, body: Any, *, dry_run: bool = False) -> Obj:
        """kube-apiserver's eviction: decided from the budget's *stored* status (as the disruption controller last
        wrote it), which it then decrements, naming the pod in ``disruptedPods`` — not from the live pods."""
        pods_rt = self.registry.get("", "v1", "pods")
        assert pods_rt is not None
        pod = self.lookup(pods_rt, namespace, name)
        options = dict((body or {}).get("deleteOptions") or {} if isinstance(body, dict) else {})
        # ?dryRun=All on the eviction, or dryRun in its deleteOptions: decided, but the budget and the pod untouched
        dry_run = dry_run or bool(options.get("dryRun"))
        if dry_run:
            options["dryRun"] = ["All"]
        # a pod that is not running (or already going) is deleted without asking a budget, as kube-apiserver does
        ignores_budgets = bool(pod["metadata"].get("deletionTimestamp")) or \
            (pod.get("status") or {}).get("phase") in ("Pending", "Succeeded", "Failed")
        if not ignores_budgets:
            budgets = [p for p in self.store.list(("policy", "poddisruptionbudgets"), namespace)
                       if disruption.covered_pods(p, [pod])]
            if len(budgets) > 1:
                raise errors.internal("This pod has more than one PodDisruptionBudget, which the eviction "
                                      "subresource does not support.")
            if budgets and not disruption.unhealthy_evictable(budgets[0], pod):
                pdb = budgets[0]
                decremented = disruption.decrement(pdb, name, stamp())
                if isinstance(decremented, disruption.Refusal):
                    wait = decremented.retry_after
                    details: Obj = {"causes": [{"reason": "DisruptionBudget", "message": decremented.message}]}
                    if wait:
                        details["retryAfterSeconds"] = wait
                    raise errors.StatusError(
                        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                        details, headers={"Retry-After": str(wait)} if wait else None)
                if not dry_run:
                    self.write_internal(("policy", "poddisruptionbudgets"), pdb, decremented)
        await self.delete(pods_rt, namespace, name, options)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def bind(self, namespace: str, name: str, body: Any) -> Obj:
        pods_rt = self.registry.get("", "v1", "pods")
        assert pods_rt is not None
        pod = self.lookup(pods_rt, namespace, name)
        target = ((body or {}).get("target") or {}).get("name") if isinstance(body, dict) else None
        if not target:
            raise errors.invalid("", "Binding", name, [{"reason": "FieldValueRequired", "field": "target.name",
                                                       "message": "Required value"}])
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise errors.conflict("", "pods/binding", name, f'pod {name} is already assigned to node "{node}"')
        new = copy.deepcopy(pod)
        new.setdefault("spec", {})["nodeName"] = target
        self.commit_update(pods_rt, pod, new)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _resized(old: Obj, new: Obj) -> Obj:
    """kube-apiserver's ``pods/resize``: only each container's ``resources`` (and ``resizePolicy``) change; the pod's
    QoS class may not (the kubelet could not keep its cgroup placement)."""
    merged: Obj = copy_json(old)
    wanted = {c.get("name"): c for c in (new.get("spec") or {}).get("containers") or []}
    for container in (merged.get("spec") or {}).get("containers") or []:
        update = wanted.get(container.get("name"))
        if update is None:
            continue
        for key in ("resources", "resizePolicy"):
            if key in update:
                container[key] = copy_json(update[key])
            else:
                container.pop(key, None)
    if _qos_class(merged) != _qos_class(old):
        raise errors.invalid("", "Pod", merged["metadata"]["name"], [{
            "field": "spec", "reason": "FieldValueInvalid",
            "message": f'Invalid value: "{_qos_class(merged)}": Pod QOS Class may not change as a result of resizing'}])
    return merged


def _qos_class(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    resources_ = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources_):
        return "BestEffort"
    guaranteed = all((r.get("limits") or {}).get(k) is not None
                     and (r.get("requests") or {}).get(k, (r.get("limits") or {}).get(k)) == (r.get("limits") or {})[k]
                     for r in resources_ for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"
