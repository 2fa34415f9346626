#!/usr/bin/env bash
# bench/run.sh — snigate's benchmark against HAProxy, nginx and sniproxy, measured side by side
# (docs/performance.md states the targets).
#
#   bench/run.sh            full run: 5 interleaved rounds, 8-15 minutes on 2 cores; writes
#                           bench/results/latest.json, bench/results/chart.svg and
#                           docs/performance.md
#   bench/run.sh --smoke    one round with tiny counts, < 2 minutes (CI); writes to a temp
#                           folder only. Fails on errors, never on missed targets.
#   bench/run.sh [--smoke] --only conns,bulk,latency,term,idle,scale,pg,syscalls,micro
#                           a subset (writes to a temp folder as well); -v logs every value
#   bench/run.sh --render   regenerate docs/performance.md from bench/results/latest.json
#                           (after editing bench/results/notes.md)
#
# Needs root (it installs the peers from Debian packages when missing, and PostgreSQL runs as
# the postgres user) and at least 2 CPUs: the load generator and backends run on CPU 0, the
# proxy under test on CPU 1.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

smoke=0
render=0
only=""
extra=()
while (($#)); do
	case $1 in
	--smoke) smoke=1 ;;
	--render) render=1 ;;
	--only) only=$2; shift ;;
	--only=*) only=${1#--only=} ;;
	*) extra+=("$1") ;;
	esac
	shift
done

# --render: regenerate docs/performance.md and the chart from bench/results/latest.json
# (after editing bench/results/notes.md), without measuring anything.
if ((render)); then
	go run ./bench/cmd/runner --render bench/results/latest.json --md docs/performance.md \
		--svg bench/results/chart.svg --chart-link ../bench/results/chart.svg --notes bench/results/notes.md
	exit
fi

if [[ $(id -u) -ne 0 ]]; then
	echo "bench: must run as root" >&2
	exit 1
fi
if (($(nproc --all) < 2)); then
	echo "bench: needs at least 2 CPUs" >&2
	exit 1
fi

# The peers, PostgreSQL and pgbench, from Debian packages.
need=0
for b in haproxy nginx sniproxy pgbench taskset; do
	command -v "$b" >/dev/null 2>&1 || need=1
done
[[ -e /usr/lib/nginx/modules/ngx_stream_module.so ]] || need=1
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need=1
if ((need)); then
	if [[ -x scripts/install-test-deps.sh || -f scripts/install-test-deps.sh ]]; then
		bash scripts/install-test-deps.sh
	else
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
		apt-get install -y -qq --no-install-recommends haproxy nginx libnginx-mod-stream sniproxy \
			postgresql postgresql-contrib util-linux
		rm -f /usr/sbin/policy-rc.d
	fi
fi

# 3000 idle connections take 6000+ descriptors in the proxy (the hard limit here is 20000).
hard=$(ulimit -Hn)
if [[ $hard == unlimited || $hard -gt 20000 ]]; then hard=20000; fi
ulimit -n "$hard"

bin=$(mktemp -d /tmp/snigate-bench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
echo "bench: building"
# snigate is built as its image builds it (Dockerfile, scripts/image.sh): static, without
# cgo or symbols. That is the binary users run, as the peers are their distribution's
# builds; the dynamic one spends ~15 ms more on every start in the loader and libc.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/snigate" ./cmd/snigate
go build -o "$bin/" ./bench/cmd/loadgen ./bench/cmd/backend ./bench/cmd/runner

args=(--snigate "$bin/snigate" --loadgen "$bin/loadgen" --backend "$bin/backend" --repo "$repo")
if ((smoke)) || [[ -n $only ]]; then
	out=$(mktemp -d /tmp/snigate-bench-out.XXXXXX)
	args+=(--json "$out/results.json" --md "$out/performance.md" --svg "$out/chart.svg" --chart-link chart.svg
		--notes bench/results/notes.md)
	echo "bench: results go to $out"
else
	args+=(--json bench/results/latest.json --md docs/performance.md --svg bench/results/chart.svg
		--chart-link ../bench/results/chart.svg --notes bench/results/notes.md)
fi
((smoke)) && args+=(--smoke)
[[ -n $only ]] && args+=(--only "$only")

# The runner, and everything it starts unless told otherwise, on CPU 0.
taskset -c 0 "$bin/runner" "${args[@]}" "${extra[@]+"${extra[@]}"}"
