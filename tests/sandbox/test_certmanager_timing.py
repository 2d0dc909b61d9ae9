"""The sandbox's cert-manager keeps cert-manager's clock (issue 16).

We test, first as pure functions with an injected "now": a certificate starts at its issuance time (no backdating,
whole seconds) and ends ``duration`` later; a CA issuer cuts a leaf at its CA chain's earliest end, so a leaf of a CA
with a minute left ends with the CA and a leaf of an expired CA is born expired; the renewal time is ``renewBefore``
before the end when that is positive and shorter than the ACTUAL lifetime, else ``renewBeforePercentage``, else 2/3 of
the actual lifetime (cert-manager's ``RenewalTime``), to the second; the back-off after a failed issuance (1 h
doubling to 32 h). The project's own certificates keep ``pki``'s 5-minute backdating.

Then on the real controller (API server over HTTP, informers, work queue): a 9 s leaf renews 6 s after it was
issued and a ``renewBefore: 4s`` one 5 s after, in real time; with the controller's clock moved forward (and the
Certificates touched, so the controller looks again), a 3 m leaf renews at 2 m and a ``renewBefore: 30s`` one at
2 m 30 s; a leaf of a CA with a minute left ends with the CA; a leaf of an expired CA is not stored, fails with
back-off instead of re-issuing in a loop (at once after a spec change), and is issued once the CA is replaced and
``Issuing=True`` is set.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest

from opsmanager import kube, pki
from opsmanager.api import conditions
from opsmanager_sandbox import apiserver as sandbox_apiserver
from opsmanager_sandbox import certmanager as cm
from tests.polling import aeventually

S = datetime.timedelta(seconds=1)
MIN = datetime.timedelta(minutes=1)
NS = "default"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ca_issuer(ca: pki.KeyPair) -> cm.IssuerState:
    secret = {"metadata": {"name": "ca", "namespace": NS},
              "data": {"tls.crt": b64(ca.cert_pem), "tls.key": b64(ca.key_pem)}}
    state = cm.issuer_state({"spec": {"ca": {"secretName": "ca"}}}, secret)
    assert state.ready, state.message
    return state


def want(**spec: Any) -> cm.Desired:
    return cm.desired({"metadata": {"name": "leaf", "namespace": NS},
                       "spec": {"secretName": "leaf-tls", "issuerRef": {"name": "ca"}, "commonName": "leaf", **spec}})


def whole(t: datetime.datetime) -> datetime.datetime:
    return t.replace(microsecond=0)


# -- pure: issuance validity and renewal time ------------------------------------------------------------------------


NOW = datetime.datetime(2026, 12, 1, 3, 0, 0, 250_000, tzinfo=datetime.UTC)  # a fraction of a second on purpose
START = whole(NOW)
LONG_CA = pki.make_ca("long-ca", not_before=NOW - 10 * MIN, not_after=NOW + datetime.timedelta(days=1))


def test_a_three_minute_leaf_starts_at_issuance_and_renews_at_two_minutes() -> None:
    w = want(duration="3m")
    assert cm.issued_validity(w, ca_issuer(LONG_CA), NOW) == (START, START + 3 * MIN)
    assert cm.renewal_time(w, START, START + 3 * MIN) == START + 2 * MIN


def test_renew_before_and_percentage_count_back_from_the_end() -> None:
    end = START + 3 * MIN
    assert cm.renewal_time(want(duration="3m", renewBefore="30s"), START, end) == START + 2 * MIN + 30 * S
    assert cm.renewal_time(want(duration="3m", renewBeforePercentage=25), START, end) == START + 2 * MIN + 15 * S
    # renewBefore wins over the percentage; an out-of-range percentage falls back to 2/3
    assert cm.renewal_time(want(duration="3m", renewBefore="30s", renewBeforePercentage=50), START, end) == \
        START + 2 * MIN + 30 * S
    assert cm.renewal_time(want(duration="3m", renewBeforePercentage=100), START, end) == START + 2 * MIN


def test_renew_before_not_shorter_than_the_lifetime_is_ignored() -> None:
    """cert-manager's rule: renewBefore counts only when 0 < renewBefore < the actual lifetime; otherwise the
    percentage, else 2/3."""
    end = START + 3 * MIN
    assert cm.renewal_time(want(duration="3m", renewBefore="3m"), START, end) == START + 2 * MIN
    assert cm.renewal_time(want(duration="3m", renewBefore="5m"), START, end) == START + 2 * MIN
    assert cm.renewal_time(want(duration="3m", renewBefore="5m", renewBeforePercentage=50), START, end) == \
        START + 90 * S


def test_renewal_time_is_truncated_to_the_second() -> None:
    # 10 s / 3 is 3.33 s: renewal at 6.67 s, stored (and acted on) as 6 s, as cert-manager truncates it
    assert cm.renewal_time(want(duration="10s"), START, START + 10 * S) == START + 6 * S


def test_a_leaf_of_a_ca_with_a_minute_left_ends_with_the_ca() -> None:
    ca = pki.make_ca("short-ca", not_before=NOW - 10 * MIN, not_after=NOW + MIN)
    ca_end = pki.cert_info(ca.cert_pem).not_after
    assert ca_end == START + MIN
    w = want(duration="3m")
    assert cm.issued_validity(w, ca_issuer(ca), NOW) == (START, ca_end)
    # the renewal time follows the ACTUAL (cut) lifetime: 2/3 of 1 m, and renewBefore 2 m (> 1 m) is ignored
    assert cm.renewal_time(w, START, ca_end) == START + 40 * S
    assert cm.renewal_time(want(duration="3m", renewBefore="2m"), START, ca_end) == START + 40 * S
    assert cm.renewal_time(want(duration="3m", renewBefore="30s"), START, ca_end) == START + 30 * S


def test_the_earliest_end_in_the_ca_chain_caps_the_leaf() -> None:
    root = pki.make_ca("root", not_before=NOW - 10 * MIN, not_after=NOW + 2 * MIN)
    inter = pki.make_leaf(root, "intermediate", is_ca=True, usages=(), not_before=NOW - 10 * MIN,
                          not_after=NOW + datetime.timedelta(hours=1))
    state = ca_issuer(pki.KeyPair(inter.cert_pem + root.cert_pem, inter.key_pem))
    assert cm.issued_validity(want(duration="3m"), state, NOW) == (START, START + 2 * MIN)


def test_a_leaf_of_an_expired_ca_is_born_expired() -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca("expired-ca", not_before=now - 10 * MIN, not_after=now - MIN)
    pair, ca_pem = cm.sign(want(duration="3m"), ca_issuer(ca), now)
    info = pki.cert_info(pair.cert_pem)
    assert (info.not_before, info.not_after) == (whole(now), whole(now - MIN))
    assert info.not_after < info.not_before  # born expired, yet signed by the CA with a matching key
    assert pki.signed_by(pair.cert_pem, ca.cert_pem) and pki.key_matches_cert(pair.cert_pem, pair.key_pem)


def test_signed_certificates_carry_exactly_the_issuance_validity() -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca("ca")
    for state in (ca_issuer(ca), cm.issuer_state({"spec": {"selfSigned": {}}}, None)):
        pair, _ = cm.sign(want(duration="3m"), state, now)
        info = pki.cert_info(pair.cert_pem)
        assert (info.not_before, info.not_after) == (whole(now), whole(now) + 3 * MIN), state.kind


def test_a_self_signed_certificate_is_not_capped() -> None:
    state = cm.issuer_state({"spec": {"selfSigned": {}}}, None)
    assert cm.issued_validity(want(duration="9000h"), state, NOW) == (START, START + datetime.timedelta(hours=9000))


def test_the_projects_own_certificates_keep_a_small_backdating() -> None:
    before = datetime.datetime.now(datetime.UTC)
    info = pki.cert_info(pki.make_leaf(pki.make_ca(), "own", duration=10 * MIN).cert_pem)
    assert whole(before) - pki.BACKDATE <= info.not_before <= datetime.datetime.now(datetime.UTC) - pki.BACKDATE
    assert info.not_after - info.not_before == 10 * MIN + pki.BACKDATE
    assert pki.validity(10 * MIN, now=NOW) == (START - pki.BACKDATE, START + 10 * MIN)
    assert pki.validity(10 * MIN, not_before=NOW) == (START, START + 10 * MIN)


def test_failure_backoff_doubles_from_an_hour_to_32_hours() -> None:
    hours = [cm.failure_backoff(n) / datetime.timedelta(hours=1) for n in (1, 2, 3, 4, 5, 6, 7, 50)]
    assert hours == [1, 2, 4, 8, 16, 32, 32, 32]


# -- the real controller ----------------------------------------------------------------------------------------------


class Clock:
    """The controller's clock: real time shifted by ``offset`` (moved by the test, never slept through)."""

    def __init__(self) -> None:
        self.offset = datetime.timedelta(0)

    def __call__(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC) + self.offset

    def move_to(self, moment: datetime.datetime) -> None:
        self.offset += moment - self()


