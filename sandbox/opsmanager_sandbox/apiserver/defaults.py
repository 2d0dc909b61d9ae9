"""Defaulting and create-time status of the built-in kinds, the part of a real server's per-kind
"strategies" that clients can observe.

Pods and StatefulSet templates get the defaults the real API server writes (restartPolicy, dnsPolicy,
terminationGracePeriodSeconds, imagePullPolicy, probe timings, volume modes, ...), so that what a controller
reads back is what it would read on a real cluster. Services get a cluster IP from 10.96.0.0/16 unless
headless. Create resets ``status`` of kinds with a status subresource, as the real strategies do. A Secret's
``stringData`` is folded into ``data``.
"""

from __future__ import annotations

import base64
import itertools
from typing import Any

Obj = dict[str, Any]

_cluster_ips = itertools.count(10)


def _probe(probe: Obj | None) -> None:
    if not isinstance(probe, dict):
        return
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    if isinstance(probe.get("httpGet"), dict):
        probe["httpGet"].setdefault("scheme", "HTTP")
        probe["httpGet"].setdefault("path", "/")


def _container(c: Obj) -> None:
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    latest = ":" not in tag or tag.endswith(":latest")
    if "@" not in image:
        c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    else:
        c.setdefault("imagePullPolicy", "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        _probe(c.get(name))
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef")
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for c in itertools.chain(spec.get("containers") or [], spec.get("initContainers") or []):
        _container(c)
    for volume in spec.get("volumes") or []:
        for kind in ("secret", "configMap"):
            if isinstance(volume.get(kind), dict):
                volume[kind].setdefault("defaultMode", 420)
        if isinstance(volume.get("projected"), dict):
            volume["projected"].setdefault("defaultMode", 420)


def secret_string_data(obj: Obj) -> None:
    """A Secret's ``stringData`` goes into ``data`` (base64), overwriting keys of the same name, and is never
    stored: the real server does this when it converts the object, on create, update and patch alike."""
    strings = obj.pop("stringData", None)
    if isinstance(strings, dict) and strings:
        data = obj.get("data")
        obj["data"] = {**(data if isinstance(data, dict) else {}), **{k: base64.b64encode(str(v).encode()).decode() for k, v in strings.items()}}


def apply(kind: str, obj: Obj) -> None:
    """Default the built-in ``kind`` in place (create and update)."""
    spec = obj.get("spec")
    if kind == "Secret":
        secret_string_data(obj)
    if kind == "Pod" and isinstance(spec, dict):
        pod_spec(spec)
    elif kind == "StatefulSet" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("type", "RollingUpdate")
            strategy.setdefault("rollingUpdate", {"partition": 0})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            pod_spec(template["spec"])
        for pvc in spec.get("volumeClaimTemplates") or []:
            pvc.setdefault("apiVersion", "v1")
            pvc.setdefault("kind", "PersistentVolumeClaim")
            pvc_spec = pvc.setdefault("spec", {})
            pvc_spec.setdefault("volumeMode", "Filesystem")
            pvc.setdefault("status", {"phase": "Pending"})
    elif kind == "Deployment" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("type", "RollingUpdate")
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxSurge", "25%")
            rolling.setdefault("maxUnavailable", "25%")
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            pod_spec(template["spec"])
    elif kind == "Service" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if "clusterIP" not in spec:
            n = next(_cluster_ips)
            spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    elif kind == "PersistentVolumeClaim" and isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def initial_status(kind: str, obj: Obj) -> Obj | None:
    """The status a real server stores on create for built-in kinds with a status subresource."""
    if kind == "Pod":
        return {"phase": "Pending", "qosClass": _qos(obj)}
    if kind == "Namespace":
        return {"phase": "Active"}
    if kind == "StatefulSet":
        return {"replicas": 0, "availableReplicas": 0}
    if kind == "Deployment":
        return {}
    if kind == "PersistentVolumeClaim":
        return {"phase": "Pending"}
    if kind == "Service":
        return {"loadBalancer": {}}
    if kind == "PodDisruptionBudget":
        return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    return None


def _qos(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    requests = [c.get("resources", {}).get("requests") for c in containers]
    limits = [c.get("resources", {}).get("limits") for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    if all(lim and req == lim for req, lim in zip(requests, limits, strict=False)):
        return "Guaranteed"
    return "Burstable"
