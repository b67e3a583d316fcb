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
. scripts/lib.sh

CACHE=${KILN_CONTAINERD_CACHE:-/var/cache/kiln-containerd}
MOD=github.com/containerd/containerd/v2

log() { echo "containerd2: $*" >&2; }

version() { go_pin "$MOD"; }

containerd_recipe() {
	local v tags='no_btrfs no_devmapper no_zfs' ld b
	v=$(version)
	ld="-X github.com/containerd/containerd/v2/version.Version=$v"
	copy_module "$MOD" "$v"
	for b in containerd ctr containerd-shim-runc-v2; do
		go build -trimpath -tags "$tags" -ldflags "$ld" -o "$TOOL_OUT/$b" "./cmd/$b"
	done
}

build() {
	build_tool "$CACHE/$(version)" "containerd, ctr and containerd-shim-runc-v2 $(version)" containerd_recipe \
		containerd ctr containerd-shim-runc-v2
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