class CertManager:
    def __init__(self, client: kube.Kube, controller: cm.Controller, clock: Clock) -> None:
        self.client, self.controller, self.clock = client, controller, clock
        self._pokes = 0

    async def install_ca(self, name: str, ca: pki.KeyPair) -> None:
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-key-pair", "namespace": NS},
                  "type": "kubernetes.io/tls", "data": {"tls.crt": b64(ca.cert_pem), "tls.key": b64(ca.key_pem)}}
        old = await self.client.get("v1", "Secret", NS, f"{name}-key-pair")
        if old is None:
            await self.client.create(secret)
            await self.client.create({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                                      "metadata": {"name": name, "namespace": NS},
                                      "spec": {"ca": {"secretName": f"{name}-key-pair"}}})
        else:
            secret["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            await self.client.replace(secret)

    async def certificate(self, name: str, issuer: str, **spec: Any) -> None:
        await self.client.create({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                                  "metadata": {"name": name, "namespace": NS},
                                  "spec": {"secretName": f"{name}-tls", "commonName": name,
                                           "issuerRef": {"name": issuer, "kind": "Issuer"}, **spec}})

    async def get(self, name: str) -> dict[str, Any]:
        return await self.client.get("cert-manager.io/v1", "Certificate", NS, name)

    async def issued(self, name: str, revision: int) -> dict[str, Any] | None:
        """The Certificate once ``revision`` has been issued and it is Ready, else None."""
        c = await self.get(name)
        st = c.get("status") or {}
        ready = cond(c, "Ready").get("status") == "True" and not cond(c, "Issuing")
        return c if st.get("revision", 0) >= revision and ready else None

    async def poke(self, *names: str) -> None:
        """Touch the Certificates (an annotation), so the controller looks at them again on its (moved) clock."""
        self._pokes += 1
        for name in names:
            await self.client.patch("cert-manager.io/v1", "Certificate", NS, name,
                                    {"metadata": {"annotations": {"test/poke": str(self._pokes)}}})


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((dict(c) for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == type_), {})


def status_time(c: dict[str, Any], field: str) -> datetime.datetime:
    return conditions.parse_rfc3339(c["status"][field])


@pytest.fixture
async def cert_manager(apiserver_async: sandbox_apiserver.APIServer) -> AsyncIterator[CertManager]:
    """The sandbox's cert-manager controller alone (no kubelet), on an API server over HTTP, with a movable clock."""
    client = kube.Kube.for_url(apiserver_async.url)
    clock = Clock()
    controller = cm.Controller(client, clock=clock)
    await controller.start()
    try:
        yield CertManager(client, controller, clock)
    finally:
        await controller.stop()
        await client.aclose()


@pytest.mark.slow
async def test_real_time_renewal_at_two_thirds_and_at_renew_before(cert_manager: CertManager) -> None:
    """A 9 s leaf renews 6 s after its issuance (2/3) and a 9 s leaf with renewBefore 4 s renews 5 s after, measured
    by the notBefore of the next certificate (whole seconds: up to 1 s of work queue and signing latency)."""
    cmgr = cert_manager
    await cmgr.install_ca("ca", pki.make_ca("timing-ca"))
    await cmgr.certificate("default-renewal", "ca", duration="9s")
    await cmgr.certificate("renew-before", "ca", duration="9s", renewBefore="4s")
    first = {n: await aeventually(lambda n=n: cmgr.issued(n, 1), timeout=10, what=f"{n} issued")
             for n in ("default-renewal", "renew-before")}
    for name, after in (("default-renewal", 6), ("renew-before", 5)):
        nb = status_time(first[name], "notBefore")
        assert status_time(first[name], "notAfter") == nb + 9 * S
        assert status_time(first[name], "renewalTime") == nb + after * S
    second = {n: await aeventually(lambda n=n: cmgr.issued(n, 2), timeout=15, what=f"{n} renewed")
              for n in ("default-renewal", "renew-before")}
    for name, after in (("default-renewal", 6), ("renew-before", 5)):
        renewed_after = status_time(second[name], "notBefore") - status_time(first[name], "notBefore")
        assert after * S <= renewed_after <= (after + 1) * S, (name, renewed_after)


@pytest.mark.slow
async def test_minutes_on_the_controllers_clock(cert_manager: CertManager) -> None:
    """A 3 m leaf renews at 2 m, a renewBefore 30 s one at 2 m 30 s, on the controller's clock moved forward; a leaf
    of a CA with a minute left ends with the CA."""
    cmgr = cert_manager
    now = cmgr.clock()
    await cmgr.install_ca("ca", pki.make_ca("timing-ca", not_before=now - 10 * MIN,
                                            not_after=now + datetime.timedelta(hours=1)))
    await cmgr.certificate("three-minutes", "ca", duration="3m")
    await cmgr.certificate("thirty-seconds-before", "ca", duration="3m", renewBefore="30s")
    a1 = await aeventually(lambda: cmgr.issued("three-minutes", 1), timeout=10)
    b1 = await aeventually(lambda: cmgr.issued("thirty-seconds-before", 1), timeout=10)
    nb_a, nb_b = status_time(a1, "notBefore"), status_time(b1, "notBefore")
    assert status_time(a1, "renewalTime") == nb_a + 2 * MIN
    assert status_time(b1, "renewalTime") == nb_b + 2 * MIN + 30 * S

    cmgr.clock.move_to(nb_a + 2 * MIN - 1.5 * S)
    await cmgr.poke("three-minutes", "thirty-seconds-before")
    a2 = await aeventually(lambda: cmgr.issued("three-minutes", 2), timeout=10, what="renewal at 2 m")
    assert 2 * MIN <= status_time(a2, "notBefore") - nb_a <= 2 * MIN + 1 * S
    assert (await cmgr.get("thirty-seconds-before"))["status"]["revision"] == 1  # its time is 30 s away

    cmgr.clock.move_to(nb_b + 2 * MIN + 30 * S - 1.5 * S)
    await cmgr.poke("thirty-seconds-before")
    b2 = await aeventually(lambda: cmgr.issued("thirty-seconds-before", 2), timeout=10, what="renewal at 2 m 30 s")
    assert 2 * MIN + 30 * S <= status_time(b2, "notBefore") - nb_b <= 2 * MIN + 31 * S

    now = cmgr.clock()
    ca_end = whole(now + MIN)
    await cmgr.install_ca("short", pki.make_ca("short-ca", not_before=now - 10 * MIN, not_after=ca_end))
    await cmgr.certificate("capped", "short", duration="3m")
    c1 = await aeventually(lambda: cmgr.issued("capped", 1), timeout=10)
    nb_c = status_time(c1, "notBefore")
    assert status_time(c1, "notAfter") == ca_end
    assert pki.cert_info(await secret_crt(cmgr, "capped-tls")).not_after == ca_end
    assert status_time(c1, "renewalTime") == whole(ca_end - (ca_end - nb_c) / 3)


async def secret_crt(cmgr: CertManager, name: str) -> bytes:
    return base64.b64decode((await cmgr.client.get("v1", "Secret", NS, name))["data"]["tls.crt"])


@pytest.mark.slow
async def test_a_leaf_of_an_expired_ca_fails_with_backoff_and_is_issued_after_the_ca_is_replaced(
        cert_manager: CertManager) -> None:
    cmgr = cert_manager
    now = cmgr.clock()
    await cmgr.install_ca("old", pki.make_ca("expired-ca", not_before=now - 10 * MIN, not_after=now - MIN))
    await cmgr.certificate("orphan", "old", duration="3m")

    async def failed() -> dict[str, Any] | None:
        c = await cmgr.get("orphan")
        return c if cond(c, "Issuing").get("status") == "False" else None

    c = await aeventually(failed, timeout=10, what="issuance failing on the expired CA")
    assert cond(c, "Issuing")["reason"] == "InvalidCertificate" and "expired on" in cond(c, "Issuing")["message"]
    assert cond(c, "Ready")["status"] == "False" and cond(c, "Ready")["reason"] == "DoesNotExist"
    assert c["status"]["failedIssuanceAttempts"] == 1 and "revision" not in c["status"]
    last_failure = status_time(c, "lastFailureTime")
    assert await cmgr.client.get("v1", "Secret", NS, "orphan-tls") is None  # the born-expired leaf is not stored

    async def attempts(n: int) -> dict[str, Any] | None:
        c = await cmgr.get("orphan")
        return c if (c.get("status") or {}).get("failedIssuanceAttempts") == n else None

    # a spec change is retried at once (cert-manager: the next request no longer matches the spec) ...
    await cmgr.client.patch("cert-manager.io/v1", "Certificate", NS, "orphan", {"spec": {"duration": "4m"}})
    c = await aeventually(lambda: attempts(2), timeout=10, what="a retry after the spec change")
    second_failure = status_time(c, "lastFailureTime")
    assert second_failure - last_failure < MIN

    # ... otherwise cert-manager's back-off holds: 2 h after a second failure (1 h after a first), not a loop
    cmgr.clock.move_to(second_failure + datetime.timedelta(hours=2) - 1.5 * S)
    await cmgr.poke("orphan")
    c = await aeventually(lambda: attempts(3), timeout=10, what="the retry after the back-off")
    assert status_time(c, "lastFailureTime") - second_failure >= datetime.timedelta(hours=2)

    # a new CA in the issuer's Secret and cmctl renew (Issuing=True) issue at once, and clear the failure
    now = cmgr.clock()
    new_ca = pki.make_ca("new-ca", not_before=now - MIN, not_after=now + datetime.timedelta(days=1))
    await cmgr.install_ca("old", new_ca)
    await aeventually(lambda: controller_sees(cmgr, "old-key-pair", new_ca), timeout=10,
                      what="the controller seeing the new CA")
    c = await cmgr.get("orphan")
    c["status"]["conditions"] = [x for x in c["status"]["conditions"] if x["type"] != "Issuing"] + [
        {"type": "Issuing", "status": "True", "reason": "ManuallyTriggered", "message": "cmctl renew",
         "lastTransitionTime": conditions.rfc3339(now)}]
    await cmgr.client.replace(c, subresource="status")
    c = await aeventually(lambda: cmgr.issued("orphan", 1), timeout=10, what="issued from the new CA")
    assert "lastFailureTime" not in c["status"] and "failedIssuanceAttempts" not in c["status"]
    assert pki.signed_by(await secret_crt(cmgr, "orphan-tls"), new_ca.cert_pem)


def controller_sees(cmgr: CertManager, secret: str, ca: pki.KeyPair) -> bool:
    """The controller's Secret informer holds the new CA (so ``Issuing=True`` signs with it, not the expired one)."""
    cached = cmgr.controller.secrets.get(NS, secret) or {}
    return bool((cached.get("data") or {}).get("tls.crt") == b64(ca.cert_pem))
