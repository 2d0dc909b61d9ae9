"""The naive strategies others use, run on the same sandbox cluster as our engine so the benchmark can set them
side by side (``python -m e2e.bench``).

Each strategy is what an operator or a runbook does when it does not know what ``etcd-measured-3.5.1.md`` shows:

- **add TLS** (``add_tls``): issue the certificates, re-render the StatefulSet https-only, restart each member
  (pod delete, ordinal order) — no dual listeners, no ``member update`` of the peer URLs;
- **remove TLS** (``remove_tls``): the mirror image — re-render http-only, restart each member;
- **rotate** (``rotate``): re-issue every certificate (``Issuing=True``), then restart each member in ordinal
  order — no leader transfer before the leader, no check of the served certificate;
- **issuer change** (``change_issuer``): KubeDB's documented flow — point the Certificates at the new issuer, the
  trust bundle becomes the new CA only (a leaf Secret's ``ca.crt``), one rolling restart;
- **restart**: members SIGKILLed in ordinal order without leader transfer (``kill_in_order``), and every pod
  deleted at once (``simultaneous_roll``, cozystack's choice).

A rolling step waits for the member to come back with a bounded timeout (:data:`MEMBER_TIMEOUT`) and then goes on,
as a script with a timeout does, so a strategy that breaks the cluster shows all the damage it does. The Etcd is
paused (``Paused=True``, reason ``bench-naive``) first so the provisioner does not repair anything behind the
strategy's back; the benchmark deletes the Etcd afterwards (a naive run may leave it broken for good).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from e2e import processes, scenario
from opsmanager import kube, pki
from opsmanager.api import conditions, constants, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render
from opsmanager.etcd import errors as etcd_errors
from opsmanager.tls import material

PAUSE_REASON = "bench-naive"
MEMBER_TIMEOUT = 30.0  # how long a naive roll waits for a member before it goes on
CERT_API = "cert-manager.io/v1"


@dataclasses.dataclass(frozen=True)
class MemberStep:
    """One member disrupted by a strategy: how long until it was back (or until the strategy gave up)."""

    pod: str
    action: str  # "delete" | "sigkill"
    seconds: float
    back: bool

    def describe(self) -> str:
        return f"{self.pod} {self.action}: " + (f"back in {self.seconds:.1f}s" if self.back
                                                 else f"not back within {self.seconds:.0f}s")


@dataclasses.dataclass(frozen=True)
class NaiveOutcome:
    """What a naive strategy did: every member step, in order."""

    strategy: str
    steps: tuple[MemberStep, ...]
    leader_moves: int = 0  # MoveLeader calls the strategy made (planned leader changes, not elections)

    @property
    def completed(self) -> bool:
        return all(s.back for s in self.steps)

    @property
    def summary(self) -> str:
        stuck = [s.pod for s in self.steps if not s.back]
        return "completed" if not stuck else f"members not back within {MEMBER_TIMEOUT:.0f}s: {', '.join(stuck)}"


Strategy = Callable[[scenario.Scenario, str], Awaitable[NaiveOutcome]]


# --- small observations --------------------------------------------------------------------------------------


def pod_ready(pod: dict[str, Any] | None) -> bool:
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


async def member_healthy(ip: str, *, timeout: float = 1.0) -> bool:
    """etcd's own ``/health`` on the plain-HTTP metrics port (what the readiness probe asks): true only while the
    member is part of a quorum, whatever its client TLS mode."""
    url = f"http://{ip}:{naming.METRICS_PORT}/health"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url) as response:
                body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
        return False
    return str((body or {}).get("health")) == "true"


async def pod_ips(sc: scenario.Scenario, db: str, replicas: int = 3) -> dict[str, str]:
    out = {}
    for name in naming.pods(db, replicas):
        pod = await sc.k.get("v1", "Pod", sc.namespace, name)
        ip = ((pod or {}).get("status") or {}).get("podIP")
        if ip:
            out[name] = ip
    return out


async def cluster_healthy(sc: scenario.Scenario, db: str, *, replicas: int = 3, within: float = 10.0) -> bool:
    """Every member answers ``/health`` true, polled until ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        ips = await pod_ips(sc, db, replicas)
        if len(ips) == replicas:
            results = await asyncio.gather(*(member_healthy(ip) for ip in ips.values()))
            if all(results):
                return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.3)


