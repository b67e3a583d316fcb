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
. scripts/lib.sh

CACHE=${KILN_CRICTL_CACHE:-/var/cache/kiln-crictl}
VERSION=${KILN_CRICTL_VERSION:-v1.37.0}
MOD=sigs.k8s.io/cri-tools

log() { echo "crictl: $*" >&2; }

# cri-tools' go.mod has no replace directives: go install uses its own
# pinned dependencies.
crictl_recipe() { go_install -ldflags "-X $MOD/pkg/version.Version=${VERSION#v}" "$MOD/cmd/crictl@$VERSION"; }

build() { build_tool "$CACHE/$VERSION" "crictl $VERSION" crictl_recipe crictl; }

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
