"""The world the fast engine tests run the ops engine in: the sandbox API server in-process, no kubelet, no etcd.

What is real: the engine (every step module, the plan, the queue, the status writes), the operator's
``kube.Kube`` client talking HTTP over loopback to the sandbox :class:`~opsmanager_sandbox.apiserver.APIServer`
(objects, status subresources, optimistic locks, the Eviction API), certificates made by :mod:`opsmanager.pki`.

What is played, by :meth:`World.settle` — called after every reconcile, so it is deterministic and never sleeps:

- the StatefulSet controller: ``status.observedGeneration`` / ``updateRevision`` (a hash of the pod template);
- the kubelet: a pod that was deleted is recreated one settle later (it is missing during one reconcile, as a
  restarting member is), on the update revision, Ready, with a fresh podIP;
- cert-manager: a Certificate with no Secret, a changed spec or ``Issuing=True`` gets a Secret with a fresh leaf
  from its issuer's CA (one CA per issuer name), ``Ready=True`` and ``revision + 1`` — its *source* Secret
  (``<db>-<alias>-issued``): the pods mount the Secrets the operator releases through the gate, as in production;
- etcd: a :class:`~tests.fakes.etcd.FakeCluster` — a member stops when its pod is deleted and starts when the
  pod is recreated, serving the certificates of the Secrets its pod template mounts;
- the volumes (:class:`Volumes`): each member's data claim (from the StatefulSet's claim template), its resize
  (``Resizing``, then ``FileSystemResizePending``, then the capacity — online while mounted, or only at the next
  mount with :attr:`Volumes.offline_only`), and the kubelet's statfs of each mounted data volume, answered for
  ``GET /api/v1/nodes/<node>/proxy/stats/summary`` (every pod runs on :data:`NODE`);
- the kubelet's volume refresh and etcd's hot reload of its leaf: a running member serves whatever leaf its pod's
  Secrets hold now (one settle after a change), except a pod annotated with the sandbox kubelet's test-only
  ``sandbox.opsmanager.dev/hold-volume-refresh: "true"``, which keeps serving what it had (a stale member).

It also records what the tests assert: every pod (re)creation, how many pods were missing at once, and which
member was the leader when its pod went away.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from opsmanager import kube, pki
from opsmanager.api import catalog, conditions, constants, crdgen
from opsmanager.api import etcd as etcd_api
from opsmanager.api import pause as pause_api
from opsmanager.cluster import naming, render, statefulset, volumes
from opsmanager.etcd import access, client
from opsmanager.ops import engine
from opsmanager.tls import material, release
from opsmanager_sandbox import apiserver as sandbox_apiserver
from opsmanager_sandbox import kubelet as sandbox_kubelet
from opsmanager_sandbox import statefulset as sandbox_statefulset
from tests.fakes import etcd as fake

NS = "ops"
NODE = "node-0"  # where every member pod runs (the kubelet whose stats summary reports the data volumes)
FILESYSTEM_SHARE = 0.97  # of a volume, what its filesystem reports (ext4 keeps the rest for itself)
CERT_API = "cert-manager.io/v1"
ISSUER = {"apiGroup": "cert-manager.io", "kind": "Issuer"}
Obj = dict[str, Any]


# A step that waits for the clock (real time plus the test's offset) — the CA rescue waits for the second of its trust
# bundle write to pass, the queue trusts an expiry observation for 5 s — must not run out of reconciles on a fast
# machine, nor on a loaded one where those waits start late: the budget is reconciles AND this long. (A finished
# request ends the loop at once; only a failing test waits this long.)
MIN_REAL_SECONDS = 30.0


class Crash(BaseException):
    """The operator process dies here (not an ``Exception``: nothing in the engine may catch it)."""


class FakeClock:
    """The engine's clock: real time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = datetime.timedelta()

    def __call__(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += datetime.timedelta(seconds=seconds)


class CrashingKube(kube.Kube):
    """The operator's client, dying once at chosen points: ``before``/``after evict <pod>``; ``in-flight <type>``
    and ``done <type>`` right after the status write that first shows a request condition False (the in-flight
    mark written before the step acts) or True (the step's end). One status write records several conditions (the
    engine queues a reconcile's changes), so a crash after it is the moment of every point it shows: they are all
    taken at once. It also counts the request's status writes (``status_writes``) and records each eviction's grace
    (``evicted_with``: (pod, grace or None), in order)."""

    crash: Callable[[str], None] = staticmethod(lambda point: None)

    on_evict: Callable[[str], None] = staticmethod(lambda pod: None)

    armed: Callable[[str], bool] = staticmethod(lambda point: False)

    evicted_with: list[tuple[str, int | None]]

    async def evict(self, namespace: str, pod: str, *, grace_period_seconds: int | None = None) -> None:
        self.on_evict(pod)
        self.evicted_with.append((pod, grace_period_seconds))
        self.crash(f"before evict {pod}")
        if self.armed(f"midway evict {pod}"):
            if not await self._admit_only(namespace, pod):
                # as the server decides from the status just read (the controller may change it before a second
                # look, and the eviction would then go through whole)
                raise kube.TooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.")
            self.crash(f"midway evict {pod}")
        await super().evict(namespace, pod, grace_period_seconds=grace_period_seconds)
        self.crash(f"after evict {pod}")

    async def _admit_only(self, namespace: str, pod: str) -> bool:
        """The first half of kube-apiserver's eviction — the budget counts the pod as disrupted — without the
        second (the pod's delete): what a client that went away between the two leaves. False when the budget
        would refuse (then nothing is written, as on the server)."""
        labels = ((await super().get("v1", "Pod", namespace, pod) or {}).get("metadata") or {}).get("labels") or {}
        for pdb in await super().list("policy/v1", "PodDisruptionBudget", namespace):
            match = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            status = pdb.get("status") or {}
            if not match or any(labels.get(k) != v for k, v in match.items()):
                continue
            if int(status.get("disruptionsAllowed", 0)) <= 0:
                return False
            await super().patch("policy/v1", "PodDisruptionBudget", namespace, pdb["metadata"]["name"], {
                "status": {"disruptionsAllowed": int(status["disruptionsAllowed"]) - 1,
                           "disruptedPods": {pod: conditions.rfc3339(datetime.datetime.now(datetime.UTC))}}},
                subresource="status")
            return True
        return False

    on_delete_pod: Callable[[str], None] = staticmethod(lambda pod: None)

    async def delete(self, api_version: str, kind: str, namespace: str | None, name: str, **kw: Any) -> bool:
        """A pod deleted outright (the CA rescue's restart of every member): ``before``/``after delete <pod>``."""
        if kind != "Pod":
            return await super().delete(api_version, kind, namespace, name, **kw)
        self.crash(f"before delete {name}")
        gone = await super().delete(api_version, kind, namespace, name, **kw)
        if gone:
            self.on_delete_pod(name)
        self.crash(f"after delete {name}")
        return gone

    stats_summary: Callable[[], Obj] = staticmethod(lambda: {"pods": []})

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        """The kubelet's stats summary through the API server's node proxy, from the world's :class:`Volumes`."""
        if method == "GET" and path == f"/api/v1/nodes/{NODE}/proxy/stats/summary":
            return self.stats_summary()
        return await super().request(method, path, **kw)

    crash_after_write: Callable[[list[str]], None] = staticmethod(lambda points: None)
    status_writes: int = 0  # PATCHes of an EtcdOpsRequest's status
    # While ``recording`` (the engine reconciles, :meth:`World.run`): every PATCH or PUT that left its object as it
    # was ("PATCH EtcdOpsRequest/add-tls status").
    recording: bool = False
    unchanged_writes: list[str]

    async def _unchanged(self, verb: str, api_version: str, kind: str, namespace: str | None, name: str,
                         subresource: str | None, write: Callable[[], Awaitable[Obj]]) -> Obj:
        if not self.recording:
            return await write()
        before = await super().get(api_version, kind, namespace, name)
        after = await write()
        if _content(before) == _content(after):
            self.unchanged_writes.append(f"{verb} {kind}/{name}{' ' + subresource if subresource else ''}")
        return after

    async def patch(self, api_version: str, kind: str, namespace: str | None, name: str, patch: Any, *,
                    subresource: str | None = None, patch_type: str = "merge") -> Obj:
        if kind == constants.OPS_KIND and subresource == "status":
            self.status_writes += 1
        return await self._unchanged("PATCH", api_version, kind, namespace, name, subresource, lambda: super(
            CrashingKube, self).patch(api_version, kind, namespace, name, patch, subresource=subresource,
                                      patch_type=patch_type))

    async def replace(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        meta = obj["metadata"]
        return await self._unchanged("PUT", obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"],
                                     subresource, lambda: super(CrashingKube, self).replace(obj,
                                                                                           subresource=subresource))

    async def transact_status(self, api_version: str, kind: str, namespace: str | None, name: str,
                              *mutations: Callable[[Obj], Obj], attempts: int = 8) -> Obj | None:
        result = await super().transact_status(api_version, kind, namespace, name, *mutations, attempts=attempts)
        if kind == constants.OPS_KIND and result is not None:
            shown = []
            for cond in (result.get("status") or {}).get("conditions") or []:
                what = {constants.FALSE: "in-flight", constants.TRUE: "done"}.get(cond.get("status"))
                if what:
                    shown.append(f"{what} {cond['type']}")
            self.crash_after_write(shown)
        return result


def _content(obj: Obj | None) -> Obj | None:
    """An object without what every write changes (its resourceVersion, managed fields)."""
    if obj is None:
        return None
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": meta}


class CrashingAdmin(fake.FakeAdmin):
    """The fake etcd admin, dying once at a chosen point around MoveLeader or a member update."""

    def __init__(self, world: World, endpoints: Sequence[access.Endpoint], tls: access.TLSIdentity | None) -> None:
        assert world.cluster is not None
        super().__init__(world.cluster, endpoints, tls)
        self.world = world

    def _name(self, member_id: int) -> str:
        member = self.cluster.by_id(member_id)
        return member.name if member is not None else format(member_id, "x")

    async def move_leader(self, target_id: int, **kw: Any) -> client.LeaderMove:
        self.world.maybe_crash(f"before move_leader {self._name(target_id)}")
        result = await super().move_leader(target_id, **kw)
        self.world.maybe_crash(f"after move_leader {self._name(target_id)}")
        return result

    async def member_update(self, member_id: int, peer_urls: Sequence[str], **kw: Any) -> list[client.Member]:
        self.world.maybe_crash(f"before member_update {self._name(member_id)}")
        result = await super().member_update(member_id, peer_urls, **kw)
        self.world.maybe_crash(f"after member_update {self._name(member_id)}")
        return result

    async def member_add(self, peer_urls: Sequence[str], **kw: Any) -> tuple[client.Member, list[client.Member]]:
        added = await super().member_add(peer_urls, **kw)
        self.world.maybe_crash(f"after member_add {self._name(added[0].id)}")
        return added

    async def member_remove(self, member_id: int, **kw: Any) -> list[client.Member]:
        name = self._name(member_id)
        result = await super().member_remove(member_id, **kw)
        self.world.maybe_crash(f"after member_remove {name}")
        return result


class Volumes:
    """The storage the members' claims get: a resizer and a kubelet that grow them, and the kubelet's statfs."""

    def __init__(self, client: kube.Kube) -> None:
        self.kube = client
        self.offline_only = False  # True: a filesystem grows only when its pod is created again (offline expansion)
        self.filesystems: dict[str, int] = {}  # pod -> bytes its data filesystem reports
        self.summaries = 0  # stats summary requests answered

    async def storage_class(self, name: str, *, expandable: bool = True) -> None:
        await self.kube.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                               "provisioner": "sandbox.opsmanager.dev/loop", "allowVolumeExpansion": expandable,
                               "volumeBindingMode": "WaitForFirstConsumer"})

    def summary(self) -> Obj:
        self.summaries += 1
        return {"node": {"nodeName": NODE}, "pods": [
            {"podRef": {"name": pod, "namespace": NS}, "volume": [{"name": naming.DATA_VOLUME, "capacityBytes": size}]}
            for pod, size in self.filesystems.items()]}

    async def settle(self, sts: Obj, live: dict[str, Obj]) -> None:
        """Claims for the StatefulSet's pods, and one step of each resize under way."""
        for pod in live:
            if not pod.startswith(f"{sts['metadata']['name']}-"):
                continue
            for body in sandbox_statefulset.new_claims(sts, pod):
                claim = await self.kube.get("v1", "PersistentVolumeClaim", NS, body["metadata"]["name"])
                if claim is None:
                    size = body["spec"]["resources"]["requests"]["storage"]
                    claim = await self.kube.create(body)
                    await self._status(claim, {"phase": "Bound", "capacity": {"storage": size}, "conditions": []})
                    self.filesystems[pod] = int(volumes.size_bytes(size) * FILESYSTEM_SHARE)
                    continue
                await self._resize(claim, pod, mounted=False)

    async def mounted(self, pod: str) -> None:
        """A pod created again mounts its volume: a pending filesystem resize completes."""
        claim = await self.kube.get("v1", "PersistentVolumeClaim", NS, volumes.claim_name(pod))
        if claim is not None:
            await self._resize(claim, pod, mounted=True)

    async def _resize(self, claim: Obj, pod: str, *, mounted: bool) -> None:
        state = volumes.Claim.of(claim)
        if state.requested <= state.capacity:
            return
        if not state.conditions:
            await self._status(claim, {"conditions": [{"type": volumes.RESIZING, "status": "True"}]})
        elif state.resizing:
            await self._status(claim, {"conditions": [{"type": volumes.FILESYSTEM_RESIZE_PENDING, "status": "True"}]})
        elif mounted or not self.offline_only:
            size = claim["spec"]["resources"]["requests"]["storage"]
            await self._status(claim, {"capacity": {"storage": size}, "conditions": []})
            self.filesystems[pod] = int(state.requested * FILESYSTEM_SHARE)

    async def _status(self, claim: Obj, change: Obj) -> None:
        await self.kube.transact_status("v1", "PersistentVolumeClaim", NS, claim["metadata"]["name"],
                                        lambda st: {**st, **change})


