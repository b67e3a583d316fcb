#!/usr/bin/env bash
# bench/gpucode.sh: what fat-binary pruning adds to kiln slim on the naive
# CUDA 12.4 app image, same run. Each variant is slimmed from the registry
# (weights moved to a volume), then cold-started on a containerd with an
# empty root: kiln warm --unpack --weights-into + ctr run of a probe that
# imports torch, loads libtorch_cuda and reads the weights. Prints, per
# variant, the compressed (pull) and uncompressed sizes, the ratio against
# the naive image's compressed size, and the cold start.
#
#   runtime            --policy runtime
#   runtime h100       --policy runtime --gpus h100
#   strict             --policy runtime-strict
#   strict h100        --policy runtime-strict --gpus h100
#   strict h100 all    ... --prune-nvidia-libs --keep-ptx=false (NVIDIA's
#                      libraries too, no PTX)
#   ... level 19       the same at zstd level 19 (the most it can cut)
#
#   bash bench/gpucode.sh [NAIVE_IMAGE]     (root; ~20 GB of scratch, ~20 min)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
NAIVE=${1:-127.0.0.1:5000/kiln/naive-app:cu124}
REG=${NAIVE%%/*}
W=${KILN_BENCH_DIR:-/var/tmp/kiln-gpucode}
PROBE='import ctypes, torch; ctypes.CDLL("libtorch_cuda.so.2.6"); n=len(open("/app/models/model.safetensors","rb").read()); print("torch", torch.__version__, "cuda", torch.version.cuda, "weights", n)'
. bench/lib/containerd.sh
trap 'ctrd_stop; rm -rf "$W"' EXIT
mkdir -p "$W"
make -s build
# One compression per variant (zstd, which kiln warm prefers) where slim
# can write several.
comp=()
bin/kiln slim --help 2>&1 | grep -q -- '--compression' && comp=(--compression zstd)

variants=("runtime|--policy runtime" "runtime h100|--policy runtime --gpus h100"
	"strict|--policy runtime-strict" "strict h100|--policy runtime-strict --gpus h100"
	"strict h100 all|--policy runtime-strict --gpus h100 --prune-nvidia-libs --keep-ptx=false"
	"... level 19|--policy runtime-strict --gpus h100 --prune-nvidia-libs --keep-ptx=false --level 19")
: >"$W/rows"
i=0
for v in "${variants[@]}"; do
	name=${v%%|*}
	read -r -a args <<<"${v#*|}"
	i=$((i + 1))
	ref=$REG/kiln-gpucode/app:v$i
	KILN_WORK_DIR=$W bin/kiln slim "$NAIVE" --to "$ref" --weights-to "$REG/kiln-gpucode/app-weights:v1" \
		"${args[@]}" "${comp[@]}" --json --progress none >"$W/rep$i.json"
	drop_caches
	ctrd_start
	t0=$(now)
	bin/kiln warm "$ref" --target "containerd:$W/c/c.sock" --unpack --weights-into "$W/weights" --progress none >/dev/null
	t1=$(now)
	CTR run --rm --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$ref" "gpucode-$i" python3 -c "$PROBE" >"$W/probe$i.txt"
	t2=$(now)
	ctrd_stop
	echo "$name|$W/rep$i.json|$t0|$t1|$t2|$(tail -1 "$W/probe$i.txt")" >>"$W/rows"
done

python3 - "$W/rows" <<'EOF'
import json, sys
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1])]
print(f"\n{'variant':18} {'compressed':>12} {'uncompressed':>13} {'vs naive':>9} {'warm (s)':>9} {'run (s)':>8} {'cold start':>11}")
naive = None
for name, rep, t0, t1, t2, probe in rows:
    r = json.load(open(rep))
    naive = naive or r["before"]["compressed_size"]
    c, u = r["after"]["compressed_size"], r["after"]["uncompressed_size"]
    t0, t1, t2 = float(t0), float(t1), float(t2)
    print(f"{name:18} {c/2**20:>9,.0f} MiB {u/2**20:>10,.0f} MiB {naive/c:>8.2f}x {t1-t0:>9.1f} {t2-t1:>8.1f} {t2-t0:>10.1f}s")
print(f"\nnaive image: {naive/2**20:,.0f} MiB compressed (gzip); probe: {rows[-1][5]}")
EOF
