#!/usr/bin/env bash
# snigate's main job on this machine: two PostgreSQL servers and a Redis primary with its
# replica (one exposure, a member each), each with its own certificate from a demo CA
# (examples/databases/certs), behind one address and one port per engine, routed by SNI
# without terminating TLS. It starts the databases on private ports
# and data folders, serves examples/databases in front of them (unprivileged: --bind-port
# maps the Gateway's 5432, 6379 and 80 to 15432, 16379 and 18080 on 127.0.0.1) and prints
# psql, redis-cli and openssl commands that work as pasted. Ctrl-C stops everything.
#
# A database whose packages are missing is skipped with the package to install; the rest
# still runs. DEMO_SELFTEST=1 runs the printed commands itself, checks their answers and
# exits (the e2e suite does this).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
go build -o bin/snigate ./cmd/snigate
certs=examples/databases/certs
work=$(mktemp -d "${TMPDIR:-/tmp}/snigate-demo.XXXXXX")
chmod 755 "$work"
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# PostgreSQL refuses to run as root: as root, the servers run as the postgres (or nobody) user.
as_db=()
db_user=$(id -un)
if [ "$(id -u)" = 0 ]; then
  db_user=$(getent passwd postgres >/dev/null && echo postgres || echo nobody)
  as_db=(setpriv --reuid="$db_user" --regid="$(id -g "$db_user")" --clear-groups --)
fi

missing=()
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
pg_ok=false
if [ -n "$pg_bin" ] && [ -x "$pg_bin/postgres" ] && command -v psql >/dev/null; then
  pg_ok=true
else
  missing+=("PostgreSQL (apt-get install postgresql postgresql-client)")
fi
redis_ok=false
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  redis_ok=true
else
  missing+=("Redis (apt-get install redis-server redis-tools)")
fi

# start_pg NAME PORT: a private server with TLS on (hostssl only: plaintext TCP is refused by
# the server itself), trusting local users, with NAME's certificate.
start_pg() {
  local name=$1 port=$2 dir="$work/$1"
  mkdir -p "$dir"
  cp "$certs/$name.pem" "$dir/server.crt"
  cp "$certs/$name-key.pem" "$dir/server.key"
  chmod 600 "$dir/server.key"
  chown -R "$db_user" "$dir"
  "${as_db[@]}" "$pg_bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
ssl = on
ssl_cert_file = '$dir/server.crt'
ssl_key_file = '$dir/server.key'
fsync = off
CONF
  cat >"$dir/data/pg_hba.conf" <<HBA
local   all all                trust
hostssl all all 127.0.0.1/32   trust
host    all all 127.0.0.1/32   reject
HBA
  "${as_db[@]}" "$pg_bin/postgres" -D "$dir/data" >"$dir/postgres.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    "${as_db[@]}" "$pg_bin/pg_isready" -q -h "$dir" -p "$port" && break
    sleep 0.1
  done
  "${as_db[@]}" "$pg_bin/psql" -q -h "$dir" -p "$port" -U postgres -c "CREATE DATABASE $name" >/dev/null
}

if $pg_ok; then
  start_pg orders 25432
  start_pg billing 25433
fi
if $redis_ok; then
  mkdir -p "$work/cache"
  cp "$certs/cache.pem" "$certs/cache-key.pem" "$certs/ca.pem" "$work/cache/"
  chmod 644 "$work/cache/"*
  chown -R "$db_user" "$work/cache"
  "${as_db[@]}" redis-server --port 0 --tls-port 26379 --bind 127.0.0.1 --dir "$work/cache" \
    --tls-cert-file "$work/cache/cache.pem" --tls-key-file "$work/cache/cache-key.pem" \
    --tls-ca-cert-file "$work/cache/ca.pem" --tls-auth-clients no --save '' --appendonly no \
    >"$work/cache/redis.log" 2>&1 &
  pids+=($!)
  # cache's second member: a replica of the first, replicating over TLS.
  "${as_db[@]}" redis-server --port 0 --tls-port 26380 --bind 127.0.0.1 --dir "$work/cache" \
    --dbfilename replica.rdb --tls-cert-file "$work/cache/cache.pem" --tls-key-file "$work/cache/cache-key.pem" \
    --tls-ca-cert-file "$work/cache/ca.pem" --tls-auth-clients no --tls-replication yes \
    --replicaof 127.0.0.1 26379 --save '' --appendonly no \
    >"$work/cache/replica.log" 2>&1 &
  pids+=($!)
