"""The pure renderer: an ``Etcd`` (plus, during a TLS transition, a :class:`Wiring`) → Kubernetes manifests.

The provisioner creates the cluster with it and the ops engine re-renders the StatefulSet with exactly the same
code, so a finished operation leaves the StatefulSet the provisioner would have written for the new ``spec.tls``.
No I/O here: every input is an argument, every output a plain dict.

Decisions, each from a known failure (see ``docs/concepts.md``):

- ``podManagementPolicy: Parallel`` — OrderedReady deadlocks a half-rolled TLS cluster: pod-0 cannot become Ready
  without quorum, so pods 1+ are never recreated (KubeDB's live tests).
- ``updateStrategy: OnDelete`` — only the ops engine restarts members, one at a time, leader last.
- Flags come from ``spec.tls`` alone (or from the engine's :class:`Wiring` during a transition); the advertised
  and initial-cluster URLs use the pods' stable DNS names.
- Plain-HTTP metrics and ``/health`` on 2381 for probes and Prometheus, so probes work under mutual TLS.
- ``--trusted-ca-file`` and ``--peer-trusted-ca-file`` point at the operator's **trust bundle** Secret
  (``<db>-ca-bundle``), never at a leaf Secret's ``ca.crt``: etcd reads CA files only at start, and a CA change
  needs old+new trusted at once, which a leaf's ``ca.crt`` can never hold.
- Peer certificates carry serverAuth + clientAuth and both ``*.<db>-pods.<ns>.svc`` and ``…svc.cluster.local``
  SANs: etcd checks a dialling peer's certificate against the reverse lookup of its address.
- Transition states (:class:`Wiring`): client http+https on one port; peer http on 2380 beside https on 2382;
  the scheme that ``--initial-cluster`` advertises chosen separately.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import os
from typing import Any, Final

import opsmanager
from opsmanager.api import backup as backup_api
from opsmanager.api import catalog, common, constants, versions
from opsmanager.api import etcd as etcd_api
from opsmanager.api import tuning as tuning_api
from opsmanager.cluster import naming

Manifest = dict[str, Any]
SCHEMES = ("http", "https")


@dataclasses.dataclass(frozen=True)
class Wiring:
    """How the members listen and advertise at one point of a TLS transition.

    ``tls`` names the certificates mounted (None: no TLS files at all); ``client_schemes`` and ``peer_schemes``
    are the listeners; ``advertised_peer_scheme`` is the scheme written into ``--initial-cluster`` and
    ``--initial-advertise-peer-urls`` (what a replacement member would register). The steady state for a
    ``spec.tls`` is :meth:`steady`; the engine builds the others with :meth:`dual`.
    """

    tls: etcd_api.TLSConfig | None
    client_schemes: tuple[str, ...]
    peer_schemes: tuple[str, ...]
    advertised_peer_scheme: str
    version: str | None = None  # the etcd the members run (an UpdateVersion's target); None: the Etcd's spec.version
    tuning: tuning_api.TuningConfig | None = None  # a Reconfigure's flags; None: the Etcd's own
    resources: etcd_api.ResourceRequirements | None = None  # a VerticalScaling's; None: the Etcd's own
    # RecoverFromQuorumLoss: the members that run (ordinals start..start+count-1 of the StatefulSet, an etcd member
    # each), the members ``--initial-cluster`` lists (the cluster a member started on an empty data dir joins), and
    # ``--force-new-cluster`` (the survivor's one restart that makes it a cluster of one). None: every replica.
    ordinals: tuple[int, int] | None = None
    initial_members: tuple[str, ...] | None = None
    force_new_cluster: bool = False

    def __post_init__(self) -> None:
        for field, schemes in (("client_schemes", self.client_schemes), ("peer_schemes", self.peer_schemes)):
            if not schemes or any(s not in SCHEMES for s in schemes):
                raise ValueError(f"Wiring.{field} must be a non-empty subset of http, https; got {schemes!r}")
            if "https" in schemes and self.tls is None:
                raise ValueError(f"Wiring.{field} includes https but no TLS certificates are mounted (tls=None)")
        if self.advertised_peer_scheme not in self.peer_schemes:
            raise ValueError(
                f"Wiring.advertised_peer_scheme {self.advertised_peer_scheme!r} is not among the peer listeners "
                f"{self.peer_schemes!r}"
            )

    @classmethod
    def steady(cls, tls: etcd_api.TLSConfig | None) -> Wiring:
        """The resting state for ``spec.tls``: https only with TLS, http only without."""
        scheme = "https" if tls is not None else "http"
        return cls(tls=tls, client_schemes=(scheme,), peer_schemes=(scheme,), advertised_peer_scheme=scheme)

    @classmethod
    def dual(cls, tls: etcd_api.TLSConfig, advertised_peer_scheme: str) -> Wiring:
        """Both schemes on client (one port) and peer (2380 http, 2382 https), TLS files loaded."""
        return cls(tls=tls, client_schemes=SCHEMES, peer_schemes=SCHEMES,
                   advertised_peer_scheme=advertised_peer_scheme)

    @property
    def client_scheme_preferred(self) -> str:
        return "https" if "https" in self.client_schemes else "http"


def _meta(db: etcd_api.Etcd, name: str, *, component: str | None = None) -> dict[str, Any]:
    labels = naming.labels(_name(db))
    if component:
        labels[naming.LABEL_COMPONENT] = component
    meta: dict[str, Any] = {"name": name, "namespace": _namespace(db), "labels": labels}
    if db.metadata.uid:
        meta["ownerReferences"] = [owner_reference(db)]
    return meta


def owner_reference(db: etcd_api.Etcd) -> dict[str, Any]:
    """The controller ownerReference every object of the cluster carries (garbage-collected with the Etcd)."""
    return {
        "apiVersion": constants.ETCD_API_VERSION,
        "kind": constants.ETCD_KIND,
        "name": _name(db),
        "uid": db.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _name(db: etcd_api.Etcd) -> str:
    if not db.metadata.name:
        raise ValueError("Etcd metadata.name is required to render its objects")
    return db.metadata.name


def _namespace(db: etcd_api.Etcd) -> str:
    return db.metadata.namespace or "default"


# --- certificates ----------------------------------------------------------------------------------------------


def secret_name(db: etcd_api.Etcd | str, tls: etcd_api.TLSConfig | None, alias: str) -> str:
    """The *mounted* Secret of an alias — what members (server, peer) and clients (client) mount, written only
    by the operator (:mod:`.release`): ``certificates[alias].secretName`` or ``<db>-<alias>-cert``."""
    name = db if isinstance(db, str) else _name(db)
    spec = tls.certificate(alias) if tls is not None else None
    if spec is not None and spec.secret_name:
        return spec.secret_name
    return etcd_api.default_secret_name(name, alias)


def source_secret_name(db: etcd_api.Etcd | str, tls: etcd_api.TLSConfig | None, alias: str) -> str:
    """Where the source of an alias comes from: the user's Secret named in ``spec.tls.externalSecrets``, else the
    Secret its cert-manager Certificate writes (``naming.source_secret``: ``<db>-<alias>-issued``). The one rule."""
    if tls is not None and tls.external_secrets is not None:
        return tls.external_secrets.secret(alias)
    name = db if isinstance(db, str) else _name(db)
    return naming.source_secret(name, alias)


def member_dns_names(db: etcd_api.Etcd, alias: str) -> list[str]:
    """The names a leaf of ``alias`` must cover: ``<pod>.<headless-svc>.<ns>.svc`` of every member for server and
    peer (clients dial them, peers check them); nothing for the client identity."""
    if alias == constants.ALIAS_CLIENT:
        return []
    name = _name(db)
    return [naming.pod_fqdn(name, _namespace(db), p) for p in naming.pods(name, db.spec.replicas)]


def default_dns_names(db: str, namespace: str) -> list[str]:
    """SANs of server and peer certificates (KubeDB's list plus the cluster.local forms of the pod wildcard)."""
    pods = naming.headless_service(db)
    return [
        db, f"{db}.{namespace}", f"{db}.{namespace}.svc", f"{db}.{namespace}.svc.cluster.local",
        f"{pods}.{namespace}.svc", f"*.{pods}.{namespace}.svc", f"*.{pods}.{namespace}.svc.cluster.local",
        "localhost",
    ]


def issuer_of(tls: etcd_api.TLSConfig, alias: str) -> common.IssuerRef | None:
    """The issuer of an alias: its certificate's ``issuerRef``, else ``spec.tls.issuerRef``."""
    spec = tls.certificate(alias)
    return spec.issuer_ref if spec is not None and spec.issuer_ref is not None else tls.issuer_ref


def _issuer(tls: etcd_api.TLSConfig, alias: str) -> common.IssuerRef:
    issuer = issuer_of(tls, alias)
    if issuer is None:
        raise ValueError("spec.tls.issuerRef is missing: set it to the cert-manager Issuer or ClusterIssuer to use")
    return issuer


def render_certificate(db: etcd_api.Etcd, tls: etcd_api.TLSConfig, alias: str) -> Manifest:
    """The cert-manager Certificate of one alias, with the operator's defaults merged with the user's fields."""
    name, namespace = _name(db), _namespace(db)
    spec = tls.certificate(alias)
    issuer = _issuer(tls, alias)
    body: dict[str, Any] = {
        "secretName": source_secret_name(db, tls, alias),
        # Labels the source as the operator's (its Secret cache holds only those) and names the Etcd it feeds.
        "secretTemplate": {"labels": {**naming.labels(name), naming.LABEL_SOURCE_OF: name}},
        "issuerRef": {"group": issuer.api_group, "kind": issuer.kind, "name": issuer.name},
        "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
    }
    if alias == constants.ALIAS_CLIENT:
        # The operator's own identity. CN=root maps to etcd's root user if RBAC is ever enabled.
        body["commonName"] = "root"
        body["usages"] = ["digital signature", "key encipherment", "client auth"]
    else:
        # Server certs need client auth too: etcd's grpc-gateway presents the server cert when dialling its own
        # client port. Peer certs are both ends of a mutual-TLS connection.
        body["commonName"] = name
        dns = default_dns_names(name, namespace) + list((spec.dns_names or []) if spec else [])
        body["dnsNames"] = list(dict.fromkeys(dns))
        body["ipAddresses"] = list(dict.fromkeys(["127.0.0.1", *((spec.ip_addresses or []) if spec else [])]))
        body["usages"] = ["digital signature", "key encipherment", "server auth", "client auth"]
    if spec is not None:
        if spec.subject is not None:
            body["subject"] = spec.subject.to_dict()
        if spec.duration:
            body["duration"] = spec.duration
        if spec.renew_before:
            body["renewBefore"] = spec.renew_before
        if spec.uris:
            body["uris"] = list(spec.uris)
        if spec.email_addresses:
            body["emailAddresses"] = list(spec.email_addresses)
        if spec.private_key is not None and spec.private_key.encoding:
            body["privateKey"]["encoding"] = spec.private_key.encoding
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": _meta(db, naming.certificate(name, alias), component=alias),
        "spec": body,
    }