# --- pause, model, StatefulSet ---------------------------------------------------------------------------------


async def set_paused(k: kube.Kube, namespace: str, db: str, paused: bool) -> None:
    """Pause (``Paused=True``, reason ``bench-naive``) or resume the Etcd, so the provisioner keeps off."""

    def mutate(st: dict[str, Any]) -> dict[str, Any]:
        if not paused:
            return pause.release(st, PAUSE_REASON)
        # A pause by someone other than a request (its own message), so the operator never heals it away.
        st = dict(st)
        st["conditions"] = conditions.set_condition(st.get("conditions"), constants.COND_PAUSED, constants.TRUE,
                                                    reason=PAUSE_REASON, message="a naive benchmark strategy runs")
        return st

    await k.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, db, mutate)


async def etcd_model(sc: scenario.Scenario, db: str) -> etcd_api.Etcd:
    obj = await sc.k.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, sc.namespace, db)
    if obj is None:
        raise RuntimeError(f"Etcd {sc.namespace}/{db} does not exist")
    return etcd_api.Etcd.model_validate(obj)


def tls_for(issuer: str) -> etcd_api.TLSConfig:
    return etcd_api.TLSConfig.model_validate(
        {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": issuer}})


async def replace_template(sc: scenario.Scenario, model: etcd_api.Etcd, wiring: render.Wiring, *,
                           timeout: float = 20.0) -> None:
    """Put the renderer's pod template for ``wiring`` into the live StatefulSet and wait until the StatefulSet
    controller has observed it (OnDelete: nothing restarts until a pod is deleted)."""
    name = naming.statefulset(model.metadata.name or "")
    desired = render.render_statefulset(model, wiring)
    deadline = time.monotonic() + timeout
    while True:
        sts = await sc.k.get("apps/v1", "StatefulSet", sc.namespace, name)
        if sts is None:
            raise RuntimeError(f"StatefulSet {sc.namespace}/{name} does not exist")
        if sts["spec"]["template"] != desired["spec"]["template"]:
            new = copy.deepcopy(sts)
            new["spec"]["template"] = desired["spec"]["template"]
            try:
                sts = await sc.k.replace(new)
            except kube.Conflict:
                continue
        status = sts.get("status") or {}
        if status.get("observedGeneration", 0) >= sts["metadata"].get("generation", 0) and \
                status.get("updateRevision"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"StatefulSet {name}: the new template was not observed within {timeout:.0f}s")
        await asyncio.sleep(0.2)


async def wait_secrets(sc: scenario.Scenario, model: etcd_api.Etcd, tls: etcd_api.TLSConfig, *,
                       issued_by: bytes | None = None, not_serials: dict[str, int] | None = None,
                       timeout: float = 30.0) -> dict[str, material.Material]:
    """Wait until every leaf Secret of ``tls`` is complete (and signed by ``issued_by``, and with a serial other
    than ``not_serials[secret]``), then mount it as the naive flows do: cert-manager's Secret straight into the
    members' (and clients') Secret, with no gate (:func:`mount_directly`)."""
    names = [render.source_secret_name(model, tls, alias) for alias in constants.CERT_ALIASES]
    deadline = time.monotonic() + timeout
    while True:
        verdicts: dict[str, material.Material] = {}
        for name in names:
            verdict = material.check_secret(await sc.k.get("v1", "Secret", sc.namespace, name), name)
            if not verdict.complete or verdict.cert is None:
                break
            if issued_by is not None:
                cert = base64.b64decode(((await sc.k.get("v1", "Secret", sc.namespace, name)) or {})
                                        .get("data", {}).get("tls.crt", ""))
                if not pki.signed_by(cert, issued_by):
                    break
            if not_serials is not None and verdict.cert.serial == not_serials.get(name):
                break
            verdicts[name] = verdict
        if len(verdicts) == len(names):
            await mount_directly(sc, model, tls)
            return verdicts
        if time.monotonic() > deadline:
            raise TimeoutError(f"certificate Secrets {names} not (re)issued within {timeout:.0f}s")
        await asyncio.sleep(0.2)


async def mount_directly(sc: scenario.Scenario, model: etcd_api.Etcd, tls: etcd_api.TLSConfig) -> None:
    """The layout before the material gate: what cert-manager issued is what members mount, at once."""
    for alias in constants.CERT_ALIASES:
        source = await sc.k.get("v1", "Secret", sc.namespace, render.source_secret_name(model, tls, alias))
        data = (source or {}).get("data") or {}
        await sc.k.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                          "metadata": {"name": render.secret_name(model, tls, alias), "namespace": sc.namespace},
                          "data": {k: data[k] for k in ("tls.crt", "tls.key", "ca.crt") if k in data}})


