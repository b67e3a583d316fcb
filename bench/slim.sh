#!/usr/bin/env bash
# Benchmark: kiln slim on the realistic devel-based app image, in one run.
#   bash bench/slim.sh [SOURCE] [LEVEL]
# SOURCE defaults to the fixture's OCI layout (zstd layers, as pulled);
# docker-archive:$KILN_FIXTURES/app.tar or 127.0.0.1:5000/kiln/naive-app:latest
# work too. Prints size before/after by class, the size ratio (weights moved
# out with --weights-to), and the rewrite throughput next to what this
# machine's zstd (same level, one core per layer) and sha256 can do on a
# sample of the same image, measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:/usr/local/go/bin:$PATH"
FIX="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
SRC="${1:-oci:$FIX/oci:app}"
LEVEL="${2:-3}"
SCRATCH="${KILN_SLIM_SCRATCH:-/var/tmp/kiln-slim}"
mkdir -p "$SCRATCH"
out=$(mktemp -d "$SCRATCH/bench.XXXXXX")
trap 'rm -rf "$out"' EXIT

go build -o "$out/kiln" ./cmd/kiln
rm -rf "$SCRATCH/weights"
echo "source: $SRC, zstd level $LEVEL" >&2
/usr/bin/time -f '%e %M' -o "$out/t" env KILN_WORK_DIR="$out" "$out/kiln" slim "$SRC" \
	--to "oci:$out/slim:app" --weights-to "oci:$SCRATCH/weights:app" --level "$LEVEL" --json --progress none >"$out/rep.json"
read -r wall rss <"$out/t"

# Machine limits on a sample of the same data: the largest blob of the
# slim image, decompressed (what the rewrite compresses).
blob=$(ls -S "$out/slim/blobs/sha256/" | head -1)
zstd -dc <"$out/slim/blobs/sha256/$blob" 2>/dev/null | head -c 512M >"$out/sample" || true
zb=$(zstd -b"$LEVEL" -T1 "$out/sample" 2>&1 | tr '\r' '\n' | grep -o '[0-9.]* MB/s' | head -1 | tr -dc '0-9.')
s0=$(date +%s.%N); sha256sum "$out/sample" >/dev/null; s1=$(date +%s.%N)
ssz=$(stat -c %s "$out/sample")
sha=$(awk "BEGIN{printf \"%.0f\", $ssz/1e6/($s1-$s0)}")

python3 - "$out/rep.json" "$wall" "$rss" "${zb:-0}" "$sha" "$(nproc)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); wall, rss, zb, sha, cpus = float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
mib = lambda n: f"{n/2**20:,.0f} MiB"
print(f"\n{'':24}{'before':>14}{'after':>14}")
print(f"{'compressed (pull)':24}{mib(r['before']['compressed_size']):>14}{mib(r['after']['compressed_size']):>14}")
print(f"{'uncompressed':24}{mib(r['before']['uncompressed_size']):>14}{mib(r['after']['uncompressed_size']):>14}")
print(f"{'layers':24}{r['before']['layers']:>14}{r['after']['layers']:>14}")
print(f"\n{'class':24}{'before':>14}{'after':>14}")
for c in r['classes']:
    print(f"{c['class']:24}{mib(c['before_bytes']):>14}{mib(c['after_bytes']):>14}")
print(f"\nweights moved out: {r['diverted_files']} files, {mib(r['diverted_bytes'])}")
print(f"size ratio (compressed, weights out): {r['before']['compressed_size']/r['after']['compressed_size']:.2f}x   (target >= 3)")
print(f"size ratio (uncompressed):            {r['before']['uncompressed_size']/r['after']['uncompressed_size']:.2f}x")
src_mb = r['before']['uncompressed_size'] / 1e6
out_mb = r['after']['uncompressed_size'] / 1e6
print(f"\nrewrite wall {wall:.1f}s, peak RSS {rss//1024} MiB, {cpus} CPUs")
print(f"throughput: {src_mb/wall:,.0f} MB/s of source (both passes), {out_mb/wall:,.0f} MB/s written")
print(f"machine limits, one core: zstd -{r['zstd_level']} compress {zb:,.0f} MB/s, sha256 {sha:,.0f} MB/s")
if zb:
    print(f"written MB/s / (zstd one-core MB/s x {cpus} cores): {out_mb/wall/(zb*cpus):.2f}  (1.0 = compression-bound on every core)")
PY
