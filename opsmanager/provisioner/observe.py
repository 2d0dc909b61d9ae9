"""Ask the members how they are — the I/O half of the status (the verdict is :mod:`.health`, pure).

How the operator reaches a member (pod IP, server name, its own client certificate, which CAs it trusts) is the
one policy of :mod:`.members`, shared with the ops engine. Here: the schemes come from the live StatefulSet's
``--listen-client-urls`` (during a TLS transition members may serve both), https first, and https is checked only
with the operator's full identity, so status also proves that mutual TLS works for a real client.

A member is healthy by etcd's own rule (Status answers, a leader is known, no alarm, a linearizable read goes
through), reproduced over gRPC by ``EtcdClient.health`` — not the plain-HTTP metrics ``/health``, which would
prove nothing about TLS.
"""

from __future__ import annotations

import logging

from opsmanager import kube
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import credentials, health, members, naming, statefulset
from opsmanager.etcd import access, pool
from opsmanager.etcd import errors as etcd_errors
from opsmanager.provisioner import auth
from opsmanager.tls import identity as tls_identity

log = logging.getLogger(__name__)

TIMEOUT = 2.0  # per member and call: a status pass stays well inside the timer interval


async def observe(k: kube.Kube, db: etcd_api.Etcd) -> health.Verdict:
    """Look at every expected member and judge the cluster. Never raises for an unhealthy cluster."""
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    replicas = db.spec.replicas
    expected = naming.pods(name, replicas)
    if db.spec.halted:
        return health.assess(replicas, [], blocked="halted")
    sts = await k.get("apps/v1", "StatefulSet", ns, naming.statefulset(name))
    if sts is None:
        return health.assess(replicas, [], blocked=f"StatefulSet {ns}/{name} does not exist (yet)")
    pods = await members.pods(k, ns, name)
    nodes_down = await members.down_nodes(k, pods)

    schemes = statefulset.client_schemes(sts)
    identity: access.TLSIdentity | None = None
    blocked = ""
    if "https" in schemes:
        identity, why = await tls_identity.client_identity(k, ns, name, [db.spec.tls])
        if identity is None or why:
            schemes = tuple(s for s in schemes if s != "https")
            if not schemes:
                blocked = f"cannot check the members over TLS: {why}"

    eps = members.endpoints(name, ns, pods, expected, schemes=schemes) if not blocked else []
    if not eps:
        return health.assess(replicas, await members.observe(None, pods, expected, timeout=TIMEOUT,
                                                             nodes_down=nodes_down), blocked=blocked)
    c = await pool.shared.lease(ns, name, eps, identity, timeout=TIMEOUT, user="status")  # channels stay open
    creds = await credentials.for_etcd(k, db)
    if creds != c.credentials:
        c.set_credentials(creds)
    views = await members.observe(c, pods, expected, timeout=TIMEOUT, nodes_down=nodes_down)
    verdict = health.assess(replicas, views, blocked=blocked)
    if verdict.all_healthy_one_leader and db.spec.auth_secret is not None and not (db.status and db.status.auth_enabled):
        try:
            did = await auth.turn_on(k, db, c)
        except etcd_errors.EtcdError as err:  # the next status pass tries again
            log.info("Etcd %s/%s: turning etcd authentication on: %s", ns, name, err)
        else:
            if did:
                await k.event(db.to_dict(), reason="AuthenticationEnabled", message=did)
    return verdict
