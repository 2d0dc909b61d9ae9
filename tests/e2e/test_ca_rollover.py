"""Automatic CA rollover on the sandbox with real etcd 3.5 (issue 12, part 4), the operator SIGKILLed twice.

A user replaces the CA Secret behind the Etcd's CA Issuer. No request is filed by anyone but the operator: it
notices the Issuer's new CA (not loaded by every member), files ``<db>-ca-rollover-<fingerprint>``
(``ReconfigureTLS``, ``rotateCertificates``, trigger ``ca-rollover``) and rolls it: widen, re-issue and release,
verify served, narrow. Under the live writer (a put every 20 ms through every member, holding an identity from
either CA) and the leader monitor; the operator is SIGKILLed and restarted at the end of the widen pass and at the
start of the narrow pass. Measured: Successful, 0 failed writes, 0 unplanned elections, each member restarted
exactly twice (once per pass, by pod UID), one request filed, the bundle holding the new CA only, every member
serving a leaf of the new CA.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager import pki
from opsmanager.api import constants
from opsmanager.tls import rollover
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("ca-rollover"), delivery_timeout=6.0) as s:
        await s.ca_issuer("ca-a")
        yield s


async def rollover_requests(sc: scenario.Scenario) -> list[dict[str, Any]]:
    return [r for r in await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace)
            if (r["metadata"].get("labels") or {}).get(constants.LABEL_OPS_TRIGGER) == constants.TRIGGER_CA_ROLLOVER]


async def test_a_replaced_ca_is_rolled_over_by_the_operator_with_no_failed_write_through_two_kills(
        sc: scenario.Scenario) -> None:
    db = "roll"
    await sc.fresh_etcd(db, issuer="ca-a")
    new = pki.make_ca("ca-a-renewed-root")
    sc.cas["ca-a-renewed"] = new  # the writer holds an identity from the new CA too (and trusts both)
    kills = [constants.COND_TRUST_BUNDLE_WIDENED, constants.COND_SERVED_CERTIFICATES_VERIFIED]
    killed: list[str] = []
    # The request's name follows from the new CA (one per CA), so the operator is armed for it before it exists:
    # it SIGKILLs itself right after each boundary's write (a failpoint; a poll could miss a boundary).
    name = rollover.request_name(db, pki.cert_info(new.cert_pem).fingerprint_sha256)
    await sc.crashes_at(name, kills[0])
    async with sc.live(db) as (w, mon), scenario.PodTracker(sc, db) as pods:
        before = w.snapshot()
        started = time.monotonic()
        await sc.k.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                          "metadata": {"name": "ca-a-keypair", "namespace": sc.namespace},
                          "data": {"tls.crt": scenario.b64(new.cert_pem), "tls.key": scenario.b64(new.key_pem)}})
        filed = await aeventually(lambda: rollover_requests(sc), timeout=60, interval=0.2,
                                  what="a ca-rollover request filed by the operator")
        assert filed[0]["metadata"]["name"] == name

        async def finished_killing() -> dict[str, Any] | None:
            assert sc.operator is not None
            if kills and sc.operator.process.poll() is not None:
                await sc.wait_crashed(timeout=10)
                killed.append(kills.pop(0))
                await sc.start_operator(crash_after=[(name, kills[0])] if kills else ())
                return None
            req = await sc.request(name) or {}
            status = req.get("status") or {}
            return req if status.get("phase") in constants.TERMINAL_OPS_PHASES else None

        req = await aeventually(finished_killing, timeout=300, interval=0.05, what=f"{name} finished")
        wall = time.monotonic() - started
        after, mres = w.snapshot(), mon.result
    assert req["status"]["phase"] == constants.PHASE_SUCCESSFUL, req["status"]
    assert killed == [constants.COND_TRUST_BUNDLE_WIDENED, constants.COND_SERVED_CERTIFICATES_VERIFIED]
    assert len(await rollover_requests(sc)) == 1, "filed once, across two operator restarts"
    assert name.startswith(f"{db}-ca-rollover-") and filed[0]["spec"]["tls"]["rotateCertificates"] is True
    moves = await sc.leader_moves(name)
    print(f"\nCA rollover: {wall:.1f}s, writes {after.ok - before.ok} ok / {after.failed - before.failed} failed, "
          f"max stall {after.max_gap:.3f}s, elections {mres.elections}, MoveLeader {moves}, restarts "
          f"{pods.restarts()}")
    # 0 failed writes, stall < 2 s, every acknowledged write read back, HashKV agrees on every member.
    await sc.assert_no_loss(w, db=db, since=before, label="CA rollover")
    announced = [(e["reason"], e["message"]) for e in await sc.k.list("v1", "Event", sc.namespace)
                 if (e.get("involvedObject") or {}).get("name") == name]
    assert mres.elections - moves <= 0, ("an unplanned election", mres.changes, announced)
    assert pods.restarts() == {p: 2 for p in pods.names}, pods.uids  # widen and narrow, once each
    bundle = await sc.k.get("v1", "Secret", sc.namespace, f"{db}-ca-bundle")
    assert bundle is not None
    cas = pki.split_pem(base64.b64decode(bundle["data"]["ca.crt"]))
    assert [pki.cert_info(c).fingerprint_sha256 for c in cas] == [pki.cert_info(new.cert_pem).fingerprint_sha256]
    for alias in constants.CERT_ALIASES:
        mounted = await sc.k.get("v1", "Secret", sc.namespace, f"{db}-{alias}-cert")
        assert mounted is not None and pki.signed_by(base64.b64decode(mounted["data"]["tls.crt"]), new.cert_pem)
    server = await sc.k.get("v1", "Secret", sc.namespace, f"{db}-server-cert")
    assert server is not None
    serial = pki.cert_info(base64.b64decode(server["data"]["tls.crt"])).serial
    assert set((await sc.served_serials(db)).values()) == {serial}
    events = [e for e in await sc.k.list("v1", "Event", sc.namespace)
              if e.get("reason") == constants.EVENT_CA_ROLLOVER_REQUESTED]
    assert len(events) == 1 and name in events[0]["message"]
