# shellcheck shell=bash
# The settings below are used by the scripts that source this file.
# shellcheck disable=SC2034
# Shared by the e2e/kind scripts (sourced, not run). Versions are pinned here, in one place.
#
# These scripts need a machine with Docker, kind and kubectl; they are NOT run on the project's CI machines (no
# Docker there): CI only checks them with `bash -n` and shellcheck (tests/deploy/test_kind_scripts.py).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${KIND_CLUSTER:-opsmanager}"
NAMESPACE="opsmanager-system"             # deploy/base/kustomization.yaml `namespace:`
DEMO_NAMESPACE="${DEMO_NAMESPACE:-etcd-demo}"
CERT_MANAGER_VERSION="v1.16.2"
PROMETHEUS_OPERATOR_VERSION="v0.79.2"     # only its PrometheusRule CRD, so deploy/'s PrometheusRule applies
ETCDCTL_VERSION="v3.5.17"                 # the live writer's etcdctl

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool is missing: install it first (README, 'A real cluster')"
  done
}

# kubectl against the kind cluster only, whatever the current context is.
k() { kubectl --context "kind-${CLUSTER}" "$@"; }

# wait_until SECONDS WHAT COMMAND...: run COMMAND every 2 s until it succeeds; fail naming WHAT at the deadline.
wait_until() {
  local timeout="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what: not reached within ${timeout}s"
    sleep 2
  done
  log "$what"
}

# The operator image as the bundle names it (deploy/base/kustomization.yaml `images:`, the one place).
bundle_image() {
  kubectl kustomize "$ROOT/deploy" | awk '$1 == "image:" { print $2; exit }'
}
