"""The scan triggers fire from the operator client's caches, and the operator's wiring watches each kind once.

Against the sandbox's API server over real HTTP, with the operator's own client (``operator.make_client``: its
caches and their selections) and ``request_scan`` recorded instead of written. We test these aspects:
- requests: at the first listing, one scan per Etcd after its latest ended request; later, a request's end seen
  from the client's own write (at once) and from the feeding watch's events (kopf's, fed by hand here), at the end
  + 1 s; a later change of an ended request requests nothing; a stopped trigger requests nothing;
- certificates: the first listing requests nothing; a re-issued ``server`` certificate of the operator's requests a
  scan SECRET_CHANGE_DELAY later; a ``client`` certificate or one without the operator's label does not;
- the operator's wiring (``make_client``, ``build_registry`` and its startup handlers, kopf itself not running)
  opens one watch per cached kind and none of the kinds kopf's watch feeds, triggers included.
"""

from __future__ import annotations

import datetime
import logging
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf
import pytest

from opsmanager import kube, operator
from opsmanager.api import constants, crdgen
from opsmanager.cluster import naming
from opsmanager.kube import informer
from opsmanager.lifecycle import triggers
from opsmanager_sandbox import apiserver as sandbox_apiserver
from tests.polling import aeventually

NS = "trig"
OPS = (constants.OPS_API_VERSION, constants.OPS_KIND)
SECOND = datetime.timedelta(seconds=1)
Requested = list[tuple[str, str, datetime.datetime]]


def at(minute: int) -> datetime.datetime:
    return datetime.datetime(2026, 12, 1, 0, minute, tzinfo=datetime.UTC)


def ended(phase: str, when: datetime.datetime) -> dict[str, Any]:
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"phase": phase, "conditions": [
        {"type": phase, "status": "True", "reason": phase, "message": "", "lastTransitionTime": stamp}]}}


