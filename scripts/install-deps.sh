#!/usr/bin/env bash
# Installs the system packages kiln's tests, fixtures and demo need, on a
# fresh Debian bookworm machine. Idempotent: a machine that has them skips
# the network entirely.
set -euo pipefail

#
#   bash scripts/install-deps.sh        # everything the tests need
#   bash scripts/install-deps.sh demo   # only what make demo uses
#
# containerd (warm target, ctr), skopeo and crane (outside clients), docker.io
# (the `docker` warm target; 20.10 pulls no zstd), openssh (fleet warm over
# SSH), iproute2 (network namespaces), zstd (the CLI, for benchmarks),
# openssl (the signing tests make PKCS#8 keys with it), chromium (headless:
# the analyze --html test opens the page and checks the treemap is drawn).
MODE=${1:-all}
pkgs=(debootstrap docker-registry runc containerd skopeo ca-certificates openssl)
if [ "$MODE" != demo ]; then
	pkgs+=(docker.io openssh-server openssh-client iproute2 zstd chromium)
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The CUDA 11.8 packages live in Debian's contrib and non-free components.
src=/etc/apt/sources.list.d/kiln-nonfree.sources
added=0
if [ ! -f "$src" ]; then
	cat >"$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	added=1
fi

if [ "${#missing[@]}" -gt 0 ] || [ "$added" = 1 ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
fi
if [ "${#missing[@]}" -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}" >&2
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# mkfs.erofs with --tar for --format erofs (bookworm's 1.5 has none).
if [ "$MODE" != demo ]; then
	bash "$(dirname "$0")/erofs-utils.sh"
fi

# staticcheck for `make test`, pinned (not for the demo: minutes of compiling).
export PATH="$(go env GOPATH)/bin:$PATH"
if [ "$MODE" != demo ] && ! command -v staticcheck >/dev/null; then
	go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
# crane at the go-containerregistry version go.mod pins: an outside client
# that must accept what kiln writes, and a benchmark peer.
if ! command -v crane >/dev/null; then
	(cd "$(dirname "$0")/.." && go install github.com/google/go-containerregistry/cmd/crane)
fi
