#!/usr/bin/env bash
# The stargz snapshotter (containerd-stargz-grpc), for kiln's lazy-pull
# test and benchmark: a containerd proxy plugin that mounts eStargz layers
# over FUSE and fetches their files from the registry on demand.
#
#   bash scripts/stargz.sh build|path
#
# build   compiles containerd-stargz-grpc from scripts/stargzd/main.go
#         against github.com/containerd/stargz-snapshotter at the version
#         go.mod pins (the snapshotter's own cmd module is not on the Go
#         module proxy; the library module is in the module cache), with
#         kiln's containerd and grpc versions, this machine's Go
#         toolchain, into $KILN_STARGZ_CACHE/<version>/ (reused when
#         present). Missing dependencies come from the Go module proxy.
# path    prints the directory holding the binary (builds first when missing)
#
# It needs containerd 2.x (scripts/containerd2.sh) to serve as a proxy
# snapshotter with remote snapshot annotations, /dev/fuse and root.
#
# Environment:
#   KILN_STARGZ_CACHE  binaries (default /var/cache/kiln-stargz)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

CACHE=${KILN_STARGZ_CACHE:-/var/cache/kiln-stargz}
MOD=github.com/containerd/stargz-snapshotter

log() { echo "stargz: $*" >&2; }

pin() {
	local v
	v=$(go list -m -f '{{.Version}}' "$1" 2>/dev/null) || true
	[[ -n $v ]] || { log "go.mod does not pin $1"; exit 1; }
	echo "$v"
}

build() {
	local v dir tmp here
	v=$(pin "$MOD")
	dir=$CACHE/$v
	if [[ -x $dir/containerd-stargz-grpc ]]; then
		log "containerd-stargz-grpc $v already built in $dir"
		return 0
	fi
	here=$PWD
	local cd2 api grpcv
	cd2=$(pin github.com/containerd/containerd/v2)
	api=$(pin github.com/containerd/containerd/api)
	grpcv=$(pin google.golang.org/grpc)
	mkdir -p "$dir"
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-stargz-src.XXXXXX")
	log "building containerd-stargz-grpc against $MOD $v (takes minutes on a small machine)"
	# The subshell owns the throwaway module and removes it however it exits.
	(
		trap 'rm -rf "$tmp"' EXIT
		# A throwaway build cache: the binary is cached per version, and its
		# dependencies' compiled objects (gigabytes, for cosign) are never
		# needed again; the disk is the binding limit.
		export GOCACHE=$tmp/.gocache
		cp "$here/scripts/stargzd/main.go" "$tmp/"
		cd "$tmp"
		export GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
		go mod init kiln.local/containerd-stargz-grpc >/dev/null 2>&1
		go mod edit -require "$MOD@$v" -require "github.com/containerd/containerd/v2@$cd2" \
			-require "github.com/containerd/containerd/api@$api" -require "google.golang.org/grpc@$grpcv"
		go mod tidy >/dev/null
		go build -trimpath -o "$dir/containerd-stargz-grpc.tmp" .
	)
	mv "$dir/containerd-stargz-grpc.tmp" "$dir/containerd-stargz-grpc"
	log "built containerd-stargz-grpc in $dir"
}

case "${1:-}" in
build) build ;;
path)
	build
	echo "$CACHE/$(pin "$MOD")"
	;;
*)
	echo "usage: $0 build|path" >&2
	exit 2
	;;
esac
