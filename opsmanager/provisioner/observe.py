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

import asyncio

from opsmanager import kube
from opsmanager.api import etcd as etcd_api
from opsmanager.etcd import access, errors
from opsmanager.etcd import client as etcd_client
from opsmanager.provisioner import applying, health, members, naming

TIMEOUT = 2.0  # per member and call: a status pass stays well inside the timer interval


def _short_reason(h: etcd_client.Health, st: etcd_client.MemberStatus | errors.EtcdError | None) -> str:
    """A stable, short reason (no addresses or timings, so an unchanged failure rewrites no status)."""
    if h.healthy and isinstance(st, etcd_client.MemberStatus):
        return ""
    if not h.reachable or isinstance(st, errors.EtcdError):
        return f"unreachable ({type(st).__name__})" if isinstance(st, errors.EtcdError) else "unreachable"
    if h.no_quorum:
        return "no quorum (no leader or linearizable read timed out)"
    return h.reason.split(":", 1)[0][:80] or "unhealthy"


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

    schemes = applying.client_schemes(sts)
    identity: access.TLSIdentity | None = None
    blocked = ""
    if "https" in schemes:
        identity, why = await members.client_identity(k, ns, name, [db.spec.tls])
        if identity is None or why:
            schemes = tuple(s for s in schemes if s != "https")
            if not schemes:
                blocked = f"cannot check the members over TLS: {why}"

    views: dict[str, health.MemberView] = {
        p: health.MemberView(p, pod_ready=p in pods and members.pod_ready(pods[p]),
                             reason="pod does not exist" if p not in pods else "no pod IP yet")
        for p in expected
    }
    eps = members.endpoints(name, ns, pods, expected, schemes=schemes) if not blocked else []
    if eps:
        async with etcd_client.EtcdClient(eps, tls=identity, timeout=TIMEOUT) as c:
            statuses, healths = await asyncio.gather(
                c.statuses(timeout=TIMEOUT),
                asyncio.gather(*(c.health(ep, timeout=TIMEOUT) for ep in eps)),
            )
        for ep, h in zip(eps, healths, strict=True):
            st = statuses.get(ep.name)
            ok_status = isinstance(st, etcd_client.MemberStatus)
            views[ep.name] = health.MemberView(
                ep.name,
                pod_ready=views[ep.name].pod_ready,
                reachable=ok_status or h.reachable,
                healthy=h.healthy and ok_status,
                member_id=st.member_id if isinstance(st, etcd_client.MemberStatus) else 0,
                leader_id=st.leader_id if isinstance(st, etcd_client.MemberStatus) else 0,
                reason=_short_reason(h, st),
            )
    return health.assess(replicas, list(views.values()), blocked=blocked)
