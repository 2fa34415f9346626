#!/usr/bin/env bash
# install-test-deps.sh — install the real servers and clients that snigate's end-to-end tests
# start as private instances (internal/testutil): PostgreSQL, Redis, MariaDB, RabbitMQ and
# ClickHouse, and the other proxies we compare against; promtool (package prometheus) for the
# alert rules' test; and Chromium (headless) for the admin status page's browser test. The
# engines Debian 12 does not carry are built from their Go modules by
# scripts/install-engines.sh (NATS, FerretDB) or run in-process by the test (Kafka's kfake).
# The engine tests' clients are Go libraries and curl (--resolve): Debian's amqp-tools, kcat
# and clickhouse-client cannot be told where a routed name is (the machine's resolver
# decides) and the 18.16 clickhouse-client sends no SNI at all (docs/engines.md), so the
# tests do not use them and they are not installed.
# Debian 12 (bookworm), run as root; safe to run again.
#
# The packages' own services are never left running: the tests start their own instances on
# free loopback ports with data folders in t.TempDir(), and a system instance on 5432/6379/3306
# would only get in the way. While installing, a policy-rc.d that exits 101 keeps invoke-rc.d
# from starting anything; afterwards every service the packages ship is stopped all the same.
set -euo pipefail

PACKAGES=(
	postgresql postgresql-contrib
	redis-server redis-tools
	mariadb-server mariadb-client
	rabbitmq-server clickhouse-server
	openssl curl iproute2
	haproxy nginx libnginx-mod-stream sniproxy
	prometheus
	chromium fonts-dejavu-core
)
SERVICES=(postgresql redis-server mariadb mysql rabbitmq-server epmd clickhouse-server haproxy nginx sniproxy prometheus)

if [[ $(id -u) -ne 0 ]]; then
	echo "install-test-deps: must run as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive

installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }

missing=()
for p in "${PACKAGES[@]}"; do
	installed "$p" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
	echo "install-test-deps: all packages already installed"
else
	apt-get update -qq
	# Drop names this distribution does not carry instead of failing the whole install.
	want=()
	for p in "${missing[@]}"; do
		cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
		if [[ -z $cand || $cand == "(none)" ]]; then
			echo "install-test-deps: WARNING: package $p does not exist here, skipped" >&2
		else
			want+=("$p")
		fi
	done

	# Keep package scripts from starting services (exit 101 = "action forbidden").
	own_policy=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		own_policy=1
	fi
	cleanup() { if ((own_policy)); then rm -f /usr/sbin/policy-rc.d; fi; }
	trap cleanup EXIT

	if ((${#want[@]} > 0)); then
		echo "install-test-deps: installing ${want[*]}"
		log=$(mktemp)
		if ! apt-get install -y -qq --no-install-recommends "${want[@]}" >"$log" 2>&1; then
			cat "$log" >&2
			exit 1
		fi
		rm -f "$log"
	fi
fi

# Stop whatever may run anyway (a machine with a real init, or an earlier install without the
# policy). Every step is allowed to fail: most of these are not running.
for s in "${SERVICES[@]}"; do
	if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
		systemctl disable --now "$s" >/dev/null 2>&1 || true
	elif [[ -x /etc/init.d/$s ]]; then
		/etc/init.d/"$s" stop >/dev/null 2>&1 || true
	fi
done
if command -v pg_lsclusters >/dev/null 2>&1; then
	pg_lsclusters -h 2>/dev/null | while read -r ver name _ status _; do
		if [[ $status == online* ]]; then pg_ctlcluster "$ver" "$name" stop || true; fi
	done
fi

echo "install-test-deps: versions"
v() { printf '  %-16s %s\n' "$1" "$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo 'not installed')"; }
for p in "${PACKAGES[@]}"; do v "$p"; done
ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sed 's/^/  postgres bin dir  /'
ver() { command -v "$1" >/dev/null 2>&1 && printf '  %-16s %s\n' "$1" "$("$@" 2>&1 </dev/null | head -n1)"; return 0; }
ver psql --version
ver redis-server --version
ver redis-cli --version
ver mariadbd --version
ver mariadb --version
ver openssl version
ver haproxy -v
ver nginx -v