def render_ca_probe(db: etcd_api.Etcd, index: int, issuer: common.IssuerRef) -> Manifest:
    """A small client Certificate issued only to learn ``issuer``'s CA (its Secret's ``ca.crt``) before any leaf
    from that issuer exists — what an issuer change widens the trust bundle with."""
    name = naming.ca_probe(_name(db), index)
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": _meta(db, name),
        "spec": {
            "secretName": name, "commonName": f"{_name(db)}-ca-probe",
            "usages": ["digital signature", "client auth"], "duration": "1h",
            "issuerRef": {"group": issuer.api_group, "kind": issuer.kind, "name": issuer.name},
            "privateKey": {"algorithm": "ECDSA", "size": 256},
        },
    }


def render_certificates(db: etcd_api.Etcd, tls: etcd_api.TLSConfig | None = None) -> list[Manifest]:
    """One Certificate per alias (server, peer, client) for ``tls`` (default: the Etcd's ``spec.tls``); none for
    user-provided Secrets (``externalSecrets``: the user, not cert-manager, writes the sources)."""
    tls = tls if tls is not None else db.spec.tls
    if tls is None or tls.external_secrets is not None:
        return []
    return [render_certificate(db, tls, alias) for alias in constants.CERT_ALIASES]


def render_trust_bundle(db: etcd_api.Etcd, ca_pems: bytes, entered: str | None = None) -> Manifest:
    """The trust-bundle Secret: every CA the members must trust right now (old + new during a CA change).
    ``entered``: the encoded record of when each CA entered it (``naming.ANNOTATION_CA_ENTERED``, see
    :func:`.gate.loaded_cas`)."""
    meta = _meta(db, naming.trust_bundle_secret(_name(db)), component="trust-bundle")
    if entered is not None:
        meta["annotations"] = {naming.ANNOTATION_CA_ENTERED: entered}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": meta,
        "data": {naming.TRUST_BUNDLE_KEY: base64.b64encode(ca_pems).decode()},
    }


