#!/usr/bin/env bash
# e2e/kind/install.sh: build the operator image, load it into the kind cluster, `kubectl apply -k deploy/`, and
# wait for 2 operator + 2 webhook pods Ready and the webhook configurations' CA injected.
#
# Not exercised on the project's CI machines (no Docker there); see README, "A real cluster".
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
need docker kind kubectl

image="$(bundle_image)"
[[ -n "$image" ]] || die "no image in kubectl kustomize deploy/"
log "building $image"
docker build -t "$image" "$ROOT"
kind load docker-image "$image" --name "$CLUSTER"

log "kubectl apply -k deploy/"
k apply -k "$ROOT/deploy"
k -n "$NAMESPACE" rollout status deployment/opsmanager-operator deployment/opsmanager-webhook --timeout=300s

ready_pods() {  # ready_pods COMPONENT: how many of its pods are Ready
  k -n "$NAMESPACE" get pods -l "app.kubernetes.io/name=opsmanager,app.kubernetes.io/component=$1" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$'
}
two_ready() { [[ "$(ready_pods "$1")" -ge 2 ]]; }
wait_until 300 "2 operator pods Ready" two_ready operator
wait_until 300 "2 webhook pods Ready" two_ready webhook

ca_injected() {
  [[ -n "$(k get validatingwebhookconfiguration opsmanager -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]] &&
    [[ -n "$(k get mutatingwebhookconfiguration opsmanager -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]]
}
wait_until 180 "CA injected into the webhook configurations" ca_injected

k -n "$NAMESPACE" get pods -o wide
log "peering (which operator replica acts):"
k get clusterkopfpeering opsmanager -o jsonpath='{.status}' && echo
log "installed; next: e2e/kind/ops.sh"
