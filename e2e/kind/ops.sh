#!/usr/bin/env bash
# e2e/kind/ops.sh: the demo's four TLS operations on a real cluster, each with a live writer, and the demo's table.
#
# A 3-member plaintext Etcd in $DEMO_NAMESPACE, two CA Issuers (ca-a, ca-b: CA Certificates from a self-signed
# Issuer), and a writer pod putting a key every ~50 ms through the Etcd's client Service (http, or https with the
# client certificate and trust bundle the operator writes, mounted as they appear and change). Then, one after the
# other, EtcdOpsRequests ReconfigureTLS: add TLS (ca-a) -> rotate -> issuer change (ca-b) -> remove TLS. For each:
# the result, the wall time, the writer's failed/total writes and its longest stall while it ran (the demo's table
# without its leader-election columns, which need the members' metrics).
#
# Needs bash >= 5 (EPOCHREALTIME). Run after up.sh and install.sh.
# Not exercised on the project's CI machines (no Docker there); see README, "A real cluster".
# The probes below run through wait_until, which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
need kubectl awk
[[ -n "${EPOCHREALTIME:-}" ]] || die "bash >= 5 is needed (EPOCHREALTIME)"

DB="${DB:-demo}"
NS="$DEMO_NAMESPACE"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

kns() { k -n "$NS" "$@"; }

log "namespace $NS, CA Issuers ca-a and ca-b"
k create namespace "$NS" --dry-run=client -o yaml | k apply -f -
for ca in ca-a ca-b; do
  kns apply -f - <<YAML
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: selfsigned
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: ${ca}
spec:
  isCA: true
  commonName: ${ca}-root
  secretName: ${ca}-keypair
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {kind: Issuer, name: selfsigned}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: ${ca}
spec:
  ca:
    secretName: ${ca}-keypair
YAML
  wait_until 120 "Issuer $ca Ready" kns wait --for=condition=Ready "issuer/$ca" --timeout=5s
done

log "Etcd $NS/$DB: 3 members, plaintext"
kns apply -f - <<YAML
apiVersion: opsmanager.dev/v1alpha1
kind: Etcd
metadata:
  name: ${DB}
spec:
  version: "3.5.1"
  replicas: 3
  storageType: Durable
  deletionPolicy: WipeOut
YAML
etcd_ready() { [[ "$(kns get etcd "$DB" -o jsonpath='{.status.phase}')" == "Ready" ]]; }
wait_until 600 "Etcd $DB Ready" etcd_ready

log "live writer"
kns delete pod writer --ignore-not-found --wait=true
kns apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: writer
spec:
  restartPolicy: Never
  containers:
    - name: writer
      image: alpine:3.20
      env:
        - {name: DB, value: "${DB}"}
        - {name: ETCDCTL_VERSION, value: "${ETCDCTL_VERSION}"}
      command: ["/bin/sh", "-c"]
      args:
        - |
          set -eu
          apk add --no-cache coreutils >/dev/null
          case "\$(uname -m)" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch="\$(uname -m)" ;; esac
          dist="etcd-\${ETCDCTL_VERSION}-linux-\${arch}"
          wget -qO- "https://github.com/etcd-io/etcd/releases/download/\${ETCDCTL_VERSION}/\${dist}.tar.gz" |
            tar xz -C /tmp --strip-components=1 "\${dist}/etcdctl"
          put() {
            if [ "\$1" = https ]; then
              set -- "\$@" --cacert=/tls/ca/ca.crt --cert=/tls/client/tls.crt --key=/tls/client/tls.key
            fi
            /tmp/etcdctl --dial-timeout=500ms --command-timeout=1s --endpoints="\$1://\${DB}:2379" "\$@" \
              put writer "\$i" >/dev/null 2>&1
          }
          set +e
          i=0; first=http; second=https
          echo "\$(date +%s.%3N) start 0"
          while true; do
            i=\$((i + 1))
            if put "\$first"; then
              echo "\$(date +%s.%3N) ok \$i"
            elif put "\$second"; then
              echo "\$(date +%s.%3N) ok \$i"; t="\$first"; first="\$second"; second="\$t"
            else
              echo "\$(date +%s.%3N) fail \$i"
            fi
            sleep 0.05
          done
      volumeMounts:
        - {name: ca, mountPath: /tls/ca, readOnly: true}
        - {name: client, mountPath: /tls/client, readOnly: true}
  volumes:
    - name: ca
      secret: {secretName: "${DB}-ca-bundle", optional: true}
    - name: client
      secret: {secretName: "${DB}-client-cert", optional: true}
YAML
writing() { kns logs writer | grep -q ' ok '; }
wait_until 300 "the writer writes" writing

# stats START END: "failed total max_stall" of the writer's log lines between two instants (Unix seconds).
stats() {
  kns logs writer >"$WORK/writer.log"
  awk -v s="$1" -v e="$2" '
    $1 >= s && $1 <= e && ($2 == "ok" || $2 == "fail") {
      total++
      if ($2 == "fail") { failed++ } else { if (last != "") { gap = $1 - last; if (gap > max) max = gap }; last = $1 }
    }
    END { printf "%d %d %.3f\n", failed, total, max }' "$WORK/writer.log"
}

terminal() {  # terminal NAME: the EtcdOpsRequest has ended
  local phase
  phase="$(kns get etcdopsrequest "$1" -o jsonpath='{.status.phase}')"
  [[ "$phase" == Successful || "$phase" == Failed || "$phase" == Skipped ]]
}

operate() {  # operate NAME LABEL TLS_JSON: one EtcdOpsRequest, waited for; appends a row to the table
  local name="$1" label="$2" tls="$3" start end phase
  log "== $label: EtcdOpsRequest $name"
  start="$EPOCHREALTIME"
  kns apply -f - <<YAML
apiVersion: ops.opsmanager.dev/v1alpha1
kind: EtcdOpsRequest
metadata:
  name: ${name}
spec:
  type: ReconfigureTLS
  databaseRef: {name: ${DB}}
  tls: ${tls}
YAML
  wait_until 900 "$name finished" terminal "$name"
  end="$EPOCHREALTIME"
  phase="$(kns get etcdopsrequest "$name" -o jsonpath='{.status.phase}')"
  read -r failed total stall < <(stats "$start" "$end")
  printf '%s\t%s\t%.1f\t%s/%s\t%s\n' "$label" "$phase" "$(awk -v s="$start" -v e="$end" 'BEGIN { print e - s }')" \
    "$failed" "$total" "$stall" >>"$WORK/table"
  log "   -> $phase; writes failed $failed of $total; max stall ${stall}s"
  [[ "$phase" == Successful ]] || { kns describe etcdopsrequest "$name" >&2; return 1; }
  wait_until 300 "Etcd $DB Ready" etcd_ready
}

printf 'operation\tresult\twall s\twrites failed/total\tmax stall s\n' >"$WORK/table"
status=0
operate add-tls "add TLS" '{issuerRef: {apiGroup: cert-manager.io, kind: Issuer, name: ca-a}}' &&
  operate rotate "rotate" '{rotateCertificates: true}' &&
  operate change-issuer "issuer change" '{issuerRef: {apiGroup: cert-manager.io, kind: Issuer, name: ca-b}}' &&
  operate remove-tls "remove TLS" '{remove: true}' || status=1

echo
column -t -s $'\t' "$WORK/table" 2>/dev/null || cat "$WORK/table"
echo
if ((status == 0)); then
  log "all four operations succeeded"
else
  log "the operations did NOT all succeed"
fi
exit "$status"
