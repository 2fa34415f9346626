#!/usr/bin/env bash
# bench/soak.sh — the soak benchmark (bench/soak): `snigate serve` for 30 minutes under mixed
# traffic, a reload every 10 s, a backend killed and restarted every minute, a live upgrade
# every 5 minutes; file descriptors, goroutines and RSS sampled each minute.
#
#   bench/soak.sh            full (30 minutes): writes bench/results/soak.json
#   bench/soak.sh --smoke    2 minutes, to a temp file: fails on errors, never on the bounds
set -euo pipefail
cd "$(dirname "$0")/.."
mode=full out=$PWD/bench/results/soak.json
if [[ ${1:-} == --smoke ]]; then
	mode=smoke out=$(mktemp /tmp/snigate-soak.XXXXXX.json)
	trap 'rm -f "$out"' EXIT
fi
SNIGATE_SOAK=$mode SNIGATE_SOAK_OUT=$out go test -count=1 -timeout 45m -run TestSoak -v ./bench/soak 2>&1 | tail -n 60
