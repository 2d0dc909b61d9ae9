"""How the operator reaches the members of an Etcd — one policy for the provisioner's status and the ops engine.

- **Which pods**: the Etcd's member pods by the selector labels (:func:`pods`); a pod *serves* when the kubelet
  says Ready, it has an address and it is not on its way out (:func:`serving`).
- **Where**: the **pod IP** from ``status.podIP`` (the operator may run where cluster DNS does not resolve pod
  names, and a pod IP is what exists the moment a pod runs), the client port 2379, and the name the pod is known by,
  ``<pod>.<db>-pods.<ns>.svc`` as the TLS server name — exactly what a client going through the headless Service
  checks (:func:`endpoints`).
- **As whom** (:func:`opsmanager.tls.identity.client_identity`): the operator presents the ``client`` alias Secret (``<db>-client-cert``,
  CN ``root``) and trusts every CA it knows for the cluster — the trust bundle ``<db>-ca-bundle`` and the
  ``ca.crt`` of the leaf Secrets of every TLS configuration given (during a transition: the one the cluster had
  and the one it is moving to), so a member is verified whichever CA its leaf chains to right now.

- **What each one says** (:func:`observe`): Status, etcd's own health and (when asked) MemberList, folded into
  the one :class:`~opsmanager.cluster.health.MemberView` per expected member that the provisioner's verdict
  and the rolling restart's decision both read.

Only the I/O of reading pods, Secrets and members is here; the verdicts (health, rollout) are pure modules.
"""

from __future__ import annotations

import asyncio
import datetime
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opsmanager import kube
from opsmanager.api import conditions
from opsmanager.cluster import health, naming
from opsmanager.etcd import access, admin, errors, probes
from opsmanager.etcd import client as etcd_client

Obj = dict[str, Any]


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The kubelet's ``Ready`` condition."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_ip(pod: Mapping[str, Any]) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    return str(ip) if ip else None


def terminating(pod: Mapping[str, Any] | None) -> bool:
    return pod is None or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


# kube-controller-manager's disruption controller keeps a ``disruptedPods`` entry this long while its pod lives on.
BUDGET_DELETION_TIMEOUT = datetime.timedelta(minutes=2)


