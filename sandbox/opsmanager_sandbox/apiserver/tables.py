"""Server-side printing: ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` answers with a
``meta.k8s.io/v1 Table``, which is what ``kubectl get`` prints.

Custom resources get their CRD's ``additionalPrinterColumns`` (JSONPath subset: ``.a.b``, ``[n]``,
``[?(@.k=="v")]``), or a single Age column when there are none, as the real server does; ``date`` columns
and Age are rendered as kubectl shows them (``5s``, ``3m12s``, ``4h``...). Built-in kinds get the columns
of their real printers for the parts kubectl shows by default (pods: Ready/Status/Restarts/Age, ...).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any

from opsmanager_sandbox.apiserver import resources

Obj = dict[str, Any]
Cell = Any
Column = tuple[dict[str, Any], Callable[[Obj, datetime.datetime], Cell]]


def parse_time(value: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any, now: datetime.datetime) -> str:
    when = parse_time(timestamp) if isinstance(timestamp, str) else None
    return human_duration((now - when).total_seconds()) if when else "<unknown>"


_TOKEN = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]|\[\*\]")


def jsonpath(obj: Any, expr: str) -> list[Any]:
    """Evaluate the JSONPath subset used by printer columns; returns all results."""
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    if expr.startswith("$"):
        expr = expr[1:]
    current = [obj]
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            return []
        pos = m.end()
        nxt: list[Any] = []
        for value in current:
            if m.group(1) is not None:
                if isinstance(value, dict) and m.group(1) in value:
                    nxt.append(value[m.group(1)])
            elif m.group(2) is not None:
                if isinstance(value, list) and int(m.group(2)) < len(value):
                    nxt.append(value[int(m.group(2))])
            elif m.group(3) is not None:
                if isinstance(value, list):
                    for item in value:
                        field: Any = item
                        for part in m.group(3).split("."):
                            field = field.get(part) if isinstance(field, dict) else None
                        if field is not None and str(field) == m.group(4):
                            nxt.append(item)
            elif isinstance(value, list):
                nxt.extend(value)
        current = nxt
    return current


def _definition(name: str, type_: str = "string", fmt: str = "", description: str = "",
                priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


_NAME: Column = (_definition("Name", fmt="name", description="Name must be unique within a namespace."),
                 lambda o, now: o["metadata"]["name"])
_AGE: Column = (_definition("Age", description="CreationTimestamp is a timestamp representing the server time "
                            "when this object was created."),
                lambda o, now: age(o["metadata"].get("creationTimestamp"), now))


def _custom_cell(column: dict[str, Any], obj: Obj, now: datetime.datetime) -> Cell:
    results = jsonpath(obj, column.get("jsonPath", ""))
    if not results:
        return None
    value = results[0]
    kind = column.get("type", "string")
    if kind == "date":
        return age(value, now)
    if kind == "string":
        return value if isinstance(value, str) else _plain(value)
    if kind == "integer" and isinstance(value, int | float):
        return int(value)
    if kind == "number" and isinstance(value, int | float):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    return _plain(value)


def _plain(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _custom_columns(rt: resources.ResourceType) -> list[Column]:
    if not rt.printer_columns:
        return [_NAME, _AGE]
    columns = [_NAME]
    for col in rt.printer_columns:
        definition = _definition(col["name"], "string" if col.get("type") == "date" else col.get("type", "string"),
                                 col.get("format", ""), col.get("description", ""), col.get("priority", 0))
        columns.append((definition, _cell_of(col)))
    return columns


def _cell_of(column: dict[str, Any]) -> Callable[[Obj, datetime.datetime], Cell]:
    def cell(obj: Obj, now: datetime.datetime) -> Cell:
        return _custom_cell(column, obj, now)
    return cell


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            term = state["terminated"] or {}
            reason = term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal")
                                            else f"ExitCode:{term.get('exitCode', 0)}")
    if pod["metadata"].get("deletionTimestamp") and reason != "NodeLost":
        reason = "Terminating"
    return str(reason)


def _pod_ready(pod: Obj) -> str:
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in (pod.get("status") or {}).get("containerStatuses") or [] if cs.get("ready"))
    return f"{ready}/{total}"


def _pod_restarts(pod: Obj) -> int:
    return sum(int(cs.get("restartCount", 0)) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def _ports(svc: Obj) -> str:
    out = []
    for p in (svc.get("spec") or {}).get("ports") or []:
        node = f":{p['nodePort']}" if p.get("nodePort") else ""
        out.append(f"{p.get('port')}{node}/{p.get('protocol', 'TCP')}")
    return ",".join(out) or "<none>"


def _involved(ev: Obj) -> str:
    ref = ev.get("involvedObject") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _last_seen(ev: Obj, now: datetime.datetime) -> str:
    stamp = ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp")
    return age(stamp, now)


def _s(name: str, fn: Callable[[Obj], Any], priority: int = 0, type_: str = "string") -> Column:
    return (_definition(name, type_, priority=priority), lambda o, now: fn(o))


def _get(path: str, fallback: Any = "<none>") -> Callable[[Obj], Any]:
    def fn(obj: Obj) -> Any:
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return fallback if value is None or value == "" else value
    return fn


_BUILTIN: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [_NAME, _s("Ready", _pod_ready), _s("Status", _pod_status),
                   _s("Restarts", _pod_restarts, type_="integer"), _AGE,
                   _s("IP", _get("status.podIP"), 1), _s("Node", _get("spec.nodeName"), 1)],
    ("", "namespaces"): [_NAME, _s("Status", _get("status.phase", "")), _AGE],
    ("", "secrets"): [_NAME, _s("Type", _get("type", "")),
                      _s("Data", lambda o: len(o.get("data") or {}), type_="integer"), _AGE],
    ("", "configmaps"): [_NAME, _s("Data", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                                   type_="integer"), _AGE],
    ("", "services"): [_NAME, _s("Type", _get("spec.type", "")), _s("Cluster-IP", _get("spec.clusterIP")),
                       _s("External-IP", lambda o: ",".join((o.get("spec") or {}).get("externalIPs") or [])
                          or "<none>"),
                       _s("Port(s)", _ports), _AGE],
    ("", "persistentvolumeclaims"): [_NAME, _s("Status", _get("status.phase", "")),
                                     _s("Volume", _get("spec.volumeName", "")),
                                     _s("Capacity", _get("status.capacity.storage", "")), _AGE],
    ("", "events"): [_s("Last Seen", lambda o: "", 0), _s("Type", _get("type", "")), _s("Reason", _get("reason", "")),
                     _s("Object", _involved), _s("Message", _get("message", "")), _NAME],
    ("apps", "statefulsets"): [_NAME, _s("Ready", lambda o: f"{(o.get('status') or {}).get('readyReplicas', 0)}/"
                                                       f"{(o.get('spec') or {}).get('replicas', 0)}"), _AGE],
    ("apps", "deployments"): [_NAME, _s("Ready", lambda o: f"{(o.get('status') or {}).get('readyReplicas', 0)}/"
                                                       f"{(o.get('spec') or {}).get('replicas', 0)}"),
                              _s("Up-to-date", _get("status.updatedReplicas", 0), type_="integer"),
                              _s("Available", _get("status.availableReplicas", 0), type_="integer"), _AGE],
    ("apps", "controllerrevisions"): [_NAME, _s("Revision", _get("revision", 0), type_="integer"), _AGE],
    ("policy", "poddisruptionbudgets"): [_NAME, _s("Min Available", _get("spec.minAvailable", "N/A")),
                                         _s("Max Unavailable", _get("spec.maxUnavailable", "N/A")),
                                         _s("Allowed Disruptions", _get("status.disruptionsAllowed", 0),
                                            type_="integer"), _AGE],
    ("coordination.k8s.io", "leases"): [_NAME, _s("Holder", _get("spec.holderIdentity", "")), _AGE],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [
        _NAME, _s("Created At", _get("metadata.creationTimestamp", ""), type_="date")],
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): [
        _NAME, _s("Webhooks", lambda o: len(o.get("webhooks") or []), type_="integer"), _AGE],
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): [
        _NAME, _s("Webhooks", lambda o: len(o.get("webhooks") or []), type_="integer"), _AGE],
}


def columns_for(rt: resources.ResourceType) -> list[Column]:
    if rt.custom:
        return _custom_columns(rt)
    columns = _BUILTIN.get(rt.storage_key, [_NAME, _AGE])
    if rt.storage_key == ("", "events"):
        last_seen = (columns[0][0], lambda o, now: _last_seen(o, now))
        return [last_seen, *columns[1:]]
    return columns


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(rt: resources.ResourceType, objects: list[Obj], *, include: str = "Metadata",
          resource_version: str = "", continue_token: str = "", headers: bool = True) -> Obj:
    now = datetime.datetime.now(datetime.UTC)
    columns = columns_for(rt)
    rows = []
    for obj in objects:
        row: Obj = {"cells": [fn(obj, now) for _, fn in columns]}
        row_obj = _row_object(obj, include)
        if row_obj is not None:
            row["object"] = row_obj
        rows.append(row)
    meta: Obj = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [definition for definition, _ in columns] if headers else [],
        "rows": rows,
    }
