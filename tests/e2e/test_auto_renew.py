"""Auto-renew end to end, on the sandbox with real etcd (issue 11, part 6 "done when").

The operator runs with ``--certificate-delivery-timeout 10`` (the delivery grace) and scans every 2 s. We test
these aspects:

* leaves of 6 m and ``autoRenew.before: "5m"``: exactly one auto request (``<etcd>-auto-renew-<expiry>``, labelled
  ``ops.opsmanager.dev/trigger: auto-renew``, owned by the Etcd, with a ``spec.timeout``), ``Successful``, under
  the live writer with 0 failed writes and the last acknowledged write read back; the scan after it shows every
  member serving a new serial on both ports, matching its Secret, and no ``ServedCertificateMismatch`` Event;
* an issuer that cannot issue (its CA Secret deleted once the cluster is up: the Issuer turns not Ready and never
  honours ``Issuing=True``): the auto request ends ``Failed`` (its timeout), an ``AutoRenewFailed`` Event names
  it, and the next auto request is created only once ``retryAfterFailure`` (1m) has passed since the failure.

The timings hold whether or not the sandbox backdates a leaf's notBefore: notAfter is issuance + 6 m either way.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager.api import conditions, constants
from opsmanager.cluster import naming
from opsmanager.lifecycle import scan, verdict
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

GRACE = 10  # --certificate-delivery-timeout, seconds


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("auto-renew"),
                                 delivery_timeout=GRACE) as s:
        yield s


def etcd_body(sc: scenario.Scenario, name: str, issuer: str, auto_renew: dict[str, Any]) -> dict[str, Any]:
    short = [{"alias": alias, "duration": "6m"} for alias in constants.CERT_ALIASES]
    return {
        "apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
        "metadata": {"name": name, "namespace": sc.namespace},
        "spec": {"version": sc.etcd_version, "replicas": 3, "deletionPolicy": "WipeOut",
                 "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": issuer},
                         "certificates": short},
                 "tlsLifecycle": {"scanInterval": "2s", "alertBefore": ["20s"], "autoRenew": auto_renew}},
    }


async def etcd(sc: scenario.Scenario, name: str) -> dict[str, Any]:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, name)
    assert obj is not None
    return obj


async def auto_requests(sc: scenario.Scenario, db: str) -> list[dict[str, Any]]:
    found = await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace,
                            label_selector=f"{constants.LABEL_OPS_TRIGGER}={constants.TRIGGER_AUTO_RENEW}")
    mine = [r for r in found if r["spec"]["databaseRef"]["name"] == db]
    return sorted(mine, key=lambda r: r["metadata"]["creationTimestamp"])


async def events(sc: scenario.Scenario, db: str, reason: str) -> list[dict[str, Any]]:
    found = await sc.k.list("v1", "Event", sc.namespace)
    return [e for e in found if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == db]


def filed_by(requests: list[dict[str, Any]], db: str, not_after: datetime.datetime) -> list[str]:
    """The auto requests filed for an expiry no later than ``not_after`` (the name carries the expiry, hex Unix
    seconds). The renewed leaves fall due in turn (6 minutes long, renewed 5 minutes before): the request for that
    later expiry is the next one, not a duplicate."""
    prefix = f"{db}-auto-renew-"
    return [r["metadata"]["name"] for r in requests
            if int(r["metadata"]["name"][len(prefix):].split("-")[0], 16) <= int(not_after.timestamp())]


def served_serials(tls: dict[str, Any]) -> dict[tuple[str, str], str | None]:
    return {(m["name"], port): (m.get(port) or {}).get("serial") for m in tls.get("members") or ()
            for port in constants.TLS_PORTS}


async def test_one_auto_request_renews_under_the_writer_and_the_scan_sees_the_new_serials(
        sc: scenario.Scenario) -> None:
    db = "auto-renewed"
    await sc.ca_issuer("ca-renew")
    started = time.monotonic()
    await sc.k.create(etcd_body(sc, db, "ca-renew", {"before": "5m"}))
    await sc.wait_ready(db, timeout=90)

    async def scanned_matching() -> dict[str, Any] | None:
        tls = ((await etcd(sc, db)).get("status") or {}).get("tls") or {}
        entries = [m.get(p) or {} for m in tls.get("members") or () for p in constants.TLS_PORTS]
        return tls if len(entries) == 6 and all(e.get("matchesSecret") for e in entries) else None

    first = await aeventually(scanned_matching, timeout=60, interval=0.5, what="a scan of the new cluster")
    old = served_serials(first)

    async with sc.live(db) as (w, _mon):
        before = w.snapshot()
        requests = await aeventually(lambda: auto_requests(sc, db), timeout=120, interval=0.5,
                                     what="an auto-renew request")
        filed_after = time.monotonic() - started
        request = requests[0]
        name = request["metadata"]["name"]
        not_after = conditions.parse_rfc3339(first["nextExpiry"]["notAfter"])
        assert name == verdict.request_name(db, not_after)
        assert request["spec"]["type"] == constants.OPS_TYPE_RECONFIGURE_TLS
        assert request["spec"]["tls"]["rotateCertificates"] is True
        assert request["spec"]["timeout"] == "1m15s"  # clamp(5m / 4, 1m, 10m)
        assert request["metadata"]["ownerReferences"][0]["name"] == db
        done = await sc.watch_request(name, timeout=240)
        assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
        ended_after = time.monotonic() - started

        async def renewed() -> dict[str, Any] | None:
            tls = await scanned_matching()
            if tls is None:
                return None
            now = served_serials(tls)
            return tls if all(now[key] not in (None, old[key]) for key in old) else None

        await aeventually(renewed, timeout=60, interval=0.5, what="a scan showing every member's new serials")
        assert filed_by(await auto_requests(sc, db), db, not_after) == [name]
        after = w.snapshot()

    result = w.snapshot()
    print(f"\nauto request filed {filed_after:.1f}s after the Etcd was created, Successful at {ended_after:.1f}s; "
          f"writes during it {after.ok - before.ok} ok / {after.failed - before.failed} failed; "
          f"whole run {result.summary()}")
    assert result.failed == 0, result.errors
    # 0 failed writes, stall < 2 s, every acknowledged write read back, HashKV agrees on every member.
    await sc.assert_no_loss(w, db=db, label="auto-renew")
    assert await events(sc, db, constants.EVENT_SERVED_CERTIFICATE_MISMATCH) == []
    requested = [e for e in await events(sc, db, constants.EVENT_AUTO_RENEW_REQUESTED)
                 if any(n in e.get("message", "") for n in filed_by(await auto_requests(sc, db), db, not_after))]
    assert len(requested) == 1, requested
    # Posted by the scan right after it wrote the status that renewed() saw.
    await aeventually(lambda: events(sc, db, constants.EVENT_CERTIFICATES_RENEWED), timeout=30, interval=0.5,
                      what="a CertificatesRenewed Event")


async def test_an_issuer_that_cannot_issue_fails_the_request_and_the_next_waits_for_retry_after_failure(
        sc: scenario.Scenario) -> None:
    db = "auto-stuck"
    await sc.ca_issuer("ca-stuck")
    # Auto-renew off until the issuer is broken; then due at once (5m50s of a 6m leaf).
    await sc.k.create(etcd_body(sc, db, "ca-stuck", {"enabled": False, "before": "5m50s",
                                                    "retryAfterFailure": "1m"}))
    await sc.wait_ready(db, timeout=90)
    await sc.k.delete("v1", "Secret", sc.namespace, "ca-stuck-keypair")

    async def issuer_not_ready() -> bool:
        issuer = await sc.k.get("cert-manager.io/v1", "Issuer", sc.namespace, "ca-stuck") or {}
        cond = conditions.get_condition((issuer.get("status") or {}).get("conditions"), "Ready")
        return bool(cond and cond["status"] == constants.FALSE)

    await aeventually(issuer_not_ready, timeout=30, interval=0.5, what="the Issuer not Ready")
    await sc.k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db,
                     {"spec": {"tlsLifecycle": {"autoRenew": {"enabled": True}}}})
    enabled = time.monotonic()

    first = (await aeventually(lambda: auto_requests(sc, db), timeout=60, interval=0.5,
                               what="the first auto-renew request"))[0]
    assert first["spec"]["timeout"] == "1m27s"  # clamp(5m50s / 4, 1m, 10m)
    done = await sc.watch_request(first["metadata"]["name"], timeout=180)
    assert done["status"]["phase"] == constants.PHASE_FAILED, done["status"]
    failed = next(c for c in done["status"]["conditions"] if c["type"] == constants.COND_FAILED)
    failed_at = conditions.parse_rfc3339(failed["lastTransitionTime"])
    failed_after = time.monotonic() - enabled
    assert "timed out" in failed.get("message", ""), failed

    await aeventually(lambda: events(sc, db, constants.EVENT_AUTO_RENEW_FAILED), timeout=30, interval=0.5,
                      what="an AutoRenewFailed Event")

    async def second() -> dict[str, Any] | None:
        found = await auto_requests(sc, db)
        return found[1] if len(found) > 1 else None

    retry = await aeventually(second, timeout=120, interval=0.5, what="the retry after retryAfterFailure")
    created = conditions.parse_rfc3339(retry["metadata"]["creationTimestamp"])
    gap = (created - failed_at).total_seconds()
    print(f"\nfirst auto request Failed {failed_after:.1f}s after auto-renew was enabled ({failed['message']}); "
          f"the retry {retry['metadata']['name']} was created {gap:.0f}s after the failure")
    assert gap >= 60, (failed_at, created)  # none before retryAfterFailure ...
    assert gap < 60 + 30  # ... and one soon after it
    assert retry["metadata"]["name"].startswith(first["metadata"]["name"] + "-")
    assert len(await auto_requests(sc, db)) == 2


async def test_a_reissue_and_an_ended_request_each_trigger_a_scan_long_before_the_interval(
        sc: scenario.Scenario) -> None:
    """``scanInterval: 1h`` once a first complete scan is there: only the triggers can make these scans. cert-manager re-issues the server and peer
    leaves (``Issuing=True``, as ``cmctl renew``; no ops request): the scan a few seconds later shows every member
    serving the new serials (etcd re-reads its leaf per handshake), posts ``CertificatesRenewed`` and no
    ``ServedCertificateMismatch``. Then a ``MoveLeader`` request ends: a scan follows it."""
    db = "triggered"
    await sc.ca_issuer("ca-trigger")
    body = etcd_body(sc, db, "ca-trigger", {"enabled": False})
    body["spec"]["tls"]["certificates"] = [{"alias": a, "duration": "1h"} for a in constants.CERT_ALIASES]
    await sc.k.create(body)
    await sc.wait_ready(db, timeout=90)

    async def tls() -> dict[str, Any]:
        return ((await etcd(sc, db)).get("status") or {}).get("tls") or {}

    async def complete() -> dict[str, Any] | None:
        """A scan of every member and port, after which no scan request is pending (the issuance at creation
        requested one too): from here on only a new trigger can make the next scan."""
        obj = await etcd(sc, db)
        now = (obj.get("status") or {}).get("tls") or {}
        pending = scan.scan_requested(obj)
        if pending and (not now.get("lastScanTime") or pending > conditions.parse_rfc3339(now["lastScanTime"])):
            return None
        return now if len(now.get("members") or ()) == 3 and all(served_serials(now).values()) else None

    await aeventually(complete, timeout=60, interval=0.5, what="a complete scan")
    await sc.k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db,
                     {"spec": {"tlsLifecycle": {"scanInterval": "1h"}}})
    first = await aeventually(complete, timeout=10, interval=0.5, what="a complete scan")
    old = served_serials(first)

    def issuing(st: dict[str, Any]) -> dict[str, Any]:
        st = dict(st)
        st["conditions"] = conditions.set_condition(st.get("conditions"), "Issuing", constants.TRUE,
                                                    reason="ManuallyTriggered", message="test: cmctl renew")
        return st

    renewed_at = time.monotonic()
    for alias in constants.PORT_ALIAS.values():
        await sc.k.transact_status("cert-manager.io/v1", "Certificate", sc.namespace, naming.certificate(db, alias),
                                   issuing)

    async def rescanned() -> dict[str, Any] | None:
        now = await tls()
        serials = served_serials(now)
        matching = all((m.get(p) or {}).get("matchesSecret") for m in now.get("members") or ()
                       for p in constants.TLS_PORTS)
        return now if matching and all(serials[k] not in (None, old[k]) for k in old) else None

    second = await aeventually(rescanned, timeout=45, interval=0.5, what="a scan showing the re-issued leaves")
    print(f"\nscan after the re-issue: {time.monotonic() - renewed_at:.1f}s after Issuing=True")
    await aeventually(lambda: events(sc, db, constants.EVENT_CERTIFICATES_RENEWED), timeout=10, interval=0.5,
                      what="CertificatesRenewed")
    assert await events(sc, db, constants.EVENT_SERVED_CERTIFICATE_MISMATCH) == []

    await sc.submit("move-after-renew", db, constants.OPS_TYPE_MOVE_LEADER)
    done = await sc.watch_request("move-after-renew", timeout=120)
    assert done["status"]["phase"] == constants.PHASE_SUCCESSFUL, done["status"]
    ended = max(conditions.parse_rfc3339(c["lastTransitionTime"]) for c in done["status"]["conditions"])

    async def scanned_after_the_request() -> bool:
        last = conditions.parse_rfc3339((await tls())["lastScanTime"])
        return last >= ended and last > conditions.parse_rfc3339(second["lastScanTime"])

    await aeventually(scanned_after_the_request, timeout=30, interval=0.5, what="a scan after the request ended")
