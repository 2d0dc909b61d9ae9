"""As whom the operator speaks TLS to a cluster's members: the CAs it trusts (the trust bundle and every leaf
Secret's ``ca.crt``, so a member still serving a leaf from an older CA is verified) and the ``client`` alias Secret
(``<db>-client-cert``) it presents for mutual TLS — or, while that Secret is incomplete, no client certificate and
the reason (enough to verify what a member serves, not to call it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opsmanager import kube, pki
from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render
from opsmanager.etcd import access
from opsmanager.tls import material


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
