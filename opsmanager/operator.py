"""``opsmanager run``: the operator process — kopf, in-process, with the provisioner and the ops engine.

    opsmanager run [--kubeconfig PATH] [--namespace NS ... | --all-namespaces]
                   [--standalone | --peering NAME [--priority N] [--peering-lifetime SECONDS]]
                   [--interval SECONDS] [--liveness URL] [--metrics-port N] [--metrics-address A]
                   [--certificate-delivery-timeout SECONDS] [--verbose | --debug | --quiet]

One process runs both halves KubeDB splits in two: the provisioner's handlers on ``etcds.opsmanager.dev``
(:mod:`opsmanager.provisioner.handlers`) and, when it is installed, the ops engine's on ``etcdopsrequests``
(:mod:`opsmanager.ops.handlers`, imported behind a guard so the operator runs without it). They cooperate through
the Etcd's ``Paused`` condition. Both are registered explicitly in a registry built here (nothing registers itself
on kopf's global registry at import) and share the process's one Kubernetes client, which is also ``memo.kube``.

Why our own login handler: kopf's built-in ``login_via_client`` loads the *default* kubeconfig; the operator must
use the one it was given (``--kubeconfig``, e.g. the sandbox's), or the in-cluster service account when none is
given and none is found. It uses the same loader as the operator's own client (:mod:`opsmanager.kube.config`, over
the official package: tokens, client certificates, exec plugins and a plain ``http://127.0.0.1:<port>`` server all
work) and hands kopf the resulting credentials.

kopf settings: finalizer, progress and diff-base annotations live under ``opsmanager.dev/`` (not kopf's
``kopf.zalando.org``), progress is kept in annotations only so ``status`` stays ours, and kopf posts Kubernetes
events only for warnings (the handlers post their own, on transitions).

Replicas (``--peering NAME``): two or more operator pods share kopf's peering object ``NAME`` (a
``ClusterKopfPeering``, or a ``KopfPeering`` in the watched namespace when ``--namespace`` is given; the install
bundle ``deploy/`` creates it) and exactly one of them acts: kopf pauses every operator that sees a live peer of
higher priority. kopf pauses *all* peers of equal priority, so each replica needs a distinct one: by default it is
the pod's seniority (:func:`seniority_priority`: the earlier a process started, the higher), so a new or restarted
replica never pre-empts the one at work and takes over only when that one's keep-alive expires (kopf's
``settings.peering.lifetime``, 60 s; ``--peering-lifetime``). The peer identity is ``$POD_ID`` (the downward
API's pod name). ``--standalone`` (the sandbox, the tests) runs without peering. docs/decisions.md D15.1.

``--metrics-port N`` (default 8081, 0 = off) serves :mod:`opsmanager.lifecycle.metrics`' registry on
``http://A:N/metrics`` (``--metrics-address A``, default 0.0.0.0 for a pod; the sandbox and the tests use
127.0.0.1) from a thread of its own (prometheus_client's server).

``--certificate-delivery-timeout SECONDS`` (default 120) is how long the kubelet may take to bring a changed
Secret into a running member: the scan and the zero-restart rotation wait that long before they call a member that
still serves its previous leaf stuck (:data:`opsmanager.api.constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT`).

The sandbox (``opsmanager_sandbox.components``) and the e2e harness (``e2e/processes.py``) start it as a child
process (``python -m opsmanager run --kubeconfig K ...``, ready when its liveness endpoint answers, stopped by
PID); tests may run it in-process with :func:`run_async` and a ``stop_flag``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import random
import sys
import time
from collections.abc import Collection, Sequence
from typing import Any

import kopf

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager.etcd import pool as etcd_pool
from opsmanager.kube import config as kube_config
from opsmanager.lifecycle import handlers as lifecycle_handlers
from opsmanager.lifecycle import metrics
from opsmanager.provisioner import handlers as provisioner_handlers
from opsmanager.provisioner import status as provisioner_status

log = logging.getLogger("opsmanager.operator")

ANNOTATION_PREFIX = "opsmanager.dev"
FINALIZER = "opsmanager.dev/finalizer"
OPS_HANDLERS_MODULE = "opsmanager.ops.handlers"
CERT_MANAGER_API = "cert-manager.io/v1"
MANAGED_SELECTOR = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"


def connection_info(kubeconfig: str | None, *, context: str | None = None) -> kopf.ConnectionInfo:
    """kopf credentials from the one loader (:mod:`opsmanager.kube.config`): ``kubeconfig``, else ``$KUBECONFIG`` or
    ``~/.kube/config``, else in-cluster. kopf calls the login handler again on a 401, which re-reads the token."""
    try:
        connection = kube_config.load(kubeconfig, context=context)
        scheme, token = connection.scheme_and_token()
    except kube.ConfigError as exc:
        raise kopf.LoginError(str(exc)) from exc
    return kopf.ConnectionInfo(
        server=connection.base_url,
        ca_path=connection.ca_path,
        insecure=not connection.verify,
        username=connection.username,
        password=connection.password,
        scheme=scheme,
        token=token,
        certificate_path=connection.cert_path,
        private_key_path=connection.key_path,
    )


def configure(settings: kopf.OperatorSettings) -> None:
    """The operator's kopf settings (see the module doc)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60


