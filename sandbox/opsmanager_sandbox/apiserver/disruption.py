"""PodDisruptionBudget arithmetic (the disruption controller's status and the eviction decision), pure.

``expectedPods`` is, for an absolute ``minAvailable``, the number of matching pods (as kube-controller-manager
counts it, a terminating pod and its replacement both); otherwise the sum of ``spec.replicas`` of the StatefulSets
or Deployments (the sandbox's Deployments own their pods directly) owning matching pods, plus the matching pods
without such an owner. ``currentHealthy`` counts matching pods that are Ready, not being deleted, and not in ``disruptedPods``: a pod an
eviction was admitted for stays there — unhealthy for the budget — until it is being deleted or ``DELETION_TIMEOUT``
has passed since (an eviction whose client went away between the budget's write and the pod's delete leaves such an
entry; every further eviction is refused until it expires).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import math
from typing import Any

from opsmanager.kube import selectors

Obj = dict[str, Any]

# kube-controller-manager's disruption controller: how long an admitted eviction's pod may stay undeleted.
DELETION_TIMEOUT = datetime.timedelta(minutes=2)


def is_ready(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def covered_pods(pdb: Obj, pods: list[Obj]) -> list[Obj]:
    selector = selectors.from_object((pdb.get("spec") or {}).get("selector"), none_matches=False)
    return [p for p in pods if selector.matches(p["metadata"].get("labels") or {})]


def scaled(value: Any, total: int, round_up: bool) -> int:
    """An int-or-percent field (``maxUnavailable: 25%``) as a number of pods out of ``total``."""
    if isinstance(value, str) and value.endswith("%"):
        share = total * int(value[:-1]) / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def _parse(stamp: str) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def disrupted(pdb: Obj, pods: list[Obj], now: datetime.datetime) -> tuple[dict[str, str], datetime.datetime | None]:
    """The ``disruptedPods`` entries still pending (their pod present, not being deleted, admitted less than
    ``DELETION_TIMEOUT`` ago), and when the first of them expires (None: none pending)."""
    entries = (pdb.get("status") or {}).get("disruptedPods") or {}
    kept: dict[str, str] = {}
    recheck: datetime.datetime | None = None
    for pod in pods:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp") or name not in entries:
            continue
        admitted = _parse(str(entries[name]))
        if admitted is None or admitted + DELETION_TIMEOUT < now:
            continue
        kept[name] = entries[name]
        expiry = admitted + DELETION_TIMEOUT
        recheck = expiry if recheck is None or expiry < recheck else recheck
    return kept, recheck


def status(pdb: Obj, pods: list[Obj], workloads: list[Obj], now: datetime.datetime | None = None) -> Obj:
    now = now if now is not None else datetime.datetime.now(datetime.UTC)
    covered = covered_pods(pdb, pods)
    pending, _ = disrupted(pdb, covered, now)
    owners = {s["metadata"]["uid"]: s for s in workloads}
    owning: dict[str, Obj] = {}
    unowned = 0
    for pod in covered:
        refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
        if refs and refs[0].get("uid") in owners:
            owning[refs[0]["uid"]] = owners[refs[0]["uid"]]
        else:
            unowned += 1
    spec = pdb.get("spec") or {}
    minimum = spec.get("minAvailable", 1)
    if spec.get("maxUnavailable") is None and not isinstance(minimum, str):
        # an absolute minAvailable: the disruption controller counts the matching pods themselves (a terminating
        # one and its replacement both), not their controllers' scale
        expected = len(covered)
    else:
        expected = unowned + sum(int((s.get("spec") or {}).get("replicas", 1)) for s in owning.values())
    healthy = sum(1 for p in covered if is_ready(p) and p["metadata"]["name"] not in pending)
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled(spec["maxUnavailable"], expected, True))
    else:
        desired = scaled(minimum, expected, True)
    allowed = max(0, healthy - desired)
    return {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        **({"disruptedPods": pending} if pending else {}),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": "True" if allowed > 0 else "False",
            "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
            "message": "",
            "observedGeneration": pdb["metadata"].get("generation", 1),
        }],
    }


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An eviction the budget refuses (429): the ``DisruptionBudget`` cause's message, and Retry-After (0: none)."""
    message: str
    retry_after: int = 0


def unhealthy_evictable(pdb: Obj, pod: Obj) -> bool:
    """A pod that is not Ready is evicted without touching the budget when the policy is ``AlwaysAllow``, or
    (``IfHealthyBudget``, the default) when the stored status has its desired healthy pods."""
    if is_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    return bool(status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0)


def decrement(pdb: Obj, pod_name: str, now: str) -> Obj | Refusal:
    """kube-apiserver's check-and-decrement on the budget's stored status: the updated budget (one disruption
    fewer, the pod in ``disruptedPods``), or why not."""
    name = pdb["metadata"]["name"]
    status = pdb.get("status") or {}
    if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 1):
        return Refusal(f"The disruption budget {name} is still being processed by the server.", 10)
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed <= 0:
        if status.get("currentHealthy", 0) <= status.get("desiredHealthy", 0):
            return Refusal(f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy pods and "
                           f"has {status.get('currentHealthy', 0)} currently")
        return Refusal(f"The disruption budget {name} does not allow evicting pods currently")
    new = copy.deepcopy(pdb)
    new_status = new.setdefault("status", {})
    new_status["disruptionsAllowed"] = allowed - 1
    new_status.setdefault("disruptedPods", {})[pod_name] = now
    if allowed - 1 == 0:
        for cond in new_status.get("conditions") or []:
            if cond.get("type") == "DisruptionAllowed":
                cond.update(status="False", reason="InsufficientPods", message="", lastTransitionTime=now)
    return new