async def write_trust_bundle(sc: scenario.Scenario, model: etcd_api.Etcd, ca_pems: bytes) -> None:
    await sc.k.apply(render.render_trust_bundle(model, ca_pems))


# --- disrupting one member ------------------------------------------------------------------------------------


async def delete_and_wait(sc: scenario.Scenario, pod_name: str, *,
                          timeout: float = MEMBER_TIMEOUT) -> MemberStep:
    """Delete a member's pod and wait until its replacement (a new UID) is Ready, or ``timeout``."""
    old = await sc.k.get("v1", "Pod", sc.namespace, pod_name)
    old_uid = (old or {}).get("metadata", {}).get("uid")
    started = time.monotonic()
    await sc.k.delete("v1", "Pod", sc.namespace, pod_name)
    while time.monotonic() - started < timeout:
        pod = await sc.k.get("v1", "Pod", sc.namespace, pod_name)
        if pod is not None and pod["metadata"].get("uid") != old_uid and pod_ready(pod):
            return MemberStep(pod_name, "delete", time.monotonic() - started, True)
        await asyncio.sleep(0.1)
    return MemberStep(pod_name, "delete", timeout, False)


async def etcd_pid(sc: scenario.Scenario, pod_name: str) -> int | None:
    """The host PID of the member's etcd (under the container's etcdstop; the node agent's process, or containerd's
    task on a real node)."""
    pid: int | None = await sc.sandbox.container_pid(sc.namespace, pod_name, naming.CONTAINER_NAME)
    return processes.etcd_under(pid) if pid is not None else None  # None while the container is ending


async def sigkill_and_wait(sc: scenario.Scenario, pod_name: str, *,
                           timeout: float = MEMBER_TIMEOUT) -> MemberStep:
    """SIGKILL a member's etcd process (a crash, no leader transfer) and wait until the kubelet has restarted it
    (a new PID) and the member answers ``/health`` true again, or ``timeout``."""
    pid = await etcd_pid(sc, pod_name)
    if pid is None:
        raise RuntimeError(f"{pod_name}: no running etcd process to kill")
    ip = (await pod_ips(sc, pod_name.rsplit("-", 1)[0])).get(pod_name)
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while time.monotonic() - started < timeout:
        new = await etcd_pid(sc, pod_name)
        if new is not None and new != pid and ip is not None and await member_healthy(ip, timeout=0.5):
            return MemberStep(pod_name, "sigkill", time.monotonic() - started, True)
        await asyncio.sleep(0.1)
    return MemberStep(pod_name, "sigkill", timeout, False)


async def roll_in_order(sc: scenario.Scenario, db: str, replicas: int = 3) -> list[MemberStep]:
    """Delete each member's pod in ordinal order, waiting (bounded) for it to be Ready before the next."""
    return [await delete_and_wait(sc, pod) for pod in naming.pods(db, replicas)]