# Timers that run every few seconds per object.
ROUTINE_HANDLERS = ("Timer 'status'", "Timer 'heal-pause'", "Timer 'tls-scan'")


class RoutineTimerFilter(logging.Filter):
    """Drop kopf's per-run "Timer 'status' is invoked/succeeded" lines: the status timer runs every few seconds for
    every Etcd, and an idle operator should not fill its log. Failures are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith(ROUTINE_HANDLERS) and message.endswith(("succeeded.", "is invoked.")))


def quiet_routine_logs() -> None:
    logging.getLogger("kopf.objects").addFilter(RoutineTimerFilter())
    logging.getLogger("transitions").setLevel(logging.WARNING)  # the phase machine's per-transition INFO lines


def load_ops_handlers(registry: kopf.OperatorRegistry, client: kube.Kube, *,
                      delivery_timeout: float = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT,
                      namespaces: Collection[str] = ()) -> bool:
    """Register the ops engine's handlers in ``registry`` (its ``register(registry, client, delivery_timeout=,
    namespaces=)``) when the module exists. False when the engine is not installed."""
    try:
        module = importlib.import_module(OPS_HANDLERS_MODULE)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not (OPS_HANDLERS_MODULE == missing or OPS_HANDLERS_MODULE.startswith(missing + ".")):
            raise  # the engine is there but one of its imports is broken: say so, do not hide it
        log.warning("%s is not installed: running the provisioner only", OPS_HANDLERS_MODULE)
        return False
    module.register(registry, client, delivery_timeout=delivery_timeout, namespaces=namespaces)
    return True


PEERING_API_VERSION = "kopf.dev/v1"


async def ensure_peering_objects(client: kube.Kube, name: str, *, namespaces: Collection[str],
                                 clusterwide: bool) -> list[str]:
    """Create kopf's peering object ``name`` when it is missing: a ``ClusterKopfPeering`` (all namespaces), else a
    ``KopfPeering`` in each watched namespace. kopf's mandatory peering pauses the operator for good while its
    object is missing, and ``kubectl apply -k deploy/`` cannot create it in the same run as its CRD (the mapping of
    a kind whose CRD is new fails), so the operator makes its own. Returns what it created."""
    if clusterwide:
        targets: list[tuple[str | None, str]] = [(None, f"/apis/{PEERING_API_VERSION}/clusterkopfpeerings")]
    else:
        targets = [(ns, f"/apis/{PEERING_API_VERSION}/namespaces/{ns}/kopfpeerings") for ns in namespaces]
    created = []
    for namespace, path in targets:
        metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
        kind = "KopfPeering" if namespace else "ClusterKopfPeering"
        try:
            await client.request("POST", path, body={"apiVersion": PEERING_API_VERSION, "kind": kind,
                                                     "metadata": metadata})
        except kube.AlreadyExists:
            continue
        created.append(f"{kind} {namespace + '/' if namespace else ''}{name}")
        log.info("created the peering object %s", created[-1])
    return created


def build_registry(kubeconfig: str | None, client: kube.CachedKube, *, interval: float,
                   with_ops: bool = True,
                   delivery_timeout: float = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT,
                   namespaces: Collection[str] = (),
                   quorum_loss_after: float = provisioner_status.DEFAULT_QUORUM_LOSS_AFTER) -> kopf.OperatorRegistry:
    """A new kopf registry with login, settings, the peering object (with ``--peering``), the provisioner and (when
    present) the ops engine, whose handlers use ``client`` — the one Kubernetes client of the operator process
    (also ``memo.kube``), whose caches the scan triggers subscribe to. ``namespaces``: the operator's ``--namespace`` list (empty: all); what it watches and
    lists beside kopf stays within them, so a Role there is enough (deploy/overlays/single-namespace)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry, id="opsmanager-login")
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(kubeconfig)

    @kopf.on.startup(registry=registry, id="opsmanager-settings")
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)
        await client.start()  # the caches fill in the background; reads go to the API server until then

    # One watch per kind: kopf's events of Etcds and EtcdOpsRequests feed the client's caches of them.
    # async: kopf runs a plain function in a worker thread, and the caches belong to the event loop
    async def feed(event: kopf.RawEvent, **_: Any) -> None:
        client.feed(event["type"], dict(event["object"]))

    for group, version, plural in ((constants.ETCD_GROUP, constants.ETCD_VERSION, constants.ETCD_PLURAL),
                                   (constants.OPS_GROUP, constants.OPS_VERSION, constants.OPS_PLURAL)):
        kopf.on.event(group, version, plural, registry=registry, id=f"opsmanager-cache-{plural}")(feed)

    @kopf.on.cleanup(registry=registry, id="opsmanager-caches")
    async def cleanup(**_: Any) -> None:
        await client.stop()
        await etcd_pool.shared.close()

    @kopf.on.startup(registry=registry, id="opsmanager-peering")
    async def peering(settings: kopf.OperatorSettings, **_: Any) -> None:
        if settings.peering.mandatory and not settings.peering.standalone:
            await ensure_peering_objects(client, settings.peering.name, namespaces=namespaces,
                                         clusterwide=settings.peering.clusterwide)

    provisioner_handlers.register(registry, interval=interval, quorum_loss_after=quorum_loss_after)
    lifecycle_handlers.register(registry, client, tick=interval, delivery_grace=delivery_timeout,
                                namespaces=namespaces)
    if with_ops:
        load_ops_handlers(registry, client, delivery_timeout=delivery_timeout, namespaces=namespaces)
    return registry


