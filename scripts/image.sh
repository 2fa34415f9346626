#!/usr/bin/env bash
# image.sh — build snigate's container image without a Docker daemon (hack/image):
# a static binary on an empty base, non-root (65532), with a CA bundle, written as
#   bin/snigate-image.tar   a `docker load`-able tarball, tagged snigate:<version>
#   bin/snigate-oci/        an OCI image layout (skopeo, crane, podman, containerd read it)
# and prints the reference and the image digest.
#
#   scripts/image.sh [VERSION]     (default: git describe, else dev)
#
# Load it with `docker load -i bin/snigate-image.tar`; push it with
# `crane push bin/snigate-image.tar REGISTRY/snigate:VERSION` or
# `skopeo copy oci:bin/snigate-oci docker://REGISTRY/snigate:VERSION`.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=$(git rev-parse HEAD 2>/dev/null || true)
ca=/etc/ssl/certs/ca-certificates.crt
if [[ ! -s $ca ]]; then
	echo "image.sh: no CA bundle at $ca (Debian package ca-certificates)" >&2
	exit 1
fi
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o bin/snigate-static ./cmd/snigate
go run ./hack/image --binary bin/snigate-static --ca "$ca" --version "$version" --revision "$revision" \
	--tarball bin/snigate-image.tar --oci bin/snigate-oci