async def ops_request(admin: kube.Kube, name: str, db: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = await admin.create({"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
                              "metadata": {"name": name, "namespace": NS},
                              "spec": {"type": constants.OPS_TYPE_RESTART, "databaseRef": {"name": db}}})
    if status is not None:
        obj = await admin.patch(*OPS, NS, name, status, subresource="status")
    return obj


async def certificate(admin: kube.Kube, name: str, component: str, *, managed: bool = True) -> None:
    labels = {naming.LABEL_INSTANCE: "db1", naming.LABEL_COMPONENT: component}
    if managed:
        labels[naming.LABEL_MANAGED_BY] = naming.MANAGED_BY
    await admin.create({"apiVersion": triggers.CERT_MANAGER_API, "kind": "Certificate",
                        "metadata": {"name": name, "namespace": NS, "labels": labels},
                        "spec": {"secretName": name, "issuerRef": {"name": "ca"}}})
    await reissue(admin, name, 1)


async def reissue(admin: kube.Kube, name: str, revision: int) -> None:
    await admin.patch(triggers.CERT_MANAGER_API, "Certificate", NS, name,
                      {"status": {"revision": revision, "notAfter": f"2027-01-0{revision}T00:00:00Z"}},
                      subresource="status")


class World:
    def __init__(self, server: sandbox_apiserver.APIServer, admin: kube.Kube, kubeconfig: Path,
                 requested: Requested) -> None:
        self.server, self.admin, self.kubeconfig, self.requested = server, admin, kubeconfig, requested

    def client(self) -> kube.CachedKube:
        return operator.make_client(str(self.kubeconfig), [NS])


@pytest.fixture
async def world(apiserver_async: sandbox_apiserver.APIServer, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    await apiserver_async.apply_objects([*(crdgen.crd(spec) for spec in crdgen.CRDS),
                                         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
    requested: Requested = []

    async def request_scan(_k: kube.Kube, namespace: str, name: str, when: datetime.datetime) -> bool:
        requested.append((namespace, name, when))
        return True

    monkeypatch.setattr(triggers, "request_scan", request_scan)
    admin = kube.Kube.for_url(apiserver_async.url)
    try:
        yield World(apiserver_async, admin, apiserver_async.write_kubeconfig(tmp_path / "kubeconfig"), requested)
    finally:
        await admin.aclose()


async def test_a_request_that_ended_requests_a_scan_from_the_cache_of_requests(world: World) -> None:
    await ops_request(world.admin, "old-1", "db1", ended(constants.PHASE_SUCCESSFUL, at(1)))
    await ops_request(world.admin, "old-2", "db1", ended(constants.PHASE_FAILED, at(2)))
    await ops_request(world.admin, "live", "db2", {"status": {"phase": constants.PHASE_PROGRESSING}})
    client = world.client()
    trigger = triggers.RequestTrigger(client, namespaces=[NS])
    trigger.start()
    try:
        await client.start()
        assert await client.wait_synced(10)
        await aeventually(lambda: world.requested, what="the scan after the listed ends")
        assert world.requested == [(NS, "db1", at(2) + SECOND)], "one per Etcd, after its latest end"

        # the operator ends a request: its own write is seen at once
        await client.patch(*OPS, NS, "live", ended(constants.PHASE_SUCCESSFUL, at(3)), subresource="status")
        await aeventually(lambda: len(world.requested) == 2, what="the scan after the operator's own end")
        assert world.requested[-1] == (NS, "db2", at(3) + SECOND)

        # a request ended by anyone else comes from the feeding watch (kopf's), fed here by hand
        client.feed("ADDED", await ops_request(world.admin, "other", "db3"))
        done = await world.admin.patch(*OPS, NS, "other", ended(constants.PHASE_SKIPPED, at(4)), subresource="status")
        client.feed("MODIFIED", done)
        await aeventually(lambda: len(world.requested) == 3, what="the scan after a fed end")
        assert world.requested[-1] == (NS, "db3", at(4) + SECOND)
        relabelled = await world.admin.patch(*OPS, NS, "other", {"metadata": {"labels": {"a": "b"}}})
        client.feed("MODIFIED", relabelled)  # a later change of an ended request
        client.feed("MODIFIED", await world.admin.get(*OPS, NS, "old-1"))  # what kopf's listing says again
        await trigger.stop()
        await client.patch(*OPS, NS, "other", {"metadata": {"labels": {"a": "c"}}})
        await client.patch(*OPS, NS, "old-2", ended(constants.PHASE_SUCCESSFUL, at(5)), subresource="status")
        assert len(world.requested) == 3 and not trigger._tasks
    finally:
        await trigger.stop()
        await client.stop()
        await client.aclose()


async def test_a_reissued_certificate_of_the_operators_requests_a_scan_from_the_cache_of_certificates(
        world: World) -> None:
    for name, component in (("db1-server", "server"), ("db1-client", "client")):
        await certificate(world.admin, name, component)
    await certificate(world.admin, "db1-foreign", "server", managed=False)
    client = world.client()
    trigger = triggers.CertificateTrigger(client, namespaces=[NS])
    trigger.start()
    try:
        await client.start()
        assert await client.wait_synced(10)
        await reissue(world.admin, "db1-foreign", 2)  # not ours: not in the (labelled) cache
        await reissue(world.admin, "db1-client", 2)  # ours, not scanned: in the same watch's stream, before
        before = datetime.datetime.now(datetime.UTC)
        await reissue(world.admin, "db1-server", 2)
        await aeventually(lambda: world.requested, what="the scan after the re-issue")
        after = datetime.datetime.now(datetime.UTC)
        [(namespace, etcd, when)] = world.requested  # the first listing requested nothing
        assert (namespace, etcd) == (NS, "db1")
        assert before + triggers.SECRET_CHANGE_DELAY <= when <= after + triggers.SECRET_CHANGE_DELAY
    finally:
        await trigger.stop()
        await client.stop()
        await client.aclose()


async def run_activities(registry: kopf.OperatorRegistry, activity: str, client: kube.Kube,
                         only: tuple[str, ...] | None = None) -> None:
    for handler in registry._activities.get_all_handlers():
        if handler.activity == activity and (only is None or handler.id in only):
            await handler.fn(settings=kopf.OperatorSettings(), logger=logging.getLogger(__name__),
                             memo=operator.make_memo(client))


async def test_the_operators_wiring_watches_each_kind_once(world: World) -> None:
    client = world.client()
    registry = operator.build_registry(None, client, interval=60.0, namespaces=[NS])
    cached = {(s.kind, s.namespace) for s in client.informers() if not isinstance(s, informer.FedInformer)}
    try:
        await run_activities(registry, "startup", client)  # starts the client and the triggers
        assert await client.wait_synced(10)

        def watched() -> Counter[tuple[str, str]]:
            return Counter((r.resource, r.namespace) for r in world.server.audit.records() if r.verb == "watch")

        # every cache's watch is open (each opens right after its list)
        await aeventually(lambda: len(watched()) >= len(cached), what="every cache's watch")
        counts = watched()
        assert all(n == 1 for n in counts.values()), counts
        assert counts[("certificates", NS)] == 1, "the Certificate trigger shares the cache's watch"
        assert counts[(constants.OPS_PLURAL, NS)] == counts[(constants.ETCD_PLURAL, NS)] == 0, \
            "EtcdOpsRequests and Etcds: kopf's watch is the one, it feeds the caches"
    finally:
        await run_activities(registry, "cleanup", client, only=("tls-scan-triggers-stop",))
        await client.stop()
        await client.aclose()