# --- the strategies ------------------------------------------------------------------------------------------


async def add_tls(sc: scenario.Scenario, db: str, issuer: str = "ca-a") -> NaiveOutcome:
    """Plaintext → TLS by restarting each member straight onto https-only URLs (no peer-URL update)."""
    await set_paused(sc.k, sc.namespace, db, True)
    model = await etcd_model(sc, db)
    tls = tls_for(issuer)
    model.spec.tls = tls
    for cert in render.render_certificates(model, tls):
        await sc.k.apply(cert)
    verdicts = await wait_secrets(sc, model, tls)
    await write_trust_bundle(sc, model, material.union_of_cas(verdicts.values()))
    await replace_template(sc, model, render.Wiring.steady(tls))
    return NaiveOutcome("https-only restart, no peer-URL update", tuple(await roll_in_order(sc, db)))


async def remove_tls(sc: scenario.Scenario, db: str) -> NaiveOutcome:
    """TLS → plaintext by restarting each member straight onto http-only URLs (no peer-URL update)."""
    await set_paused(sc.k, sc.namespace, db, True)
    model = await etcd_model(sc, db)
    model.spec.tls = None
    await replace_template(sc, model, render.Wiring.steady(None))
    return NaiveOutcome("http-only restart, no peer-URL update", tuple(await roll_in_order(sc, db)))


async def _serials(sc: scenario.Scenario, model: etcd_api.Etcd, tls: etcd_api.TLSConfig) -> dict[str, int]:
    out = {}
    for alias in constants.CERT_ALIASES:
        name = render.source_secret_name(model, tls, alias)
        verdict = material.check_secret(await sc.k.get("v1", "Secret", sc.namespace, name), name)
        if verdict.cert is not None:
            out[name] = verdict.cert.serial
    return out


async def reissue(sc: scenario.Scenario, db: str) -> None:
    """Re-issue every certificate of ``db`` (``Issuing=True``, as ``cmctl renew``) and wait for the new Secrets."""
    model = await etcd_model(sc, db)
    tls = model.spec.tls
    if tls is None:
        raise RuntimeError(f"Etcd {db} has no TLS to rotate")
    before = await _serials(sc, model, tls)

    def issuing(st: dict[str, Any]) -> dict[str, Any]:
        st = dict(st)
        st["conditions"] = conditions.set_condition(st.get("conditions"), "Issuing", constants.TRUE,
                                                    reason="ManuallyTriggered", message="bench: rotate")
        return st

    for alias in constants.CERT_ALIASES:
        await sc.k.transact_status(CERT_API, "Certificate", sc.namespace, naming.certificate(db, alias), issuing)
    await wait_secrets(sc, model, tls, not_serials=before)


async def rotate(sc: scenario.Scenario, db: str) -> NaiveOutcome:
    """Re-issue every certificate (``Issuing=True``, as ``cmctl renew``), then one rolling restart in ordinal
    order: no MoveLeader before the leader, no check of what each member serves."""
    await set_paused(sc.k, sc.namespace, db, True)
    await reissue(sc, db)
    return NaiveOutcome("re-issue, then pod delete in ordinal order", tuple(await roll_in_order(sc, db)))


