"""The version catalog: the ``EtcdVersion`` kind (KubeDB's ``catalog.kubedb.com`` EtcdVersion), cluster-scoped, one
object per etcd version a cluster may run — its image, whether it is deprecated, and the updates it allows.

KubeDB's fields that this product uses are here under KubeDB's names: ``spec.version``, ``spec.db.image``,
``spec.deprecated`` and ``spec.updateConstraints`` (``allowlist`` / ``denylist``: semver constraints such as
``>= 3.6.0, < 3.8.0``, matched against the target's ``spec.version``; an empty allowlist allows every target the
denylist does not name). KubeDB's exporter, init-container, security-context, Stash and UI images have no use here.

The admission webhook reads the objects (through its lookup, as it reads Etcds): an Etcd's ``spec.version`` and an
UpdateVersion's target must name one, a new one must not be deprecated, and the current version's constraints must
allow the target (:func:`update_allowed`). Adding a version is adding an object; the CRDs do not list versions.

The objects the install bundle ships (``deploy/catalog/``, one per version of
:data:`opsmanager.api.constants.SUPPORTED_ETCD_VERSIONS`) are generated from :data:`SHIPPED` —
``python -m opsmanager.api.catalog --out deploy/catalog`` (``--check``: exit 1 when the files differ), checked by
``tests/api/test_catalog.py`` as the CRDs are. The sandbox installs the same objects (:func:`objects`).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from collections.abc import Sequence
from typing import Any, Final, Literal

import pydantic
import yaml

from opsmanager.api import common, constants, versions

# --- the kind --------------------------------------------------------------------------------------------------


class EtcdVersionDatabase(common.Model):
    """The etcd image of a version."""

    image: str = pydantic.Field(min_length=1, description="The etcd image the members run (`quay.io/coreos/etcd:v3.6.16`).")


class UpdateConstraints(common.Model):
    """Which versions an UpdateVersion may move a cluster on this version to (KubeDB's ``updateConstraints``)."""

    allowlist: list[str] = pydantic.Field(
        default_factory=list,
        description="Semver constraints a target must meet, one of them (`>= 3.6.0, < 3.8.0`; `||` for either). "
                    "Empty: every target the denylist does not name.",
    )
    denylist: list[str] = pydantic.Field(
        default_factory=list,
        description="Semver constraints no target may meet (`< 3.5.35`). Empty: none is denied.",
    )


class EtcdVersionSpec(common.Model):
    """One etcd version a cluster may run."""

    version: str = pydantic.Field(
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$",
        description="The etcd version (`3.6.16`): what an Etcd's `spec.version` and an UpdateVersion's target name "
                    "(the object's name is the same).",
    )
    db: EtcdVersionDatabase = pydantic.Field(description="The etcd image.")
    deprecated: bool = pydantic.Field(
        default=False,
        description="Usable but best avoided: a new Etcd or an UpdateVersion may not choose it (an Etcd already on "
                    "it keeps running and may be updated away).",
    )
    update_constraints: UpdateConstraints = pydantic.Field(
        default_factory=UpdateConstraints,
        description="The versions an UpdateVersion may move a cluster on this version to.",
    )


class EtcdVersion(common.Model):
    """An etcd version of the catalog (cluster-scoped): its image, deprecation and update constraints."""

    api_version: Literal["catalog.opsmanager.dev/v1alpha1"] = pydantic.Field(
        default=constants.CATALOG_API_VERSION, description="`catalog.opsmanager.dev/v1alpha1`."
    )
    kind: Literal["EtcdVersion"] = pydantic.Field(default=constants.ETCDVERSION_KIND, description="`EtcdVersion`.")
    metadata: common.ObjectMeta = pydantic.Field(
        default_factory=common.ObjectMeta, description="Standard object metadata."
    )
    spec: EtcdVersionSpec = pydantic.Field(description="The version.")


# --- semver constraints (KubeDB's: Masterminds semver, the subset its catalogs use) -------------------------------

_COMPARISON = re.compile(r"^\s*(>=|<=|!=|>|<|=)?\s*v?([0-9]+(?:\.[0-9]+){0,2})\s*$")


def _padded(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")] + [0, 0]
    return parts[0], parts[1], parts[2]


def _meets(version: tuple[int, int, int], comparison: str) -> bool:
    match = _COMPARISON.match(comparison)
    if match is None:
        raise ValueError(f"{comparison!r} is not a version constraint such as '>= 3.6.0'")
    op, bound = match.group(1) or "=", _padded(match.group(2))
    return {"=": version == bound, "!=": version != bound, ">": version > bound, "<": version < bound,
            ">=": version >= bound, "<=": version <= bound}[op]


def matches(constraint: str, version: str) -> bool:
    """Does ``version`` meet ``constraint`` (``>= 3.6.0, < 3.8.0``: all of the comma-separated comparisons;
    ``a || b``: either)? ValueError for a constraint that does not parse."""
    wanted = versions.parse(version)
    return any(all(_meets(wanted, c) for c in alternative.split(",")) for alternative in constraint.split("||"))


def update_allowed(constraints: UpdateConstraints, target: str) -> bool:
    """KubeDB's rule: the target meets one allowlist constraint (or the allowlist is empty) and no denylist one."""
    allowed = not constraints.allowlist or any(matches(c, target) for c in constraints.allowlist)
    return allowed and not any(matches(c, target) for c in constraints.denylist)


# --- the catalog the install bundle ships -------------------------------------------------------------------------

IMAGE: Final = "quay.io/coreos/etcd:v{version}"
"""The etcd image of a version: the StatefulSet renders the same (``opsmanager.cluster.render``)."""


def _shipped(version: str, allow: str, deny: tuple[str, ...] = ()) -> EtcdVersion:
    return EtcdVersion(metadata=common.ObjectMeta(name=version), spec=EtcdVersionSpec(
        version=version, db=EtcdVersionDatabase(image=IMAGE.format(version=version)),
        update_constraints=UpdateConstraints(allowlist=[allow], denylist=list(deny))))


# Each minor may go one minor up and (from 3.6 on, etcd's downgrade protocol) one down; nothing goes back to a patch
# below 3.5.35 (3.5.1 has a known data-inconsistency bug after a crash, etcd #13766: it is the no-Go fallback only).
SHIPPED: Final = (
    _shipped("3.5.1", ">= 3.5.1, < 3.7.0"),
    _shipped("3.5.35", ">= 3.5.35, < 3.7.0"),
    _shipped("3.6.16", ">= 3.5.35, < 3.8.0"),
    _shipped("3.7.3", ">= 3.6.16, < 3.8.0"),
)


def objects() -> list[dict[str, Any]]:
    """The shipped EtcdVersion objects, as the API takes them."""
    return [v.to_dict() for v in SHIPPED]


# --- deploy/catalog/ -----------------------------------------------------------------------------------------------

HEADER = "# Generated by `python -m opsmanager.api.catalog --out deploy/catalog` from opsmanager/api/catalog.py.\n"
OBJECTS_FILE = "etcdversions.yaml"
KUSTOMIZATION_FILE = "kustomization.yaml"


def render_all() -> dict[str, str]:
    """``{filename: text}`` of ``deploy/catalog/``: the objects, and a kustomization of its own (no namespace:
    the objects are cluster-scoped, and they are applied once their CRD is established)."""
    body = yaml.safe_dump_all(objects(), sort_keys=False, default_flow_style=False)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [OBJECTS_FILE], "labels": [{"pairs": {"app.kubernetes.io/part-of": "opsmanager"}}]}
    return {OBJECTS_FILE: HEADER + str(body),
            KUSTOMIZATION_FILE: HEADER + str(yaml.safe_dump(kustomization, sort_keys=False,
                                                            default_flow_style=False))}


def check(out: pathlib.Path) -> list[str]:
    """Why ``out`` is stale (empty when its files are what :func:`render_all` writes)."""
    problems = []
    for name, text in render_all().items():
        path = out / name
        if not path.exists():
            problems.append(f"{path} is missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path} is stale")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opsmanager.api.catalog",
                                     description="Write the install bundle's EtcdVersion objects.")
    parser.add_argument("--out", default="deploy/catalog", type=pathlib.Path)
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when the files differ")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.check:
        problems = check(args.out)
        for problem in problems:
            print(f"catalog --check: {problem}; regenerate with --out {args.out}", file=sys.stderr)
        return 1 if problems else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
