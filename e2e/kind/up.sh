#!/usr/bin/env bash
# e2e/kind/up.sh: a kind cluster with cert-manager (pinned, from its release manifest, webhook answering) and the
# Prometheus Operator's PrometheusRule CRD (the bundle includes a PrometheusRule).
#
# Not exercised on the project's CI machines (no Docker there); see README, "A real cluster".
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
need docker kind kubectl

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "kind cluster $CLUSTER exists"
else
  kind create cluster --name "$CLUSTER" --wait 180s
fi

log "cert-manager $CERT_MANAGER_VERSION"
k apply -f "https://github.com/cert-manager/cert-manager/releases/download/${CERT_MANAGER_VERSION}/cert-manager.yaml"
k -n cert-manager rollout status deployment/cert-manager deployment/cert-manager-cainjector \
  deployment/cert-manager-webhook --timeout=300s

# Ready pods are not enough: cert-manager's webhook must answer (its CA is injected a moment later). A server-side
# dry run of an Issuer goes through it.
cert_manager_webhook_answers() {
  k apply --dry-run=server -f - <<YAML
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: webhook-probe
  namespace: default
spec:
  selfSigned: {}
YAML
}
wait_until 180 "cert-manager's webhook answers" cert_manager_webhook_answers

log "PrometheusRule CRD (prometheus-operator $PROMETHEUS_OPERATOR_VERSION)"
k apply --server-side -f "https://raw.githubusercontent.com/prometheus-operator/prometheus-operator/${PROMETHEUS_OPERATOR_VERSION}/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"
wait_until 60 "PrometheusRule CRD established" \
  k wait --for=condition=Established crd/prometheusrules.monitoring.coreos.com --timeout=5s

log "up: kind cluster $CLUSTER (context kind-$CLUSTER); next: e2e/kind/install.sh"
