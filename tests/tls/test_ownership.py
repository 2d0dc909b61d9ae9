"""Never adopt: objects with our names but another controller are refused, with the object and the fix named."""

from __future__ import annotations

from typing import Any

from opsmanager.tls import ownership


def obj(kind: str = "Service", owner: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "db-pods", "namespace": "ns"}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


ETCD_REF = {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "name": "db", "uid": "u-1", "controller": True}


def test_absent_and_ours_are_fine() -> None:
    assert ownership.foreign_owned(None, "ns/db", "u-1") is None
    assert ownership.foreign_owned(obj(owner=ETCD_REF), "ns/db", "u-1") is None


def test_another_etcd_of_the_same_name_is_foreign() -> None:
    # A previous Etcd "db" (other uid) left it behind: still not ours.
    why = ownership.foreign_owned(obj(owner=ETCD_REF | {"uid": "u-old"}), "ns/db", "u-1")
    assert why is not None and "Service ns/db-pods" in why and "u-old" in why and "never adopts" in why


def test_no_controller_is_foreign_for_our_objects() -> None:
    why = ownership.foreign_owned(obj(), "ns/db", "u-1")
    assert why is not None and "no controller" in why and "Delete or rename" in why


def test_a_non_controller_owner_ref_does_not_make_it_ours() -> None:
    why = ownership.foreign_owned(obj(owner=ETCD_REF | {"controller": False}), "ns/db", "u-1")
    assert why is not None


def test_leaf_secret_without_owner_from_our_certificate_is_fine() -> None:
    s = obj("Secret", annotations={ownership.CERTIFICATE_NAME_ANNOTATION: "db-server"})
    assert ownership.foreign_secret(s, "ns/db", "u-1", "db-server") is None
    assert ownership.foreign_secret(obj("Secret"), "ns/db", "u-1", "db-server") is None
    assert ownership.foreign_secret(None, "ns/db", "u-1", "db-server") is None


def test_leaf_secret_owned_by_our_certificate_is_fine() -> None:
    ref = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "name": "db-server", "uid": "c",
           "controller": True}
    assert ownership.foreign_secret(obj("Secret", owner=ref), "ns/db", "u-1", "db-server") is None


def test_leaf_secret_written_by_another_certificate_is_refused() -> None:
    s = obj("Secret", annotations={ownership.CERTIFICATE_NAME_ANNOTATION: "other-server"})
    why = ownership.foreign_secret(s, "ns/db", "u-1", "db-server")
    assert why is not None and "'other-server'" in why and "secretName" in why


def test_leaf_secret_controlled_by_something_else_is_refused() -> None:
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "d", "controller": True}
    why = ownership.foreign_secret(obj("Secret", owner=ref), "ns/db", "u-1", "db-server")
    assert why is not None and "Deployment x" in why
