#!/usr/bin/env bash
# Benchmark: kiln slim on the realistic devel-based app image, in one run.
#   bash bench/slim.sh [SOURCE] [LEVEL]
#   POLICY=runtime-strict bash bench/slim.sh   # also prune unreferenced libraries
#   PROBE="python3 -c 'import torch'" ...       # run the probe through BuildKit
# SOURCE defaults to the fixture's OCI layout (zstd layers, as pulled);
# docker-archive:$KILN_FIXTURES/app.tar or 127.0.0.1:5000/kiln/naive-app:cu124
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
POLICY="${POLICY:-runtime}"
PROBE="${PROBE:-}"
SCRATCH="${KILN_SLIM_SCRATCH:-/var/tmp/kiln-slim}"
mkdir -p "$SCRATCH"
out=$(mktemp -d "$SCRATCH/bench.XXXXXX")
trap 'rm -rf "$out"' EXIT

go build -o "$out/kiln" ./cmd/kiln
rm -rf "$SCRATCH/weights"
echo "source: $SRC, zstd level $LEVEL, policy $POLICY${PROBE:+, probe: $PROBE}" >&2
probe=()
if [ -n "$PROBE" ]; then probe=(--probe "$PROBE"); fi
/usr/bin/time -f '%e %M' -o "$out/t" env KILN_WORK_DIR="$out" "$out/kiln" slim "$SRC" --policy "$POLICY" "${probe[@]}" \
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
print(f"\n{'removed (reason)':40}{'files':>8}{'bytes':>14}")
for s in r['removed']:
    print(f"{s['why']:40}{s['files']:>8}{mib(s['bytes']):>14}")
p = r.get('prune')
if p:
    print(f"\nprune_libs {p['mode']}: dropped {p['dropped_files']} of {p['candidates']} candidate libraries ({mib(p['dropped_bytes'])} of {mib(p['candidate_bytes'])}), {p['roots']} roots")
    for f in p['top'][:12]:
        print(f"  {mib(f['bytes']):>10}  {f['path']}  ({f['why']})")
    print("  largest kept:")
    for k in p['top_kept'][:8]:
        print(f"  {mib(k['bytes']):>10}  {k['path']}  ({k['reason']})")
    if p['unresolved']:
        print("  needed, not in the image: " + ", ".join(u['name'] for u in p['unresolved']))
for w in r['warnings']:
    print(f"warning: {w}")
print(f"\nweights moved out: {r['diverted_files']} files, {mib(r['diverted_bytes'])}")
print(f"size ratio (compressed, weights out): {r['before']['compressed_size']/r['after']['compressed_size']:.2f}x   (target >= 3, policy {r['policy']})")
print(f"size ratio (uncompressed):            {r['before']['uncompressed_size']/r['after']['uncompressed_size']:.2f}x")
src_mb = r['before']['uncompressed_size'] / 1e6
out_mb = r['after']['uncompressed_size'] / 1e6
print(f"\nrewrite wall {wall:.1f}s, peak RSS {rss//1024} MiB, {cpus} CPUs")
print(f"throughput: {src_mb/wall:,.0f} MB/s of source (both passes), {out_mb/wall:,.0f} MB/s written")
print(f"machine limits, one core: zstd -{r['zstd_level']} compress {zb:,.0f} MB/s, sha256 {sha:,.0f} MB/s")
if zb:
    print(f"written MB/s / (zstd one-core MB/s x {cpus} cores): {out_mb/wall/(zb*cpus):.2f}  (1.0 = compression-bound on every core)")
PY
