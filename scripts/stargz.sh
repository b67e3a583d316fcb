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
. scripts/lib.sh

CACHE=${KILN_STARGZ_CACHE:-/var/cache/kiln-stargz}
MOD=github.com/containerd/stargz-snapshotter

log() { echo "stargz: $*" >&2; }

pin() { go_pin "$1"; }

# A throwaway module: scripts/stargzd/main.go against the library module,
# with kiln's containerd and grpc versions.
stargz_recipe() {
	cp "$KILN_ROOT/scripts/stargzd/main.go" .
	export GOFLAGS=-mod=mod
	go mod init kiln.local/containerd-stargz-grpc >/dev/null 2>&1
	go mod edit -require "$MOD@$(pin "$MOD")" -require "github.com/containerd/containerd/v2@$(pin github.com/containerd/containerd/v2)" \
		-require "github.com/containerd/containerd/api@$(pin github.com/containerd/containerd/api)" -require "google.golang.org/grpc@$(pin google.golang.org/grpc)"
	go mod tidy >/dev/null
	go build -trimpath -o "$TOOL_OUT/containerd-stargz-grpc" .
}

build() {
	local v
	v=$(pin "$MOD")
	build_tool "$CACHE/$v" "containerd-stargz-grpc $v" stargz_recipe containerd-stargz-grpc
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