FED_KINDS = ((constants.ETCD_API_VERSION, constants.ETCD_KIND), (constants.OPS_API_VERSION, constants.OPS_KIND))


def make_client(kubeconfig: str | None, namespaces: Sequence[str] = (), *, cached: bool = True) -> kube.CachedKube:
    """The operator's one Kubernetes client, reading from watch-fed caches (:mod:`opsmanager.kube.cache`) of the
    kinds it reads: Etcds, EtcdOpsRequests and cert-manager Issuers whole; its own StatefulSets, Pods, Services,
    PodDisruptionBudgets, Certificates and Secrets by label (``app.kubernetes.io/managed-by=opsmanager``); other
    Secrets it reads (an Issuer's CA, a user's own certificates) by a watch of their own name. Whatever else reacts
    to changes of a kind (the scan triggers) subscribes to these caches: each kind is watched once per process.
    ``namespaces``: the ones it watches (none: all)."""
    client = kube.CachedKube(kube_config.load(kubeconfig))
    if not cached:
        return client  # --no-watch-cache: every read is a request (a diagnostic and the benchmark's baseline)
    scope: list[str | None] = list(namespaces) if namespaces else [None]
    # kopf watches Etcds and EtcdOpsRequests for its handlers; the caches of both are fed its events (registered
    # by build_registry) instead of watching them a second time.
    for api_version, kind in FED_KINDS:
        client.cache(api_version, kind, namespaces=scope, fed=True)
    client.cache(CERT_MANAGER_API, "Issuer", namespaces=scope)
    client.cache(CERT_MANAGER_API, "ClusterIssuer")
    for api_version, kind in (("apps/v1", "StatefulSet"), ("v1", "Pod"), ("v1", "Service"),
                              ("policy/v1", "PodDisruptionBudget"), (CERT_MANAGER_API, "Certificate"),
                              ("v1", "Secret")):
        client.cache(api_version, kind, namespaces=scope, label_selector=MANAGED_SELECTOR)
    client.track_by_name("v1", "Secret")
    client.track_by_name("v1", "Node")  # the node of a member pod that stopped serving (members.down_nodes)
    client.use_wakeups(naming.owner_of)  # a change of an Etcd's objects wakes the loops waiting on that Etcd
    return client
