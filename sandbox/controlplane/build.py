"""Build the real control plane from Go modules: kube-apiserver, kube-controller-manager, kube-scheduler, and etcd
(etcd, etcdctl, etcdutl) of each supported minor — and SeaweedFS's ``weed``, the S3 server the backup tests store
snapshots in, and the product's own ``etcdauth`` (``tools/etcdauth``) — into a cache keyed by version, rebuilding
nothing present.

Each component is a Go module of this repository (``<component>/go.mod``) whose ``tool`` directives name the main
packages; the version it pins is the one built. No third-party source is copied here: the Go module proxy serves it.

    python3 sandbox/controlplane/build.py build [COMPONENT ...]   # what ``make controlplane`` runs
    python3 sandbox/controlplane/build.py path COMPONENT [TOOL]   # where a built binary is (or will be)
    python3 sandbox/controlplane/build.py replaces [--check]      # regenerate kubernetes/go.mod's replace block

``k8s.io/kubernetes`` requires its staging modules (``k8s.io/api``, ``k8s.io/client-go``, …) at ``v0.0.0`` and
replaces them with its own directories, which a consumer does not have: the consumer replaces each with the
staging module's release (``v0.<minor>.<patch>``). ``replaces`` derives that list from the pinned release's own
go.mod — every requirement at ``v0.0.0`` — so it is never written by hand.

The cache is ``$OPSMANAGER_CONTROLPLANE_CACHE``, else ``~/.cache/opsmanager/controlplane``:
``<component>-<version>/<tool>``. A binary is written under a temporary name and renamed, so a build that is
interrupted leaves nothing that looks built. Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Final

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent


@dataclasses.dataclass(frozen=True)
class Component:
    name: str
    module: str  # the module whose pinned version is the component's version
    tools: dict[str, str]  # binary name -> main package
    # A module whose source is this repository's (a directory of the checkout): its version is its content's hash.
    source: str | None = None

    @property
    def directory(self) -> pathlib.Path:
        return REPO / self.source if self.source else HERE / self.name

    def pinned(self) -> str:
        """The version of :attr:`module` its ``go.mod`` requires (for a module of this repository too)."""
        found = required_version((self.directory / "go.mod").read_text(), self.module)
        if found is None:
            raise SystemExit(f"{self.directory / 'go.mod'} does not require {self.module}")
        return found

    def version(self) -> str:
        """The version ``go.mod`` pins for :attr:`module` (read as text: needs no Go); for a module of this
        repository, ``src-`` and the first 12 hex digits of the SHA-256 of its go.mod, go.sum and Go files, so an
        edit builds anew."""
        if self.source:
            digest = hashlib.sha256()
            for path in sorted(self.directory.rglob("*")):
                if path.name in ("go.mod", "go.sum") or path.suffix == ".go":
                    rel = path.relative_to(self.directory).as_posix()  # a main in a subdirectory counts too
                    digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
            return "src-" + digest.hexdigest()[:12]
        found = required_version((self.directory / "go.mod").read_text(), self.module)
        if found is None:
            raise SystemExit(f"{self.directory / 'go.mod'} does not require {self.module}")
        return found


_REQUIRE_LINE = re.compile(r"^(?:require\s+)?(\S+)\s+(v\S+)$")


def required_version(gomod: str, module: str) -> str | None:
    """The version a go.mod text requires ``module`` at: a ``require`` line (``require m v1.2.3``, what ``go mod
    tidy`` writes for a lone requirement) or an entry of a ``require (…)`` block — a release or a pseudo-version
    (``v0.0.0-20261109003541-7506e5f91cd6``), ``// indirect`` or not. ``replace``, ``exclude``, ``tool`` and
    ``retract`` lines never count, nor does a module whose path only starts with ``module``."""
    block = ""
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if block:
            if line == ")":
                block = ""
                continue
            entry = line if block == "require" else ""
        else:
            opened = re.fullmatch(r"(\w+)\s*\(", line)
            if opened:
                block = opened.group(1)
                continue
            entry = line if line.startswith("require ") else ""
        match = _REQUIRE_LINE.match(entry)
        if match and match.group(1) == module:
            return match.group(2)
    return None


COMPONENTS = {c.name: c for c in (
    Component("kubernetes", "k8s.io/kubernetes", {
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        # the real nodes (opsmanager_sandbox.realnodes): the same module, so about 105 packages more
        "kubelet": "k8s.io/kubernetes/cmd/kubelet",
        "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
    }),
    Component("etcd-3.5", "go.etcd.io/etcd/server/v3", {
        "etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
        "etcdutl": "go.etcd.io/etcd/etcdutl/v3",
    }),
    Component("etcd-3.6", "go.etcd.io/etcd/server/v3", {
        "etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
        "etcdutl": "go.etcd.io/etcd/etcdutl/v3",
    }),
    Component("etcd-3.7", "go.etcd.io/etcd/server/v3", {
        "etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
        "etcdutl": "go.etcd.io/etcd/etcdutl/v3",
    }),
    # An S3 server for the backup tests (opsmanager_sandbox.objectstore). The module publishes no release tags the
    # proxy serves, so the pin is a pseudo-version; its go.mod repeats SeaweedFS's one replace (go-bip39).
    Component("seaweedfs", "github.com/seaweedfs/seaweedfs", {
        "weed": "github.com/seaweedfs/seaweedfs/weed",
    }),
    # The product's own Go tool (tools/etcdauth): sets the root password in a restored member's database. The
    # operator image ships it beside etcdutl; the tests' restore init containers run this build.
    Component("etcdauth", "opsmanager.dev/tools/etcdauth", {"etcdauth": "."}, source="tools/etcdauth"),
    # The product's other Go tool (tools/etcdstop): the members' etcd runs under it, so that a follower asked to stop
    # does not wait out its watch streams. The operator image ships it; the pods' init container copies it.
    Component("etcdstop", "opsmanager.dev/tools/etcdstop", {"etcdstop": "."}, source="tools/etcdstop"),
    # The real nodes' runtime: containerd 2.x (what the kubelet after 1.35 requires; Debian's 1.6 only through a
    # deprecated fallback) with its own runc shim and ctr; runc itself is Debian's (`make tools`).
    Component("containerd", "github.com/containerd/containerd/v2", {
        "containerd": "github.com/containerd/containerd/v2/cmd/containerd",
        "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
        "ctr": "github.com/containerd/containerd/v2/cmd/ctr",
    }),
    # The pod network: CNI bridge + host-local, with loopback (every pod) and portmap (hostPort).
    Component("cni-plugins", "github.com/containernetworking/plugins", {
        "bridge": "github.com/containernetworking/plugins/plugins/main/bridge",
        "host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
        "loopback": "github.com/containernetworking/plugins/plugins/main/loopback",
        "portmap": "github.com/containernetworking/plugins/plugins/meta/portmap",
    }),
    # Cluster DNS: CoreDNS's own packages behind a main of ours that links only the plugins a cluster's DNS uses
    # (sandbox/controlplane/coredns/main.go); keyed by that directory's content, which pins the release.
    Component("coredns", "github.com/coredns/coredns", {"coredns": "."}, source="sandbox/controlplane/coredns"),
    # cert-manager's controller: its release binary is a module the proxy does not serve, its controllers are the
    # root module's public packages; a main of ours links the CA and self-signed issuance
    # (sandbox/controlplane/cert-manager/main.go). The same release as the CRDs below.
    Component("cert-manager", "github.com/cert-manager/cert-manager", {"controller": ".", "cainjector": "./cainjector"},
              source="sandbox/controlplane/cert-manager"),
    # The tests' linearizability checker: porcupine behind a main of ours holding the model of etcd's key-value
    # store (sandbox/controlplane/lincheck/main.go, e2e/lincheck.py; docs/decisions.md D36.1 says why not etcd's).
    Component("lincheck", "github.com/anishathalye/porcupine", {"lincheck": "."},
              source="sandbox/controlplane/lincheck"),
    # Real storage on the real nodes: the CSI sidecars as released (their modules' own mains), beside our loop-device
    # driver (sandbox/controlplane/csi-loop/main.go; node-driver-registrar is not served, so it registers itself).
    Component("csi-loop", "github.com/container-storage-interface/spec", {"csi-loop": "."},
              source="sandbox/controlplane/csi-loop"),
    Component("external-provisioner", "github.com/kubernetes-csi/external-provisioner/v6", {
        "csi-provisioner": "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner",
    }),
    Component("external-resizer", "github.com/kubernetes-csi/external-resizer/v2", {
        "csi-resizer": "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer",
    }),
)}

# cert-manager's CRDs, as its release ships them (plain YAML in ``deploy/crds`` of the module): the real API server
# then checks every Certificate and Issuer the operator writes against cert-manager's own schemas. Its controller
# cannot be built from the module proxy (its binaries are separate modules the proxy does not serve).
CERT_MANAGER: Final = ("github.com/cert-manager/cert-manager", COMPONENTS["cert-manager"].pinned())

NO_GO = ("Go is not installed (no `go` on PATH): the real control plane is built from Go modules and needs it. "
         "Without Go, the embedded control plane runs everything else: `make demo`, `opsmanager sandbox up` "
         "(--control-plane embedded, the default).")


def cache_root() -> pathlib.Path:
    configured = os.environ.get("OPSMANAGER_CONTROLPLANE_CACHE")
    return pathlib.Path(configured) if configured else pathlib.Path.home() / ".cache" / "opsmanager" / "controlplane"


def binary(component: str, tool: str | None = None) -> pathlib.Path:
    """Where ``tool`` of ``component`` is (or will be) built; the component's directory without ``tool``."""
    c = COMPONENTS[component]
    where = cache_root() / f"{c.name}-{c.version()}"
    return where / tool if tool else where


