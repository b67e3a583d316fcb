#!/usr/bin/env bash
# Benchmark: kiln's two-stage image vs the naive single-stage Dockerfile on
# the devel base (built with buildctl), same content: the fixtures' real CUDA
# torch 2.6.0+cu124 and nvidia-*-cu12 wheels (repackaged from Debian trixie's
# CUDA 12.4 binaries), FlashAttention compiled from source by nvcc 12.4, the
# stand-in bitsandbytes, from a local PEP 503/691 index, and an app.
#
#   bash bench/build.sh
#
# Reports: final image size (compressed, as pushed) and the ratio, no-op
# rebuild wall time, bytes pushed after an app-only change, and the
# cold-runner rows (BUILDKIT pruned completely before each, as on an
# ephemeral CI runner): the first build with an empty wheel cache
# (--wheel-cache, FlashAttention compiled and pushed) and the rebuild that
# fetches the wheel instead, as a ratio. KILN_BENCH_COLD=0 skips them (they
# run buildctl prune --all).
# Needs: buildkitd (sudo bash scripts/buildkitd.sh start), the local registry
# and fixtures (bash scripts/registry.sh start && bash scripts/fixtures.sh).
# Targets (issue 4): kiln >= 3x smaller than naive; no-op rebuild < 2 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

REG=${KILN_REGISTRY:-127.0.0.1:5000}
FIX=${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}
TORCH_MB=${TORCH_MB:-64}
PORT=${KILN_BENCH_INDEX_PORT:-39518}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-build.XXXXXX")
trap 'kill "${WPID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

bash scripts/buildkitd.sh start
eval "$(bash scripts/buildkitd.sh env)"
BUILDCTL="buildctl --addr $BUILDKIT_HOST"
[[ -f $FIX/wheels/SHA256SUMS ]] || { echo "fixture wheels missing in $FIX/wheels: bash scripts/fixtures.sh" >&2; exit 1; }
for tag in 12.4.1-devel-debian13 12.4.1-base-debian13; do
	curl -fsS -o /dev/null "http://$REG/v2/nvidia/cuda/manifests/$tag" -H 'Accept: application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' ||
		{ echo "fixture $REG/nvidia/cuda:$tag missing: bash scripts/fixtures.sh" >&2; exit 1; }
done

# Static: kiln build runs this binary inside the image to prune GPU code.
CGO_ENABLED=0 go build -o "$WORK/kiln" ./cmd/kiln
. bench/lib/ab.sh
wheel_index "$WORK" .
# The offline stack debian13-cu124 (CUDA 12.4.1, torch 2.6.0+cu124, Debian 13),
# as a user would start from it.
default_recipe "$WORK" "$WORK/kiln"

# The naive image: everything on the devel base, one stage.
cat >"$WORK/ctx/Dockerfile" <<EOF
FROM $REG/nvidia/cuda:12.4.1-devel-debian13
RUN --network=host apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-dev python3-setuptools build-essential
RUN --network=host pip install --break-system-packages --index-url $INDEX --trusted-host 127.0.0.1 torch==2.6.0+cu124 bitsandbytes==0.45.5
RUN --network=host FLASH_ATTN_CUDA_ARCHS="80;90" pip install --break-system-packages --no-build-isolation --index-url $INDEX --trusted-host 127.0.0.1 flash-attn==2.7.4.post1
COPY app /app
WORKDIR /app
ENTRYPOINT ["python3", "main.py"]
EOF

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.2f}')" "$1" "$2"; }

# layer digests and sizes of a pushed image: "digest size" lines
layers_of() {
	curl -fsS "http://$REG/v2/$1/manifests/$2" -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' |
		python3 -c 'import json,sys; m=json.load(sys.stdin); [print(l["digest"], l["size"]) for l in m["layers"]]'
}
total() { awk '{s+=$2} END {printf "%.0f\n", s}'; }
new_bytes() { # bytes of layers in image $2 not in image $1
	awk 'NR==FNR {seen[$1]=1; next} !($1 in seen) {s+=$2} END {printf "%.0f\n", s}' <(layers_of "$1" "$2") <(layers_of "$1" "$3")
}