async def rotate_then_restart(sc: scenario.Scenario, db: str) -> NaiveOutcome:
    """The restart-based rotation (this operator's rotate before zero-restart): re-issue every certificate, then a
    leader-aware ``Restart`` EtcdOpsRequest (one member at a time, MoveLeader before the leader)."""
    await reissue(sc, db)
    request = f"{db}-restart"
    await sc.submit(request, db, constants.OPS_TYPE_RESTART)
    req = await sc.watch_request(request, timeout=300)
    conds = (req.get("status") or {}).get("conditions") or []
    steps = []
    for pod in naming.pods(db, 3):
        evicted = conditions.get_condition(conds, constants.per_pod_type(constants.STEP_EVICT_POD, pod))
        ready = conditions.get_condition(conds, constants.per_pod_type(constants.STEP_CHECK_POD_READY, pod))
        if evicted is None:
            continue
        seconds = 0.0
        if ready is not None and ready.get("status") == constants.TRUE:
            seconds = (conditions.parse_rfc3339(ready["lastTransitionTime"])
                       - conditions.parse_rfc3339(evicted["lastTransitionTime"])).total_seconds()
        steps.append(MemberStep(pod, "evict", seconds, ready is not None and ready.get("status") == constants.TRUE))
    if (req.get("status") or {}).get("phase") != constants.PHASE_SUCCESSFUL:
        raise RuntimeError(f"the Restart request {request} ended {(req.get('status') or {}).get('phase')}")
    return NaiveOutcome("re-issue, then a leader-aware Restart request", tuple(steps),
                        leader_moves=await sc.leader_moves(request))


async def change_issuer(sc: scenario.Scenario, db: str, issuer: str = "ca-b") -> NaiveOutcome:
    """KubeDB's documented flow: the Certificates move to the new issuer, the CA the members trust becomes the
    new CA only (the leaf Secret's ``ca.crt``), then one rolling restart in ordinal order."""
    await set_paused(sc.k, sc.namespace, db, True)
    model = await etcd_model(sc, db)
    tls = tls_for(issuer)
    model.spec.tls = tls
    new_ca = sc.cas[issuer].cert_pem
    for cert in render.render_certificates(model, tls):
        await sc.k.apply(cert)
    await wait_secrets(sc, model, tls, issued_by=new_ca)
    await write_trust_bundle(sc, model, new_ca)
    await replace_template(sc, model, render.Wiring.steady(tls))
    return NaiveOutcome("new CA only, one rolling restart (KubeDB)", tuple(await roll_in_order(sc, db)))


async def kill_in_order(sc: scenario.Scenario, db: str) -> NaiveOutcome:
    """Restart by SIGKILL of each member in ordinal order, no leader transfer; the kubelet restarts each."""
    await set_paused(sc.k, sc.namespace, db, True)
    steps = [await sigkill_and_wait(sc, pod) for pod in naming.pods(db, 3)]
    return NaiveOutcome("SIGKILL in ordinal order, no leader transfer", tuple(steps))


async def simultaneous_roll(sc: scenario.Scenario, db: str, replicas: int = 3) -> NaiveOutcome:
    """Every pod deleted at once (cozystack's choice); wait until each replacement is Ready."""
    await set_paused(sc.k, sc.namespace, db, True)
    steps = await asyncio.gather(*(delete_and_wait(sc, pod) for pod in naming.pods(db, replicas)))
    return NaiveOutcome("all pods deleted at once (cozystack)", tuple(steps))


# --- the day-2 types beyond TLS: what is done without a learner, a MoveLeader or the downgrade protocol ----------


async def _wait_ready(sc: scenario.Scenario, pod_name: str, started: float, *,
                      timeout: float = MEMBER_TIMEOUT) -> MemberStep:
    while time.monotonic() - started < timeout:
        if pod_ready(await sc.k.get("v1", "Pod", sc.namespace, pod_name)):
            return MemberStep(pod_name, "add", time.monotonic() - started, True)
        await asyncio.sleep(0.1)
    return MemberStep(pod_name, "add", timeout, False)


