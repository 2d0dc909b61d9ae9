"""JSON merge patch (RFC 7386), the one implementation: apply a patch, make one, tell whether one changes anything.

Maps merge key by key and ``null`` deletes a key; anything else (a list, a scalar) replaces. Used by the client (a
PATCH that would change nothing is not sent), the webhook (KubeDB's precondition message prints the patch from the
old object to the new) and the sandbox's API server (``application/merge-patch+json``). Pure, like
:mod:`opsmanager.kube.selectors`: the webhook's validation may import no I/O module, and the package's
``__init__`` loads the client and the informers only when one of their names is used.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def apply(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied (neither is modified)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply(result.get(key), value)
    return result


def diff(old: Any, new: Any) -> Any:
    """The patch that turns ``old`` into ``new``: removed keys map to None, changed values are patched in."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return copy.deepcopy(new)
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = copy.deepcopy(value)
        elif old[key] != value:
            patch[key] = diff(old[key], value)
    return patch


def changes(current: Any, patch: Any) -> bool:
    """Would ``patch`` change ``current``? A list counts as unchanged when it has the same length and each item is
    unchanged by its counterpart, so fields the API server defaults inside items do not turn a no-op into a write."""
    if isinstance(patch, Mapping):
        if not isinstance(current, Mapping):
            return True
        return any((key in current) if value is None else (key not in current or changes(current[key], value))
                   for key, value in patch.items())
    if isinstance(patch, list):
        return (not isinstance(current, list) or len(current) != len(patch)
                or any(changes(c, p) for c, p in zip(current, patch, strict=True)))
    return bool(current != patch)
