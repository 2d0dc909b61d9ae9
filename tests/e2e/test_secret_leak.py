"""No private key, token or Secret value appears in any log, Event, status, annotation or metric (issue 15 part 5).

One sandbox with the operator and the admission webhook runs what the demo runs: a TLS Etcd created with TLS, and a
plaintext one taken through add TLS, rotate, issuer change and remove TLS. Every Secret is collected after each
step (removing TLS deletes the Etcd's), with the CA keys, the sandbox kubeconfig's credentials and every
service-account token among them. Then every form of each (:mod:`e2e.leaks`: raw, base64, PEM body lines; values
under 16 bytes ignored) is looked for in:
- every ``*.log`` file under the sandbox directory (etcd members, the webhook, the sandbox, the operator's log);
- every Event, in every namespace;
- ``status`` and ``metadata.annotations`` of every Etcd, EtcdOpsRequest, Certificate, Pod and StatefulSet;
- the operator's ``/metrics``.
A failure names where and which Secret, never the value. tests/e2e/test_leak_scanner.py shows the scanner finds a
planted key (so this test can fail).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from e2e import leaks, scenario
from opsmanager.api import constants

pytestmark = pytest.mark.slow

ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer"}
KINDS = [(constants.ETCD_API_VERSION, constants.ETCD_KIND), (constants.OPS_API_VERSION, constants.OPS_KIND),
         ("cert-manager.io/v1", "Certificate"), ("v1", "Pod"), ("apps/v1", "StatefulSet")]


async def collect(sc: scenario.Scenario, into: dict[str, bytes]) -> None:
    """Every Secret value that exists now (in every namespace), added to ``into``."""
    into.update(leaks.secret_data(await sc.k.list("v1", "Secret", None)))


async def haystacks(sc: scenario.Scenario) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for path in sorted(Path(sc.dir).rglob("*.log")):
        # A real node's /var/log/containers holds links into /var/log/pods as its own mount namespace sees it;
        # the files themselves are read where the node's /var/log/pods lives in the sandbox directory.
        if path.is_symlink():
            continue
        found[f"file {path.relative_to(sc.dir)}"] = path.read_bytes()
    for event in await sc.k.list("v1", "Event", None):
        meta, obj = event["metadata"], event.get("involvedObject") or {}
        found[f"Event {meta.get('namespace')}/{meta['name']} ({event.get('reason')} on {obj.get('kind')} "
              f"{obj.get('name')})"] = json.dumps(event)
    for api_version, kind in KINDS:
        for obj in await sc.k.list(api_version, kind, None):
            meta = obj["metadata"]
            where = f"{kind} {meta.get('namespace')}/{meta['name']}"
            found[f"{where} status"] = json.dumps(obj.get("status") or {})
            found[f"{where} metadata.annotations"] = json.dumps(meta.get("annotations") or {})
    assert sc.operator is not None
    async with aiohttp.ClientSession() as session, session.get(sc.operator.metrics_url) as resp:
        found["operator /metrics"] = await resp.text()
    return found


async def test_no_secret_appears_in_logs_events_statuses_annotations_or_metrics(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    secrets: dict[str, bytes] = {}
    async with scenario.Scenario(tmp_path_factory.mktemp("leak")) as sc:
        for name in ("ca-a", "ca-b"):
            ca = await sc.ca_issuer(name)
            secrets[f"CA key of issuer {name}"] = ca.key_pem
        secrets.update(leaks.kubeconfig_secrets(yaml.safe_load(Path(sc.sandbox.kubeconfig).read_text()),
                                                "sandbox kubeconfig"))
        secrets.update(leaks.kubeconfig_secrets(yaml.safe_load(Path(sc.sandbox.operator_kubeconfig).read_text()),
                                                "operator kubeconfig"))
        await sc.create_etcd("born-tls", issuer="ca-a")
        await sc.wait_ready("born-tls", timeout=120)
        await sc.fresh_etcd("plain")
        operations: list[tuple[str, dict[str, Any]]] = [
            ("add-tls", {"tls": {"issuerRef": {**ISSUER, "name": "ca-a"}}}),
            ("rotate", {"tls": {"rotateCertificates": True}}),
            ("change-issuer", {"tls": {"issuerRef": {**ISSUER, "name": "ca-b"}}}),
            ("remove-tls", {"tls": {"remove": True}}),
        ]
        for name, spec in operations:
            await collect(sc, secrets)
            await sc.submit(f"plain-{name}", "plain", constants.OPS_TYPE_RECONFIGURE_TLS, **spec)
            req = await sc.watch_request(f"plain-{name}", timeout=300)
            assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, (name, req["status"])
            await sc.wait_ready("plain", timeout=60)
        await collect(sc, secrets)
        found = await haystacks(sc)
    # Not vacuous: the keys of both Etcds' certificates were collected, and the logs and Events were read.
    keys = [label for label in secrets if label.endswith(" tls.key")]
    assert any("plain-" in k for k in keys) and any("born-tls-" in k for k in keys), sorted(secrets)
    assert len([w for w in found if w.startswith("file ")]) >= 6, sorted(found)
    assert "file operator.log" in found and len(found["file operator.log"]) > 1000
    assert sum(1 for w in found if w.startswith("Event ")) >= 20
    leaked = leaks.scan(found, secrets)
    assert leaked == [], "secrets found:\n" + "\n".join(str(f) for f in leaked)
