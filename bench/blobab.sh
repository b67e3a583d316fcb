#!/usr/bin/env bash
# bench/blobab.sh [BEFORE_REV [AFTER_REV]]: the blob layer before and after
# (issue 14: "no benchmark gets slower"). Builds kiln at BEFORE_REV
# (default: the merge base with main) and AFTER_REV (default: HEAD), each
# from a clean checkout of the commit, then, in one run and
# taking turns each round so that a drifting machine weighs on both alike:
#   weights pull   the CUDA app's 300 MB safetensors artifact (bench/
#                  weightspub), chunked (default) and on one connection
#   warm oci:      the CUDA 12.4 runtime base from the local registry into
#                  an empty oci: directory
#   analyze        the same image, every layer read and hashed
# Prints the best of RUNS (default 3) per row and after/before ratios
# (below 1.00: after is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:/usr/local/go/bin:$PATH"
FIX="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
BEFORE=${1:-$(git merge-base HEAD main)}
AFTER=${2:-HEAD}
IMG=${IMG:-127.0.0.1:5000/nvidia/cuda:12.4.1-runtime-debian13}
RUNS=${RUNS:-3}
W=${KILN_BENCH_DIR:-/var/tmp/kiln-blobab}
rm -rf "$W" && mkdir -p "$W"
. bench/lib/ab.sh
trap 'ab_remove "$W"; rm -rf "$W"' EXIT
ab_kilns "$W" "$BEFORE" "$AFTER"
(cd "$W/src.after" && go build -o "$W/weightspub" ./bench/weightspub)
[[ -f $FIX/app.tar ]] || bash scripts/fixtures.sh archive # docker save output, written on demand
read -r ref _ bytes < <("$W/weightspub" -layer 6 "docker-archive:$FIX/app.tar" "127.0.0.1:5000/kiln-weights/ab:latest")
echo "before $(git rev-parse --short "$BEFORE"), after $(git rev-parse --short "$AFTER"); weights $ref ($bytes bytes); image $IMG; best of $RUNS; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

once() { # once ROW WHICH CMD...: one timed run into a fresh $W/dst
	local row=$1 which=$2
	shift 2
	rm -rf "$W/dst" && mkdir -p "$W/dst" && sync
	/usr/bin/time -f '%e' -o "$W/t" "$@" >/dev/null
	cat "$W/t" >>"$W/times.$row.$which"
}
for _ in $(seq "$RUNS"); do
	for which in before after; do
		k=$W/kiln.$which
		once pull "$which" "$k" weights pull "$ref" --into "$W/dst/vol" --progress none
		once pull1 "$which" "$k" weights pull "$ref" --into "$W/dst/vol" --progress none --chunk-size 0
		once warm "$which" "$k" warm "$IMG" --target "oci:$W/dst/oci" --compression gzip --progress none
		once analyze "$which" "$k" analyze "$IMG" --json --progress none
	done
done
ab_header
ab_row "weights pull (chunked), s" "$W/times.pull"
ab_row "weights pull (one connection), s" "$W/times.pull1"
ab_row "warm registry -> oci:, s" "$W/times.warm"
ab_row "analyze (every layer), s" "$W/times.analyze"
