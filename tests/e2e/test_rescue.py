"""Rescue end to end (issue 13 "done when"), on the sandbox with real etcd 3.5 processes.

We test these aspects:

* **leaves expired**: leaves of 2 m, the Issuer deleted so cert-manager cannot renew them; past the expiry the
  Etcd shows ``CertificatesValid=False/Expired`` and the ``CertificateExpired`` Event; auto-renew (enabled only
  now, ``retryAfterFailure: 30s``) files a request that runs the rescue plan (``RescueLeaves``,
  ``RescuePlanChosen`` naming member, port and notAfter) and fails on its timeout while the Issuer is missing; the
  Issuer recreated, the next auto request serves valid leaves again within one minute of its creation, with no
  member restarted (pod UIDs and etcd PIDs unchanged) and every key written before the expiry readable;
* **CA expired, nothing filed by hand — and a plain rotate filed by hand**: a CA valid for 3 minutes and two Etcds
  with leaves from it; before the end no auto-renew request (the renewed leaves would end with the CA) and
  ``CAExpiringSoon`` says so; after it the CA Secret is replaced by a new CA: the operator's own rollover request
  (one Etcd) or a plain ``IfReady`` rotate filed at once (the other) starts as the rescue (``RescueCA``): every
  member restarted together, once, serving the new CA within 2 minutes; every key written before readable; no
  request left Pending;
* **valid but unreachable**: a cluster whose members are all stopped (StatefulSet scaled to 0 by hand while the
  Etcd is paused, so nobody recreates them) with a rotate request never takes a rescue plan.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
import pytest_asyncio

from e2e import scenario
from opsmanager import pki
from opsmanager.api import conditions, constants, tlschange
from opsmanager.cluster import naming
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors
from opsmanager.ops.operations.reconfigure_tls import plans as tls_plans
from tests.e2e import tier
from tests.polling import aeventually

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

GRACE = 10  # --certificate-delivery-timeout, seconds
KEYS = 20


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async with scenario.Scenario(tmp_path_factory.mktemp("rescue"), delivery_timeout=GRACE,
                                 nodes=tier.LONG_MODULE_NODES) as s:
        yield s


async def etcd(sc: scenario.Scenario, name: str) -> dict[str, Any]:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, name)
    assert obj is not None
    return obj


async def events(sc: scenario.Scenario, db: str, reason: str) -> list[dict[str, Any]]:
    found = await sc.k.list("v1", "Event", sc.namespace)
    return [e for e in found if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == db]


async def auto_requests(sc: scenario.Scenario, db: str) -> list[dict[str, Any]]:
    found = await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace,
                            label_selector=f"{constants.LABEL_OPS_TRIGGER}={constants.TRIGGER_AUTO_RENEW}")
    mine = [r for r in found if r["spec"]["databaseRef"]["name"] == db]
    return sorted(mine, key=lambda r: r["metadata"]["creationTimestamp"])


async def write_keys(sc: scenario.Scenario, db: str) -> dict[str, str]:
    written = {f"/rescue/{db}/{i}": f"v{i}" for i in range(KEYS)}
    # A client identity from the CA this Etcd trusts: the scenario holds one per CA made so far (earlier tests'
    # CAs first), and a member refuses a client certificate from a CA it has not loaded.
    refused: list[str] = []
    # https only: these Etcds serve TLS, and a refused identity must read as a refused handshake; with the
    # plain-http try after it, the client's error can come out as "unreachable" instead.
    endpoints = [ep.with_schemes("https") for ep in await sc.endpoints(db)]
    for identity in sc.writer_identities():
        try:
            async with etcd_client.EtcdClient(endpoints, tls=identity) as client:
                for key, value in written.items():
                    await client.kv.put(key, value)
            return written
        except etcd_errors.TLSHandshakeFailed as err:
            refused.append(f"{identity.name}: {str(err)[:120]}")
    raise AssertionError(f"no client identity accepted by {db}: {refused}")


async def read_keys(sc: scenario.Scenario, db: str, written: dict[str, str]) -> None:
    last: list[str] = []

    async def readable() -> bool:
        for identity in sc.writer_identities():
            try:
                async with etcd_client.EtcdClient(await sc.endpoints(db), tls=identity) as client:
                    got = {k: await client.kv.get(k) for k in written}
                    if all(got[k] == v.encode() for k, v in written.items()):
                        return True
                    last.append(f"values differ: {sorted(k for k in written if got[k] != written[k].encode())[:3]}")
            except Exception as err:  # noqa: BLE001 - not yet: the poll goes on until its deadline
                last.append(repr(err)[:300])
        return False

    try:
        await aeventually(readable, timeout=30, interval=0.5, what="every key written before the expiry readable")
    except AssertionError as err:
        raise AssertionError(f"{err}; last: {last[-2:]}") from None


async def served_not_after(sc: scenario.Scenario, db: str) -> dict[tuple[str, str], datetime.datetime]:
    out = {}
    async with etcd_client.EtcdClient(await sc.endpoints(db), tls=sc.writer_identities()[0]) as client:
        for pod in naming.pods(db, 3):
            for port in constants.TLS_PORTS:
                number: str | int = naming.peer_port("https") if port == constants.PORT_PEER else port
                out[(pod, port)] = (await client.served_certificate(pod, port=number)).not_after
    return out


def rescue_condition(req: dict[str, Any]) -> dict[str, Any]:
    cond = conditions.get_condition(req["status"]["conditions"], constants.COND_RESCUE_PLAN_CHOSEN)
    assert cond is not None and cond["status"] == constants.TRUE, req["status"]
    return cond


async def issuer_body(sc: scenario.Scenario, name: str) -> dict[str, Any]:
    return {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": {"name": name, "namespace": sc.namespace},
            "spec": {"ca": {"secretName": f"{name}-keypair"}}}


async def test_expired_leaves_are_rescued_by_auto_renew_without_a_restart_and_with_the_data(
        sc: scenario.Scenario) -> None:
    db, issuer = "leaves", "ca-leaves"
    await sc.ca_issuer(issuer)
    await sc.k.create({
        "apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
        "metadata": {"name": db, "namespace": sc.namespace},
        "spec": {"version": sc.etcd_version, "replicas": 3, "deletionPolicy": "WipeOut",
                 "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": issuer},
                         "certificates": [{"alias": a, "duration": "2m"} for a in constants.CERT_ALIASES]},
                 "tlsLifecycle": {"scanInterval": "2s", "alertBefore": ["20s"],
                                  "autoRenew": {"enabled": False, "before": "1m50s", "retryAfterFailure": "30s"}}},
    })
    await sc.wait_ready(db, timeout=90)
    await sc.k.delete("cert-manager.io/v1", "Issuer", sc.namespace, issuer)  # cert-manager cannot renew now
    written = await write_keys(sc, db)
    expiry = max((await served_not_after(sc, db)).values())

    async with scenario.PodTracker(sc, db) as pods, scenario.PidTracker(sc, db) as pids:
        async def expired() -> dict[str, Any] | None:
            obj = await etcd(sc, db)
            cond = conditions.get_condition((obj.get("status") or {}).get("conditions"),
                                            constants.COND_CERTIFICATES_VALID)
            return cond if cond and cond["status"] == constants.FALSE and cond["reason"] == \
                constants.REASON_CERTS_EXPIRED else None

        left = (expiry - datetime.datetime.now(datetime.UTC)).total_seconds()
        try:
            cond = await aeventually(expired, timeout=max(left, 0) + 60, interval=1,
                                     what="CertificatesValid=False/Expired")
        except AssertionError:
            status = (await etcd(sc, db)).get("status") or {}
            print(f"\nstatus at the deadline: {status.get('conditions')} {status.get('tls')}")
            raise
        # The scan sets the condition first and posts its Events after: on a loaded machine the test can read between.
        await aeventually(lambda: events(sc, db, constants.EVENT_CERTIFICATE_EXPIRED), timeout=30, interval=0.5,
                          what="a CertificateExpired Event")
        print(f"\nexpired: {cond['message'][:200]}")

        await sc.k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db,
                         {"spec": {"tlsLifecycle": {"autoRenew": {"enabled": True}}}})
        first = (await aeventually(lambda: auto_requests(sc, db), timeout=60, interval=0.5,
                                   what="an auto-renew request for the expired leaves"))[0]
        assert first["spec"].get("apply") == constants.APPLY_ALWAYS  # the expired cluster is not Ready
        done = await sc.watch_request(first["metadata"]["name"], timeout=150)
        assert done["status"]["phase"] == constants.PHASE_FAILED, done["status"]  # no Issuer: it cannot issue
        assert tlschange.recorded_plan(done) == tls_plans.RotateVariant.RESCUE_LEAVES.value
        assert f"{db}-0 client notAfter" in rescue_condition(done)["message"]
        failed = conditions.get_condition(done["status"]["conditions"], constants.COND_FAILED)
        assert failed is not None and "not found" in failed["message"], failed  # cert-manager's reason
        await sc.k.apply(await issuer_body(sc, issuer))

        async def second() -> dict[str, Any] | None:
            found = await auto_requests(sc, db)
            return found[1] if len(found) > 1 else None

        retry = await aeventually(second, timeout=90, interval=0.5, what="the next auto-renew attempt")
        created = time.monotonic()
        gap = (conditions.parse_rfc3339(retry["metadata"]["creationTimestamp"])
               - conditions.parse_rfc3339(failed["lastTransitionTime"])).total_seconds()
        assert gap >= 30, gap  # retryAfterFailure

        async def valid_again() -> bool:
            try:
                served = await served_not_after(sc, db)
            except Exception:  # noqa: BLE001 - the poll goes on until its deadline
                return False
            now = datetime.datetime.now(datetime.UTC)
            return all(t > now for t in served.values())

        await aeventually(valid_again, timeout=60, interval=0.5, what="valid leaves served on both ports")
        healed = time.monotonic() - created
        ok = await sc.watch_request(retry["metadata"]["name"], timeout=60)
        assert ok["status"]["phase"] == constants.PHASE_SUCCESSFUL, ok["status"]
        # cert-manager renews the expired leaves as soon as the Issuer is back, and the gate releases them: when
        # that came before the retry started, the retry finds nothing expired and is a plain rotate (no rescue).
        retry_plan = tlschange.recorded_plan(ok)
        assert retry_plan in (tls_plans.RotateVariant.RESCUE_LEAVES.value, tls_plans.RotateVariant.HOT_RELOAD.value)
        await read_keys(sc, db, written)
    assert pods.restarts() == {p: 0 for p in naming.pods(db, 3)}, pods.uids
    assert pids.restarts() == {p: 0 for p in naming.pods(db, 3)}, pids.pids
    print(f"\nleaves rescue: first auto request RescueLeaves, Failed (no Issuer); retry ({retry_plan}) filed {gap:.0f}s "
          f"after the failure; valid leaves served {healed:.1f}s after it was filed; no restart; {KEYS} keys read back")


@pytest.mark.timeout(720)  # the CA lives 3 minutes, the members then have 3 minutes to come back, the requests 90 s
async def test_an_expired_ca_comes_back_by_itself_and_with_a_plain_rotate_filed_by_hand(
        sc: scenario.Scenario) -> None:
    """Two Etcds on one CA Issuer whose CA lives 3 minutes (their leaves end with it). Before the end: no auto-renew
    request (renewed leaves would end with the CA), ``CertificatesValid=False/CAExpiringSoon`` and the Event say so.
    After it the CA Secret is replaced with a new CA, and for ``alone`` nothing is filed by hand, for ``by-hand`` a
    plain rotate (``apply`` left at IfReady) right away. Both come back: every member serves a leaf of the new CA
    within 3 minutes, each restarted once, every key written before the expiry reads back; no request stays
    Pending, and the one that ran started as a rescue."""
    issuer, alone, by_hand = "ca-short", "alone", "by-hand"
    dbs = (alone, by_hand)
    old = pki.make_ca(f"{issuer}-old", duration=datetime.timedelta(minutes=3))
    sc.cas[issuer] = old
    await sc.k.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                      "metadata": {"name": f"{issuer}-keypair", "namespace": sc.namespace},
                      "data": {"tls.crt": scenario.b64(old.cert_pem), "tls.key": scenario.b64(old.key_pem)}})
    await sc.k.apply(await issuer_body(sc, issuer))
    for db in dbs:
        await sc.k.create({
            "apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
            "metadata": {"name": db, "namespace": sc.namespace},
            "spec": {"version": sc.etcd_version, "replicas": 3, "deletionPolicy": "WipeOut",
                     "tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": issuer}},
                     "tlsLifecycle": {"scanInterval": "5s"}},
        })
    for db in dbs:
        await sc.wait_ready(db, timeout=120)
    written = {db: await write_keys(sc, db) for db in dbs}
    ca_end = pki.cert_info(old.cert_pem).not_after

    async def ca_reported(db: str) -> dict[str, Any] | None:
        cond = conditions.get_condition(((await etcd(sc, db)).get("status") or {}).get("conditions"),
                                        constants.COND_CERTIFICATES_VALID)
        return cond if cond and cond["reason"] == constants.REASON_CA_EXPIRING_SOON else None

    left = (ca_end - datetime.datetime.now(datetime.UTC)).total_seconds()
    for db in dbs:
        cond = await aeventually(lambda db=db: ca_reported(db), timeout=max(left, 0) + 30, interval=1,
                                 what=f"{db}: CertificatesValid=False/CAExpiringSoon")
        assert "auto-renew files no request" in cond["message"], cond

        async def ca_event(db: str) -> list[dict[str, Any]]:
            return [e for e in await events(sc, db, constants.EVENT_CA_EXPIRING_SOON)
                    if "auto-renew files no request" in e["message"]]

        # The scan writes the condition first and posts its Events after it.
        await aeventually(lambda db=db: ca_event(db), timeout=30, interval=0.5,
                          what=f"{db}: a CAExpiringSoon Event saying auto-renew files no request")

    async def ca_expired() -> bool:
        return datetime.datetime.now(datetime.UTC) > ca_end + datetime.timedelta(seconds=2)

    left = (ca_end - datetime.datetime.now(datetime.UTC)).total_seconds()
    await aeventually(ca_expired, timeout=max(left, 0) + 30, interval=1, what="the CA's notAfter passed")
    for db in dbs:
        assert await auto_requests(sc, db) == [], f"{db}: auto-renew filed a request that could not help"
    new = pki.make_ca(f"{issuer}-new")
    sc.cas[issuer] = new  # the writer's identity: from the new CA
    new_subject = pki.cert_info(new.cert_pem).subject
    new_identity = next(i for i in sc.writer_identities() if i.name == f"id-{issuer}")
    async with scenario.PodTracker(sc, alone) as pods_alone, scenario.PodTracker(sc, by_hand) as pods_by_hand:
        await sc.k.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                          "metadata": {"name": f"{issuer}-keypair", "namespace": sc.namespace},
                          "data": {"tls.crt": scenario.b64(new.cert_pem), "tls.key": scenario.b64(new.key_pem)}})
        replaced = time.monotonic()
        await sc.submit("by-hand-rotate", by_hand, constants.OPS_TYPE_RECONFIGURE_TLS,
                        tls={"rotateCertificates": True})  # apply left at its default, IfReady

        async def serves_new_ca(db: str) -> bool:
            try:
                async with etcd_client.EtcdClient(await sc.endpoints(db), tls=new_identity) as client:
                    for pod in naming.pods(db, 3):
                        for port in (constants.PORT_CLIENT, naming.peer_port("https")):
                            if (await client.served_certificate(pod, port=port)).issuer != new_subject:
                                return False
                return True
            except Exception:  # noqa: BLE001 - not yet: the poll goes on until its deadline
                return False

        came_back = {}
        for db in dbs:
            # 3 minutes: in a loaded full run both Etcds restart their six members at once beside the other
            # modules, and 2 minutes proved too short there.
            await aeventually(lambda db=db: serves_new_ca(db), timeout=max(5.0, 180 - (time.monotonic() - replaced)),
                              interval=1, what=f"{db}: every member serving a leaf of the new CA within 3 minutes")
            came_back[db] = time.monotonic() - replaced
        for db in dbs:
            mine = [r for r in await sc.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace)
                    if r["spec"]["databaseRef"]["name"] == db]
            finished = [await sc.watch_request(r["metadata"]["name"], timeout=90) for r in mine]
            assert all(r["status"]["phase"] in constants.TERMINAL_OPS_PHASES for r in finished)
            ok = [r for r in finished if r["status"]["phase"] == constants.PHASE_SUCCESSFUL]
            rescues = [r for r in ok if tlschange.recorded_plan(r)
                       == tls_plans.RotateVariant.RESCUE_CA.value]
            assert len(rescues) == 1, [(r["metadata"]["name"], r["status"]) for r in finished]
            rescue = rescues[0]
            assert "the CA every member loaded has expired" in rescue_condition(rescue)["message"]
            # Whether it waited depends on whether the provisioner had already marked the Etcd not Ready when the
            # request arrived: a request that found it Ready started plainly; one that found it not Ready
            # started as a rescue (apply IfReady does not wait on expired certificates). Either way it never
            # waited for Ready, and the plan is the rescue.
            started = conditions.get_condition(rescue["status"]["conditions"], constants.COND_PENDING)
            assert started is None or started["reason"] in ("StartedAsRescue", "Started"), rescue["status"]
            if db == alone:
                assert rescue["metadata"]["labels"][constants.LABEL_OPS_TRIGGER] == constants.TRIGGER_CA_ROLLOVER
            how = started["message"][:120] if started is not None else "started at once"
            print(f"\n{db}: rescued by {rescue['metadata']['name']} ({how}); every member on "
                  f"the new CA {came_back[db]:.0f}s after the CA Secret was replaced; requests: "
                  f"{[(r['metadata']['name'], r['status']['phase']) for r in finished]}")
    assert pods_alone.restarts() == {p: 1 for p in naming.pods(alone, 3)}, pods_alone.uids
    assert pods_by_hand.restarts() == {p: 1 for p in naming.pods(by_hand, 3)}, pods_by_hand.uids
    for db in dbs:
        await read_keys(sc, db, written[db])
    # Once rescued, the members count as having loaded the new CA (they started after it entered the bundle): a
    # rotate now is the zero-restart one, not another rescue.
    await sc.submit("after-rescue", alone, constants.OPS_TYPE_RECONFIGURE_TLS, tls={"rotateCertificates": True})
    after = await sc.watch_request("after-rescue", timeout=120)
    assert after["status"]["phase"] == constants.PHASE_SUCCESSFUL, after["status"]
    assert tlschange.recorded_plan(after) == tls_plans.RotateVariant.HOT_RELOAD.value
    assert conditions.get_condition(after["status"]["conditions"], constants.COND_RESTART_PODS) is None


async def test_a_valid_cluster_whose_members_are_all_stopped_is_never_rescued(sc: scenario.Scenario) -> None:
    db, issuer = "stopped", "ca-stopped"
    await sc.ca_issuer(issuer)
    await sc.fresh_etcd(db, issuer=issuer, timeout=90)

    async def scanned() -> bool:
        tls = ((await etcd(sc, db)).get("status") or {}).get("tls") or {}
        return len(tls.get("members") or ()) == 3

    await aeventually(scanned, timeout=60, interval=0.5, what="a scan of the valid cluster")
    # Stop every member on purpose (spec.halted: every member pod deleted, volumes and certificates kept).
    await sc.k.patch(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db, {"spec": {"halted": True}})

    async def gone() -> bool:
        found = [await sc.k.get("v1", "Pod", sc.namespace, p) for p in naming.pods(db, 3)]
        return all(p is None for p in found)

    await aeventually(gone, timeout=60, interval=0.5, what="every member pod gone")
    await sc.submit("rotate-stopped", db, constants.OPS_TYPE_RECONFIGURE_TLS, tls={"rotateCertificates": True},
                    apply=constants.APPLY_ALWAYS)

    async def observed() -> str | None:
        req = await sc.request("rotate-stopped") or {}
        return tlschange.recorded_plan(req)

    variant = await aeventually(observed, timeout=60, interval=0.5, what="the rotate's plan observed")
    assert variant == tls_plans.RotateVariant.HOT_RELOAD.value
    req = await sc.request("rotate-stopped") or {}
    assert tlschange.rescue_reason(req) is None
    await sc.k.delete(constants.OPS_API_VERSION, constants.OPS_KIND, sc.namespace, "rotate-stopped")
