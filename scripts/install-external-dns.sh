#!/usr/bin/env bash
# install-external-dns.sh — give the DNS test (e2e TestExternalDNSCluster) the real
# external-dns v0.22.0, built from its Go module (hack/external-dns pins it; v0.23.0 needs
# Go 1.27). One binary in one folder:
#
#   $HOME/.cache/snigate/external-dns/external-dns
#
# A stamp there records a hash of hack/external-dns: a change builds afresh. It links every
# DNS provider's SDK (AWS, Azure, Google…): the first build takes several minutes on 2
# cores; later runs find the stamp and build nothing. Safe to run again. Prints the folder on
# its last line; the test finds it there, or through SNIGATE_EXTERNAL_DNS.
#
#   EXTERNAL_DNS_DIR   where to put the binary (default above)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
hash=$(cd "$root" && cat hack/external-dns/go.mod hack/external-dns/go.sum | sha256sum | cut -c1-12)
dir=${EXTERNAL_DNS_DIR:-${HOME}/.cache/snigate/external-dns}
log() { echo "install-external-dns: $*" >&2; }

if [[ $(cat "$dir/.stamp" 2>/dev/null) == "$hash" && -x "$dir/external-dns" ]]; then
	log "cached in $dir"
	echo "$dir"
	exit 0
fi
mkdir -p "$dir"
start=$SECONDS
log "building external-dns v0.22.0 (once per machine; several minutes on 2 cores)"
(cd "$root/hack/external-dns" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
	go build -trimpath -ldflags "-s -w" -o "$dir/external-dns" sigs.k8s.io/external-dns)
"$dir/external-dns" --version >/dev/null
echo "$hash" >"$dir/.stamp"
log "built in $((SECONDS - start)) s"
echo "$dir"
