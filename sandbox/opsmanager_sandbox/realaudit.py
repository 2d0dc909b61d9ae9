"""kube-apiserver's own audit log, read as the embedded API server's :class:`~.apiserver.audit.AuditLog`.

The real control plane writes one JSON event per request stage to ``<dir>/audit.log`` (``--audit-log-path``) under
:data:`POLICY`: every request at ``Metadata`` level (who, verb, resource, name, status; never a body, header or
token), the ``RequestReceived`` stage omitted. :class:`KubeAuditLog` reads the new lines on each query and turns
them into the same :class:`~.apiserver.audit.AuditRecord` the embedded API server keeps, so the RBAC proof and
the API budget count the same way against either control plane:

- a watch (and a pod's ``exec``, ``log`` or ``portforward`` stream) is counted at ``ResponseStarted``, when its
  stream opens; every other request at ``ResponseComplete``;
- ``at`` is the event's ``stageTimestamp`` moved to ``time.monotonic()``;
- ``resource`` is ``resource/subresource``; a non-resource request is its path (``/version``).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from pathlib import Path
from typing import Any, Final

from opsmanager_sandbox.apiserver import audit, rbac

POLICY: Final = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


class KubeAuditLog(audit.AuditLog):
    """The records of kube-apiserver's JSON audit file, read incrementally (a partly written last line waits)."""

    def __init__(self, path: str | Path) -> None:
        # every record: kube-apiserver's log also holds the controllers' and the node agent's traffic, and an RBAC
        # proof reads what an identity did from the start of its module
        super().__init__(size=None)
        self.path = Path(path)
        self._offset = 0
        self._partial = b""
        self._read_lock = threading.Lock()

    def records(self, *, user: str | None = None, since: float | None = None) -> list[audit.AuditRecord]:
        self._tail()
        return super().records(user=user, since=since)

    def __len__(self) -> int:
        self._tail()
        return super().__len__()

    def _tail(self) -> None:
        with self._read_lock:
            try:
                with self.path.open("rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return
            if not chunk and self.path.stat().st_size < self._offset:  # truncated or replaced: start over
                self._offset, self._partial = 0, b""
                return
            self._offset += len(chunk)
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            # the wall clock → monotonic offset, taken once per read: records of one read share it
            shift = time.monotonic() - time.time()
            for line in lines:
                record = _record(json.loads(line), shift) if line.strip() else None
                if record is not None:
                    self.append(record)


def _record(event: dict[str, Any], shift: float) -> audit.AuditRecord | None:
    stage, verb = event.get("stage"), event.get("verb", "")
    streaming = verb == "watch" or (event.get("objectRef") or {}).get("subresource") in ("exec", "log", "portforward")
    if stage != ("ResponseStarted" if streaming else "ResponseComplete"):
        return None
    ref = event.get("objectRef") or {}
    if ref:
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    else:
        resource = event.get("requestURI", "").split("?", 1)[0]
    user = event.get("user") or {}
    pod = (user.get("extra") or {}).get(rbac.POD_NAME_EXTRA) or [""]
    stamp = datetime.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00")).timestamp()
    return audit.AuditRecord(stamp + shift, user.get("username", ""), tuple(user.get("groups") or ()), verb,
                             resource, ref.get("apiGroup", ""), ref.get("namespace", ""), ref.get("name", ""),
                             int((event.get("responseStatus") or {}).get("code", 0)), pod[0])
