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
#   4. with PRUNED (a second image: the same one after kiln slim --gpus or
#      kiln build's gpu_code pruning), runs the same seeded kernels in both —
#      a matmul (cuBLAS), a convolution with cuDNN off (torch's own CUDA
#      kernels, in libtorch_cuda), scaled-dot-product attention on the
#      flash backend (torch's FlashAttention kernels), a 2-D FFT (cuFFT) and
#      a one-rank NCCL all_reduce (NCCL, pruned with --prune-nvidia-libs) —
#      and compares: the kept cubins are byte-identical, so the results
#      must be too.
#
#   bash scripts/gpu-check.sh [IMAGE [PRUNED]]
#
# IMAGE is anything the engine can run (a tag it has, or a docker-archive
# file it loads first: docker-archive:PATH). Results go to $OUT (default
# ./gpu-check-out); the summary is $OUT/summary.txt. Exit 0 when the GPU ran
# the matmul, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
IMAGE=${1:-${KILN_GPU_IMAGE:-}}
PRUNED=${2:-${KILN_GPU_PRUNED_IMAGE:-}}
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
# run_in IMAGE SCRIPT: python3 -c SCRIPT in IMAGE on the GPU.
run_in() {
	local img=$1 script=$2
	if [[ -n $img ]] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		local ref=$img
		if [[ $img == docker-archive:* ]]; then
			ref=$(docker load -i "${img#docker-archive:}" | sed -n 's/^Loaded image: //p' | tail -1)
		fi
		say "probe: docker run --gpus all $ref"
		docker run --rm --gpus all -e CUBLAS_WORKSPACE_CONFIG=:4096:8 "$ref" python3 -c "$script"
	elif [[ -n $img ]] && command -v ctr >/dev/null; then
		say "probe: ctr run --gpus 0 $img"
		ctr run --rm --gpus 0 --env CUBLAS_WORKSPACE_CONFIG=:4096:8 "$img" "kiln-gpu-check-$$" python3 -c "$script"
	elif python3 -c 'import torch' 2>/dev/null; then
		say "probe: host python3 (no engine or no image)"
		CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 -c "$script"
	else
		say "probe: nothing can run torch here (no engine with an image, no host torch)"
		return 1
	fi
}
run_in "$IMAGE" "$PROBE" >"$OUT/probe.txt" 2>&1 && grep -q "GPU CHECK OK" "$OUT/probe.txt" && ok=0
cat "$OUT/probe.txt" | tee -a "$SUM" | tail -8
say "result: $([[ $ok == 0 ]] && echo "GPU ran the matmul" || echo "no GPU matmul")"

# 4. The pruned image against the unpruned one, kernel for kernel.
KERNELS='
import hashlib, torch
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
d = torch.device("cuda")
def digest(t):
    t = t.detach().float().cpu().contiguous()
    try:
        b = t.numpy().tobytes()
    except Exception:
        b = bytes(t.view(torch.uint8).flatten().tolist())
    return hashlib.sha256(b).hexdigest()[:16]
out = {}
a = torch.randn(2048, 2048, device=d); b = torch.randn(2048, 2048, device=d)
out["matmul_fp32"] = a @ b
out["matmul_bf16"] = a.bfloat16() @ b.bfloat16()
torch.backends.cudnn.enabled = False  # the native kernels, in libtorch_cuda
x = torch.randn(8, 64, 56, 56, device=d); w = torch.randn(128, 64, 3, 3, device=d)
out["conv2d"] = torch.nn.functional.conv2d(x, w, padding=1)
q, k, v = (torch.randn(4, 16, 512, 64, device=d, dtype=torch.bfloat16) for _ in range(3))
from torch.nn.attention import sdpa_kernel, SDPBackend
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    out["sdpa_flash"] = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
ref = torch.softmax((q.float() @ k.float().transpose(-1, -2)) / 8 + torch.triu(torch.full((512, 512), float("-inf"), device=d), 1), -1) @ v.float()
print("sdpa_flash_vs_math_maxerr %.3e" % (out["sdpa_flash"].float() - ref).abs().max().item())
out["fft2"] = torch.view_as_real(torch.fft.fft2(torch.randn(256, 256, device=d)))  # cuFFT: its own fat binaries, kept whole
import os, torch.distributed as dist  # NCCL: pruned with --prune-nvidia-libs, one rank
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29511")
dist.init_process_group("nccl", rank=0, world_size=1)
r = torch.arange(1 << 20, device=d, dtype=torch.float32)
dist.all_reduce(r)
out["nccl_all_reduce"] = r
dist.destroy_process_group()
torch.cuda.synchronize()
for k_, t in out.items():
    print("KERNEL", k_, digest(t))
print("KERNELS OK")
'
if [[ -n $PRUNED && -n $IMAGE ]]; then
	run_in "$IMAGE" "$KERNELS" >"$OUT/kernels-full.txt" 2>&1
	run_in "$PRUNED" "$KERNELS" >"$OUT/kernels-pruned.txt" 2>&1
	cat "$OUT/kernels-full.txt" "$OUT/kernels-pruned.txt" >>"$SUM"
	if grep -q "KERNELS OK" "$OUT/kernels-full.txt" && grep -q "KERNELS OK" "$OUT/kernels-pruned.txt" &&
		diff <(grep ^KERNEL "$OUT/kernels-full.txt") <(grep ^KERNEL "$OUT/kernels-pruned.txt") >"$OUT/kernels.diff"; then
		say "pruned image: matmul, conv2d, flash attention, FFT and NCCL all_reduce bitwise equal to the unpruned image's"
	else
		say "pruned image: kernels failed or differ (kernels-full.txt, kernels-pruned.txt, kernels.diff)"
		ok=1
	fi
fi
exit "$ok"