def _entries(budget: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((budget or {}).get("status") or {}).get("disruptedPods") or {}


def _admitted_and_created(stamp: Any,
                          pod: Mapping[str, Any] | None) -> tuple[datetime.datetime, datetime.datetime] | None:
    """A ``disruptedPods`` stamp and the creation of the live pod of that name (None: no such pod, one being
    deleted, or either time missing or unreadable). Both have one-second resolution."""
    created = ((pod or {}).get("metadata") or {}).get("creationTimestamp")
    if pod is None or terminating(pod) or not created or not stamp:
        return None
    try:
        return conditions.parse_rfc3339(str(stamp)), conditions.parse_rfc3339(str(created))
    except ValueError:
        return None


def admitted_by_budget(budget: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> bool:
    """Has the PodDisruptionBudget already admitted an eviction of this very pod — the pod's name in the budget's
    ``status.disruptedPods``, stamped no earlier than the pod was created (an entry left by an earlier pod of the
    same name does not count) — while the pod is not being deleted?"""
    times = _admitted_and_created(_entries(budget).get(str((pod.get("metadata") or {}).get("name"))), pod)
    return times is not None and times[0] >= times[1]


def stale_budget_entries(budget: Mapping[str, Any] | None,
                         pods: Mapping[str, Mapping[str, Any]]) -> dict[str, datetime.datetime]:
    """The budget's ``disruptedPods`` entries older than the live pod of that name (an eviction of its predecessor,
    which kube-controller-manager missed): ``{pod: when kube-controller-manager drops the entry}``. Until then the
    budget counts a healthy member as disrupted and refuses every eviction."""
    stale: dict[str, datetime.datetime] = {}
    for name, stamp in _entries(budget).items():
        times = _admitted_and_created(stamp, pods.get(name))
        if times is not None and times[0] < times[1]:
            stale[name] = times[0] + BUDGET_DELETION_TIMEOUT
    return stale


# How far apart the budget's stamp of an admitted eviction and the operator's record of that eviction (its
# ``EvictPod--<pod>`` going True, written right after the eviction answered) may be and still be the same eviction.
SAME_EVICTION = datetime.timedelta(seconds=60)


def own_stale_entries(budget: Mapping[str, Any] | None, pods: Mapping[str, Mapping[str, Any]],
                      evicted_at: Mapping[str, datetime.datetime], recovered: Iterable[str],
                      replicas: int) -> list[str]:
    """The members whose stale ``disruptedPods`` entries are the budget's only refusal, when each is proven the
    operator's own: the entry is no later than the live pod of that name was created, the operator
    recorded evicting that member's previous pod at the entry's time (``evicted_at``, within
    :data:`SAME_EVICTION`), the member is healthy again (in ``recovered``: its checks after that restart passed,
    and its pod serves), and every one of the ``replicas`` members serves, so one more disruption is exactly what
    the budget allows. ``[]`` when any of that does not hold, or when the budget holds any other entry (someone
    else's disruption in flight): then the refusal stands."""
    entries = _entries(budget)
    # Older than the live pod, or of its very second (the StatefulSet may recreate a pod within the second it was
    # evicted): the request's record below says whose eviction it was.
    stale: dict[str, datetime.datetime] = {}
    for name, stamp in entries.items():
        times = _admitted_and_created(stamp, pods.get(name))
        if times is not None and times[0] <= times[1]:
            stale[name] = times[0]
    if not stale or set(entries) != set(stale):
        return []
    healthy = set(recovered)
    if len(pods) != replicas or not all(serving(p) for p in pods.values()):
        return []
    for name, admitted in stale.items():
        at = evicted_at.get(name)
        if name not in healthy or at is None or abs(at - admitted) > SAME_EVICTION:
            return []
    return sorted(stale)


def serving(pod: Mapping[str, Any] | None) -> bool:
    """Ready by the kubelet, with an address, and not on its way out."""
    return pod is not None and not terminating(pod) and pod_ready(pod) and pod_ip(pod) is not None


async def pods(k: kube.Kube, namespace: str, db_name: str) -> dict[str, Obj]:
    """The Etcd's member pods by name (whatever their state)."""
    return {p["metadata"]["name"]: p
            for p in await k.list("v1", "Pod", namespace, label_selector=naming.label_selector(db_name))}


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


async def down_nodes(k: kube.Kube, member_pods: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The nodes of member pods that do not serve which are not Ready themselves: node → why (its Ready
    condition's reason and message). A pod on a node whose kubelet stopped keeps running as far as the API server
    knows, and its deletion never completes: that is what a request must wait on, and say. Only the nodes of pods
    that do not serve are read (nothing while the cluster is well); a Node the operator may not read, or that does
    not exist (the pod garbage collector removes such pods), counts as Ready: the pod's own conditions still say
    the rest."""
    out: dict[str, str] = {}
    for name in sorted({node_of(p) for p in member_pods.values() if not serving(p) and node_of(p)}):
        try:
            node = await k.get("v1", "Node", None, name)
        except (kube.Forbidden, kube.NotFound):
            return {}
        if node is None:
            continue
        ready = next((c for c in (node.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"),
                     None)
        if ready is None or ready.get("status") != "True":
            why = f"{(ready or {}).get('reason') or 'no Ready condition'}: {(ready or {}).get('message') or ''}"
            out[name] = why.rstrip(": ").rstrip()
    return out


def endpoints(db_name: str, namespace: str, member_pods: Mapping[str, Mapping[str, Any]], expected: Iterable[str],
              *, schemes: Sequence[str], peer_scheme: str = "https",
              metrics: bool = False) -> list[access.Endpoint]:
    """An endpoint for each expected member whose pod has an address and is not being deleted."""
    out = []
    for name in expected:
        pod = member_pods.get(name)
        if pod is None or terminating(pod) or (ip := pod_ip(pod)) is None:
            continue
        out.append(access.Endpoint(
            name=name, host=ip, client_port=naming.CLIENT_PORT,
            metrics_port=naming.METRICS_PORT if metrics else None, peer_port=naming.peer_port(peer_scheme),
            schemes=tuple(schemes), server_name=naming.pod_fqdn(db_name, namespace, name)))
    return out


def revision(pod: Mapping[str, Any]) -> str | None:
    """The StatefulSet revision the pod was created from (``controller-revision-hash``)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get("controller-revision-hash")


def _short_reason(h: probes.Health, st: etcd_client.MemberStatus | errors.EtcdError | None) -> str:
    """A stable, short reason (no addresses or timings, so an unchanged failure rewrites no status)."""
    if h.healthy and isinstance(st, etcd_client.MemberStatus):
        return ""
    if not h.reachable or isinstance(st, errors.EtcdError):
        return f"unreachable ({type(st).__name__})" if isinstance(st, errors.EtcdError) else "unreachable"
    if h.no_quorum:
        return "no quorum (no leader or linearizable read timed out)"
    return h.reason.split(":", 1)[0][:80] or "unhealthy"


async def observe(client: admin.EtcdAdmin | None, member_pods: Mapping[str, Mapping[str, Any]],
                  expected: Sequence[str], *, timeout: float, update_revision: str | None = None,
                  learners: bool = False, nodes_down: Mapping[str, str] | None = None) -> list[health.MemberView]:
    """One :class:`health.MemberView` per expected member, in order. ``client`` (None: nothing can be asked)
    reaches the members with an address; ``update_revision`` fills ``up_to_date``; ``learners`` also asks
    MemberList (a failed list leaves ``is_learner`` to what Status says); ``nodes_down`` (:func:`down_nodes`)
    fills each member's ``node_down``. Never raises for an unhealthy member."""
    statuses: Mapping[str, etcd_client.MemberStatus | errors.EtcdError] = {}
    healths: dict[str, probes.Health] = {}
    learner_names: set[str] = set()
    if client is not None and client.endpoints:
        eps = client.endpoints
        statuses, answers = await asyncio.gather(
            client.statuses(timeout=timeout), asyncio.gather(*(client.health(ep, timeout=timeout) for ep in eps)))
        healths = {ep.name: h for ep, h in zip(eps, answers, strict=True)}
        if learners:
            try:
                learner_names = {m.name for m in await client.members(timeout=timeout) if m.is_learner}
            except errors.EtcdError:
                pass
    views = []
    for name in expected:
        pod = member_pods.get(name)
        up_to_date = update_revision is None or (pod is not None and revision(pod) == update_revision)
        if pod is None or terminating(pod):
            views.append(health.MemberView(name, exists=False, up_to_date=up_to_date or pod is None,
                                           reason="pod does not exist"))
            continue
        h, st = healths.get(name), statuses.get(name)
        node = node_of(pod)
        node_down = (nodes_down or {}).get(node, "") if not serving(pod) else ""
        if h is None:
            views.append(health.MemberView(name, pod_ready=serving(pod), up_to_date=up_to_date,
                                           reason="no pod IP yet" if pod_ip(pod) is None else "not asked",
                                           node=node, node_down=node_down))
            continue
        ok = isinstance(st, etcd_client.MemberStatus)
        views.append(health.MemberView(
            name, pod_ready=serving(pod), reachable=ok or h.reachable, healthy=h.healthy and ok,
            member_id=st.member_id if isinstance(st, etcd_client.MemberStatus) else 0,
            leader_id=st.leader_id if isinstance(st, etcd_client.MemberStatus) else 0,
            reason=_short_reason(h, st),
            is_learner=name in learner_names or (isinstance(st, etcd_client.MemberStatus) and st.is_learner),
            applied_index=st.raft_applied_index if isinstance(st, etcd_client.MemberStatus) else 0,
            raft_index=st.raft_index if isinstance(st, etcd_client.MemberStatus) else 0,
            up_to_date=up_to_date, node=node, node_down=node_down))
    return views


async def answering(client: admin.EtcdAdmin, *, timeout: float = 1.5) -> dict[str, etcd_client.MemberStatus]:
    """The Status of every member that answers, by endpoint (pod) name."""
    views = await client.statuses(timeout=timeout)
    return {name: view for name, view in views.items() if isinstance(view, etcd_client.MemberStatus)}


def not_answering(names: Iterable[str], statuses: Mapping[str, etcd_client.MemberStatus], *,
                  leader: bool = True) -> str | None:
    """Why a change must wait (``"a, b not answering"``, or ``"no leader"`` when ``leader`` is asked for), or None
    when every named member answers (and one of them leads)."""
    down = [n for n in names if n not in statuses]
    if down:
        return f"{', '.join(down)} not answering"
    if leader and not any(v.is_leader for v in statuses.values()):
        return "no leader"
    return None


def find_member(listed: Iterable[etcd_client.Member], pod: str, fqdn: str) -> etcd_client.Member | None:
    """The member ``pod`` runs: by name, or (a member added but not started yet has no name) by its peer URL's
    host, the pod's stable DNS name ``fqdn``."""
    for m in listed:
        if m.name == pod or any(urllib.parse.urlsplit(u).hostname == fqdn for u in m.peer_urls):
            return m
    return None

