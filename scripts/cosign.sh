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
. "$(dirname "$0")/lib.sh"

VERSION=${KILN_COSIGN_VERSION:-v3.1.3}
CACHE=${KILN_COSIGN_CACHE:-/var/cache/kiln-cosign}
DIR=$CACHE/$VERSION

log() { echo "cosign: $*" >&2; }

cosign_recipe() { go_install "github.com/sigstore/cosign/v3/cmd/cosign@$VERSION"; }

build() { build_tool "$DIR" "cosign $VERSION" cosign_recipe cosign; }

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
