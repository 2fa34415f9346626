#!/usr/bin/env bash
# install-kube.sh — give the Kubernetes controller tests a real API server: etcd from
# Debian's etcd-server package, and kube-apiserver and kube-controller-manager 1.36.3 built
# from the k8s.io/kubernetes Go module (hack/kube-apiserver, hack/kube-controller-manager).
# The controller manager is there for its garbage collector, which a bare API server lacks.
# All three end up in one folder that controller-runtime's envtest reads as KUBEBUILDER_ASSETS:
#
#   $HOME/.cache/snigate/kube-1.36.3/{kube-apiserver,kube-controller-manager,etcd}
#
# The apiserver build takes ~17 minutes on 2 cores. The controller manager, built right after
# it, compiles mostly the same packages and finds them in Go's build cache: about 1 minute
# more (71 s measured; without that cache it compiles them all again).
# So each happens once per machine: a cached binary that answers --version is kept. Safe to
# run again. Prints the folder on its last line.
#
#   KUBE_ASSETS_DIR   where to put the binaries (default above)
#   SKIP_APT=1        do not apt-get (etcd must then already be on PATH or in the folder)
set -euo pipefail

KUBE_VERSION=1.36.3
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${KUBE_ASSETS_DIR:-${HOME}/.cache/snigate/kube-${KUBE_VERSION}}
mkdir -p "$dir"

log() { echo "install-kube: $*" >&2; }

# --- etcd -------------------------------------------------------------------------------
if [[ ! -x $dir/etcd ]]; then
	if ! command -v etcd >/dev/null 2>&1 && [[ ! -x /usr/bin/etcd ]] && [[ ${SKIP_APT:-} != 1 ]]; then
		if [[ $(id -u) -ne 0 ]]; then
			log "etcd missing and not root: run as root, or apt-get install etcd-server yourself"
			exit 1
		fi
		export DEBIAN_FRONTEND=noninteractive
		# Keep the package from starting a system etcd (exit 101 = "action forbidden").
		own_policy=0
		if [[ ! -e /usr/sbin/policy-rc.d ]]; then
			printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
			chmod 755 /usr/sbin/policy-rc.d
			own_policy=1
		fi
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
		if ((own_policy)); then rm -f /usr/sbin/policy-rc.d; fi
		if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
			systemctl disable --now etcd >/dev/null 2>&1 || true
		elif [[ -x /etc/init.d/etcd ]]; then
			/etc/init.d/etcd stop >/dev/null 2>&1 || true
		fi
	fi
	etcd_bin=$(command -v etcd || echo /usr/bin/etcd)
	if [[ ! -x $etcd_bin ]]; then
		log "no etcd binary found"
		exit 1
	fi
	ln -sf "$etcd_bin" "$dir/etcd"
fi
log "$("$dir/etcd" --version 2>&1 | head -n1)"

# --- kube-apiserver, kube-controller-manager ---------------------------------------------
# build NAME HINT: go build hack/NAME into $dir/NAME unless a cached one answers --version.
build() {
	local name=$1 hint=$2
	if [[ -x $dir/$name ]] && "$dir/$name" --version >/dev/null 2>&1; then
		log "cached $name: $("$dir/$name" --version)"
		return
	fi
	log "building $name ${KUBE_VERSION} (once per machine; $hint)"
	local pkg=k8s.io/component-base/version minor=${KUBE_VERSION#*.}
	local ldflags="-s -w -X ${pkg}.gitVersion=v${KUBE_VERSION} -X ${pkg}.gitMajor=${KUBE_VERSION%%.*}"
	ldflags+=" -X ${pkg}.gitMinor=${minor%%.*} -X ${pkg}.gitTreeState=clean"
	local tmp="$dir/$name.tmp.$$"
	(
		cd "$root/hack/$name"
		GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp" .
	)
	mv -f "$tmp" "$dir/$name"
	log "built $name: $("$dir/$name" --version)"
}
build kube-apiserver "~17 min on 2 cores"
build kube-controller-manager "~1 min on 2 cores after kube-apiserver, from Go's build cache"

echo "$dir"
