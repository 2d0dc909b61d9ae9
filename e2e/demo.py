"""``python -m e2e.demo`` (``make demo``): the whole product on the embedded sandbox, start to end.

Sandbox up in RBAC mode → the product installed from its bundle (``kubectl apply -k deploy/``: two operator and
two webhook pods under their own ServiceAccounts; ``--no-install`` runs them as plain child processes instead)
→ a 3-member plaintext Etcd → add TLS → rotate → change the issuer (a new CA) → remove TLS, with a live
writer putting every 20 ms through every member the whole time. Prints each condition as it happens and a final
table: per operation, wall time, failed writes of the live writer, the longest write stall, and leader elections
not caused by a MoveLeader. Exits 0 only if all four operations succeed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import pathlib
import sys
import time
from collections.abc import Sequence

from e2e import scenario
from opsmanager import kube, pki
from opsmanager_sandbox import install as sandbox_install

BUNDLE = pathlib.Path(__file__).resolve().parent.parent / "deploy"
# clients watching beside the writer in the demo: over gRPC, and through etcd's JSON gateway
WATCHERS, GATEWAY_WATCHERS = 2, 1

OPERATIONS = (
    ("add-tls", "add TLS", {"tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer",
                                                  "name": "ca-a"}}}),
    ("rotate", "rotate", {"tls": {"rotateCertificates": True}}),
    ("change-issuer", "issuer change", {"tls": {"issuerRef": {"apiGroup": "cert-manager.io", "kind": "Issuer",
                                                              "name": "ca-b"}}}),
    ("remove-tls", "remove TLS", {"tls": {"remove": True}}),
)


def table(results: list[tuple[str, scenario.OpResult]]) -> str:
    head = ("operation", "result", "wall s", "writes failed/total", "max stall s", "elections",
            "MoveLeader", "unplanned", "watch problems")
    rows = [head]
    for label, r in results:
        watch = str(len(r.recorded.watch_problems())) if r.recorded is not None else "–"
        rows.append((label, r.phase, f"{r.wall_seconds:.1f}", f"{r.writes_failed}/{r.writes_ok + r.writes_failed}",
                     f"{r.max_gap:.3f}", str(r.elections), str(r.leader_moves), str(r.unplanned_elections), watch))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


async def check_served(sc: scenario.Scenario, db: str) -> str | None:
    """After a TLS operation: every member serves the certificate now in the server Secret."""
    secret = await sc.k.get("v1", "Secret", sc.namespace, f"{db}-server-cert")
    data = ((secret or {}).get("data") or {}).get("tls.crt")
    if not data:
        return "the server certificate Secret is missing"
    want = pki.cert_info(base64.b64decode(data)).serial
    served = await sc.served_serials(db)
    wrong = {k: format(v, "x") for k, v in served.items() if v != want}
    return f"members serving another certificate: {wrong}" if wrong else None


async def run(workdir: pathlib.Path, db: str = "demo", *, bundle: pathlib.Path | None = BUNDLE,
              control_plane: str = "embedded", nodes: int | None = None) -> int:
    say = print
    started = time.monotonic()
    # storage=None: real nodes give the members real volumes (the CSI driver's default class), as `sandbox up` does
    # Besides the writer, a recording client and clients that watch its keys (one starting on each member), as a
    # kube-apiserver watches its etcd: what an operation does to watch streams shows too.
    async with scenario.Scenario(workdir, printer=say, install=bundle, control_plane=control_plane, nodes=nodes,
                                 storage=None, watchers=WATCHERS, gateway_watchers=GATEWAY_WATCHERS) as sc:
        real = sc.sandbox.realnodes
        say(f"sandbox up in {time.monotonic() - started:.1f}s ({control_plane} control plane"
            f"{f', {len(real.nodes)} real nodes' if real is not None else ''}"
            f"{', CSI volumes' if sc.storage == 'csi' else ''}"
            f"{', ' + str(await sc.server_version()) if control_plane == 'kubernetes' else ''}); kubeconfig: "
            f"{sc.sandbox.kubeconfig}")
        if bundle is not None:
            pods = await sc.k.list("v1", "Pod", sandbox_install.NAMESPACE)
            say(f"installed with `kubectl apply -k {bundle.name}/`: "
                f"{', '.join(sorted(p['metadata']['name'] for p in pods))} Ready")
        say(f"  try: KUBECONFIG={sc.sandbox.kubeconfig} kubectl get etcd,etcdops -n {sc.namespace}")
        await sc.ca_issuer("ca-a")
        await sc.ca_issuer("ca-b")
        await sc.create_etcd(db)
        await sc.wait_ready(db, timeout=90)
        say(f"Etcd {sc.namespace}/{db}: 3 members Ready (plaintext) at {time.monotonic() - started:.1f}s")
        try:
            await sc.submit("invalid", db, "ReconfigureTLS", tls={"remove": True, "rotateCertificates": True})
            say("!! the admission webhook let an invalid request through")
            return 1
        except kube.Invalid as denied:
            say(f"an invalid request is refused at once by the admission webhook:\n  {denied}")
        results: list[tuple[str, scenario.OpResult]] = []
        for name, label, spec in OPERATIONS:
            say(f"\n== {label}: EtcdOpsRequest {name}")
            result = await sc.operate(name, db, "ReconfigureTLS", timeout=600, **spec)
            results.append((label, result))
            watch = result.recorded.watch_problems() if result.recorded is not None else []
            say(f"   -> {result.phase} in {result.wall_seconds:.1f}s; writes failed {result.writes_failed} of "
                f"{result.writes_ok + result.writes_failed}; max stall {result.max_gap:.3f}s; "
                f"unplanned elections {result.unplanned_elections}; {WATCHERS + GATEWAY_WATCHERS} watchers "
                f"({GATEWAY_WATCHERS} through the gateway): "
                f"{len(watch)} events lost, repeated or out of order")
            if result.phase != "Successful":
                say(f"   FAILED: {result.failure}")
                break
            if watch:
                say(f"   WATCH: {watch[:3]}")
                results[-1] = (label, dataclasses.replace(result, phase="WatchBroken"))
                break
            if name != "remove-tls":
                problem = await check_served(sc, db)
                if problem:
                    say(f"   served certificates: {problem}")
                    results[-1] = (label, dataclasses.replace(result, phase="WrongCertificate"))
                    break
                say("   every member serves the certificate in its Secret (fresh TLS handshake)")
            await sc.wait_ready(db, timeout=60)
        say("\n" + table(results))
        ok = len(results) == len(OPERATIONS) and all(r.phase == "Successful" for _, r in results)
        say(f"\n{'all four operations succeeded' if ok else 'the demo did NOT complete'} "
            f"({time.monotonic() - started:.0f}s in all)")
        return 0 if ok else 1


TRY_MORE = """\
More to try by hand, on a sandbox that stays up (the manifests are in docs/examples/; each kind of request is
explained, with what to do when it fails, in docs/operations.md):

  opsmanager sandbox up --dir .sandbox/try --object-store &   # prints the S3 endpoint; Secret default/s3 made
  export KUBECONFIG=.sandbox/try/kubeconfig

  authentication and a live password change (no restart):
    kubectl apply -f docs/examples/etcd-auth.yaml       # Secret demo-auth generated, authentication turned on
    kubectl apply -f docs/examples/rotate-auth.yaml     # RotateAuth; then: kubectl get secret demo-auth -o yaml
  backups and a restore (edit destination.endpoint to the printed one first):
    kubectl apply -f docs/examples/etcd-backup.yaml     # a Backup request every ten minutes (trigger label)
    kubectl apply -f docs/examples/backup.yaml          # one now; kubectl get etcd saved -o jsonpath='{.status.backup}'
    kubectl apply -f docs/examples/restore.yaml         # the newest snapshot back, a new cluster ID
  a cluster that lost quorum (stop two members of demo for good, e.g. delete their data and kill etcd):
    kubectl get etcd demo -o jsonpath='{.status.conditions[?(@.type=="QuorumLost")].message}'
    kubectl apply -f docs/examples/recover-from-quorum-loss.yaml   # confirmMember: the member that message names
"""


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__.splitlines()[0],
                                     epilog=TRY_MORE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=".sandbox/demo", help="working directory of the sandbox (default %(default)s)")
    parser.add_argument("--no-install", action="store_true",
                        help="run the operator and the webhook as child processes instead of installing deploy/")
    parser.add_argument("--control-plane", choices=("embedded", "kubernetes"), default="embedded",
                        help="embedded: the emulated control plane; kubernetes: kube-apiserver, "
                             "kube-controller-manager and kube-scheduler built by `make controlplane` (default "
                             "%(default)s)")
    parser.add_argument("--nodes", type=int, default=None, metavar="N",
                        help="with --control-plane kubernetes: N real nodes (kubelet, containerd, runc, a pod network, "
                             "CoreDNS; `make controlplane tools`); 0: the node agent (default: $OPSMANAGER_NODES, "
                             "else 0)")
    args = parser.parse_args(list(argv))
    return asyncio.run(run(pathlib.Path(args.dir), bundle=None if args.no_install else BUNDLE,
                           control_plane=args.control_plane, nodes=args.nodes))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