# Seniority priorities count down from this many milliseconds (the year 2286): positive, and with the tie-breaker
# an exact integer in JSON (< 2**53). Milliseconds, because a second's resolution left two replicas started in the
# same second ordered by the random tie-breaker alone, so the younger could pre-empt the elder.
_PRIORITY_EPOCH_MS = 10**13
_TIE_BREAKER = 100


def seniority_priority(now: float | None = None, *, rng: random.Random | None = None) -> int:
    """A kopf peering priority that is higher the earlier this process started (milliseconds), with a random
    tie-breaker for replicas started within the same millisecond (kopf pauses every peer of equal priority, itself
    included)."""
    started_ms = int((time.time() if now is None else now) * 1000)
    return (_PRIORITY_EPOCH_MS - started_ms) * _TIE_BREAKER + (rng or random.SystemRandom()).randrange(_TIE_BREAKER)


def peering_options(*, standalone: bool, peering_name: str | None, priority: int | None,
                    lifetime: int | None = None) -> dict[str, Any]:
    """kopf.run/kopf.operator keyword arguments for the peering flags: ``--standalone``; ``--peering NAME``
    (mandatory peering on that object, with ``priority`` or the seniority priority, and ``lifetime``: seconds
    a keep-alive counts, kopf's default 60); or neither (kopf's default: peering on an object named ``default``
    if one exists, else standalone)."""
    if peering_name is None:
        return {"standalone": standalone}
    if standalone:
        raise ValueError("--standalone and --peering exclude each other: one replica alone, or several peering")
    options: dict[str, Any] = {"standalone": False, "peering_name": peering_name,
                               "priority": seniority_priority() if priority is None else priority}
    if lifetime is not None:
        settings = kopf.OperatorSettings()
        settings.peering.lifetime = lifetime
        options["settings"] = settings
    return options


def make_memo(client: kube.Kube) -> kopf.Memo:
    return kopf.Memo(kube=client)


async def run_async(
    kubeconfig: str | None,
    *,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    standalone: bool = True,
    peering_name: str | None = None,
    priority: int | None = None,
    peering_lifetime: int | None = None,
    interval: float = provisioner_handlers.DEFAULT_INTERVAL,
    liveness_endpoint: str | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    with_ops: bool = True,
    delivery_timeout: float = constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT,
    quorum_loss_after: float = provisioner_status.DEFAULT_QUORUM_LOSS_AFTER,
) -> None:
    """Run the operator in the current event loop until ``stop_flag`` is set (or it is cancelled)."""
    client = make_client(kubeconfig, list(namespaces))
    registry = build_registry(kubeconfig, client, interval=interval, with_ops=with_ops,
                              delivery_timeout=delivery_timeout, namespaces=namespaces,
                              quorum_loss_after=quorum_loss_after)
    memo = make_memo(client)
    quiet_routine_logs()
    try:
        await kopf.operator(
            registry=registry, memo=memo, clusterwide=clusterwide,
            **peering_options(standalone=standalone and peering_name is None, peering_name=peering_name,
                              priority=priority, lifetime=peering_lifetime),
            namespaces=list(namespaces), liveness_endpoint=liveness_endpoint,
            stop_flag=stop_flag, ready_flag=ready_flag,
        )
    finally:
        await memo.kube.close()