fi

bin/snigate serve -f examples/databases --bind 127.0.0.1 --admin 127.0.0.1:19901 \
  --bind-port 80=18080 --bind-port 5432=15432 --bind-port 6379=16379 >"$work/snigate.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -fs http://127.0.0.1:19901/readyz >/dev/null 2>&1 && break; sleep 0.1; done
if ! curl -fs http://127.0.0.1:19901/readyz >/dev/null 2>&1; then
  cat "$work/snigate.log"
  echo "snigate did not become ready" >&2
  exit 1
fi

psql_orders="psql \"host=orders.postgres.db.demo.test hostaddr=127.0.0.1 port=15432 sslmode=verify-full sslrootcert=$certs/ca.pem user=postgres dbname=orders\" -c 'select current_database()'"
psql_billing="psql \"host=billing.db.demo.test hostaddr=127.0.0.1 port=15432 sslmode=verify-full sslrootcert=$certs/ca.pem user=postgres dbname=billing\" -c 'select current_database()'"
redis_cache="redis-cli -h 127.0.0.1 -p 16379 --tls --sni cache.redis.db.demo.test --cacert $certs/ca.pem PING"
serial_seen="openssl s_client -connect 127.0.0.1:15432 -starttls postgres -servername orders.postgres.db.demo.test -CAfile $certs/ca.pem </dev/null 2>/dev/null | openssl x509 -noout -serial"
serial_file="openssl x509 -in $certs/orders.pem -noout -serial"
no_sni="openssl s_client -connect 127.0.0.1:15432 -starttls postgres -noservername </dev/null"
# billing allows 127.0.0.1 alone (spec.access): the same client from 127.0.0.2 is refused.
billing_allowed="openssl s_client -bind 127.0.0.1:0 -connect 127.0.0.1:15432 -starttls postgres -servername billing.postgres.db.demo.test -CAfile $certs/ca.pem </dev/null 2>&1 | grep -m1 'Verify return code'"
billing_refused="openssl s_client -bind 127.0.0.2:0 -connect 127.0.0.1:15432 -starttls postgres -servername billing.postgres.db.demo.test -CAfile $certs/ca.pem </dev/null"
refusals="curl -s http://127.0.0.1:19901/metrics | grep 'snigate_rejected_connections_total{reason=\"client_not_allowed\"'"
# cache's members, each node by its own name through the same address: r0 the primary, r1
# its replica (ROLE answers master / slave)
redis_r0="redis-cli -h 127.0.0.1 -p 16379 --tls --sni r0.cache.redis.db.demo.test --cacert $certs/ca.pem ROLE"
redis_r1="redis-cli -h 127.0.0.1 -p 16379 --tls --sni r1.cache.redis.db.demo.test --cacert $certs/ca.pem ROLE"
redis_plain="redis-cli -h 127.0.0.1 -p 16379 PING"
plaintext="psql \"host=127.0.0.1 port=15432 sslmode=disable user=postgres dbname=orders\" -c 'select 1'"