def render_mounted_secret(db: etcd_api.Etcd, tls: etcd_api.TLSConfig | None, alias: str,
                          data: dict[str, bytes], source: str) -> Manifest:
    """The mounted Secret of an alias as the operator writes it: owned by the Etcd, labelled like the other
    objects, the source's three keys, the source named in ``opsmanager.dev/released-from`` — no cert-manager
    annotation (nothing but the operator writes it)."""
    meta = _meta(db, secret_name(db, tls, alias), component=alias)
    meta["annotations"] = {naming.ANNOTATION_RELEASED_FROM: source}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": meta,
        "data": {k: base64.b64encode(v).decode() for k, v in sorted(data.items())},
    }


# --- services and PDB -----------------------------------------------------------------------------------------


def _service(db: etcd_api.Etcd, name: str, spec: dict[str, Any]) -> Manifest:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(db, name), "spec": spec}


def render_services(db: etcd_api.Etcd) -> list[Manifest]:
    """The headless Service the members find each other by, and the client Service."""
    name = _name(db)
    selector = naming.selector_labels(name)
    ports = {"client": naming.CLIENT_PORT, "peer": naming.PEER_PORT_HTTP, "metrics": naming.METRICS_PORT,
             "peer-tls": naming.PEER_PORT_HTTPS}
    headless = _service(db, naming.headless_service(name), {
        "clusterIP": "None",
        # Members must find each other before they are Ready (a member is Ready only once it has quorum).
        "publishNotReadyAddresses": True,
        "selector": selector,
        "ports": [{"name": n, "port": p, "targetPort": p} for n, p in ports.items()],
    })
    client = _service(db, naming.client_service(name), {
        "type": "ClusterIP",
        "selector": selector,
        "ports": [{"name": "client", "port": naming.CLIENT_PORT, "targetPort": naming.CLIENT_PORT}],
    })
    return [headless, client]