kiln_build() {
	local tag=$1
	shift
	"$WORK/kiln" build "$WORK/ctx/kiln.yaml" --mirror "$REG" --wheel-index "$INDEX" --progress quiet \
		--push "$REG/kiln-bench/slim:$tag" "$@" >/dev/null
}
naive_build() {
	$BUILDCTL build --frontend dockerfile.v0 --local context="$WORK/ctx" --local dockerfile="$WORK/ctx" \
		--allow network.host --progress quiet \
		--output "type=image,name=$REG/kiln-bench/naive:$1,push=true,registry.insecure=true,compression=zstd,force-compression=true,oci-mediatypes=true" >/dev/null
}

echo "building kiln's two-stage image..." >&2
t0=$(now); kiln_build v1; t1=$(now)
# --rebuild: BuildKit solves and exports again (the push tags the content tag).
t2=$(now); kiln_build v2 --rebuild; t3=$(now)
# the default: the content tag answers, nothing is built
t8=$(now); kiln_build v2; t9=$(now)
echo "building the naive single-stage image..." >&2
t4=$(now); naive_build v1; t5=$(now)
t6=$(now); naive_build v2; t7=$(now)

echo "print('v2')" >"$WORK/ctx/app/main.py"
kiln_build v3
naive_build v3

cold_first=- cold_again=- cold_same=-
if [[ ${KILN_BENCH_COLD:-1} != 0 ]]; then
	echo "cold runner: empty BuildKit, empty wheel cache, then a cached wheel..." >&2
	echo "print('v1')" >"$WORK/ctx/app/main.py"
	WC="$REG/kiln-bench/wheels-$(date +%s%N)" # an empty wheel cache
	$BUILDCTL prune --all >/dev/null
	t10=$(now); kiln_build cold1 --wheel-cache "$WC"; t11=$(now)
	$BUILDCTL prune --all >/dev/null
	t12=$(now); kiln_build cold2 --wheel-cache "$WC"; t13=$(now)
	cold_first=$(secs "$t10" "$t11") cold_again=$(secs "$t12" "$t13")
	digest() { curl -fsS -o /dev/null -D - "http://$REG/v2/kiln-bench/slim/manifests/$1" -H 'Accept: application/vnd.oci.image.manifest.v1+json' | tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest" {print $2}'; }
	[[ $(digest cold1) == "$(digest cold2)" ]] && cold_same=yes || cold_same=NO
fi

kiln_size=$(layers_of kiln-bench/slim v1 | total)
naive_size=$(layers_of kiln-bench/naive v1 | total)
kiln_push=$(new_bytes kiln-bench/slim v1 v3)
naive_push=$(new_bytes kiln-bench/naive v1 v3)

printf '\n%-34s %15s %15s\n' "" "kiln two-stage" "naive devel"
printf '%-34s %15s %15s\n' "image size (compressed layers, B)" "$kiln_size" "$naive_size"
printf '%-34s %15s %15s\n' "first build (s)" "$(secs "$t0" "$t1")" "$(secs "$t4" "$t5")"
printf '%-34s %15s %15s\n' "no-op rebuild, --rebuild (s)" "$(secs "$t2" "$t3")" "$(secs "$t6" "$t7")"
printf '%-34s %15s %15s\n' "no-op rebuild, default (s)" "$(secs "$t8" "$t9")" "-"
printf '%-34s %15s %15s\n' "pushed after app-only change (B)" "$kiln_push" "$naive_push"
printf '%-34s %15s %15s\n' "cold runner, empty wheel cache (s)" "$cold_first" "-"
printf '%-34s %15s %15s\n' "cold runner, wheel cached (s)" "$cold_again" "-"
printf '%-34s %15s %15s\n' "  same image digest" "$cold_same" "-"
if [[ $cold_first != - ]]; then
	python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(f'cold-runner rebuild / first build: {b/a:.2f} ({b:.1f} s / {a:.1f} s)')" "$cold_first" "$cold_again"
fi
python3 -c "import sys; k,n=map(int,sys.argv[1:]); print(f'\nsize ratio naive/kiln: {n/k:.2f}x (target >= 3x)')" "$kiln_size" "$naive_size"
