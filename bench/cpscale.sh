#!/usr/bin/env bash
# bench/cpscale.sh — the control-plane scale benchmark (bench/cpscale): a real kube-apiserver
# and etcd, `snigate controller` with its local proxy, tenants by the hundred on one shared
# Gateway, then 10 000 exposures on one tenant (docs/performance.md, "The control plane at
# scale").
#
#   bench/cpscale.sh            full: 10, 100 and 1 000 tenants × 10 exposures (30 trials each),
#                               then 10 000 on one tenant; writes bench/results/cpscale.json and
#                               bench/results/control-plane.md (with the last full run, kept in
#                               bench/results/runs/cpscale-<time>.json), then renders
#                               docs/performance.md
#   bench/cpscale.sh --smoke    the 10 × 10 step, 5 trials, to a temp folder (CI): fails on
#                               errors, never on missed targets
#   bench/cpscale.sh --provision
#                               the full steps with `snigate controller --provision` and its
#                               data planes run by a stand-in node (internal/testutil/dpnode):
#                               bench/results/cpscale-provisioned.json and
#                               control-plane-provisioned.md (docs/performance.md, 8.1)
#   bench/cpscale.sh --smoke --provision
#                               the 10 × 10 step of that, to a temp folder
#
# Needs root (the backend runs in a network namespace) and scripts/install-kube.sh's
# kube-apiserver and etcd.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=full provision= name=cpscale section=control-plane
for arg in "$@"; do
	case $arg in
	--smoke) mode=smoke ;;
	--provision) provision=1 name=cpscale-provisioned section=control-plane-provisioned ;;
	*) echo "usage: bench/cpscale.sh [--smoke] [--provision]" >&2; exit 2 ;;
	esac
done
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$HOME/.cache/snigate/kube-1.36.3}"
previous=
if [[ $mode == full ]]; then
	out=$PWD/bench/results/$name.json md=$PWD/bench/results/$section.md
	# The last full run is kept in bench/results/runs/ and shown after the new one.
	if [[ -f $out ]]; then
		previous=$PWD/bench/results/runs/$name-$(date -u -r "$out" +%Y%m%dT%H%M%S).json
		cp "$out" "$previous"
	fi
else
	tmp=$(mktemp -d /tmp/snigate-cpscale.XXXXXX)
	trap 'rm -rf "$tmp"' EXIT
	out=$tmp/cpscale.json md=$tmp/control-plane.md
fi
SNIGATE_CPSCALE_KEEP=${SNIGATE_CPSCALE_KEEP:-} SNIGATE_CPSCALE=$mode SNIGATE_CPSCALE_PROVISION=$provision SNIGATE_CPSCALE_OUT=$out SNIGATE_CPSCALE_MD=$md \
	SNIGATE_CPSCALE_PREVIOUS=$previous SNIGATE_CPSCALE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || true) \
	go test -count=1 -timeout 150m -run TestControlPlaneScale -v ./bench/cpscale 2>&1 | grep -v '^\s*{"time' | tail -n 60
if [[ $mode == full ]]; then
	bash bench/run.sh --render
fi