def render_pdb(db: etcd_api.Etcd) -> Manifest:
    name = _name(db)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(db, naming.pdb(name)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": naming.selector_labels(name)}},
    }


OPERATOR_IMAGE_ENV: Final = "OPSMANAGER_IMAGE"

# --- the StatefulSet -------------------------------------------------------------------------------------------


def initial_cluster_state(db: etcd_api.Etcd) -> str:
    """``new`` until membership has been changed: then a member started on an empty data directory must join the
    running cluster (which has added it as a learner) instead of bootstrapping a second one. etcd reads the
    ``--initial-cluster*`` flags only on an empty data directory, so the members that have data ignore the change."""
    return (db.status.initial_cluster_state if db.status is not None else None) or "new"


@dataclasses.dataclass(frozen=True)
class JoinExisting:
    """``status.initialClusterState: existing``, from the first membership change on (:func:`initial_cluster_state`
    reads it): a change for :func:`opsmanager.cluster.etcdstatus.write`."""

    def apply(self, status: dict[str, Any]) -> dict[str, Any]:
        return {**status, "initialClusterState": "existing"}


def etcd_args(db: etcd_api.Etcd, wiring: Wiring) -> list[str]:
    """The etcd command line of a member (``$(POD_NAME)`` is expanded by the kubelet), with only the flags its
    etcd version accepts (:func:`opsmanager.api.versions.accepted_args`: etcd exits on a flag it does not know)."""
    name, namespace = _name(db), _namespace(db)
    me = f"$(POD_NAME).{naming.headless_service(name)}.{namespace}.svc"
    peer_scheme = wiring.advertised_peer_scheme
    initial = initial_cluster(db, wiring)
    args = [
        "--name=$(POD_NAME)",
        f"--data-dir={naming.DATA_DIR}",
        "--listen-client-urls=" + ",".join(f"{s}://0.0.0.0:{naming.CLIENT_PORT}" for s in wiring.client_schemes),
        "--advertise-client-urls=" + ",".join(f"{s}://{me}:{naming.CLIENT_PORT}" for s in wiring.client_schemes),
        "--listen-peer-urls=" + ",".join(f"{s}://0.0.0.0:{naming.peer_port(s)}" for s in wiring.peer_schemes),
        f"--initial-advertise-peer-urls={peer_scheme}://{me}:{naming.peer_port(peer_scheme)}",
        f"--initial-cluster={initial}",
        f"--initial-cluster-state={initial_cluster_state(db)}",
        f"--initial-cluster-token={namespace}-{name}",
        f"--listen-metrics-urls=http://0.0.0.0:{naming.METRICS_PORT}",
    ]
    configured = db.spec.configuration.tuning if db.spec.configuration is not None else None
    args += tuning_api.flags(wiring.tuning if wiring.tuning is not None else configured)
    if wiring.force_new_cluster:
        args.append("--force-new-cluster")
    if wiring.tls is not None:
        server, peer, trust = naming.tls_mount("server"), naming.tls_mount("peer"), naming.TRUST_MOUNT
        args += [
            f"--cert-file={server}/tls.crt",
            f"--key-file={server}/tls.key",
            f"--trusted-ca-file={trust}/{naming.TRUST_BUNDLE_KEY}",
            "--client-cert-auth=true",
            f"--peer-cert-file={peer}/tls.crt",
            f"--peer-key-file={peer}/tls.key",
            f"--peer-trusted-ca-file={trust}/{naming.TRUST_BUNDLE_KEY}",
            "--peer-client-cert-auth=true",
        ]
    return versions.accepted_args(wiring.version or db.spec.version, args)


