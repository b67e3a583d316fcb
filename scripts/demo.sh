#!/usr/bin/env bash
# make demo: on a fresh Debian machine (as root), install what kiln needs,
# start a local registry and buildkitd, build the realistic CUDA fixture
# images from Debian's packages, then run kiln's main jobs on them:
#   1. analyze the naive image people build today;
#   2. build the embedded default recipe (debian13-cu124: CUDA 12.4.1, real
#      CUDA torch 2.6.0+cu124 from a PyPI-shaped index) as a two-stage
#      image, beside the naive single-stage Dockerfile, and compare;
#   3. gate kiln's image with the runtime rules (and the naive one: exit 3);
#   4. slim the naive app image without a rebuild: runtime-strict policy, the
#      weights moved into a volume artifact, probed through BuildKit;
#   5. pull the weights volume, verify it, print how to mount it;
#   6. host check: the slim image against described GPU hosts (no GPU here);
#   7. warm the slim image and its weights into a local containerd (its own
#      root and socket) and start it with ctr run: no pull, weights mounted.
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
bin/kiln recipes show debian13-cu124 | sed 's/^/    /'
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

hr "4. kiln slim: the naive app image, rewritten without a rebuild (weights moved out, probed)"
SLIM="$REG/kiln-demo/app:slim"
WREF="$REG/kiln-demo/app-weights:v1"
bin/kiln slim "$REG/kiln/naive-app:cu124" --to "$SLIM" --policy runtime-strict \
	--weights-to "$WREF" --progress none \
	--probe "python3 -c 'import torch, ctypes; ctypes.CDLL(\"libtorch_cuda.so.2.6\"); print(\"probe: torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.ones(3).sum().item())'"
echo
bin/kiln analyze --progress none --ci testdata/rules/runtime.yaml "$SLIM" | tail -n 2

hr "5. kiln weights: pull the volume the slim image points to, verify it, mount it"
VOL=/var/tmp/kiln-demo-weights
rm -rf "$VOL"
bin/kiln weights pull "$SLIM" --into "$VOL"
bin/kiln weights verify "$VOL"
bin/kiln weights run-args "$SLIM" --volume "$VOL" --format docker

hr "6. kiln host check: will the slim image run on these hosts?"
for h in h200-570 h100-535 b200-580 rtx5090-575 geforce-470; do
	set +e
	bin/kiln host check --host-info "testdata/hostcheck/hosts/$h.json" --image "$SLIM" --progress none | sed -n '1,2p;/^FAIL  \|^WARN  /p;$p'
	echo "  -> exit ${PIPESTATUS[0]} (1 = an item failed)"
	set -e
	echo
done

hr "7. kiln warm: the slim image and its weights into a local containerd, then ctr run with no pull"
# A containerd of the demo's own (root, state, socket): the host's, if any,
# is left alone.
CW=/var/tmp/kiln-demo-containerd
IMG="$SLIM"
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
bin/kiln warm "$IMG" --target "containerd:$CW/c.sock" --unpack --weights-into "$CW/weights" --ready-file "$CW/ready"
echo
ctr --address "$CW/c.sock" images check
echo
echo "ready marker: $(cat "$CW/ready")"
# ctr run never pulls: it fails on an image that is not there. It finds
# the warmed one complete and unpacked, and starts at once.
# The weights volume is mounted read-only where the image expects it (its
# dev.kiln.weights.mount label: /app/models for the fixture app).
time ctr --address "$CW/c.sock" run --rm \
	--mount "type=bind,src=$CW/weights,dst=/app/models,options=rbind:ro" "$IMG" kiln-demo \
	python3 -c 'import os, torch; print("container started from the warmed image, no pull: torch", torch.__version__, "| weights:", sorted(os.listdir("/app/models")))'