def cert_manager_crds() -> pathlib.Path:
    """Where cert-manager's CRD files are (or will be) copied."""
    return cache_root() / f"cert-manager-{CERT_MANAGER[1]}" / "crds"


def fetch_cert_manager_crds(go: str) -> None:
    target = cert_manager_crds()
    if target.is_dir() and any(target.glob("*.yaml")):
        return
    module, version = CERT_MANAGER
    print(f"  cert-manager {version}: CRDs from the module …", end=" ", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        info = json.loads(subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=tmp,
                                         check=True, capture_output=True, text=True).stdout)
    files = sorted(pathlib.Path(info["Dir"], "deploy", "crds").glob("*.yaml"))
    if not files:
        raise SystemExit(f"{module}@{version} has no deploy/crds/*.yaml")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = pathlib.Path(tempfile.mkdtemp(dir=target.parent, prefix=".crds-"))
    for f in files:
        shutil.copyfile(f, partial / f.name)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    print(f"{len(files)} files", flush=True)


# The CSI sidecars' RBAC as their releases ship it (``deploy/kubernetes/rbac.yaml``): their ServiceAccounts,
# ClusterRoles and bindings, applied as they are, so the sidecars run with exactly the rights upstream asks for.
SIDECARS: Final = ("external-provisioner", "external-resizer")


