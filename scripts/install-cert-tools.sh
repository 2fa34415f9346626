#!/usr/bin/env bash
# install-cert-tools.sh — give the certificate tests real parts: cert-manager's controller and
# its HTTP-01 solver (v1.21.2, from hack/cert-manager: upstream's own mains are modules the Go
# proxy does not serve, so small mains wire its public packages), and the ACME test server
# Pebble with its challenge test server (v2.10.3, hack/pebble). All four go in one folder:
#
#   $HOME/.cache/snigate/cert-tools/{controller,acmesolver,pebble,pebble-challtestsrv}
#
# A stamp there records a hash of hack/cert-manager and hack/pebble: a change builds afresh.
# First build on 2 cores: about 2 minutes (cert-manager links every DNS-01 provider's SDK);
# Pebble a few seconds. Safe to run again. Prints the folder on its last line; tests find it
# there, or through SNIGATE_CERT_TOOLS.
#
#   CERT_TOOLS_DIR   where to put the binaries (default above)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
hash=$(cd "$root" && cat hack/cert-manager/go.mod hack/cert-manager/go.sum hack/cert-manager/*/main.go \
	hack/pebble/go.mod hack/pebble/go.sum | sha256sum | cut -c1-12)
dir=${CERT_TOOLS_DIR:-${HOME}/.cache/snigate/cert-tools}
log() { echo "install-cert-tools: $*" >&2; }

if [[ $(cat "$dir/.stamp" 2>/dev/null) == "$hash" ]]; then
	log "cached in $dir"
	echo "$dir"
	exit 0
fi
mkdir -p "$dir"
start=$SECONDS
log "building cert-manager controller and acmesolver v1.21.2 (once per machine; ~2 min on 2 cores)"
(cd "$root/hack/cert-manager" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
	go build -trimpath -ldflags "-s -w" -o "$dir/" ./controller ./acmesolver)
log "building pebble and pebble-challtestsrv v2.10.3"
(cd "$root/hack/pebble" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
	go build -trimpath -ldflags "-s -w" -o "$dir/" \
	github.com/letsencrypt/pebble/v2/cmd/pebble github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv)
for bin in controller acmesolver pebble; do
	"$dir/$bin" -version >/dev/null
done
echo "$hash" >"$dir/.stamp"
log "built in $((SECONDS - start)) s"
echo "$dir"
