"""``opsmanager sandbox up``: run the local sandbox until SIGINT/SIGTERM.

    opsmanager sandbox up [--dir .sandbox] [--no-operator | --install DIR] [--port N] [--apply FILE ...]
                          [--speed F] [--certificate-delivery-timeout SECONDS] [--authorization MODE]

Starts the API server (with the CRDs rendered from the API models, or ``--crds DIR``, and cert-manager's kinds), the kubelet, the StatefulSet controller
and cert-manager, writes ``<dir>/kubeconfig``, applies the ``--apply`` manifests, prints how to point kubectl at
it, and runs until interrupted; then stops every process it started (by PID) and exits 0. The operator and the
admission webhook (``components.DEFAULTS``) start as child processes of this CLI unless ``--no-operator`` is given;
the operator's metrics URL is then in ``<dir>/endpoints.json`` (``{"operatorMetrics": "http://127.0.0.1:PORT/metrics"}``).

``--install DIR`` runs the product as a cluster would instead: RBAC mode, then ``kubectl apply -k DIR`` (the
bundle, ``deploy/``) with the admin kubeconfig; the sandbox's Deployment controller and kubelet bring up its two
operator and two webhook pods under their own ServiceAccounts (:mod:`opsmanager_sandbox.install`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opsmanager_sandbox import cluster, objectstore, process, realcp
from opsmanager_sandbox import components as sandbox_components
from opsmanager_sandbox import install as sandbox_install


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opsmanager sandbox", description="the local Kubernetes sandbox")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the sandbox and run until SIGINT/SIGTERM")
    up.add_argument("--dir", default=".sandbox", help="state directory: kubeconfig, logs, volumes (default .sandbox)")
    up.add_argument("--no-operator", action="store_true",
                    help="do not start the operator and the admission webhook inside the sandbox")
    up.add_argument("--install", metavar="DIR", default=None,
                    help="install the product from its kustomize bundle (kubectl apply -k DIR, e.g. deploy/) as "
                         "pods under their own ServiceAccounts, in RBAC mode, instead of the child processes")
    up.add_argument("--port", type=int, default=0, help="API server port on 127.0.0.1 (default: a free one)")
    up.add_argument("--apply", action="append", default=[], metavar="FILE",
                    help="YAML manifests to apply once the sandbox is up (repeatable)")
    up.add_argument("--speed", type=float, default=1.0,
                    help="multiply probe periods and restart back-off by this factor (default 1.0 = real time)")
    up.add_argument("--crds", default=None, metavar="DIR",
                    help="apply the CRD files of DIR (default: the CRDs rendered from the installed API models)")
    up.add_argument("--certificate-delivery-timeout", type=float, metavar="SECONDS",
                    default=sandbox_components.SANDBOX_CERTIFICATE_DELIVERY_TIMEOUT,
                    help="the operator's --certificate-delivery-timeout (default %(default)s: the sandbox kubelet "
                         "delivers a changed Secret after 0.5 s)")
    up.add_argument("--authorization", choices=("AlwaysAllow", "RBAC"), default="AlwaysAllow",
                    help="the API server's authorization mode: RBAC enforces Roles and bindings and serves HTTPS; "
                         "the kubeconfig's admin token keeps full rights either way (default %(default)s)")
    up.add_argument("--control-plane", choices=cluster.CONTROL_PLANES, default=cluster.EMBEDDED,
                    help="embedded: the emulated API server and controllers (no Go needed); kubernetes: "
                         "kube-apiserver, kube-controller-manager and kube-scheduler built from their Go modules "
                         "(`make controlplane` first) with this project's node agent (default %(default)s)")
    up.add_argument("--nodes", type=int, default=None, metavar="N",
                    help="with --control-plane kubernetes: N real nodes (kubelet, containerd and runc, a pod network, "
                         "kube-proxy, CoreDNS; root and `make controlplane tools` needed); 0: this project's node "
                         "agent instead (default: 3 on the real control plane)")
    up.add_argument("--storage", choices=cluster.STORAGES, default=None,
                    help="with real nodes: how claims get volumes; csi: this project's CSI driver (a loop device "
                         "with XFS per volume, online growth) with the real external-provisioner and "
                         "external-resizer, StorageClasses standard (the default) and fast; hostpath: a pre-bound "
                         "hostPath volume each, as the embedded mode and the node agent have (default: csi on real "
                         "nodes, else hostpath)")
    up.add_argument("--object-store", action="store_true",
                    help="also run an S3 server on loopback (SeaweedFS, built by `make controlplane`) with the "
                         "bucket `backups` and the Secret `s3` in namespace default, for spec.backup "
                         "(docs/examples/etcd-backup.yaml); its endpoint is printed")
    up.add_argument("-v", "--verbose", action="store_true", help="log the controllers' work")
    return parser


def storage_for(asked: str | None, nodes: int) -> str:
    """Real nodes get real volumes unless asked otherwise; the embedded mode and the node agent have hostPath only."""
    if asked is None:
        return cluster.default_storage(nodes)
    if asked == cluster.CSI and not nodes:
        raise SystemExit("--storage csi: CSI volumes need real nodes: add --control-plane kubernetes (and --nodes N)")
    return asked


def _nodes(args: argparse.Namespace) -> int:
    if args.nodes is None:
        return 3 if args.control_plane == cluster.KUBERNETES else 0
    if args.nodes and args.control_plane != cluster.KUBERNETES:
        raise SystemExit("--nodes: real nodes need the real control plane: add --control-plane kubernetes")
    return int(args.nodes)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("aiohttp").setLevel(logging.CRITICAL)  # disconnects of watches at shutdown
    if args.install is not None:
        if args.no_operator:
            print("opsmanager sandbox up: --install and --no-operator exclude each other (the bundle installs the "
                  "operator)", file=sys.stderr)
            return 2
        if not (Path(args.install) / "kustomization.yaml").is_file():
            print(f"opsmanager sandbox up: --install {args.install}: no kustomization.yaml there; give the "
                  "bundle's directory, e.g. --install deploy/", file=sys.stderr)
            return 2
        if args.authorization != "RBAC":
            args.authorization = "RBAC"  # the product runs under its own ServiceAccounts
    for path in args.apply:
        if not Path(path).is_file():
            print(f"opsmanager sandbox up: --apply {path}: no such file", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_up(args))
    except process.SandboxUnsupported as exc:
        print(f"opsmanager sandbox up: this machine cannot run the sandbox: {exc}", file=sys.stderr)
        return 1
    except sandbox_install.InstallError as exc:
        print(f"opsmanager sandbox up: --install: {exc}", file=sys.stderr)
        return 1
    except realcp.NotBuilt as exc:
        print(f"opsmanager sandbox up: {exc}", file=sys.stderr)
        return 1


async def _object_store(sb: cluster.Sandbox) -> objectstore.ObjectStoreServer:
    """A SeaweedFS S3 server in ``<dir>/s3`` with the bucket ``backups``, and its keys as Secret ``default/s3``."""
    store = await objectstore.ObjectStoreServer(Path(sb.dir) / "s3", buckets=("backups",)).astart()
    secret = Path(sb.dir) / "s3-secret.yaml"
    keys = {k: base64.b64encode(v.encode()).decode()
            for k, v in (("accessKeyId", store.access_key), ("secretAccessKey", store.secret_key))}
    secret.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s3, namespace: default}\n"
                      f"data: {{accessKeyId: {keys['accessKeyId']}, secretAccessKey: {keys['secretAccessKey']}}}\n")
    secret.chmod(0o600)
    await sb.apply(secret)
    return store


async def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    components: list[Any] = [] if args.no_operator else [
        *cluster.DEFAULT_COMPONENTS,
        *(functools.partial(c, delivery_timeout=args.certificate_delivery_timeout)
          if c is sandbox_components.operator else c for c in sandbox_components.DEFAULTS)]
    if args.install is not None:
        components = [sandbox_install.install(args.install)]
    crds = Path(args.crds) if args.crds else cluster.MODEL_CRDS
    nodes = _nodes(args)
    async with cluster.Sandbox(dir=args.dir, port=args.port, speed=args.speed, components=components,
                               crds_dir=crds, authorization=args.authorization, control_plane=args.control_plane,
                               nodes=nodes, storage=storage_for(args.storage, nodes)) as sb:
        store = await _object_store(sb) if args.object_store else None
        for path in args.apply:
            await sb.apply(Path(path))
        metrics_url = sandbox_components.recorded_endpoints(sb.dir).get("operatorMetrics")
        endpoints = (f"  operator metrics: {metrics_url} (in {sb.dir / sandbox_components.ENDPOINTS_FILE})\n"
                     if metrics_url else "")
        if store is not None:
            endpoints += (f"  S3 store: {store.endpoint} (bucket backups; Secret default/s3 holds its keys): "
                          "set it as spec.backup.destination.endpoint\n")
        extras = "none" if not components else ", ".join(
            getattr(getattr(c, "func", c), "__name__", repr(c)) for c in components)
        print(f"sandbox up in {time.monotonic() - started:.2f}s: API server {sb.url} (state in {sb.dir})\n"
              f"  CRDs: {', '.join(sb.crds) or 'none'}; extra components: {extras}\n"
              f"  point kubectl at it with:\n"
              f"    export KUBECONFIG={sb.kubeconfig}\n"
              f"    kubectl get pods -A\n"
              + (f"  nodes: {', '.join(f'{n.name} {n.ip}' for n in sb.realnodes.nodes)} (kubectl logs/exec work)\n"
                 if sb.realnodes is not None else
                 f"  container logs: {sb.dir / 'logs'}/<namespace>/<pod>/<container>.log\n") +
              f"{endpoints}"
              "  stop with Ctrl-C (SIGINT) or SIGTERM", flush=True)
        try:
            await stop.wait()
        finally:
            if store is not None:
                store.stop()
        print("stopping the sandbox ...", flush=True)
    print("sandbox stopped", flush=True)
    return 0