def sidecar_rbac(component: str) -> pathlib.Path:
    """Where a CSI sidecar's ``rbac.yaml`` is (or will be) copied, beside its binary."""
    return binary(component) / "rbac.yaml"


def fetch_sidecar_rbac(go: str) -> None:
    for name in SIDECARS:
        target = sidecar_rbac(name)
        if target.is_file():
            continue
        c = COMPONENTS[name]
        with tempfile.TemporaryDirectory() as tmp:
            info = json.loads(subprocess.run([go, "mod", "download", "-json", f"{c.module}@{c.version()}"], cwd=tmp,
                                             check=True, capture_output=True, text=True).stdout)
        source = pathlib.Path(info["Dir"], "deploy", "kubernetes", "rbac.yaml")
        if not source.is_file():
            raise SystemExit(f"{c.module}@{c.version()} has no deploy/kubernetes/rbac.yaml")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(".rbac.yaml.partial")
        shutil.copyfile(source, partial)
        partial.rename(target)
        print(f"  {name} {c.version()}: RBAC from the module", flush=True)


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise SystemExit(NO_GO)
    return go


def _module_time(go: str, c: Component) -> str:
    """The pinned release's publication time (the proxy's ``.info``): a build date that does not change from one
    build to the next."""
    out = subprocess.run([go, "list", "-m", "-json", c.module], cwd=c.directory, check=True, capture_output=True,
                         text=True).stdout
    stamp = json.loads(out).get("Time") or "1970-01-01T00:00:00Z"
    return stamp.split(".")[0].rstrip("Z") + "Z"


PSEUDO_VERSION: Final = re.compile(r"^v\d+\.\d+\.\d+-(?:\S*\.)?\d{14}-([0-9a-f]{12})$")
"""A Go pseudo-version (``v0.0.0-20261109003541-7506e5f91cd6``, or ``vX.Y.Z-pre.0.<time>-<commit>``): group 1 is the
commit's 12-hex-digit prefix."""


def ldflags(go: str, c: Component) -> str:
    """``-s -w`` and the version stamp: Kubernetes' ``/version`` (gitVersion, major, minor; the proxy serves no git
    commit, so that is zeros), etcd's git SHA field, SeaweedFS's commit (what its release workflows stamp; its own
    version number is a constant in the source). A stamp names one module's variable only: weed links etcd's client
    packages too, and those must not claim a version of etcd."""
    version = c.version()
    flags = ["-s", "-w"]
    if c.module == "k8s.io/kubernetes":
        minor = version.split(".")[1]
        built = _module_time(go, c)
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor=1", f"-X {pkg}.gitMinor={minor}",
                      f"-X {pkg}.gitCommit={'0' * 40}", f"-X {pkg}.gitTreeState=clean", f"-X {pkg}.buildDate={built}"]
    elif c.module.startswith("go.etcd.io/etcd/"):
        flags.append(f"-X go.etcd.io/etcd/api/v3/version.GitSHA=module-{version}")
    elif c.module == "github.com/containerd/containerd/v2":
        flags.append(f"-X github.com/containerd/containerd/v2/version.Version={version}")
    elif c.module == "github.com/seaweedfs/seaweedfs":
        pseudo = PSEUDO_VERSION.match(version)
        flags.append(f"-X github.com/seaweedfs/seaweedfs/weed/util/version.COMMIT="
                     f"{pseudo.group(1) if pseudo else 'module-' + version}")
    return " ".join(flags)


