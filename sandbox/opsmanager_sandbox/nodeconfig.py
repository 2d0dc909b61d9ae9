"""What the node agent's parts share: its configuration, the constants pods see, and :class:`PodHost`, what a
pod worker needs from whoever runs it (the API-driven :class:`~opsmanager_sandbox.kubelet.Kubelet` or the in-memory
:class:`~opsmanager_sandbox.podhost.StandaloneHost`)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from opsmanager_sandbox import (
    events,
)

if TYPE_CHECKING:
    from opsmanager_sandbox.podworker import PodWorker

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NODE_NAME = "sandbox"
# Where a pod of the operator's image finds its service account (token, ca.crt, namespace), and the volume the
# kubelet projects there (the ServiceAccount admission plugin's kube-api-access-<random> volume).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_VOLUME = "kube-api-access-sandbox"

# Test-only: a pod with this annotation set to "true" keeps its Secret/ConfigMap volumes as they are.
ANNOTATION_HOLD_VOLUME_REFRESH = "sandbox.opsmanager.dev/hold-volume-refresh"


def holds_volume_refresh(pod: Obj) -> bool:
    """The pod asks (test-only) that its Secret/ConfigMap volumes are not re-projected."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_HOLD_VOLUME_REFRESH, "")).lower() == "true"
UNSUPPORTED_IMAGE = "ImageNotSupportedBySandbox"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class KubeletConfig:
    dir: Path
    speed: float = 1.0
    volume_refresh_delay: float = 0.5
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    cluster_domain: str = "cluster.local"
    node_name: str = NODE_NAME
    host_ip: str = "127.0.0.1"
    shutdown_grace: float = 10.0
    volume_retry: float = 1.0
    api_host: str | None = None
    """Where pods of the operator's image reach the API server (``KUBERNETES_SERVICE_HOST``); None: nowhere, and
    no service-account token is projected."""
    api_port: int = 443
    api_ca_pem: bytes = b""
    """The API server's CA (``ca.crt`` of the service-account directory)."""
    token_expiration: int = 3607
    """``expirationSeconds`` of the projected token (the real kube-api-access volume's 3607)."""
    scheduler: bool = False
    """A real kube-scheduler binds pods (the real control plane): pods without ``nodeName`` wait for it, and a claim
    gets a pre-bound PersistentVolume for the PV controller to bind, instead of the kubelet binding both itself."""

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"


class PodHost(Protocol):
    """What a :class:`PodWorker` needs from whoever runs it."""

    config: KubeletConfig
    recorder: events.Recorder

    def secret(self, namespace: str, name: str) -> Obj | None: ...

    def configmap(self, namespace: str, name: str) -> Obj | None: ...

    def pvc(self, namespace: str, name: str) -> Obj | None: ...

    def status_changed(self, worker: PodWorker) -> None: ...

    def network_changed(self) -> None: ...

    def flush_dns(self) -> None: ...

    def pvc_dir(self, pvc: Obj) -> Path: ...

    async def service_account_token(self, worker: PodWorker) -> tuple[str, float]:
        """A token of the pod's ServiceAccount bound to the pod, and its lifetime in seconds."""
        ...


