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
# erofs-config [--fsverity | CACHE_DIR]
#         prints the config.toml lines (version 2 syntax, which 2.x
#         migrates) that turn on the EROFS snapshotter and differ: the
#         differ first for the diff service (tar layers converted at
#         unpack by mkfs.erofs, native EROFS layers copied), reproducible
#         mkfs flags, and the transfer service unpacking into erofs (with
#         that differ) besides overlayfs, so `ctr images pull
#         --snapshotter erofs` converts. CACHE_DIR: a layer_content_caches directory (kiln
#         warm --erofs-cache). --fsverity: fs-verity on each committed
#         layer, checked at every mount (containerd 2.4 then refuses to
#         load the snapshotter on a file system without fs-verity, e.g.
#         tmpfs or ext4 without the verity feature; and it cannot be
#         combined with a cache). Run containerd with mkfs.erofs
#         (erofs-utils 1.8+) on PATH: `ctr plugins ls | grep erofs` must
#         say ok, and `ctr run --snapshotter erofs` uses it.
# erofs-check
#         checks this host for the EROFS snapshotter: a mkfs.erofs with
#         tar mode on PATH (bash scripts/erofs-utils.sh builds one where
#         Debian 12 has only 1.5) and a kernel that mounts an EROFS image
#         from a file (no loop device: Linux 6.12+).
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

erofs_config() {
	cat <<-'TOML'
	[plugins."io.containerd.differ.v1.erofs"]
	  mkfs_options = ["-T0", "--mkfs-time", "--sort=none"]
	[plugins."io.containerd.service.v1.diff-service"]
	  default = ["erofs", "walking"]
	[[plugins."io.containerd.transfer.v1.local".unpack_config]]
	  platform = "linux"
	  snapshotter = "erofs"
	  differ = "erofs"
	[[plugins."io.containerd.transfer.v1.local".unpack_config]]
	  platform = "linux"
	  snapshotter = "overlayfs"
	[plugins."io.containerd.snapshotter.v1.erofs"]
	TOML
	case "${1:-}" in
	"") ;;
	--fsverity) echo '  enable_fsverity = true' ;;
	/*) printf '  layer_content_caches = ["%s"]\n' "$1" ;;
	*)
		log "erofs-config: want --fsverity or an absolute cache directory, not $1"
		exit 2
		;;
	esac
}

erofs_check() {
	local tmp
	command -v mkfs.erofs >/dev/null && mkfs.erofs --help 2>&1 | grep -- '--tar=' >/dev/null || {
		log "no mkfs.erofs with tar mode (erofs-utils 1.7+): bash scripts/erofs-utils.sh"
		exit 1
	}
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-erofs-check.XXXXXX")
	# Expanded now: the trap runs after this function's locals are gone.
	trap "umount '$tmp/mnt' 2>/dev/null || true; rm -rf '$tmp'" EXIT
	mkdir -p "$tmp/in/etc" "$tmp/mnt"
	echo ok >"$tmp/in/etc/probe"
	mkfs.erofs --quiet "$tmp/probe.erofs" "$tmp/in" >/dev/null
	if ! mount -t erofs -o ro "$tmp/probe.erofs" "$tmp/mnt"; then
		log "this kernel does not mount an EROFS image from a file (modprobe erofs; Linux 6.12+ mounts files without a loop device)"
		exit 1
	fi
	grep -q ok "$tmp/mnt/etc/probe" || { log "the mounted EROFS image reads wrong"; exit 1; }
	log "$(mkfs.erofs --version | head -1); kernel $(uname -r) mounts EROFS images from files"
}

case "${1:-}" in
build) build ;;
erofs-config) erofs_config "${2:-}" ;;
erofs-check) erofs_check ;;
path)
	build
	echo "$CACHE/$(version)"
	;;
*)
	echo "usage: $0 build|path|erofs-config [--fsverity|CACHE_DIR]|erofs-check" >&2
	exit 2
	;;
esac
