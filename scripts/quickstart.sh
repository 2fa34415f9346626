#!/usr/bin/env bash
# Starts the quickstart demo on this machine: four echo backends and snigate serving
# examples/quickstart on 127.0.0.1:8443 (TLS and HTTPS by SNI) and 127.0.0.1:8080 (HTTP).
# Prints commands to try; Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
go build -o bin/snigate ./cmd/snigate
certs=examples/quickstart/certs
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
bin/snigate echo --listen 127.0.0.1:9101 --name alpha --cert $certs/alpha.pem --key $certs/alpha-key.pem & pids+=($!)
bin/snigate echo --listen 127.0.0.1:9102 --name beta --cert $certs/beta.pem --key $certs/beta-key.pem & pids+=($!)
bin/snigate echo --listen 127.0.0.1:9103 --name app-plaintext & pids+=($!)
bin/snigate echo --listen 127.0.0.1:9104 --name web --http & pids+=($!)
bin/snigate serve -f examples/quickstart --admin 127.0.0.1:9901 & pids+=($!)
for _ in $(seq 50); do curl -fs http://127.0.0.1:9901/readyz >/dev/null 2>&1 && break; sleep 0.1; done
cat <<MSG

snigate is serving examples/quickstart on 127.0.0.1:8443. Try:

  # passthrough: the certificate you see is the alpha backend's own (CN alpha.demo.test)
  openssl s_client -connect 127.0.0.1:8443 -servername alpha.demo.test -CAfile $certs/ca.pem
  openssl s_client -connect 127.0.0.1:8443 -servername beta.demo.test -CAfile $certs/ca.pem
  # terminate: snigate presents app.demo.test's certificate; the backend gets plaintext
  openssl s_client -connect 127.0.0.1:8443 -servername app.demo.test -CAfile $certs/ca.pem
  # fail closed: an unknown name gets nothing back, not even an alert
  openssl s_client -connect 127.0.0.1:8443 -servername nope.demo.test
  # HTTPS on the same port, chosen by SNI: h2, web.demo.test's certificate, an HTTPRoute
  curl --cacert $certs/web.pem --resolve web.demo.test:8443:127.0.0.1 https://web.demo.test:8443/api/hello
  # plain HTTP on 8080 redirects to https
  curl -si --resolve web.demo.test:8080:127.0.0.1 http://web.demo.test:8080/ | head -3

  bin/snigate check -f examples/quickstart     # status and routing table
  curl -s http://127.0.0.1:9901/metrics | grep snigate_

Ctrl-C stops the demo.
MSG
wait -n "${pids[@]}"
