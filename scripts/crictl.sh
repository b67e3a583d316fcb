#!/usr/bin/env bash
# crictl, the Kubernetes CRI client (sigs.k8s.io/cri-tools), for the test
# that runs a pod through containerd 2.x's CRI plugin the way a kubelet
# does (integration/cri_test.go): RunPodSandbox, CreateContainer with an
# image volume, logs.
#
#   bash scripts/crictl.sh build|path
#
# build   compiles crictl at $KILN_CRICTL_VERSION (default v1.37.0, the
#         release matching the k8s.io/api v0.37 that warm/fleet's schema
#         test targets) from the Go module proxy (`go install pkg@version`:
#         cri-tools' go.mod has no replace directives, so its own pinned
#         dependencies are used), with this machine's Go toolchain, into
#         $KILN_CRICTL_CACHE/<version>/ (reused when present).
# path    prints the directory holding crictl (builds first when missing).
#
# Environment:
#   KILN_CRICTL_CACHE    binaries (default /var/cache/kiln-crictl)
#   KILN_CRICTL_VERSION  cri-tools version (default v1.37.0)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

CACHE=${KILN_CRICTL_CACHE:-/var/cache/kiln-crictl}
VERSION=${KILN_CRICTL_VERSION:-v1.37.0}
MOD=sigs.k8s.io/cri-tools

log() { echo "crictl: $*" >&2; }

build() {
	local dir=$CACHE/$VERSION tmp
	if [[ -x $dir/crictl ]]; then
		log "crictl $VERSION already built in $dir"
		return 0
	fi
	mkdir -p "$dir"
	tmp=$(mktemp -d "$dir/.gobin.XXXXXX")
	log "building crictl $VERSION (a minute or two on a small machine)"
	# go install writes into a fresh directory first so an interrupted
	# build never leaves a crictl that looks complete. Outside this
	# module (cd /) so kiln's go.mod does not take part.
	(
		trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
		# A throwaway build cache: the binary is cached per version, and its
		# dependencies' compiled objects (gigabytes, for cosign) are never
		# needed again; the disk is the binding limit.
		export GOCACHE=$tmp/.gocache
		# A throwaway module cache too: this tool's module graph is not kiln's
		# (cosign's alone is ~2.5 GB of cloud SDKs), and nothing reads it again.
		export GOMODCACHE=$tmp/.gomodcache
		cd /
		GOBIN=$tmp CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath \
			go install -ldflags "-X $MOD/pkg/version.Version=${VERSION#v}" "$MOD/cmd/crictl@$VERSION"
		mv "$tmp/crictl" "$dir/crictl"
	)
	log "built crictl $VERSION in $dir"
}

case "${1:-}" in
build) build ;;
path)
	build
	echo "$CACHE/$VERSION"
	;;
*)
	echo "usage: $0 build|path" >&2
	exit 2
	;;
esac
