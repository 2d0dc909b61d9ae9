"""Ask the members how they are — the I/O half of the status (the verdict is :mod:`.health`, pure).

How the operator reaches a member, and why:

- it dials the **pod IP** from ``status.podIP`` (the operator may run where cluster DNS does not resolve pod
  names, and a pod IP is what exists the moment a pod runs), on the client port 2379;
- with TLS it **verifies the server certificate against the trust bundle** ``<db>-ca-bundle`` and checks the name
  the pod is known by, ``<pod>.<db>-pods.<ns>.svc`` (``Endpoint.server_name``, i.e. gRPC's target name override),
  exactly as a client going through the headless Service would;
- it presents its **own client certificate**, the ``client`` alias Secret (``<db>-client-cert``, CN ``root``), so
  status also proves that mutual TLS works for a real client;
- the schemes come from the live StatefulSet's ``--listen-client-urls`` (during a TLS transition members may serve
  both), https first.

A member is healthy by etcd's own rule (Status answers, a leader is known, no alarm, a linearizable read goes
through), reproduced over gRPC by ``EtcdClient.health`` — not the plain-HTTP metrics ``/health``, which would
prove nothing about TLS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.etcd import access, errors
from opsmanager.etcd import client as etcd_client
from opsmanager.provisioner import applying, health, material, naming, render

TIMEOUT = 2.0  # per member and call: a status pass stays well inside the timer interval


def pod_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_ip(pod: Mapping[str, Any]) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    return str(ip) if ip else None


def _short_reason(h: etcd_client.Health, st: etcd_client.MemberStatus | errors.EtcdError | None) -> str:
    """A stable, short reason (no addresses or timings, so an unchanged failure rewrites no status)."""
    if h.healthy and isinstance(st, etcd_client.MemberStatus):
        return ""
    if not h.reachable or isinstance(st, errors.EtcdError):
        return f"unreachable ({type(st).__name__})" if isinstance(st, errors.EtcdError) else "unreachable"
    if h.no_quorum:
        return "no quorum (no leader or linearizable read timed out)"
    return h.reason.split(":", 1)[0][:80] or "unhealthy"


async def client_identity(k: kube.Kube, db: etcd_api.Etcd) -> tuple[access.TLSIdentity | None, str]:
    """The operator's TLS identity for this cluster (trust bundle + ``client`` alias certificate), or None and why.

    Without ``spec.tls`` (e.g. while an ops request is adding TLS) the default Secret name is tried."""
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    client_secret = render.secret_name(db, db.spec.tls, constants.ALIAS_CLIENT)
    secret = await k.get("v1", "Secret", ns, client_secret)
    verdict = material.check_secret(secret, f"{ns}/{client_secret}")
    if not verdict.complete:
        return None, verdict.problem
    bundle_name = naming.trust_bundle_secret(name)
    bundle = await k.get("v1", "Secret", ns, bundle_name)
    if bundle is None or not (bundle.get("data") or {}).get(naming.TRUST_BUNDLE_KEY):
        return None, f"trust bundle Secret {ns}/{bundle_name} does not exist yet"
    assert secret is not None
    try:
        return access.TLSIdentity.from_secret_data(secret["data"], ca=bundle["data"], name="operator"), ""
    except ValueError as exc:
        return None, str(exc)


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
    selector = ",".join(f"{key}={value}" for key, value in naming.selector_labels(name).items())
    pods = {p["metadata"]["name"]: p for p in await k.list("v1", "Pod", ns, label_selector=selector)}

    schemes = applying.client_schemes(sts)
    identity: access.TLSIdentity | None = None
    blocked = ""
    if "https" in schemes:
        identity, why = await client_identity(k, db)
        if identity is None:
            schemes = tuple(s for s in schemes if s != "https")
            if not schemes:
                blocked = f"cannot check the members over TLS: {why}"

    views: dict[str, health.MemberView] = {
        p: health.MemberView(p, pod_ready=p in pods and pod_ready(pods[p]),
                             reason="pod does not exist" if p not in pods else "no pod IP yet")
        for p in expected
    }
    eps = [
        access.Endpoint(name=p, host=ip, client_port=naming.CLIENT_PORT, metrics_port=None, schemes=schemes,
                           server_name=naming.pod_fqdn(name, ns, p))
        for p in expected if p in pods and (ip := pod_ip(pods[p])) is not None
    ] if not blocked else []
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