def _tls_volumes(db: etcd_api.Etcd, tls: etcd_api.TLSConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    name = _name(db)
    volumes = [
        {"name": f"{alias}-tls", "secret": {"secretName": secret_name(db, tls, alias), "defaultMode": 0o400}}
        for alias in (constants.ALIAS_SERVER, constants.ALIAS_PEER)
    ]
    volumes.append({"name": "ca-bundle", "secret": {"secretName": naming.trust_bundle_secret(name),
                                                    "defaultMode": 0o444}})
    mounts = [
        {"name": f"{alias}-tls", "mountPath": naming.tls_mount(alias), "readOnly": True}
        for alias in (constants.ALIAS_SERVER, constants.ALIAS_PEER)
    ]
    mounts.append({"name": "ca-bundle", "mountPath": naming.TRUST_MOUNT, "readOnly": True})
    return volumes, mounts


# The first supported etcd with /readyz (its checks: no CORRUPT alarm, a serializable and a linearizable read, not a
# learner); older ones have /health only.
READYZ_SINCE: Final = (3, 5, 35)


def readiness_path(version: str) -> str:
    try:
        return "/readyz" if versions.parse(version) >= READYZ_SINCE else "/health"
    except ValueError:
        return "/health"


def operator_image() -> str:
    """The operator's own image, for the members' ``etcdstop`` and ``restore`` init containers: ``$OPSMANAGER_IMAGE`` (the install
    bundle sets it to the image it runs), else ``opsmanager:<version>``."""
    return os.environ.get(OPERATOR_IMAGE_ENV) or f"opsmanager:{opsmanager.__version__}"


def _restore_container(db: etcd_api.Etcd) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``restore`` init container of an Etcd with backups (``opsmanager restore-member``): it does nothing unless
    a Restore request wrote its plan into the ``<etcd>-restore`` ConfigMap (an optional volume). The store's keys
    come from the credentials Secret (optional too: a missing Secret must not keep etcd from starting; a restore
    then fails naming it). With ``spec.authSecret``, that Secret is mounted too: a restore sets its ``password``
    as the root user's in the restored data, so a snapshot taken before a RotateAuth does not bring back the
    password it rotated away."""
    assert db.spec.backup is not None
    dest = db.spec.backup.destination
    name = _name(db)

    def key(env: str, secret_key: str) -> dict[str, Any]:
        return {"name": env, "valueFrom": {"secretKeyRef": {"name": dest.credentials_secret.name, "key": secret_key,
                                                            "optional": True}}}

    volumes: list[dict[str, Any]] = [
        {"name": "restore-plan", "configMap": {"name": naming.restore_plan(name), "optional": True}}]
    mounts: list[dict[str, Any]] = [{"name": naming.DATA_VOLUME, "mountPath": naming.DATA_MOUNT},
                                    {"name": "restore-plan", "mountPath": naming.RESTORE_PLAN_MOUNT, "readOnly": True}]
    if dest.ca is not None:
        volumes.append({"name": "restore-ca", "secret": {"secretName": dest.ca.name, "optional": True}})
        mounts.append({"name": "restore-ca", "mountPath": naming.RESTORE_CA_MOUNT, "readOnly": True})
    if db.spec.auth_secret is not None:  # the restored members take the password clients have now
        volumes.append({"name": "restore-auth", "secret": {"secretName": db.spec.auth_secret.name, "optional": True}})
        mounts.append({"name": "restore-auth", "mountPath": naming.RESTORE_AUTH_MOUNT, "readOnly": True})
    container = {
        "name": naming.RESTORE_CONTAINER,
        "image": operator_image(),
        "args": ["restore-member", f"--plan={naming.RESTORE_PLAN_MOUNT}/{naming.RESTORE_PLAN_FILE}"],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                key("AWS_ACCESS_KEY_ID", backup_api.KEY_ACCESS_KEY_ID),
                key("AWS_SECRET_ACCESS_KEY", backup_api.KEY_SECRET_ACCESS_KEY)],
        "volumeMounts": mounts,
        # The data dir is the etcd container's (root in etcd's images): the restore renames it, so it runs as the
        # same user, not as the operator image's own.
        "securityContext": {"runAsUser": 0},
    }
    return container, volumes


def _etcdstop_container(resources: dict[str, Any] | None) -> dict[str, Any]:
    """The init container that copies ``etcdstop`` from the operator's image into the pod (``opsmanager
    install-etcdstop``). It takes etcd's ``resources``: a pod is Guaranteed only when every container is, and an
    init container's requests count as the largest of them, not on top."""
    container: dict[str, Any] = {
        "name": naming.ETCDSTOP_CONTAINER,
        "image": operator_image(),
        "args": ["install-etcdstop", f"--to={naming.ETCDSTOP_MOUNT}"],
        "volumeMounts": [{"name": naming.ETCDSTOP_VOLUME, "mountPath": naming.ETCDSTOP_MOUNT}],
    }
    if resources is not None:
        container["resources"] = copy.deepcopy(resources)
    return container


