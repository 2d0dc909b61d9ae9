"""How the operator reaches the members of an Etcd — one policy for the provisioner's status and the ops engine.

- **Which pods**: the Etcd's member pods by the selector labels (:func:`pods`); a pod *serves* when the kubelet
  says Ready, it has an address and it is not on its way out (:func:`serving`).
- **Where**: the **pod IP** from ``status.podIP`` (the operator may run where cluster DNS does not resolve pod
  names, and a pod IP is what exists the moment a pod runs), the client port 2379, and the name the pod is known by,
  ``<pod>.<db>-pods.<ns>.svc`` as the TLS server name — exactly what a client going through the headless Service
  checks (:func:`endpoints`).
- **As whom** (:func:`client_identity`): the operator presents the ``client`` alias Secret (``<db>-client-cert``,
  CN ``root``) and trusts every CA it knows for the cluster — the trust bundle ``<db>-ca-bundle`` and the
  ``ca.crt`` of the leaf Secrets of every TLS configuration given (during a transition: the one the cluster had
  and the one it is moving to), so a member is verified whichever CA its leaf chains to right now.

Only the I/O of reading pods and Secrets is here; the verdicts (health, rollout) are pure modules elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opsmanager import kube, pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.etcd import access
from opsmanager.provisioner import material, naming, render

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


def serving(pod: Mapping[str, Any] | None) -> bool:
    """Ready by the kubelet, with an address, and not on its way out."""
    return pod is not None and not terminating(pod) and pod_ready(pod) and pod_ip(pod) is not None


async def pods(k: kube.Kube, namespace: str, db_name: str) -> dict[str, Obj]:
    """The Etcd's member pods by name (whatever their state)."""
    selector = ",".join(f"{key}={value}" for key, value in naming.selector_labels(db_name).items())
    return {p["metadata"]["name"]: p for p in await k.list("v1", "Pod", namespace, label_selector=selector)}


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


async def client_identity(k: kube.Kube, namespace: str, db_name: str,
                          tls_configs: Sequence[etcd_api.TLSConfig | None]) -> tuple[access.TLSIdentity | None, str]:
    """The operator's TLS identity for this cluster and, when it is not complete, why.

    ``(None, why)`` when no CA is known at all (no trust bundle, no leaf ``ca.crt``); ``(identity without a
    client certificate, why)`` when CAs are known but the ``client`` alias Secret is not complete (enough to
    verify what a member serves, not for mutual TLS); ``(identity, "")`` otherwise. A configuration of ``None``
    (no TLS, e.g. before an ops request adds it) contributes the default Secret names."""
    configs = list(tls_configs) or [None]
    cas: list[bytes] = []
    bundle_name = naming.trust_bundle_secret(db_name)
    bundle = material.secret_bytes(await k.get("v1", "Secret", namespace, bundle_name), naming.TRUST_BUNDLE_KEY)
    if bundle:
        cas.append(bundle)
    client: Mapping[str, Any] | None = None
    problem = ""
    seen: set[str] = set()
    for tls in configs:
        for alias in (constants.ALIAS_CLIENT, constants.ALIAS_SERVER):
            name = render.secret_name(db_name, tls, alias)
            if name in seen:
                continue
            seen.add(name)
            secret = await k.get("v1", "Secret", namespace, name)
            if (ca := material.secret_bytes(secret, "ca.crt")) is not None:
                cas.append(ca)
            if alias == constants.ALIAS_CLIENT and client is None:
                verdict = material.check_secret(secret, f"{namespace}/{name}")
                if verdict.complete:
                    client = secret
                elif not problem:
                    problem = verdict.problem
    if not cas:
        return None, f"trust bundle Secret {namespace}/{bundle_name} does not exist yet"
    ca_pem = pki.bundle(*cas)
    if client is None:
        return access.TLSIdentity(ca_pem=ca_pem, name="operator-no-client-cert"), problem
    return access.TLSIdentity(ca_pem=ca_pem, cert_pem=material.secret_bytes(client, "tls.crt"),
                              key_pem=material.secret_bytes(client, "tls.key"), name="operator"), ""
