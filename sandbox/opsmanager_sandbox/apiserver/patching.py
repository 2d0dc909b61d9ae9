"""The three PATCH flavours of the Kubernetes API: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
strategic merge patch for the built-in kinds.

Strategic merge needs each list field's patch strategy and merge key, which a real server takes from Go
struct tags. Here they are a small table (:data:`_POD_SPEC`, :data:`_COMMON`, ...) covering the kinds the
sandbox serves: containers/env/volumes by ``name``, volumeMounts by ``mountPath``, ports by
``containerPort`` (Service ports by ``port``), conditions by ``type``, ownerReferences by ``uid``,
finalizers as a merged set. Directives ``$patch: delete|replace|merge``, ``$retainKeys`` and
``$deleteFromPrimitiveList/<field>`` are honoured; ``$setElementOrder/<field>`` is accepted and ignored.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer

from opsmanager_sandbox.apiserver import errors

_DELETE = object()

_POD_SPEC: dict[str, tuple[str, str | None]] = {}
for _c in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC[_c] = ("merge", "name")
    _POD_SPEC[f"{_c}.ports"] = ("merge", "containerPort")
    _POD_SPEC[f"{_c}.env"] = ("merge", "name")
    _POD_SPEC[f"{_c}.volumeMounts"] = ("merge", "mountPath")
    _POD_SPEC[f"{_c}.volumeDevices"] = ("merge", "devicePath")
_POD_SPEC.update({
    "volumes": ("merge", "name"),
    "imagePullSecrets": ("merge", "name"),
    "hostAliases": ("merge", "ip"),
    "topologySpreadConstraints": ("merge", "topologyKey"),
})

_COMMON: dict[str, tuple[str, str | None]] = {
    "metadata.finalizers": ("merge", None),
    "metadata.ownerReferences": ("merge", "uid"),
    "status.conditions": ("merge", "type"),
}

_BY_KIND: dict[str, dict[str, dict[str, tuple[str, str | None]]]] = {
    "Pod": {"spec": _POD_SPEC, "status": {"podIPs": ("merge", "ip"), "hostIPs": ("merge", "ip")}},
    "StatefulSet": {"spec.template.spec": _POD_SPEC},
    "Deployment": {"spec.template.spec": _POD_SPEC},
    "Service": {"spec": {"ports": ("merge", "port")}},
}


def json_patch(target: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902; a failed ``test`` or an unappliable operation is a 422, a malformed patch a 400."""
    if not isinstance(operations, list):
        raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        patch = jsonpatch.JsonPatch(operations)
    except (jsonpatch.InvalidJsonPatch, TypeError) as e:
        raise errors.bad_request(f"invalid JSON patch: {e}") from e
    try:
        result = patch.apply(target)
    except jsonpatch.JsonPatchTestFailed as e:
        raise errors.unprocessable(f"the server rejected our request due to an error in our request: "
                                   f"test operation failed: {e}") from e
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, IndexError, TypeError) as e:
        raise errors.unprocessable(f"the server rejected our request due to an error in our request: {e}") from e
    if not isinstance(result, dict):
        raise errors.bad_request("the JSON patch replaced the whole object with a non-object")
    return result


def patch_meta(kind: str, path: tuple[str, ...]) -> tuple[str, str | None]:
    """(strategy, mergeKey) of the list at ``path`` (field names only, list positions left out)."""
    dotted = ".".join(path)
    if dotted in _COMMON:
        return _COMMON[dotted]
    for prefix, table in _BY_KIND.get(kind, {}).items():
        if dotted.startswith(prefix + "."):
            found = table.get(dotted[len(prefix) + 1:])
            if found:
                return found
    return ("replace", None)


def strategic_merge_patch(target: dict[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    if not isinstance(patch, dict):
        raise errors.bad_request("a strategic merge patch must be a JSON object")
    result = _smp_map(target, patch, kind, ())
    return {} if result is _DELETE else result


def _strip(value: Any) -> Any:
    """Remove directives from a value that is inserted rather than merged."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") in ("replace", "delete"))]
    return value


def _smp_map(original: Any, patch: dict[str, Any], kind: str, path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _strip(patch)
    result = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [x for x in result[field] if x not in value]
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(result.get(key), value, kind, path + (key,))
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(result.get(key), value, kind, path + (key,))
        else:
            result[key] = value
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(original: Any, patch: list[Any], kind: str, path: tuple[str, ...]) -> list[Any]:
    strategy, key = patch_meta(kind, path)
    if any(isinstance(item, dict) and item.get("$patch") == "replace" and len(item) == 1 for item in patch):
        return list(_strip([i for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]))
    if strategy != "merge" or not isinstance(original, list):
        return list(_strip([i for i in patch if not (isinstance(i, dict) and i.get("$patch") == "delete")]))
    result = list(original)
    if key is None:  # a set of primitives
        return result + [x for x in patch if x not in result]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise errors.bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        positions = [i for i, el in enumerate(result) if isinstance(el, dict) and el.get(key) == item[key]]
        if item.get("$patch") == "delete":
            result = [el for i, el in enumerate(result) if i not in positions]
        elif positions:
            result[positions[0]] = _smp_map(result[positions[0]], item, kind, path)
        else:
            result.append(_strip(item))
    return result
