"""Admission from the version catalog: the ``EtcdVersion`` objects (read through the lookup, as Etcds are) decide
which versions an Etcd may run and which updates an UpdateVersion may make.

An Etcd: ``spec.version`` names an EtcdVersion (``etcdversions.catalog.opsmanager.dev "3.4.0" not found``), of a minor
the operator runs, and a new Etcd's is not deprecated (KubeDB's ``etcd <ns>/<name> is using deprecated version
<v>. Skipped processing``). The version is checked when it is chosen — on create, and on an update that changes it —
never on other updates: an EtcdVersion deprecated or deleted later does not lock the Etcds already on it (the
engine keeps writing their spec, and an UpdateVersion moves them away).

An UpdateVersion: its target names an EtcdVersion of a minor the operator runs, not deprecated; etcd can make the
move (:func:`opsmanager.api.versions.path_problem`: 3.5 → 3.7 goes through 3.6, a downgrade one minor from 3.6 on);
and the ``updateConstraints`` of the Etcd's current EtcdVersion allow the target (KubeDB's ``update version from
<current> to <target> is not supported``). No EtcdVersion for the current version: no constraints to apply.
"""

from __future__ import annotations

from typing import Any

import pydantic

from opsmanager.api import catalog, rules, versions
from opsmanager.webhook.validation import messages
from opsmanager.webhook.validation.lookups import EtcdLookup


def entry(version: str, lookup: EtcdLookup) -> tuple[catalog.EtcdVersion | None, str | None]:
    """The catalog's object for ``version`` and None, or None and why there is none to use (unknown, broken)."""
    obj = lookup.get_etcdversion(version)
    if obj is None:
        return None, messages.MSG_VERSION_UNKNOWN.format(version=version)
    try:
        found = catalog.EtcdVersion.model_validate(obj)
        for constraint in (*found.spec.update_constraints.allowlist, *found.spec.update_constraints.denylist):
            catalog.matches(constraint, found.spec.version)  # a constraint that does not parse breaks the object
    except (pydantic.ValidationError, ValueError) as exc:
        return None, messages.MSG_VERSION_BROKEN.format(version=version, error=_first_line(exc))
    if not versions.supported(found.spec.version):
        return None, messages.MSG_VERSION_NOT_RUN.format(version=version, minor=versions.minor(found.spec.version),
                                                         minors=", ".join(versions.SUPPORTED_MINORS))
    return found, None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def version_problem(version: str, lookup: EtcdLookup, *, new: bool, namespace: str, name: str) -> str | None:
    """Why the Etcd ``namespace/name`` may not run ``version`` (its ``spec.version``); None when it may. ``new``:
    the version is being chosen (a create, or an update that changes it) — only then may it not be deprecated."""
    found, problem = entry(version, lookup)
    if found is None:
        return problem
    if new and found.spec.deprecated:
        return messages.MSG_VERSION_DEPRECATED.format(namespace=namespace, name=name, version=version)
    return None


def update_problem(current: Any, target: str, lookup: EtcdLookup) -> str | None:
    """Why an UpdateVersion may not move an Etcd on ``current`` (its ``spec.version``) to ``target``; None when
    it may (see the module doc for the order)."""
    found, problem = entry(target, lookup)
    if found is None:
        return problem
    if found.spec.deprecated:
        return messages.MSG_UPDATE_TARGET_DEPRECATED.format(target=target)
    if not isinstance(current, str) or not versions.supported(current):
        return None  # an Etcd the catalog checks cannot read: the engine refuses what it cannot run
    if (path := rules.update_path(current, target)) is not None:
        return path.message
    constraints = lookup.get_etcdversion(current)
    if constraints is None:
        return None
    try:
        allowed = catalog.update_allowed(catalog.EtcdVersion.model_validate(constraints).spec.update_constraints,
                                         target)
    except (pydantic.ValidationError, ValueError) as exc:
        return messages.MSG_VERSION_BROKEN.format(version=current, error=_first_line(exc))
    return None if allowed else messages.MSG_UPDATE_NOT_SUPPORTED.format(current=current, target=target)
