"""The Kubernetes-API implementation of :class:`opsmanager.webhook.validation.EtcdLookup`.

Uses the official ``kubernetes`` client (``CustomObjectsApi``), which is blocking: the server calls it through
``asyncio.to_thread``. 404 means "no such Etcd" (the webhook then denies with KubeDB's ``spec.databaseRef ... is
invalid or not found``); any other failure raises :class:`~opsmanager.webhook.validation.EtcdLookupError` so the webhook
says it could not decide instead of claiming the Etcd is missing. Client errors never escape this module.
"""

from __future__ import annotations

import threading
from typing import Any

import kubernetes
import urllib3
from kubernetes.client import exceptions as k8s_exceptions

from opsmanager.api import constants
from opsmanager.webhook import validation


class KubernetesEtcdLookup:
    """Read Etcd objects from an API server.

    Pass an ``api_client`` (tests, the sandbox), or a ``kubeconfig`` path; with neither, the in-cluster
    service account is tried first, then the default kubeconfig. The client is created on first use.
    """

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        self._client = api_client
        self._owns_client = api_client is None
        self._kubeconfig = kubeconfig
        self._context = context
        self._timeout = timeout
        self._lock = threading.Lock()

    def _api(self) -> kubernetes.client.CustomObjectsApi:
        with self._lock:
            if self._client is None:
                if self._kubeconfig:
                    self._client = kubernetes.config.new_client_from_config(
                        config_file=self._kubeconfig, context=self._context
                    )
                else:
                    configuration = kubernetes.client.Configuration()
                    try:
                        kubernetes.config.load_incluster_config(client_configuration=configuration)
                    except kubernetes.config.ConfigException:
                        kubernetes.config.load_kube_config(
                            context=self._context, client_configuration=configuration
                        )
                    self._client = kubernetes.client.ApiClient(configuration)
            return kubernetes.client.CustomObjectsApi(self._client)

    def get_etcd(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self._api().get_namespaced_custom_object(
                constants.ETCD_GROUP, constants.ETCD_VERSION, namespace, constants.ETCD_PLURAL, name,
                _request_timeout=self._timeout,
            )
        except k8s_exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise validation.EtcdLookupError(f"GET etcds {namespace}/{name}: HTTP {exc.status} {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError, kubernetes.config.ConfigException, ValueError) as exc:
            raise validation.EtcdLookupError(f"GET etcds {namespace}/{name}: {exc}") from exc
        if not isinstance(obj, dict):
            raise validation.EtcdLookupError(f"GET etcds {namespace}/{name}: the API returned {type(obj).__name__}")
        return obj

    def close(self) -> None:
        """Close the client's connection pool (only when this lookup created the client)."""
        with self._lock:
            if self._client is not None and self._owns_client:
                self._client.close()
                self._client = None
