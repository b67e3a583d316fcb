#!/usr/bin/env bash
# bench/coldstart.sh: cold start of the naive CUDA 12.4 app image against
# kiln's way, on a containerd with an empty root each time, from the local
# registry, same machine, same run:
#
#   naive  ctr images pull (gzip, 9 layers, weights baked in) + ctr run
#   kiln   kiln warm --unpack --weights-into DIR (the slimmed zstd image and
#          its weights volume) + ctr run with the volume mounted
#
# Both runs end with the container importing torch (libtorch_cuda loaded)
# and reading the model file; the time is wall clock from an empty store to
# the container's exit. The slim image is made once beforehand (a build
# step, not timed): kiln slim --policy runtime-strict --weights-to.
#
#   bash bench/coldstart.sh [NAIVE_IMAGE]     (root; ~25 GB of scratch)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
NAIVE=${1:-127.0.0.1:5000/kiln/naive-app:cu124}
REG=${NAIVE%%/*}
SLIM=$REG/kiln-cold/app:slim
WREF=$REG/kiln-cold/app-weights:v1
W=${KILN_BENCH_DIR:-/var/tmp/kiln-coldstart}
PROBE='import os, ctypes, torch; ctypes.CDLL("libtorch_cuda.so.2.6"); f="/app/models/model.safetensors"; n=len(open(f,"rb").read()); print("torch", torch.__version__, "cuda", torch.version.cuda, "weights", n)'

make -s build
. bench/lib/containerd.sh
trap 'ctrd_stop; rm -rf "$W"' EXIT

mkdir -p "$W"
if ! crane digest --insecure "$SLIM" >/dev/null 2>&1; then
	echo "making the slim image once (not timed): kiln slim --policy runtime-strict --weights-to" >&2
	bin/kiln slim "$NAIVE" --to "$SLIM" --policy runtime-strict --weights-to "$WREF" --progress none >/dev/null
fi
drop_caches

ctrd_start
t0=$(now)
CTR images pull --plain-http "$NAIVE" >/dev/null
t1=$(now)
CTR run --rm "$NAIVE" cold-naive python3 -c "$PROBE"
t2=$(now)

ctrd_stop

drop_caches
ctrd_start
t3=$(now)
bin/kiln warm "$SLIM" --target "containerd:$W/c/c.sock" --unpack --weights-into "$W/weights" --progress none >/dev/null
t4=$(now)
CTR run --rm --mount "type=bind,src=$W/weights,dst=/app/models,options=rbind:ro" "$SLIM" cold-kiln python3 -c "$PROBE"
t5=$(now)
ctrd_stop

python3 - "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" "$(crane manifest --insecure "$NAIVE" | python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')" "$(crane manifest --insecure "$SLIM" | python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')" <<'EOF'
import sys
t = list(map(float, sys.argv[1:7])); nb, kb = int(sys.argv[7]), int(sys.argv[8])
naive_pull, naive_run = t[1]-t[0], t[2]-t[1]
kiln_warm, kiln_run = t[4]-t[3], t[5]-t[4]
print(f"\n{'':28} {'naive (ctr pull)':>18} {'kiln (warm+volume)':>20}")
print(f"{'image bytes (compressed)':28} {nb:>18,} {kb:>20,}")
print(f"{'fetch + unpack (s)':28} {naive_pull:>18.1f} {kiln_warm:>20.1f}")
print(f"{'ctr run to exit (s)':28} {naive_run:>18.1f} {kiln_run:>20.1f}")
print(f"{'cold start total (s)':28} {naive_pull+naive_run:>18.1f} {kiln_warm+kiln_run:>20.1f}")
print(f"\ncold start ratio naive/kiln: {(naive_pull+naive_run)/(kiln_warm+kiln_run):.2f}x")
EOF