def _parser() -> argparse.ArgumentParser:
    """The options of ``opsmanager run``."""
    parser = argparse.ArgumentParser(prog="opsmanager run", description="Run the etcd ops-manager operator.")
    parser.add_argument("--kubeconfig", metavar="PATH",
                        help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                       help="watch this namespace (repeatable); default: all namespaces")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)")
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument("--standalone", action="store_true",
                         help="no peering: do not coordinate with other operator replicas")
    peering.add_argument("--peering", metavar="NAME",
                         help="replicas: peer through kopf's (Cluster)KopfPeering NAME; only the one of highest "
                              "priority acts")
    parser.add_argument("--priority", type=int, metavar="N",
                        help="peering priority (default: seniority, the earlier started the higher); needs --peering")
    parser.add_argument("--peering-lifetime", type=int, metavar="SECONDS",
                        help="how long a replica's keep-alive counts, so how soon a standby takes over from a "
                             "replica that died without exiting (kopf's default: 60); needs --peering")
    parser.add_argument("--interval", type=float, default=provisioner_handlers.DEFAULT_INTERVAL, metavar="SECONDS",
                        help="how often each Etcd is reconciled and its status refreshed (default %(default)s)")
    parser.add_argument("--liveness", metavar="URL",
                        help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--metrics-port", type=int, default=metrics.DEFAULT_PORT, metavar="N",
                        help="serve Prometheus metrics on http://A:N/metrics (default %(default)s; 0: off)")
    parser.add_argument("--metrics-address", default="0.0.0.0", metavar="A",
                        help="address the metrics server binds (default %(default)s; 127.0.0.1: this host only)")
    parser.add_argument("--certificate-delivery-timeout", type=float, metavar="SECONDS",
                        default=constants.DEFAULT_CERTIFICATE_DELIVERY_TIMEOUT,
                        help="how long the kubelet may take to deliver a changed Secret into a member before the "
                             "operator calls it stuck (default %(default)s)")
    parser.add_argument("--quorum-loss-after", type=float, metavar="SECONDS",
                        default=provisioner_status.DEFAULT_QUORUM_LOSS_AFTER,
                        help="how long a majority of an Etcd's members must not answer before its QuorumLost "
                             "condition turns True (default %(default)s)")
    parser.add_argument("--no-ops", action="store_true", help="run the provisioner only, without the ops engine")
    parser.add_argument("--no-watch-cache", action="store_true",
                        help="read every object from the API server instead of watch-fed caches (a diagnostic and "
                             "the benchmark's baseline; costs the API server far more)")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true")
    verbosity.add_argument("--debug", action="store_true")
    verbosity.add_argument("-q", "--quiet", action="store_true")
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(list(argv))
    _check_args(parser, args)
    return args


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What argparse cannot say: bounds, and the options that need ``--peering`` (``parser.error`` exits)."""
    if args.interval <= 0:
        parser.error(f"--interval must be greater than 0 seconds, got {args.interval}")
    if args.certificate_delivery_timeout <= 0:
        parser.error("--certificate-delivery-timeout must be greater than 0 seconds, "
                     f"got {args.certificate_delivery_timeout}")
    if not 0 <= args.metrics_port <= 65535:
        parser.error(f"--metrics-port must be a port number from 0 (off) to 65535, got {args.metrics_port}")
    if args.priority is not None and args.peering is None:
        parser.error("--priority needs --peering NAME (a priority orders the replicas peering on NAME)")
    if args.peering_lifetime is not None and args.peering is None:
        parser.error("--peering-lifetime needs --peering NAME")
    if args.peering_lifetime is not None and args.peering_lifetime < 10:
        parser.error(f"--peering-lifetime must be at least 10 seconds (keep-alives go 5-10 s before it ends), "
                     f"got {args.peering_lifetime}")
    if args.peering is not None and not args.peering.strip():
        parser.error("--peering needs the name of a (Cluster)KopfPeering object, e.g. --peering opsmanager")
    if args.kubeconfig and not os.path.exists(args.kubeconfig):
        parser.error(f"--kubeconfig {args.kubeconfig}: no such file")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    kopf.configure(verbose=args.verbose, debug=args.debug, quiet=args.quiet)
    if not args.debug:
        quiet_routine_logs()
    client = make_client(args.kubeconfig, args.namespace, cached=not args.no_watch_cache)
    registry = build_registry(args.kubeconfig, client, interval=args.interval, with_ops=not args.no_ops,
                              delivery_timeout=args.certificate_delivery_timeout, namespaces=args.namespace,
                              quorum_loss_after=args.quorum_loss_after)
    memo = make_memo(client)
    clusterwide = not args.namespace
    log.info("opsmanager operator: %s, api %s", "all namespaces" if clusterwide else ", ".join(args.namespace),
             memo.kube.host)
    if args.metrics_port:
        metrics.serve(args.metrics_port, addr=args.metrics_address)
    try:
        kopf.run(registry=registry, memo=memo, clusterwide=clusterwide, namespaces=args.namespace,
                 liveness_endpoint=args.liveness,
                 **peering_options(standalone=args.standalone, peering_name=args.peering, priority=args.priority,
                                   lifetime=args.peering_lifetime))
    finally:
        memo.kube.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
