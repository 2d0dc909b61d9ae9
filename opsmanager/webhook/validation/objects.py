"""Reading raw admission objects, and the update precondition both kinds share.

An admission review may carry any JSON (the schema check runs after KubeDB's rules, as in KubeDB), so the rules
read objects through accessors that take any shape and fall back to empty values instead of raising.

On update only the precondition runs for an EtcdOpsRequest (as in KubeDB): ``apiVersion``, ``kind``, ``name``,
``namespace`` and ``spec`` must not change; an Etcd's ``spec.storageType`` likewise. Status and other metadata may.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opsmanager.kube import mergepatch
from opsmanager.webhook.validation import messages
from opsmanager.webhook.validation.fielderrors import go_value


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def meta_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    return as_dict(obj.get("metadata"))


def name_of(obj: Mapping[str, Any]) -> str:
    name = meta_of(obj).get("name")
    return name if isinstance(name, str) else ""


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool(meta_of(obj).get("deletionTimestamp"))


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
    patch = go_value(mergepatch.diff(dict(old), dict(new)))
    return messages.MSG_PRECONDITION.format(patch=patch, keys="\n\t".join(names))
