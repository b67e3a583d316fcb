#!/usr/bin/env bash
# scripts/gpu-check.sh: one short check on a host with a real NVIDIA driver
# and GPU (an H200 lent to a session, a rented box). What it does, each step
# independent of the others' success, in about a minute:
#   1. saves the real `nvidia-smi -q -x` (and the CSV query kiln's host check
#      reads) under $OUT/testdata/hostcheck/, for host check's parser tests;
#   2. runs `kiln host check --capture` and `kiln host check --json` (with
#      --image when one is given) against the real driver;
#   3. runs the built image's torch on the GPU: torch.cuda.is_available(), a
#      4096x4096 fp32 and bf16 matmul checked against the CPU on a slice, and
#      the achieved TFLOP/s. The image is run with docker --gpus (NVIDIA
#      Container Toolkit) or ctr --gpus when one is present; without an
#      engine, a host python3 that imports torch runs the same probe.
#
#   bash scripts/gpu-check.sh [IMAGE]
#
# IMAGE is anything the engine can run (a tag it has, or a docker-archive
# file it loads first: docker-archive:PATH). Results go to $OUT (default
# ./gpu-check-out); the summary is $OUT/summary.txt. Exit 0 when the GPU ran
# the matmul, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
IMAGE=${1:-${KILN_GPU_IMAGE:-}}
mkdir -p "$OUT/testdata/hostcheck"
SUM=$OUT/summary.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }

PROBE='
import time, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
d = torch.device("cuda")
print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
for dt in (torch.float32, torch.bfloat16):
    a = torch.randn(4096, 4096, device=d, dtype=dt)
    b = torch.randn(4096, 4096, device=d, dtype=dt)
    c = a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    dt_s = (time.perf_counter() - t) / 10
    ref = a[:64].float().cpu() @ b.float().cpu()
    err = (c[:64].float().cpu() - ref).abs().max().item() / ref.abs().max().item()
    print("matmul", dt, "%.1f TFLOP/s" % (2 * 4096**3 / dt_s / 1e12), "rel err %.2e" % err)
    assert err < (1e-3 if dt == torch.float32 else 5e-2), err
print("GPU CHECK OK")
'

# 1. The driver's own description.
if command -v nvidia-smi >/dev/null; then
	name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9._-')
	drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
	nvidia-smi -q -x >"$OUT/testdata/hostcheck/nvidia-smi-q-x-${name:-gpu}-${drv:-unknown}.xml" 2>&1
	nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_cap,driver_version --format=csv,noheader,nounits \
		>"$OUT/testdata/hostcheck/nvidia-smi-query-${name:-gpu}-${drv:-unknown}.csv" 2>&1
	nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
	say "driver: $drv on $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd, -)"
else
	say "nvidia-smi: not found (no driver on this host)"
fi

# 2. kiln host check against the real driver.
KILN=bin/kiln
if [[ ! -x $KILN ]] && command -v go >/dev/null; then
	go build -o bin/kiln ./cmd/kiln 2>"$OUT/kiln-build.log" || KILN=
fi
if [[ -x ${KILN:-} ]]; then
	"$KILN" host check --capture >"$OUT/host.json" 2>"$OUT/host-capture.err"
	img_args=()
	[[ -n $IMAGE ]] && img_args=(--image "$IMAGE")
	"$KILN" host check --json "${img_args[@]}" >"$OUT/hostcheck.json" 2>"$OUT/hostcheck.err"
	say "kiln host check: exit $? (hostcheck.json)"
	"$KILN" host check --progress none "${img_args[@]}" >"$OUT/hostcheck.txt" 2>&1
else
	say "kiln: no binary (carry bin/kiln or install go)"
fi

# 3. torch on the GPU, in the image when an engine can run it.
ok=1
run_probe() {
	if [[ -n $IMAGE ]] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		local ref=$IMAGE
		if [[ $IMAGE == docker-archive:* ]]; then
			ref=$(docker load -i "${IMAGE#docker-archive:}" | sed -n 's/^Loaded image: //p' | tail -1)
		fi
		say "probe: docker run --gpus all $ref"
		docker run --rm --gpus all "$ref" python3 -c "$PROBE"
	elif [[ -n $IMAGE ]] && command -v ctr >/dev/null; then
		say "probe: ctr run --gpus 0 $IMAGE"
		ctr run --rm --gpus 0 "$IMAGE" kiln-gpu-check python3 -c "$PROBE"
	elif python3 -c 'import torch' 2>/dev/null; then
		say "probe: host python3 (no engine or no image)"
		python3 -c "$PROBE"
	else
		say "probe: nothing can run torch here (no engine with an image, no host torch)"
		return 1
	fi
}
run_probe >"$OUT/probe.txt" 2>&1 && grep -q "GPU CHECK OK" "$OUT/probe.txt" && ok=0
cat "$OUT/probe.txt" | tee -a "$SUM" | tail -8
say "result: $([[ $ok == 0 ]] && echo "GPU ran the matmul" || echo "no GPU matmul")"
exit "$ok"