def initial_cluster(db: etcd_api.Etcd, wiring: Wiring) -> str:
    """``--initial-cluster``: every member's name (``wiring.initial_members``, else every replica) and the peer URL
    it advertises."""
    name, namespace = _name(db), _namespace(db)
    scheme = wiring.advertised_peer_scheme
    listed = wiring.initial_members if wiring.initial_members is not None else naming.pods(name, db.spec.replicas)
    return ",".join(f"{p}={scheme}://{naming.pod_fqdn(name, namespace, p)}:{naming.peer_port(scheme)}"
                    for p in listed)


def spread_over_nodes(name: str) -> dict[str, Any]:
    """The default affinity of the member pods: preferably one member per node. Preferred, not required, so a
    cluster with fewer nodes than members still runs them all; losing a node then costs one member, not a quorum."""
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": naming.selector_labels(name)}}}]}}


def _etcd_container(db: etcd_api.Etcd, wiring: Wiring, version: str,
                    mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The etcd container: its flags for ``wiring``, its ports, its readiness probe and its resources."""
    container: dict[str, Any] = {
        "name": naming.CONTAINER_NAME,
        "image": catalog.IMAGE.format(version=version),
        # etcd under etcdstop (copied in by the first init container): a stopping follower does not wait out its
        # clients' watch streams (opsmanager.cluster.etcdstop)
        "command": [naming.ETCDSTOP_BINARY, "--", "etcd"],
        "args": etcd_args(db, wiring),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "ports": [
            {"name": "client", "containerPort": naming.CLIENT_PORT},
            {"name": "peer", "containerPort": naming.PEER_PORT_HTTP},
            {"name": "metrics", "containerPort": naming.METRICS_PORT},
            {"name": "peer-tls", "containerPort": naming.PEER_PORT_HTTPS},
        ],
        # On the plain-HTTP metrics port: works whatever the client TLS mode is. Both paths do a linearizable
        # read, so a member is Ready only while it is part of a quorum; /readyz also fails on a learner, which
        # refuses writes, so a member being added stays out of the client Service until it is promoted.
        "readinessProbe": {
            "httpGet": {"path": readiness_path(version), "port": naming.METRICS_PORT, "scheme": "HTTP"},
            "periodSeconds": 2,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "volumeMounts": [*mounts, {"name": naming.ETCDSTOP_VOLUME, "mountPath": naming.ETCDSTOP_MOUNT,
                                   "readOnly": True}],
    }
    user_spec = db.spec.pod_template.spec if db.spec.pod_template and db.spec.pod_template.spec else None
    resources = wiring.resources if wiring.resources is not None else (
        user_spec.resources if user_spec is not None else None)
    if resources is not None:
        container["resources"] = resources.to_dict()
    return container


def _pod_spec(db: etcd_api.Etcd, wiring: Wiring, version: str) -> dict[str, Any]:
    """The members' pod spec: the data and TLS volumes, the etcdstop init container, the restore init container (with
    ``spec.backup``), the etcd container, and the user's scheduling from ``spec.podTemplate``."""
    name = _name(db)
    user_spec = db.spec.pod_template.spec if db.spec.pod_template and db.spec.pod_template.spec else None
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = [{"name": naming.DATA_VOLUME, "mountPath": naming.DATA_MOUNT}]
    if db.spec.storage_type == constants.STORAGE_EPHEMERAL:
        volumes.append({"name": naming.DATA_VOLUME, "emptyDir": {}})
    if wiring.tls is not None:
        tls_volumes, tls_mounts = _tls_volumes(db, wiring.tls)
        volumes += tls_volumes
        mounts += tls_mounts
    container = _etcd_container(db, wiring, version, mounts)
    volumes.append({"name": naming.ETCDSTOP_VOLUME, "emptyDir": {}})
    init_containers: list[dict[str, Any]] = [_etcdstop_container(container.get("resources"))]
    if db.spec.backup is not None:
        restore, restore_volumes = _restore_container(db)
        init_containers.append(restore)
        volumes += restore_volumes
    pod_spec: dict[str, Any] = {
        "initContainers": init_containers,
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": (
            user_spec.termination_grace_period_seconds
            if user_spec is not None and user_spec.termination_grace_period_seconds is not None else 30
        ),
        "affinity": copy.deepcopy(user_spec.affinity) if user_spec is not None and user_spec.affinity is not None
        else spread_over_nodes(name),
    }
    if user_spec is not None and user_spec.node_selector:
        pod_spec["nodeSelector"] = dict(user_spec.node_selector)
    if user_spec is not None and user_spec.tolerations:
        pod_spec["tolerations"] = copy.deepcopy(user_spec.tolerations)
    return pod_spec