def build(names: list[str]) -> int:
    go = _go()
    env = {**os.environ, "CGO_ENABLED": "0"}
    todo = [(COMPONENTS[n], tool) for n in names for tool in COMPONENTS[n].tools
            if not binary(n, tool).is_file()]
    fetch_cert_manager_crds(go)
    fetch_sidecar_rbac(go)
    if not todo:
        print(f"control plane: everything built ({', '.join(f'{n} {COMPONENTS[n].version()}' for n in names)}) "
              f"in {cache_root()}")
        return 0
    print(f"control plane: building {len(todo)} binaries into {cache_root()} — a cold build (empty Go caches) takes "
          "about 16 minutes and 3 GiB of memory on 2 cores (kube-apiserver alone 6-7 minutes, SeaweedFS's weed "
          "about 4); a rebuild from a warm Go cache about a minute", flush=True)
    started = time.monotonic()
    for c, tool in todo:
        target = binary(c.name, tool)
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"  {c.name} {c.version()}: {tool} …", end=" ", flush=True)
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            partial = pathlib.Path(tmp) / tool
            result = subprocess.run([go, "build", "-trimpath", "-ldflags", ldflags(go, c), "-o", str(partial),
                                     c.tools[tool]], cwd=c.directory, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                print("failed")
                sys.stderr.write(result.stdout + result.stderr)
                return result.returncode
            os.replace(partial, target)
        print(f"{time.monotonic() - t0:.0f} s", flush=True)
    print(f"control plane: built in {time.monotonic() - started:.0f} s")
    return 0


REPLACE_BLOCK = re.compile(r"^// Generated by build\.py replaces.*?^\)\n", re.MULTILINE | re.DOTALL)


def staging_replaces(go: str, version: str) -> str:
    """The replace block for ``k8s.io/kubernetes@version``: every requirement of its go.mod at ``v0.0.0``."""
    with tempfile.TemporaryDirectory() as tmp:  # outside any module: the download is not bent by a local go.mod
        info = json.loads(subprocess.run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], cwd=tmp,
                                         check=True, capture_output=True, text=True).stdout)
    gomod = json.loads(subprocess.run([go, "mod", "edit", "-json", info["GoMod"]], check=True, capture_output=True,
                                      text=True).stdout)
    staging = sorted(r["Path"] for r in gomod.get("Require") or () if r["Version"] == "v0.0.0")
    target = "v0." + version.removeprefix("v1.")
    lines = "".join(f"\t{m} => {m} {target}\n" for m in staging)
    return (f"// Generated by build.py replaces from k8s.io/kubernetes@{version}'s go.mod: each staging module it "
            f"requires at v0.0.0.\nreplace (\n{lines})\n")


def replaces(check: bool) -> int:
    go = _go()
    c = COMPONENTS["kubernetes"]
    path = c.directory / "go.mod"
    text = path.read_text()
    want = staging_replaces(go, c.version())
    found = REPLACE_BLOCK.search(text)
    if found is None:
        raise SystemExit(f"{path}: no generated replace block (a line starting '// Generated by build.py replaces')")
    if found.group(0) == want:
        print(f"{path}: the replace block is current ({want.count('=>')} staging modules)")
        return 0
    if check:
        print(f"{path}: the replace block is stale: run python3 {pathlib.Path(__file__).name} replaces",
              file=sys.stderr)
        return 1
    path.write_text(text[:found.start()] + want + text[found.end():])
    print(f"{path}: wrote {want.count('=>')} replaces; run `go mod tidy` there")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build what is missing from the cache")
    b.add_argument("components", nargs="*", metavar="COMPONENT", help=f"any of {', '.join(COMPONENTS)} (all)")
    p = sub.add_parser("path", help="print where a binary is (or will be) built")
    p.add_argument("component", choices=list(COMPONENTS))
    p.add_argument("tool", nargs="?")
    r = sub.add_parser("replaces", help="regenerate kubernetes/go.mod's replace block")
    r.add_argument("--check", action="store_true", help="only say whether it is current (exit 1 if not)")
    args = parser.parse_args(argv)
    if args.command == "build":
        unknown = [n for n in args.components if n not in COMPONENTS]
        if unknown:
            parser.error(f"unknown component(s) {', '.join(unknown)}: choose from {', '.join(COMPONENTS)}")
        return build(args.components or list(COMPONENTS))
    if args.command == "path":
        print(binary(args.component, args.tool))
        return 0
    return replaces(args.check)


if __name__ == "__main__":
    sys.exit(main())
