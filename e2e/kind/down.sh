#!/usr/bin/env bash
# e2e/kind/down.sh: delete the kind cluster (and everything in it).
#
# Not exercised on the project's CI machines (no Docker there); see README, "A real cluster".
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
need kind

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind delete cluster --name "$CLUSTER"
else
  log "no kind cluster $CLUSTER"
fi
