"""Who controls an object — so the provisioner never adopts what another controller (or a person) made.

Names like ``<db>-server-cert`` or ``<db>-pods`` are predictable, so they can already be taken: by a Certificate of
another Etcd with a custom ``secretName``, by a Service someone created by hand, by a Secret another Certificate
writes. Adopting such an object would hand the cluster's identity to whoever controls it, and two Certificates
writing one Secret fight forever. The rule is **fail closed**: the provisioner creates an object that is missing,
updates one it controls (an ownerReference with ``controller: true`` and the Etcd's uid), and refuses anything
else with a message that names the object, its controller and the fix.

Leaf Secrets are a special case: cert-manager writes them and, by default, sets no ownerReference on them (with
``--enable-certificate-owner-ref`` it points at the Certificate). So a leaf Secret is acceptable when it has no
controller, or its controller is our Etcd or the Certificate of that alias, **and** cert-manager's
``cert-manager.io/certificate-name`` annotation, when present, names that Certificate.

Pure functions; objects are dicts as the API returns them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CERTIFICATE_NAME_ANNOTATION = "cert-manager.io/certificate-name"


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference marked ``controller: true``, or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def is_controlled_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    """True when the object's controller ownerReference carries ``uid``."""
    ref = controller_of(obj)
    return ref is not None and bool(uid) and ref.get("uid") == uid


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', 'object')} {meta.get('namespace', '')}/{meta.get('name', '')}".replace(" /", " ")


def _describe_ref(ref: Mapping[str, Any] | None) -> str:
    if ref is None:
        return "no controller (created by hand or by another tool)"
    return f"{ref.get('kind', '?')} {ref.get('name', '?')} (uid {ref.get('uid', '?')})"


def foreign_owned(obj: Mapping[str, Any] | None, etcd: str, uid: str | None) -> str | None:
    """Why ``obj`` (one of the objects the provisioner creates: Certificate, trust bundle, Service, PDB,
    StatefulSet) must not be touched, or None when it is absent or ours. ``etcd`` is ``namespace/name``."""
    if obj is None or is_controlled_by(obj, uid):
        return None
    return (
        f"{_describe(obj)} already exists and is controlled by {_describe_ref(controller_of(obj))}, not by "
        f"Etcd {etcd}; the operator never adopts an object it did not create. Delete or rename that object, "
        f"or give the Etcd another name"
    )


def foreign_secret(secret: Mapping[str, Any] | None, etcd: str, uid: str | None, certificate: str) -> str | None:
    """Why the leaf Secret of the Certificate ``certificate`` must not be used, or None when it is acceptable."""
    if secret is None:
        return None
    ref = controller_of(secret)
    if ref is not None and ref.get("uid") != uid and not (
        ref.get("kind") == "Certificate" and ref.get("name") == certificate
    ):
        return (
            f"{_describe(secret)} is controlled by {_describe_ref(ref)}, not by Etcd {etcd} or its Certificate "
            f"{certificate}; the operator never adopts it. Delete that Secret or set another "
            f"spec.tls.certificates[].secretName"
        )
    written_by = ((secret.get("metadata") or {}).get("annotations") or {}).get(CERTIFICATE_NAME_ANNOTATION)
    if written_by is not None and written_by != certificate:
        return (
            f"{_describe(secret)} is written by another Certificate, {written_by!r} (annotation "
            f"{CERTIFICATE_NAME_ANNOTATION}); two Certificates writing one Secret overwrite each other. "
            f"Set another spec.tls.certificates[].secretName, or delete Certificate {written_by!r}"
        )
    return None
