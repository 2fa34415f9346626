#!/usr/bin/env bash
# The whole test suite: formatting, vet, unit and golden tests, short fuzz runs of every
# network-byte parser, the race detector on the concurrent packages, and end-to-end tests
# that start the real binary against real TLS clients and database servers.
# Needs the packages of scripts/install-test-deps.sh (run it once as root).
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l cmd internal e2e 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...
# Short fuzzing of each parser of network bytes (the seed corpus always runs in go test).
go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 10s ./internal/clienthello/
# Unit, golden and end-to-end tests, with the race detector on everything concurrent.
go test -race -count=1 -timeout 20m ./...
