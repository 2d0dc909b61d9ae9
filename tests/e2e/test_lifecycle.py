"""The certificate-lifecycle scan end to end, on the sandbox with real etcd (issue 11, first "done when").

Leaves of 10 minutes and ``alertBefore: ["9m"]`` (the issue's numbers), scanned every 2 s: a minute after issuance
(cert-manager's clock: notBefore is the issuance time, notAfter 10 m later) every served leaf is inside
the threshold. We test these aspects: ``CertificatesValid=False/ExpiringSoon``; exactly one
``CertificateExpiringSoon`` Event per certificate (the server leaf on the client port, the peer leaf on the peer
port), still exactly one after the operator is SIGKILLed and restarted and has scanned again; ``status.tls`` and
the metric show the serial and notAfter that the test's own fresh handshake sees.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager import pki
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.etcd import client as etcd_client
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

DB = "short-lived"
ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca-life"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("lifecycle")) as s:
        await s.ca_issuer("ca-life")
        yield s


async def etcd(sc: scenario.Scenario) -> dict[str, Any]:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, DB)
    assert obj is not None
    return obj


async def expiring_events(sc: scenario.Scenario) -> list[dict[str, Any]]:
    events = await sc.k.list("v1", "Event", sc.namespace)
    return [e for e in events if e.get("reason") == constants.EVENT_CERTIFICATE_EXPIRING_SOON
            and (e.get("involvedObject") or {}).get("name") == DB]


async def served(sc: scenario.Scenario) -> dict[tuple[str, str], pki.CertInfo]:
    """What each member serves on each port, by the test's own fresh handshakes."""
    eps = await sc.endpoints(DB)
    out = {}
    async with etcd_client.EtcdClient(eps, tls=sc.writer_identities()[0]) as client:
        for ep in eps:
            out[(ep.name, constants.PORT_CLIENT)] = await client.served_certificate(ep, port="client")
            out[(ep.name, constants.PORT_PEER)] = await client.served_certificate(ep, port=naming.PEER_PORT_HTTPS)
    return out


async def test_expiring_leaves_are_flagged_once_per_certificate_and_match_the_wire(sc: scenario.Scenario) -> None:
    short = [{"alias": alias, "duration": "10m"} for alias in constants.CERT_ALIASES]
    await sc.k.create({
        "apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
        "metadata": {"name": DB, "namespace": sc.namespace},
        "spec": {"version": sc.etcd_version, "replicas": 3, "deletionPolicy": "WipeOut",
                 "tls": {"issuerRef": ISSUER, "certificates": short},
                 "tlsLifecycle": {"scanInterval": "2s", "alertBefore": ["9m"]}},
    })
    await sc.wait_ready(DB, timeout=90)

    async def expiring_soon() -> bool:
        cond = conditions.get_condition(((await etcd(sc)).get("status") or {}).get("conditions"),
                                        constants.COND_CERTIFICATES_VALID)
        return bool(cond and cond["status"] == constants.FALSE
                    and cond["reason"] == constants.REASON_CERTS_EXPIRING_SOON)

    await aeventually(expiring_soon, timeout=120, interval=0.5, what="CertificatesValid=False/ExpiringSoon")
    wire = await served(sc)
    serials = {info.serial for info in wire.values()}
    assert len(serials) == 2, wire  # one server leaf (client port) and one peer leaf, shared by the members
    await aeventually(lambda: _count(sc, len(serials)), timeout=30, interval=0.5,
                      what="one CertificateExpiringSoon per certificate")

    # status.tls says what the wire says.
    tls = (await etcd(sc))["status"]["tls"]
    for member in tls["members"]:
        for port in constants.TLS_PORTS:
            seen = wire[(member["name"], port)]
            assert member[port]["serial"] == f"{seen.serial:x}"
            assert conditions.parse_rfc3339(member[port]["notAfter"]) == seen.not_after.replace(microsecond=0)
            assert member[port]["matchesSecret"] is True
    assert tls["nextExpiry"]["member"] in {m["name"] for m in tls["members"]}

    # ... and so does the metric.
    assert sc.operator is not None
    with urllib.request.urlopen(sc.operator.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    first = tls["members"][0]
    sample = (f'opsmanager_etcd_certificate_not_after_timestamp_seconds{{etcd="{DB}",member="{first["name"]}",'
              f'namespace="{sc.namespace}",port="client"}}')
    line = next(ln for ln in text.splitlines() if ln.startswith(sample))
    assert float(line.split()[-1]) == wire[(first["name"], "client")].not_after.timestamp()

    # An operator crash and restart, then new scans: no Event twice.
    last_scan = tls["lastScanTime"]
    await sc.kill_operator()
    await sc.start_operator()

    async def rescanned() -> bool:
        return (await etcd(sc))["status"]["tls"]["lastScanTime"] > last_scan

    await aeventually(rescanned, timeout=60, interval=0.5, what="a scan by the restarted operator")
    await aeventually(rescanned, timeout=60, interval=0.5, what="a second scan")
    assert len(await expiring_events(sc)) == len(serials)


async def _count(sc: scenario.Scenario, n: int) -> bool:
    return len(await expiring_events(sc)) == n