if [ "${DEMO_SELFTEST:-}" = 1 ]; then
  fail=0
  check() { # check WHAT WANT COMMAND: COMMAND's output must contain WANT
    local out
    out=$(bash -c "$3" 2>&1 || true)
    if [[ "$out" == *"$2"* ]]; then echo "ok   $1"; else echo "FAIL $1: want \"$2\" in:"; echo "$out"; fail=1; fi
  }
  if $pg_ok; then
    check "psql verify-full to orders by name" orders "$psql_orders"
    check "psql verify-full to billing by its flat name" billing "$psql_billing"
    check "the serial seen through snigate is the database's own" "$(bash -c "$serial_file")" "$serial_seen"
    out=$(bash -c "$no_sni" 2>&1 || true)
    if [[ "$out" == *"BEGIN CERTIFICATE"* ]]; then echo "FAIL no SNI got a certificate"; fail=1; else echo "ok   no SNI: closed, no certificate"; fi
    check "plaintext psql is refused" "only over TLS" "$plaintext"
    check "billing from 127.0.0.1, which its access allows" "Verify return code: 0 (ok)" "$billing_allowed"
    out=$(bash -c "$billing_refused" 2>&1 || true)
    if [[ "$out" == *"BEGIN CERTIFICATE"* ]]; then echo "FAIL billing from 127.0.0.2 got a certificate"; fail=1; else echo "ok   billing from 127.0.0.2: closed, no certificate"; fi
    check "the refusal is counted on billing's route" 'route="TLSRoute/demo/billing"' "$refusals"
  fi
  if $redis_ok; then
    check "redis-cli --tls --sni" PONG "$redis_cache"
    check "cache's member r0 by its own name: the primary" master "$redis_r0"
    check "cache's member r1 by its own name: the replica" slave "$redis_r1"
    out=$(timeout 5 bash -c "$redis_plain" 2>&1 || true)
    if [[ "$out" == *PONG* ]]; then echo "FAIL plaintext redis-cli got an answer"; fail=1; else echo "ok   plaintext redis-cli: closed ($out)"; fi
  fi
  # The certificate probe runs right after the load: its verdicts follow within moments.
  want_verified=0
  $pg_ok && want_verified=$((want_verified + 2))
  $redis_ok && want_verified=$((want_verified + 1))
  for _ in $(seq 50); do
    curl -fs http://127.0.0.1:19901/status >"$work/status.json"
    [ "$({ grep -oE '"reason": *"Verified"' "$work/status.json" || true; } | wc -l)" -ge "$want_verified" ] && break
    sleep 0.2
  done
  check "the exposures are programmed" '"Programmed"' "cat $work/status.json"
  n=$({ grep -oE '"reason": *"Verified"' "$work/status.json" || true; } | wc -l)
  if [ "$n" -ge "$want_verified" ]; then echo "ok   the certificate probe: $n databases Verified"; else echo "FAIL the certificate probe: $n Verified, want $want_verified"; cat "$work/status.json"; fail=1; fi
  for m in "${missing[@]}"; do echo "skipped: $m is not installed"; done
  exit $fail
fi

cat <<MSG

snigate serves examples/databases on 127.0.0.1: PostgreSQL on 15432, Redis on 16379 (the
Gateway's 5432 and 6379), every database by its own name, TLS end to end. Try:

  # PostgreSQL, verify-full against the demo CA: the certificate checked is the database's own
  $psql_orders
  $psql_billing
  # Redis clients send no SNI unless told: --sni picks the database
  $redis_cache
  # a clustered engine as one exposure: cache's members, each node by its own name
  $redis_r0
  $redis_r1
  # the serial seen through snigate equals the one in the database's certificate file
  $serial_seen
  $serial_file
  # no SNI: closed without a byte of TLS; plaintext PostgreSQL: refused with a clear error
  $no_sni
  $plaintext
  $redis_plain
  # billing is restricted to 127.0.0.1 (spec.access): from 127.0.0.2 it is closed without a
  # byte after 'S', and counted (its status lists the access in force)
  $billing_allowed
  $billing_refused
  $refusals

  bin/snigate check -f examples/databases                  # exposures, listeners, routes
  # each exposure's status, with the certificate probe's verdict (CertificateVerified) and
  # the certificate it read (serverCertificate: serial, names, chainsToTrustAnchor)
  curl -s http://127.0.0.1:19901/status | python3 -m json.tool | less
  curl -s http://127.0.0.1:19901/metrics | grep snigate_backend_certificate_expiry

MSG
for m in "${missing[@]}"; do echo "skipped: $m is not installed"; done
echo "Ctrl-C stops the demo."
wait -n "${pids[@]}"
