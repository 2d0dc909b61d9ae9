"""Names, ports, labels and paths of everything the operator creates for an Etcd — spelled once.

KubeDB's names are kept where KubeDB has one (StatefulSet and pods ``<db>``, ``<db>-0``…, Services ``<db>`` and
``<db>-pods``, Secrets ``<db>-<alias>-cert``); ours are added for what KubeDB lacks (the trust bundle, the second
peer port used during a scheme change).

Ports. Clients use 2379 for both schemes (etcd serves http and https on one port through cmux). Peers cannot:
etcd refuses ``http://A:2380,https://A:2380`` ("address already in use", measured), so a member that must speak
both during a transition listens for peers on **2380 over http and 2382 over https**. The port follows the scheme
everywhere (listen, advertise, ``--initial-cluster``), so a peer URL's port always tells its scheme.
Metrics and ``/health`` are served in plain HTTP on 2381, so probes and Prometheus work under mutual TLS.
"""

from __future__ import annotations

from typing import Any, Final

from opsmanager.api import constants

CLIENT_PORT: Final = 2379
PEER_PORT_HTTP: Final = 2380
METRICS_PORT: Final = 2381
PEER_PORT_HTTPS: Final = 2382


def peer_port(scheme: str) -> int:
    """The peer port for a scheme: 2380 for http, 2382 for https."""
    if scheme == "http":
        return PEER_PORT_HTTP
    if scheme == "https":
        return PEER_PORT_HTTPS
    raise ValueError(f"peer scheme must be 'http' or 'https', got {scheme!r}")


DATA_MOUNT: Final = "/var/lib/etcd"
DATA_DIR: Final = "/var/lib/etcd/data"
TLS_ROOT: Final = "/var/run/etcd/tls"
TRUST_BUNDLE_KEY: Final = "ca.crt"

CONTAINER_NAME: Final = "etcd"
DATA_VOLUME: Final = "data"

# Template annotation bumped by the ops engine to make a pass's restart visible as a new StatefulSet revision
# (like `kubectl rollout restart`'s restartedAt). The provisioner keeps the live value when it re-applies.
ANNOTATION_RESTARTED_AT: Final = "opsmanager.dev/restartedAt"

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
MANAGED_BY: Final = "opsmanager"


def statefulset(db: str) -> str:
    return db


def pod(db: str, ordinal: int) -> str:
    return f"{db}-{ordinal}"


def pods(db: str, replicas: int) -> list[str]:
    return [pod(db, i) for i in range(replicas)]


def headless_service(db: str) -> str:
    return f"{db}-pods"


def client_service(db: str) -> str:
    return db


def pdb(db: str) -> str:
    return db


def certificate(db: str, alias: str) -> str:
    """The cert-manager Certificate object for an alias: ``<db>-<alias>``."""
    return f"{db}-{alias}"


def source_secret(db: str, alias: str) -> str:
    """The *source* Secret cert-manager's Certificate of an alias writes: ``<db>-<alias>-issued``.

    Members and clients never mount it: the operator copies it into the mounted Secret (``render.secret_name``)
    only when the gate (:mod:`.gate`) passes. One definition; ``render.source_secret_name`` is the one rule for
    "where does the source of alias X come from".
    """
    return f"{db}-{alias}-issued"


# On the trust bundle: {"<sha256 of a CA>": "<RFC3339 second it entered the bundle>"} (see .gate.loaded_cas).
ANNOTATION_CA_ENTERED: Final = "opsmanager.dev/ca-entered"
# On an Etcd: the (source Secret, reason) pairs already announced by a Warning Event (JSON list), so a held
# source is reported once, not once per reconcile.
ANNOTATION_MATERIAL_ANNOUNCED: Final = "opsmanager.dev/tls-material-announced"
# On the mounted Secrets the operator writes: the source Secret they were copied from.
ANNOTATION_RELEASED_FROM: Final = "opsmanager.dev/released-from"
# On source Secrets (through the Certificate's secretTemplate): which Etcd they feed (a marker for people).
LABEL_SOURCE_OF: Final = "opsmanager.dev/source-of"


def ca_probe(db: str, index: int) -> str:
    """The CA-probe Certificate (and its Secret) of the ``index``-th new issuer: ``<db>-ca-probe-<index>``."""
    return f"{db}-ca-probe-{index}"


def trust_bundle_secret(db: str) -> str:
    """The operator-managed Secret whose ``ca.crt`` every member trusts (old + new CA during a rotation)."""
    return f"{db}-ca-bundle"


def auth_secret(db: str) -> str:
    """The auth Secret (etcd's root password) the operator generates when nothing names one: ``<db>-auth``."""
    return f"{db}-auth"


def restore_plan(db: str) -> str:
    """The ConfigMap a Restore writes its plan into (the members' ``restore`` init container reads it)."""
    return f"{db}-restore"


# Where the ``restore`` init container finds its plan, the store's CA and the auth Secret (whose ``password`` the
# restored members must take) (opsmanager.backup.restore's defaults).
RESTORE_PLAN_MOUNT: Final = "/etc/opsmanager/restore"
RESTORE_PLAN_FILE: Final = "plan.json"
RESTORE_CA_MOUNT: Final = "/etc/opsmanager/restore-ca"
RESTORE_AUTH_MOUNT: Final = "/etc/opsmanager/restore-auth"
RESTORE_CONTAINER: Final = "restore"
ETCDSTOP_CONTAINER: Final = "etcdstop"  # the init container that copies etcdstop (opsmanager.cluster.etcdstop)
ETCDSTOP_VOLUME: Final = "etcdstop"
ETCDSTOP_MOUNT: Final = "/opt/opsmanager"
ETCDSTOP_BINARY: Final = ETCDSTOP_MOUNT + "/etcdstop"


def tls_mount(alias: str) -> str:
    return f"{TLS_ROOT}/{alias}"


TRUST_MOUNT: Final = f"{TLS_ROOT}/ca"


def pod_fqdn(db: str, namespace: str, pod_name: str) -> str:
    """The stable DNS name of a member pod (headless Service subdomain)."""
    return f"{pod_name}.{headless_service(db)}.{namespace}.svc"


def selector_labels(db: str) -> dict[str, str]:
    return {LABEL_NAME: "etcd", LABEL_INSTANCE: db}


def labels(db: str) -> dict[str, str]:
    return {**selector_labels(db), LABEL_MANAGED_BY: MANAGED_BY}


def label_selector(db: str) -> str:
    """The label selector of every object the operator made for ``db``, member pods included (their template
    carries :func:`labels`). It includes ``managed-by``, so reads are answered by the operator's caches, which hold
    only what it manages (:mod:`opsmanager.kube.cache`)."""
    return ",".join(f"{key}={value}" for key, value in labels(db).items())


def owner_of(obj: dict[str, Any]) -> tuple[str, str] | None:
    """``(namespace, Etcd name)`` an object belongs to: the Etcd itself, an EtcdOpsRequest's ``databaseRef``, or an
    object the operator made for it (labelled ``managed-by`` and ``instance``). None for anything else. What wakes
    the loops waiting on an Etcd (:class:`opsmanager.kube.cache.Wakeups`)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    kind = obj.get("kind")
    if kind == constants.ETCD_KIND:
        return namespace, str(meta.get("name") or "")
    if kind == constants.OPS_KIND:
        ref = ((obj.get("spec") or {}).get("databaseRef") or {}).get("name")
        return (namespace, ref) if isinstance(ref, str) and ref else None
    labels = meta.get("labels") or {}
    instance = labels.get(LABEL_INSTANCE)
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and isinstance(instance, str) and instance:
        return namespace, instance
    return None