@dataclasses.dataclass
class Record:
    creations: dict[str, int] = dataclasses.field(default_factory=dict)  # pod -> times (re)created by us
    max_missing: int = 0
    restarted_while_leader: list[str] = dataclasses.field(default_factory=list)
    evictions: list[tuple[str, float]] = dataclasses.field(default_factory=list)  # (pod, clock offset in s)
    deletions: list[str] = dataclasses.field(default_factory=list)  # pods deleted outright (CA rescue)
    resized: list[str] = dataclasses.field(default_factory=list)  # pods the kubelet resized in place, in order


class World:
    def __init__(self, server: sandbox_apiserver.APIServer, client: CrashingKube) -> None:
        self.server = server
        self.kube = client
        client.crash = self.maybe_crash
        client.armed = lambda point: point in self.crash_points
        client.crash_after_write = self.maybe_crash_after_write
        client.unchanged_writes = []
        client.evicted_with = []
        client.on_evict = lambda pod: self.record.evictions.append((pod, self.clock.offset.total_seconds()))
        client.on_delete_pod = lambda pod: self.record.deletions.append(pod)
        self.clock = FakeClock()
        self.volumes = Volumes(client)
        client.stats_summary = self.volumes.summary
        self.cluster: fake.FakeCluster | None = None
        self.cas: dict[str, pki.KeyPair] = {}
        self.record = Record()
        self.crash_points: set[str] = set()
        self.crashes: list[str] = []
        self.held: set[str] = set()  # pods the kubelet does not recreate (a member that never comes back)
        self.cert_manager_running = True
        self.issuer_fails: str | None = None  # cert-manager fails every issuance with this message (Issuing=False)
        self.delivery_timeout = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT  # --certificate-delivery-timeout
        self._ips = 0
        self._missing_seen: set[str] = set()
        self.provisioner_holds = False  # True: the provisioner never re-renders the StatefulSet
        self.resize_infeasible: set[str] = set()  # pods the kubelet cannot resize (PodResizePending/Infeasible)
        # The Etcd's PodDisruptionBudget, which evictions then ask (its status follows the pods a little later, so a
        # roll meets a refusal or two): off by default, which keeps the counts of writes and evictions exact.
        self.budget = False

    # --- crash injection --------------------------------------------------------------------------------------

    def maybe_crash(self, point: str) -> None:
        if point in self.crash_points:
            self.crash_points.discard(point)
            self.crashes.append(point)
            raise Crash(point)

    def maybe_crash_after_write(self, shown: Sequence[str]) -> None:
        """Die right after a status write showing any chosen point; every chosen point it shows is taken."""
        hit = [p for p in shown if p in self.crash_points]
        if hit:
            self.crash_points.difference_update(hit)
            self.crashes.extend(hit)
            raise Crash(hit[0])

    def engine(self) -> engine.Engine:
        """A fresh engine, as a restarted operator builds it (nothing carried over from the previous one)."""
        return engine.Engine(self.kube, clock=self.clock, etcd=self.admin, delivery_timeout=self.delivery_timeout)

    def admin(self, endpoints: Sequence[access.Endpoint], tls: access.TLSIdentity | None) -> CrashingAdmin:
        return CrashingAdmin(self, endpoints, tls)

    # --- objects ----------------------------------------------------------------------------------------------

    async def user_secrets(self, db: str, ca_name: str, *, prefix: str = "user") -> dict[str, str]:
        """User-provided TLS Secrets (``spec.tls.externalSecrets``), one per alias, from the CA ``ca_name`` (the
        same CA an issuer of that name has here): ``<prefix>-<alias>``."""
        ca, names = self.ca(ca_name), {}
        for alias in constants.CERT_ALIASES:
            dns = [] if alias == constants.ALIAS_CLIENT else [f"*.{naming.headless_service(db)}.{NS}.svc"]
            leaf = pki.make_leaf(ca, "root" if alias == constants.ALIAS_CLIENT else db, dns_names=dns)
            names[alias] = f"{prefix}-{alias}"
            data = {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": ca.cert_pem}
            await self.kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                   "metadata": {"name": names[alias], "namespace": NS},
                                   "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
        return names

    async def etcd(self, name: str, *, tls_issuer: str | None = None, replicas: int = 3,
                   external_ca: str | None = None, extra: Obj | None = None) -> Obj:
        """An Etcd at rest: its Certificates issued (or, with ``external_ca``, user-provided Secrets from that CA:
        :meth:`user_secrets`), trust bundle, StatefulSet, Ready pods, phase Ready. ``extra``: more of its spec."""
        spec: Obj = {"version": constants.DEFAULT_ETCD_VERSION, "replicas": replicas, "storageType": "Durable",
                     "deletionPolicy": "WipeOut", **(extra or {})}
        if tls_issuer is not None:
            spec["tls"] = {"issuerRef": {**ISSUER, "name": tls_issuer}}
        if external_ca is not None:
            spec["tls"] = {"externalSecrets": await self.user_secrets(name, external_ca)}
            tls_issuer = external_ca
        obj = await self.kube.create({"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                                      "metadata": {"name": name, "namespace": NS}, "spec": spec})
        db = etcd_api.Etcd.model_validate(obj)
        pods = naming.pods(name, replicas)
        scheme = "https" if tls_issuer else "http"
        self.cluster = fake.FakeCluster(
            pods, peer_urls=[f"{scheme}://{naming.pod_fqdn(name, NS, p)}:{naming.peer_port(scheme)}" for p in pods])
        if db.spec.tls is not None:
            for cert in render.render_certificates(db, db.spec.tls):
                await self.kube.apply(cert)
            await self.settle()
            for alias in constants.CERT_ALIASES:  # the provisioner's gate: the sources into the mounted Secrets
                assert (await release.release(self.kube, db, db.spec.tls, alias, allowed=None)).verdict.passed
            cas = [material.secret_bytes(await self.kube.get("v1", "Secret", NS, render.secret_name(db, db.spec.tls, a)),
                                      "ca.crt") for a in constants.CERT_ALIASES]
            await release.write_bundle(self.kube, db, pki.bundle(*[c for c in cas if c]), initial=True)
        await statefulset.apply_statefulset(self.kube, db)
        if self.budget:
            await self.kube.apply(render.render_pdb(db))
        for _ in range(3):
            await self.settle()
        self.record = Record()
        self.cluster.history.clear()  # the set-up's elections (members started as their pods appeared)

        def ready(st: Obj) -> Obj:
            return {**st, "phase": constants.DB_PHASE_READY}

        return await self.kube.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, name,
                                               ready) or obj

    async def request(self, name: str, db: str, type_: str, **spec: Any) -> Obj:
        return await self.kube.create({
            "apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
            "metadata": {"name": name, "namespace": NS},
            "spec": {"type": type_, "databaseRef": {"name": db}, **spec}})

    async def get_request(self, name: str) -> Obj:
        req = await self.kube.get(constants.OPS_API_VERSION, constants.OPS_KIND, NS, name)
        assert req is not None, f"EtcdOpsRequest {name} is gone"
        return req

    async def get_etcd(self, name: str) -> Obj:
        obj = await self.kube.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS, name)
        assert obj is not None
        return obj

    async def is_paused(self, db: str) -> bool:
        return conditions.is_true(((await self.get_etcd(db)).get("status") or {}).get("conditions"),
                                  constants.COND_PAUSED)

    # --- driving ----------------------------------------------------------------------------------------------

    async def run(self, name: str, *, max_reconciles: int = 400,
                  between: Callable[[int], Awaitable[None]] | None = None) -> Obj:
        """Reconcile ``name`` until it is finished, with a fresh engine every time (an operator restart between
        every two reconciles) and the world settling in between; a :class:`Crash` is an operator restart too."""
        started = time.monotonic()
        for i in itertools.count():
            if i >= max_reconciles and time.monotonic() - started > MIN_REAL_SECONDS:
                break
            self.kube.recording = True
            try:
                outcome = await self.engine().reconcile(NS, name)
            except Crash:
                self.kube.recording = False
                outcome = engine.Outcome(finished=False)
                await self.settle()  # the operator is down for a while: a deleted pod comes back meanwhile
            finally:
                self.kube.recording = False
            await self.settle()
            if between is not None:
                await between(i)
            if outcome.finished:
                return await self.get_request(name)
        raise AssertionError(f"{name} not finished after {max_reconciles} reconciles: "
                             f"{json.dumps((await self.get_request(name)).get('status'), indent=1)[:3000]}")

    async def run_all(self, names: Sequence[str], *, max_rounds: int = 400,
                      between: Callable[[int], Awaitable[None]] | None = None) -> dict[str, Obj]:
        """Reconcile several requests round-robin (as the operator's daemons interleave) until all finished."""
        left = list(names)
        started = time.monotonic()
        for i in itertools.count():
            if i >= max_rounds and time.monotonic() - started > MIN_REAL_SECONDS:
                break
            for name in list(left):
                if (await self.engine().reconcile(NS, name)).finished:
                    left.remove(name)
                await self.settle()
            if between is not None:
                await between(i)
            if not left:
                return {n: await self.get_request(n) for n in names}
        statuses = {n: (await self.get_request(n)).get("status") for n in left}
        raise AssertionError(f"{left} not finished after {max_rounds} rounds: "
                             f"{json.dumps(statuses, indent=1)[:3000]}")

    # --- the controllers ---------------------------------------------------------------------------------------

    async def settle(self) -> None:
        await self._cert_manager()
        await self._provisioner()
        await self._resizes()
        for sts in await self.kube.list("apps/v1", "StatefulSet", NS):
            if sts["metadata"].get("deletionTimestamp"):
                continue  # orphaned by a delete: the garbage collector removes it any moment, its pods stay
            await self._statefulset(sts)
        await self._refresh_volumes()

    async def hold_volume_refresh(self, pod: str, hold: bool = True) -> None:
        """Annotate ``pod`` as the sandbox kubelet's test-only knob does: its member keeps serving what it has."""
        value = "true" if hold else None
        await self.kube.patch("v1", "Pod", NS, pod, {"metadata": {"annotations": {
            sandbox_kubelet.ANNOTATION_HOLD_VOLUME_REFRESH: value}}})

    async def _served_from_volumes(self, pod: Obj) -> dict[str, pki.CertInfo | None]:
        volumes = {v["name"]: (v.get("secret") or {}).get("secretName") for v in pod["spec"].get("volumes") or []}
        out: dict[str, pki.CertInfo | None] = {}
        for port, alias in constants.PORT_ALIAS.items():
            secret_name = volumes.get(f"{alias}-tls")
            cert = material.secret_bytes(await self.kube.get("v1", "Secret", NS, secret_name), "tls.crt") \
                if secret_name else None
            out[port] = pki.cert_info(cert) if cert else None
        return out

    async def _refresh_volumes(self) -> None:
        """The kubelet delivers changed Secrets into running pods; etcd serves the new leaf at the next handshake."""
        if self.cluster is None:
            return
        for pod in await self.kube.list("v1", "Pod", NS):
            member = self.cluster.members.get(pod["metadata"]["name"])
            if member is None or not member.up or sandbox_kubelet.holds_volume_refresh(pod):
                continue
            for port, cert in (await self._served_from_volumes(pod)).items():
                if cert is not None:
                    self.cluster.serve(member.name, port, cert)

    def ca(self, issuer: str) -> pki.KeyPair:
        if issuer not in self.cas:
            self.cas[issuer] = pki.make_ca(f"{issuer}-ca")
        return self.cas[issuer]

    async def _cert_manager(self) -> None:
        if not self.cert_manager_running:
            return
        certs = await self.kube.list(CERT_API, "Certificate", NS)
        secrets = {s["metadata"]["name"] for s in await self.kube.list("v1", "Secret", NS)} if certs else set()
        for cert in certs:
            meta, spec, status = cert["metadata"], cert["spec"], cert.get("status") or {}
            conds = status.get("conditions") or []
            ready = conditions.get_condition(conds, "Ready") or {}
            secret = spec["secretName"] if spec["secretName"] in secrets else None
            if (secret is not None and ready.get("observedGeneration") == meta.get("generation")
                    and not conditions.is_true(conds, "Issuing")):
                continue
            issuer = spec["issuerRef"]
            if self.issuer_fails is not None:
                if conditions.is_true(conds, "Issuing"):
                    def failed(st: Obj, why: str = self.issuer_fails) -> Obj:
                        return {**st, "conditions": conditions.set_condition(
                            st.get("conditions"), "Issuing", constants.FALSE, reason="Failed", message=why)}
                    await self.kube.transact_status(CERT_API, "Certificate", NS, meta["name"], failed)
                continue
            ca = self.ca(issuer["name"])
            leaf = pki.make_leaf(ca, spec.get("commonName") or meta["name"], dns_names=spec.get("dnsNames") or (),
                                 usages=[u for u in spec.get("usages") or () if u in ("server auth", "client auth")]
                                 or ("server", "client"))
            data = {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": ca.cert_pem}
            await self.kube.apply({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": spec["secretName"], "namespace": NS, "annotations": {
                    "cert-manager.io/certificate-name": meta["name"],
                    "cert-manager.io/issuer-name": issuer["name"],
                    "cert-manager.io/issuer-kind": issuer.get("kind", "Issuer")}},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
            })
            generation = meta.get("generation")

            def issued(st: Obj, generation: Any = generation) -> Obj:
                conds = conditions.remove_condition(st.get("conditions"), "Issuing")
                conds = conditions.set_condition(conds, "Ready", constants.TRUE, reason="Ready",
                                                 message="Certificate is up to date",
                                                 observed_generation=generation)
                return {**st, "conditions": conds, "revision": int(st.get("revision") or 0) + 1}

            await self.kube.transact_status(CERT_API, "Certificate", NS, meta["name"], issued)

    async def _resizes(self) -> None:
        """The kubelet's part of an in-place resize: a pod whose spec asks for other resources than its container
        reports gets them (unless held in :attr:`resize_infeasible`: PodResizePending/Infeasible)."""
        for pod in await self.kube.list("v1", "Pod", NS):
            name = pod["metadata"]["name"]
            container = pod["spec"]["containers"][0]
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            reported = statuses[0].get("resources") if statuses else None
            if container.get("resources") == reported:
                continue
            if name in self.resize_infeasible:
                def infeasible(st: Obj) -> Obj:
                    conds = conditions.set_condition(st.get("conditions") or [], "PodResizePending", "True",
                                                     reason="Infeasible", message="Node didn't have enough capacity")
                    return {**st, "conditions": conds}
                await self.kube.transact_status("v1", "Pod", NS, name, infeasible)
                continue

            def resized(st: Obj, c: Obj = container) -> Obj:
                return {**st, "containerStatuses": [{"name": c["name"], "resources": c.get("resources"),
                                                     "restartCount": 0}]}
            await self.kube.transact_status("v1", "Pod", NS, name, resized)
            self.record.resized.append(name)

    async def _provisioner(self) -> None:
        """The provisioner's part a HorizontalScaling relies on (it does not pause the Etcd): the StatefulSet is
        re-rendered when the Etcd's member count or ``status.initialClusterState`` changes."""
        for obj in await self.kube.list(constants.ETCD_API_VERSION, constants.ETCD_KIND, NS):
            if self.provisioner_holds:
                return
            sts = await self.kube.get("apps/v1", "StatefulSet", NS, naming.statefulset(obj["metadata"]["name"]))
            db = etcd_api.Etcd.model_validate(obj)
            if sts is None or pause_api.held_by_request(obj.get("status")) is not None:
                continue
            args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
            state = f"--initial-cluster-state={render.initial_cluster_state(db)}"
            if sts["spec"].get("replicas") != db.spec.replicas or state not in args:
                await statefulset.apply_statefulset(self.kube, db)

    async def _statefulset(self, sts: Obj) -> None:
        template = sts["spec"]["template"]
        # The sandbox StatefulSet controller's own rule for a revision's name (a hash of the pod template).
        revision = f"{sts['metadata']['name']}-" + sandbox_statefulset.revision_hash(
            sandbox_statefulset.template_patch(sts))
        status = sts.get("status") or {}
        if status.get("updateRevision") != revision or status.get("observedGeneration") != sts["metadata"].get(
                "generation"):
            def observed(st: Obj) -> Obj:
                return {**st, "observedGeneration": sts["metadata"].get("generation"), "updateRevision": revision,
                        "replicas": sts["spec"].get("replicas", 1)}
            await self.kube.transact_status("apps/v1", "StatefulSet", NS, sts["metadata"]["name"], observed)
        assert self.cluster is not None
        names = [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"].get("replicas", 1))]
        live = {p["metadata"]["name"]: p for p in await self.kube.list("v1", "Pod", NS)}
        prefix = f"{sts['metadata']['name']}-"
        for name in [n for n in live if n.startswith(prefix) and n not in names and n[len(prefix):].isdigit()]:
            # scaled down: the controller deletes the pod (not the operator's client: no crash point, no record)
            await kube.Kube.delete(self.kube, "v1", "Pod", NS, name)
            if self.cluster.members.get(name) is not None:
                self.cluster.stop(name)
        missing = [n for n in names if n not in live]
        self.record.max_missing = max(self.record.max_missing, len(missing))
        for name in names:
            if name in live:
                continue
            member = self.cluster.members.get(name)
            if member is not None and member.up:  # the pod went away since the last settle: its member stops
                if self.cluster.leader == name:
                    self.record.restarted_while_leader.append(name)
                self.cluster.stop(name)
            if name in self.held:
                continue
            if name not in self._missing_seen and member is not None:
                self._missing_seen.add(name)  # recreated on the next settle: missing during one reconcile
                continue
            self._missing_seen.discard(name)
            await self._create_pod(sts, names.index(name), template, revision)
            await self.volumes.mounted(name)
        await self.volumes.settle(sts, {n: p for n, p in live.items() if n in names})

    async def _create_pod(self, sts: Obj, ordinal: int, template: Obj, revision: str) -> None:
        assert self.cluster is not None
        pod = sandbox_statefulset.new_pod(sts, template, ordinal, revision)  # as the sandbox's controller makes it
        # on the node whose kubelet reports its volumes; deleted at once, as the kubelet here confirms at once
        pod["spec"].update(nodeName=NODE, terminationGracePeriodSeconds=0)
        name = pod["metadata"]["name"]
        await self.kube.create(pod)
        self._ips += 1
        ip = f"10.0.{self._ips // 250}.{self._ips % 250 + 1}"

        def running(st: Obj) -> Obj:
            return {**st, "phase": "Running", "podIP": ip,
                    "conditions": [{"type": "Ready", "status": "True"}]}

        await self.kube.transact_status("v1", "Pod", NS, name, running)
        self.record.creations[name] = self.record.creations.get(name, 0) + 1
        if name not in self.cluster.members:
            return
        for port, cert in (await self._served_from_volumes(pod)).items():
            self.cluster.serve(name, port, cert)
        image = pod["spec"]["containers"][0]["image"]  # quay.io/coreos/etcd:v<version>: the binary it runs
        self.cluster.member(name).version = image.rsplit(":v", 1)[1]
        self.cluster.member(name).flags = tuple(pod["spec"]["containers"][0]["args"])
        self.cluster.start(name)


async def start(tmp: Path) -> tuple[sandbox_apiserver.APIServer, CrashingKube]:
    server = sandbox_apiserver.APIServer(bookmark_interval=0.5)
    await server.start()
    await server.apply_objects([*(crdgen.crd(spec) for spec in crdgen.CRDS),
                                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
    await server.apply_objects(catalog.objects())  # the install bundle's version catalog, which admission reads
    path = server.write_kubeconfig(tmp / "kubeconfig")
    client = CrashingKube.from_kubeconfig(str(path))
    assert isinstance(client, CrashingKube)
    return server, client


def umbrella(req: Obj) -> list[str]:
    """The request's step conditions, in the order they were first written."""
    return [c["type"] for c in (req.get("status") or {}).get("conditions") or []
            if constants.PER_POD_SEPARATOR not in c["type"]]
