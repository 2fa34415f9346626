#!/usr/bin/env bash
# The whole test suite: formatting, vet, unit and golden tests, short fuzz runs of every
# network-byte parser, the race detector on the concurrent packages, end-to-end tests that
# start the real binary against real TLS clients and database servers, controller tests on a
# real kube-apiserver, and the upstream Gateway API conformance suite.
# Needs the packages of scripts/install-test-deps.sh (run it once as root).
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l cmd internal e2e bench conformance hack charts config 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...
# Elsewhere the data plane compiles without its Linux system calls (relay_other.go): keep
# that true, so that snigate builds and vets on a developer's Mac.
GOOS=darwin go vet ./...
# Short fuzzing of each parser of network or file bytes (their seed corpora always run in
# go test below). FUZZTIME=2000000x scripts/test.sh fuzzes longer. The budget is a count of
# executions, not a duration: Go 1.26's fuzz coordinator can fail a run with a spurious
# "context deadline exceeded" when a duration ends on a loaded machine (golang/go#75804).
fuzz() { go test -run '^$' -fuzz "^$1\$" -fuzztime "${FUZZTIME:-100000x}" -fuzzminimizetime 100x "$2"; }
fuzz FuzzParse ./internal/clienthello/
fuzz FuzzStdlib ./internal/clienthello/
fuzz FuzzClassify ./internal/pgwire/
fuzz FuzzParseCancel ./internal/pgwire/
fuzz FuzzDecide ./internal/proxy/
fuzz FuzzPostgresPreamble ./internal/proxy/
fuzz FuzzDecideAgainstOld ./internal/proxy/
fuzz FuzzDecode ./internal/source/file/
fuzz FuzzToJSON ./internal/source/file/blockyaml/
fuzz FuzzDecodeTLSRoute ./internal/source/file/
fuzz FuzzGuard ./internal/trustanchor/
fuzz FuzzLooksLikeTLS ./internal/probe/
fuzz FuzzParseGreeting ./internal/probe/
fuzz FuzzParse ./internal/proxyproto/
fuzz FuzzDecideProxyHeader ./internal/proxy/
fuzz FuzzDecideAccess ./internal/proxy/
fuzz FuzzDecode ./internal/handover/
fuzz FuzzStringsAreSlogs ./internal/accesslog/
# Unit, golden and end-to-end tests, with the race detector on everything concurrent.
# (conformance runs on its own below: it needs its gate and a machine-wide lock.)
go test -race -count=1 -timeout 20m $(go list ./... | grep -v '/conformance$')
# The relay's tests again with its loops waiting on io_uring (serve --io-uring): the run
# fails if the machine refuses io_uring rather than passing on epoll.
SNIGATE_TEST_IO_URING=1 go test -race -count=1 -timeout 10m ./internal/relay
# The upstream Gateway API conformance suite v1.6.3 (GATEWAY-TLS, GATEWAY-HTTP, GATEWAY-TCP),
# twice, each on a fresh kube-apiserver: snigate's controller with its local proxy
# (TestConformance), then with provisioned data planes (TestConformanceProvisioned);
# docs/conformance.md. Needs root (network namespaces for the echo backends) and
# scripts/install-kube.sh. The reports go to temp files; the committed
# conformance/report.yaml and report-provisioned.yaml are refreshed by running without it.
SNIGATE_CONFORMANCE=1 SNIGATE_CONFORMANCE_REPORT="${TMPDIR:-/tmp}/snigate-conformance-report.yaml" \
  go test -count=1 -timeout 40m -run TestConformance ./conformance
