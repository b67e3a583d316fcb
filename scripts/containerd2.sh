#!/usr/bin/env bash
# A modern containerd (2.x) next to Debian's 1.6.20, for benchmarks and for
# testing kiln warm's direct ingest against the 2.x content store.
#
#   bash scripts/containerd2.sh build|path
#
# build   compiles containerd, ctr and containerd-shim-runc-v2 from the Go module cache at the
#         github.com/containerd/containerd/v2 version go.mod pins (missing
#         dependencies come from the Go module proxy), with this machine's
#         Go toolchain, into $KILN_CONTAINERD_CACHE/<version>/ (reused when
#         present). A 2.x daemon cannot drive Debian's 1.6 shim: run it
#         with this directory first in PATH (it looks its shim up there).
#         Snapshotters needing cgo or kernel tools (btrfs,
#         devmapper, zfs) are left out; overlayfs and native remain.
#         The CRI plugin is built in (it is left out only by the no_cri
#         tag): integration/cri_test.go drives it with crictl
#         (scripts/crictl.sh), image volumes included.
# path    prints the directory holding the binaries (builds first
#         when missing), e.g.
#           D=$(bash scripts/containerd2.sh path)
#           CONTAINERD=$D/containerd CTR=$D/ctr bash bench/warm.sh
#
# Environment:
#   KILN_CONTAINERD_CACHE  binaries (default /var/cache/kiln-containerd)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

CACHE=${KILN_CONTAINERD_CACHE:-/var/cache/kiln-containerd}
MOD=github.com/containerd/containerd/v2

log() { echo "containerd2: $*" >&2; }

version() {
	local v
	v=$(go list -m -f '{{.Version}}' "$MOD" 2>/dev/null) || true
	[[ -n $v ]] || { log "go.mod does not pin $MOD"; exit 1; }
	echo "$v"
}

build() {
	local v dir src tmp
	v=$(version)
	dir=$CACHE/$v
	if [[ -x $dir/containerd && -x $dir/ctr && -x $dir/containerd-shim-runc-v2 ]]; then
		log "containerd $v already built in $dir"
		return 0
	fi
	src=$(go mod download -json "$MOD@$v" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $src && -d $src ]] || { log "module $MOD@$v not found in the module cache"; exit 1; }
	mkdir -p "$dir"
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-containerd-src.XXXXXX")
	log "building containerd, ctr and containerd-shim-runc-v2 $v (takes minutes on a small machine)"
	# The subshell owns the writable copy of the module (the cache is
	# read-only) and removes it however it exits. A RETURN trap here would
	# outlive this function and fire, with $tmp unset, when later ones return.
	(
		trap 'rm -rf "$tmp"' EXIT
		# A throwaway build cache: the binary is cached per version, and its
		# dependencies' compiled objects (gigabytes, for cosign) are never
		# needed again; the disk is the binding limit.
		export GOCACHE=$tmp/.gocache
		cp -r "$src/." "$tmp/"
		chmod -R u+w "$tmp"
		cd "$tmp"
		export GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
		local tags='no_btrfs no_devmapper no_zfs'
		local ld="-X github.com/containerd/containerd/v2/version.Version=$v"
		go build -trimpath -tags "$tags" -ldflags "$ld" -o "$dir/containerd.tmp" ./cmd/containerd
		go build -trimpath -tags "$tags" -ldflags "$ld" -o "$dir/ctr.tmp" ./cmd/ctr
		go build -trimpath -tags "$tags" -ldflags "$ld" -o "$dir/containerd-shim-runc-v2.tmp" ./cmd/containerd-shim-runc-v2
	)
	for b in containerd ctr containerd-shim-runc-v2; do
		mv "$dir/$b.tmp" "$dir/$b"
	done
	log "built containerd, ctr and containerd-shim-runc-v2 in $dir"
}

case "${1:-}" in
build) build ;;
path)
	build
	echo "$CACHE/$(version)"
	;;
*)
	echo "usage: $0 build|path" >&2
	exit 2
	;;
esac