def _template_meta(db: etcd_api.Etcd, template_annotations: dict[str, str] | None) -> dict[str, Any]:
    """The pod template's labels (the user's, then ours) and annotations (the user's, then the caller's)."""
    user_meta = db.spec.pod_template.metadata if db.spec.pod_template and db.spec.pod_template.metadata else None
    pod_labels = {**(user_meta.labels or {} if user_meta else {}), **naming.labels(_name(db))}
    pod_annotations = {**(user_meta.annotations or {} if user_meta else {}), **(template_annotations or {})}
    template_meta: dict[str, Any] = {"labels": pod_labels}
    if pod_annotations:
        template_meta["annotations"] = pod_annotations
    return template_meta


def render_statefulset(
    db: etcd_api.Etcd,
    wiring: Wiring | None = None,
    *,
    template_annotations: dict[str, str] | None = None,
) -> Manifest:
    """The StatefulSet of the members. ``wiring`` defaults to the steady state of ``spec.tls``."""
    wiring = wiring if wiring is not None else Wiring.steady(db.spec.tls)
    version = wiring.version or db.spec.version
    name = _name(db)
    template = {"metadata": _template_meta(db, template_annotations), "spec": _pod_spec(db, wiring, version)}
    spec: dict[str, Any] = {
        "replicas": 0 if db.spec.halted else (wiring.ordinals[1] if wiring.ordinals else db.spec.replicas),
        "serviceName": naming.headless_service(name),
        "selector": {"matchLabels": naming.selector_labels(name)},
        "podManagementPolicy": "Parallel",
        "updateStrategy": {"type": "OnDelete"},
        "template": template,
    }
    if wiring.ordinals is not None and wiring.ordinals[0]:
        spec["ordinals"] = {"start": wiring.ordinals[0]}
    if db.spec.storage_type == constants.STORAGE_DURABLE:
        pvc_spec = db.spec.storage.to_dict() if db.spec.storage is not None else {}
        pvc_spec.setdefault("accessModes", ["ReadWriteOnce"])
        pvc_spec.setdefault("resources", {"requests": {"storage": constants.DEFAULT_STORAGE_SIZE}})
        spec["volumeClaimTemplates"] = [{"metadata": {"name": naming.DATA_VOLUME}, "spec": pvc_spec}]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(db, naming.statefulset(name)),
        "spec": spec,
    }

def render(
    db: etcd_api.Etcd,
    wiring: Wiring | None = None,
    *,
    trust_bundle: bytes | None = None,
    template_annotations: dict[str, str] | None = None,
) -> list[Manifest]:
    """Every object of the cluster, in creation order: Certificates, trust bundle (when its content is known),
    Services, PDB, StatefulSet."""
    wiring = wiring if wiring is not None else Wiring.steady(db.spec.tls)
    out: list[Manifest] = render_certificates(db, wiring.tls)
    if wiring.tls is not None and trust_bundle is not None:
        out.append(render_trust_bundle(db, trust_bundle))
    out += render_services(db)
    out.append(render_pdb(db))
    out.append(render_statefulset(db, wiring, template_annotations=template_annotations))
    return copy.deepcopy(out)
