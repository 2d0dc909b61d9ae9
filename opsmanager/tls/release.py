"""Release: copy a source Secret into the Secret members or clients mount — only through the gate.

The one writer of the mounted Secrets (``render.secret_name``) and of the trust bundle's record of when each CA
entered it. Both the provisioner (cert-manager's routine renewals, the migration of legacy clusters) and the ops
engine's certificate steps call :func:`release`, each with the CAs its situation allows:

- the provisioner: the CAs every member has loaded (:func:`loaded`, the rule in :func:`.gate.loaded_cas`);
- add TLS: ``None`` (no member serves TLS yet; the bundle and the leaves are written before the pass that turns
  TLS on);
- rotate, certificate update, issuer change after the widen pass: the current trust bundle (every member has
  restarted onto it).

A mounted Secret is written only when the gate passes, and only when it would change (a no-op otherwise). It is
owned by the Etcd (controller ownerReference), labelled as the other objects, carries the source's ``tls.crt``,
``tls.key``, ``ca.crt`` and never cert-manager's annotations. A legacy mounted Secret (written by our own
Certificate, before this layout) is taken over: its cert-manager annotations are stripped. A mounted Secret that
someone else controls is never written (fail closed, naming it). A user-provided Secret
(``spec.tls.externalSecrets``) is only ever read: :func:`user_secrets` guards every write and delete here.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from opsmanager import kube, pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import members, naming, render
from opsmanager.tls import gate, material, ownership

Obj = dict[str, Any]
CERT_MANAGER_PREFIXES = ("cert-manager.io/", "controller.cert-manager.io/")


@dataclasses.dataclass(frozen=True)
class Released:
    """What :func:`release` did for one alias: the gate's verdict, whether the mounted Secret was written, and
    ``blocked`` (a foreign mounted Secret in the way) when nothing could be written."""

    alias: str
    verdict: gate.Verdict
    changed: bool = False
    blocked: str | None = None


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _ns(db: etcd_api.Etcd) -> str:
    return db.metadata.namespace or "default"


def _where(db: etcd_api.Etcd) -> str:
    return f"{_ns(db)}/{db.metadata.name}"


def _strip_cert_manager(meta: Mapping[str, Any], key: str) -> dict[str, str]:
    return {k: v for k, v in (meta.get(key) or {}).items() if not k.startswith(CERT_MANAGER_PREFIXES)}


def foreign_mounted(secret: Mapping[str, Any] | None, db: etcd_api.Etcd, alias: str) -> str | None:
    """Why the operator may not write the mounted Secret of ``alias`` (None: absent, ours, or a legacy Secret
    our own Certificate wrote)."""
    if secret is None or ownership.is_controlled_by(secret, db.metadata.uid):
        return None
    return ownership.foreign_secret(secret, _where(db), db.metadata.uid,
                                    naming.certificate(db.metadata.name or "", alias))


def _unchanged(live: Mapping[str, Any], want: Mapping[str, Any], uid: str | None) -> bool:
    meta = live.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (ownership.is_controlled_by(live, uid)
            and (live.get("data") or {}) == want["data"]
            and not any(k.startswith(CERT_MANAGER_PREFIXES) for k in annotations)
            and not any(k.startswith(CERT_MANAGER_PREFIXES) for k in (meta.get("labels") or {}))
            and annotations.get(naming.ANNOTATION_RELEASED_FROM) == want["metadata"]["annotations"][
                naming.ANNOTATION_RELEASED_FROM])


async def release(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig, alias: str, *,
                  allowed: bytes | None, now: datetime.datetime | None = None) -> Released:
    """Gate the source of ``alias`` (``render.source_secret_name``) against ``allowed`` (the CAs every member
    has loaded; None: no member serves TLS yet) and, when it passes, write it into the mounted Secret."""
    ns = _ns(db)
    source_name = render.source_secret_name(db, tls, alias)
    source = await k.get("v1", "Secret", ns, source_name)
    verdict = gate.check(source, f"{ns}/{source_name}", dns_names=render.member_dns_names(db, alias),
                         loaded=allowed, now=now or _now())
    if not verdict.passed:
        return Released(alias, verdict)
    mounted_name = render.secret_name(db, tls, alias)
    if mounted_name in user_secrets(db, tls):
        return Released(alias, verdict, blocked=f"Secret {ns}/{mounted_name} is a user-provided Secret "
                        "(spec.tls.externalSecrets); the operator never writes it. Name the user's Secrets "
                        "differently from the mounted ones")
    live = await k.get("v1", "Secret", ns, mounted_name)
    if why := foreign_mounted(live, db, alias):
        return Released(alias, verdict, blocked=why)
    want = render.render_mounted_secret(db, tls, alias, dict(verdict.data), source_name)
    if live is None:
        try:
            await k.create(want)
        except kube.Conflict:
            return Released(alias, verdict, blocked=f"Secret {ns}/{mounted_name} appeared meanwhile; looking again")
        return Released(alias, verdict, changed=True)
    if _unchanged(live, want, db.metadata.uid):
        return Released(alias, verdict)
    meta = live["metadata"]
    body = {
        "apiVersion": "v1", "kind": "Secret", "type": live.get("type") or want["type"],
        "metadata": {
            "name": mounted_name, "namespace": ns, "resourceVersion": meta.get("resourceVersion"),
            "labels": {**_strip_cert_manager(meta, "labels"), **want["metadata"]["labels"]},
            "annotations": {**_strip_cert_manager(meta, "annotations"), **want["metadata"]["annotations"]},
            "ownerReferences": want["metadata"]["ownerReferences"],
        },
        "data": want["data"],
    }
    await k.replace(body)
    return Released(alias, verdict, changed=True)


# --- the trust bundle and what every member has loaded ----------------------------------------------------------


async def read_bundle(k: kube.Kube, db: etcd_api.Etcd) -> tuple[Obj | None, bytes]:
    secret = await k.get("v1", "Secret", _ns(db), naming.trust_bundle_secret(db.metadata.name or ""))
    return secret, material.secret_bytes(secret, naming.TRUST_BUNDLE_KEY) or b""


async def write_bundle(k: kube.Kube, db: etcd_api.Etcd, pems: bytes, *, initial: bool = False,
                       now: datetime.datetime | None = None) -> bool:
    """Write the trust bundle and the record of when each CA entered it; True when it changed.
    ``initial``: no member exists yet (the provisioner creating the cluster)."""
    if not pki.split_pem(pems):
        raise ValueError("refusing to write an empty trust bundle: it would make every member reject every peer")
    live, current = await read_bundle(k, db)
    annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
    previous = gate.decode_record(annotations.get(naming.ANNOTATION_CA_ENTERED)) if live is not None else {}
    record = gate.record_after_write(previous, current, pems, now or _now(), initial=initial)
    encoded = gate.encode_record(record)
    if live is not None and current == pems and annotations.get(naming.ANNOTATION_CA_ENTERED) == encoded:
        return False
    await k.apply(render.render_trust_bundle(db, pems, encoded))
    return True


async def loaded(k: kube.Kube, db: etcd_api.Etcd) -> bytes:
    """The CAs of the trust bundle every running member has loaded (:func:`.gate.loaded_cas`)."""
    live, bundle = await read_bundle(k, db)
    annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
    record = gate.decode_record(annotations.get(naming.ANNOTATION_CA_ENTERED))
    pods = await members.pods(k, _ns(db), db.metadata.name or "")
    started = {name: gate.container_started(pod, naming.CONTAINER_NAME) for name, pod in pods.items()}
    return gate.loaded_cas(bundle, record, started)


def user_secrets(db: etcd_api.Etcd, tls: etcd_api.TLSConfig | None) -> frozenset[str]:
    """The user-provided Secrets of ``tls`` and of the Etcd's ``spec.tls`` (``externalSecrets``): never written,
    never deleted, never labelled by the operator — whatever else a caller believes about them."""
    names: set[str] = set()
    for config in (tls, db.spec.tls):
        if config is not None and config.external_secrets is not None:
            names |= {config.external_secrets.secret(a) for a in constants.CERT_ALIASES}
    return frozenset(names)


async def delete_released(k: kube.Kube, db: etcd_api.Etcd, tls: etcd_api.TLSConfig | None, alias: str) -> list[str]:
    """Delete the mounted Secret of ``alias`` (when the operator wrote it, or a legacy one of our Certificate)
    and its source (when our Certificate wrote it). Never a foreign Secret. Returns what was deleted."""
    ns, deleted = _ns(db), list[str]()
    mounted_name = render.secret_name(db, tls, alias)
    keep = user_secrets(db, tls)
    if mounted_name in keep:
        return deleted
    live = await k.get("v1", "Secret", ns, mounted_name)
    certificate = naming.certificate(db.metadata.name or "", alias)
    legacy = (((live or {}).get("metadata") or {}).get("annotations") or {}).get(
        ownership.CERTIFICATE_NAME_ANNOTATION) == certificate
    if live is not None and (ownership.is_controlled_by(live, db.metadata.uid) or legacy) and foreign_mounted(
            live, db, alias) is None:
        if await k.delete("v1", "Secret", ns, mounted_name, uid=live["metadata"].get("uid")):
            deleted.append(f"Secret {mounted_name}")
    source_name = render.source_secret_name(db, tls, alias)
    if source_name in keep:  # the user's Secret: not even WipeOut deletes it
        return deleted
    source = await k.get("v1", "Secret", ns, source_name)
    if source is not None and (source["metadata"].get("annotations") or {}).get(
            ownership.CERTIFICATE_NAME_ANNOTATION) == certificate and ownership.foreign_secret(
            source, _where(db), db.metadata.uid, certificate) is None:
        if await k.delete("v1", "Secret", ns, source_name, uid=source["metadata"].get("uid")):
            deleted.append(f"Secret {source_name}")
    return deleted