async def scale_up_voters(sc: scenario.Scenario, db: str, target: int = 5) -> NaiveOutcome:
    """3 → 5 by adding each new member straight as a voter (``member add``, no learner), then scaling the
    StatefulSet: the quorum grows before the new member has any data."""
    await set_paused(sc.k, sc.namespace, db, True)
    model = await etcd_model(sc, db)
    steps = []
    for index in range(model.spec.replicas, target):
        pod = naming.pods(db, target)[index]
        started = time.monotonic()
        url = f"http://{naming.pod_fqdn(db, sc.namespace, pod)}:{naming.PEER_PORT_HTTP}"
        async with await sc.plain_client(db, index) as client:
            while True:  # etcd refuses a voter until the leader has been connected to every voter for 5 s
                try:
                    await client.member_add([url])
                    break
                except etcd_errors.MembershipError as err:
                    if not err.transient or time.monotonic() - started > MEMBER_TIMEOUT:
                        raise
                    await asyncio.sleep(0.5)
        model.spec.replicas = index + 1
        model.status = etcd_api.EtcdStatus(initialClusterState="existing")
        await replace_template(sc, model, render.Wiring.steady(None))
        await sc.k.patch("apps/v1", "StatefulSet", sc.namespace, naming.statefulset(db), {"spec": {"replicas": index + 1}})
        steps.append(await _wait_ready(sc, pod, started))
    return NaiveOutcome("member add as a voter, then scale the StatefulSet", tuple(steps))


async def defragment_all_at_once(sc: scenario.Scenario, db: str) -> NaiveOutcome:
    """Every member defragmented at the same time (``etcdctl defrag --cluster`` run in parallel): no member answers
    while its file is rewritten, so all of them at once stops every write."""
    started = time.monotonic()
    async with await sc.plain_client(db) as client:
        await asyncio.gather(*(client.defragment(ep.name, timeout=120.0) for ep in client.endpoints))
    took = time.monotonic() - started
    return NaiveOutcome("every member defragmented at once",
                        tuple(MemberStep(pod, "defragment", took, True) for pod in naming.pods(db, 3)))


def binary_swap(version: str) -> Strategy:
    """The new etcd binary put in place and each member restarted in ordinal order (no MoveLeader, no check of
    the member's or the cluster's version in between)."""
    async def swap(sc: scenario.Scenario, db: str) -> NaiveOutcome:
        await set_paused(sc.k, sc.namespace, db, True)
        model = await etcd_model(sc, db)
        wiring = dataclasses.replace(render.Wiring.steady(model.spec.tls), version=version)
        await replace_template(sc, model, wiring)
        return NaiveOutcome(f"bare binary swap to {version}, ordinal roll", tuple(await roll_in_order(sc, db)))
    return swap


async def fragment(sc: scenario.Scenario, db: str, megabytes: int = 64, live_megabytes: int = 192) -> None:
    """``live_megabytes`` of 64 KiB values that stay, and ``megabytes`` more written, deleted and compacted: a
    defragmentation has that much to give back and the live data to copy (its duration, and so the stall when
    every member does it at once, grows with the live data)."""
    async with await sc.plain_client(db) as client:
        for i in range(live_megabytes * 16):
            await client.kv.put(f"/live/{i:06d}", b"l" * 65536)
        for i in range(megabytes * 16):
            await client.kv.put(f"/fragment/{i:06d}", b"x" * 65536)
        _deleted, revision = await client.kv.delete_prefix("/fragment/")
        await client.compact(revision, physical=True)


async def give_resources(sc: scenario.Scenario, db: str) -> None:
    """Members with CPU and memory requests (a BestEffort pod cannot be resized in place: its QoS class would
    change), by a VerticalScaling in Restart mode."""
    name = f"{db}-resources"
    await sc.submit(name, db, constants.OPS_TYPE_VERTICAL_SCALING,
                    verticalScaling={"etcd": {"resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}})
    done = await sc.watch_request(name, timeout=300)
    if (done.get("status") or {}).get("phase") != constants.PHASE_SUCCESSFUL:
        raise RuntimeError(f"{name}: {done.get('status')}")
    await sc.wait_ready(db, timeout=120)


__all__ = ["MEMBER_TIMEOUT", "MemberStep", "NaiveOutcome", "Strategy", "add_tls", "change_issuer",
           "cluster_healthy", "delete_and_wait", "kill_in_order", "member_healthy", "remove_tls", "rotate",
           "simultaneous_roll", "set_paused", "scale_up_voters", "defragment_all_at_once", "binary_swap", "fragment", "give_resources"]
