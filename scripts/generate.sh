#!/usr/bin/env bash
# Generates from the Go types in api/: the deepcopy functions (api/*/zz_generated.deepcopy.go)
# and the CRDs (config/crd/snigate/*.yaml), with controller-gen built from its own Go module
# (sigs.k8s.io/controller-tools, version pinned here). OUT=DIR writes the CRDs to DIR instead,
# which is how the test compares the committed CRDs with freshly generated ones.
set -euo pipefail
cd "$(dirname "$0")/.."
CONTROLLER_TOOLS=v0.23.0
out="${OUT:-config/crd/snigate}"
mkdir -p "$out"
gen() { go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS}" "$@"; }
if [ -z "${OUT:-}" ]; then
  gen object paths=./api/...
fi
gen crd paths=./api/... output:crd:artifacts:config="$out"
