#!/usr/bin/env bash
# The real cosign CLI for kiln's signing tests: built from the Go module
# proxy at a pinned version (no other download), cached per version like
# scripts/buildkitd.sh caches buildkitd.
#
#   bash scripts/cosign.sh build|path
#
# build   go install github.com/sigstore/cosign/v3/cmd/cosign@$KILN_COSIGN_VERSION
#         into $KILN_COSIGN_CACHE/<version>/ (reused when present; ~4 min
#         of two cores the first time).
# path    prints the binary's path (builds it first if needed).
#
# Environment:
#   KILN_COSIGN_VERSION  default v3.1.3
#   KILN_COSIGN_CACHE    binaries (default /var/cache/kiln-cosign)
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"

VERSION=${KILN_COSIGN_VERSION:-v3.1.3}
CACHE=${KILN_COSIGN_CACHE:-/var/cache/kiln-cosign}
DIR=$CACHE/$VERSION

log() { echo "cosign: $*" >&2; }

build() {
	if [[ -x $DIR/cosign ]]; then
		log "cosign $VERSION already built in $DIR"
		return 0
	fi
	mkdir -p "$DIR"
	local tmp
	tmp=$(mktemp -d "$DIR/.build.XXXXXX")
	log "building cosign $VERSION from the module proxy (minutes on a small machine)"
	# GOBIN into a private directory, then one rename: a concurrent or
	# killed build never leaves a half-written binary at $DIR/cosign.
	(
		trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
		# A throwaway build cache: the binary is cached per version, and its
		# dependencies' compiled objects (gigabytes, for cosign) are never
		# needed again; the disk is the binding limit.
		export GOCACHE=$tmp/.gocache
		# A throwaway module cache too: this tool's module graph is not kiln's
		# (cosign's alone is ~2.5 GB of cloud SDKs), and nothing reads it again.
		export GOMODCACHE=$tmp/.gomodcache
		GOBIN=$tmp CGO_ENABLED=0 GOFLAGS= GOTOOLCHAIN=local \
			go install -trimpath "github.com/sigstore/cosign/v3/cmd/cosign@$VERSION"
		mv "$tmp/cosign" "$DIR/cosign"
	)
	log "built $DIR/cosign"
}

case "${1:-}" in
build) build ;;
path)
	build
	echo "$DIR/cosign"
	;;
*)
	echo "usage: $0 build|path" >&2
	exit 2
	;;
esac
