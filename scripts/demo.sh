#!/usr/bin/env bash
# make demo: on a fresh Debian machine (as root), install what kiln needs,
# start a local registry and buildkitd, build the realistic CUDA fixture
# images from Debian's packages, then run kiln's main jobs on them:
#   1. analyze the naive image people build today;
#   2. build the embedded default recipe (debian-cuda11.8) as a two-stage
#      image, beside the naive single-stage Dockerfile, and compare;
#   3. gate kiln's image with the runtime rules (and the naive one: exit 3).
#   4. warm kiln's image into a local containerd (its own root and socket) and
#      start a container of it with ctr run: no pull.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
export KILN_FIXTURES="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
export KILN_REGISTRY="${KILN_REGISTRY:-127.0.0.1:5000}"
REG=$KILN_REGISTRY

hr() { printf '\n\033[1m== %s\033[0m\n\n' "$*"; }

hr "setup: packages, registry, fixture images, buildkitd"
bash scripts/install-deps.sh
bash scripts/registry.sh start
bash scripts/fixtures.sh
bash scripts/buildkitd.sh start
make -s build

hr "1. kiln analyze: the naive CUDA app image (docker-archive:$KILN_FIXTURES/app.tar)"
bin/kiln analyze --top 5 "docker-archive:$KILN_FIXTURES/app.tar"

hr "2. kiln build: the embedded default recipe, two-stage, vs the naive single-stage Dockerfile"
bin/kiln recipes show debian-cuda11.8 | sed 's/^/    /'
echo
bash bench/build.sh

hr "3. kiln analyze --ci testdata/rules/runtime.yaml on both"
if bin/kiln analyze --progress none --ci testdata/rules/runtime.yaml "$REG/kiln-bench/slim:v1" | tail -n 3; then
	echo "kiln's image: runtime rules pass"
else
	echo "kiln's image: runtime rules broken (exit $?)"
fi
set +e
bin/kiln analyze --progress none --ci testdata/rules/runtime.yaml "$REG/kiln-bench/naive:v1" | sed -n '/^CI /,$p'
echo "naive image: exit ${PIPESTATUS[0]} (3 = a --ci rule broken)"
set -e

hr "4. kiln warm: kiln's image into a local containerd, then ctr run with no pull"
# A containerd of the demo's own (root, state, socket): the host's, if any,
# is left alone.
CW=/var/tmp/kiln-demo-containerd
IMG="$REG/kiln-bench/slim:v1"
demo_containerd_stop() {
	if [ -f "$CW/pid" ]; then kill "$(cat "$CW/pid")" 2>/dev/null || true; sleep 1; fi
	grep -o " $CW/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$CW"
}
demo_containerd_stop
mkdir -p "$CW"
cat >"$CW/config.toml" <<TOML
version = 2
root = "$CW/root"
state = "$CW/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CW/c.sock"
[ttrpc]
  address = "$CW/c.sock.ttrpc"
TOML
containerd --config "$CW/config.toml" >"$CW/containerd.log" 2>&1 &
echo $! >"$CW/pid"
trap demo_containerd_stop EXIT
for _ in $(seq 100); do [ -S "$CW/c.sock" ] && break; sleep 0.1; done
bin/kiln warm "$IMG" --target "containerd:$CW/c.sock" --unpack --ready-file "$CW/ready"
echo
ctr --address "$CW/c.sock" images check
echo
echo "ready marker: $(cat "$CW/ready")"
# ctr run never pulls: it fails on an image that is not there. It finds
# the warmed one complete and unpacked, and starts at once.
time ctr --address "$CW/c.sock" run --rm "$IMG" kiln-demo \
	sh -c 'echo "container started from the warmed image, no pull: $(. /etc/os-release; echo $PRETTY_NAME)"'
