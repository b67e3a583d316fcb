#!/usr/bin/env bash
# Benchmark: `kiln weights pull` against `crane blob` on the same blobs.
#   bash bench/weights.sh [IMAGE] [REPO]
# Publishes the fixture app image's 300 MB safetensors (layer 5 of app.tar)
# as a weights artifact in the local registry (bench/weightspub: no image
# rewrite), then pulls it RUNS times with each tool into fresh directories
# on the same disk and prints MB/s and the kiln/crane throughput ratio.
# kiln verifies each file, fsyncs, renames and writes the marker; crane blob
# streams the blob (digest-verified) to a file.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:/usr/local/go/bin:$PATH"
FIX="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
IMAGE="${1:-docker-archive:$FIX/app.tar}"
REPO="${2:-127.0.0.1:5000/kiln-weights/bench}"
LAYER="${LAYER:-5}"
RUNS="${RUNS:-3}"
SCRATCH="${SCRATCH:-/var/tmp/kiln-weights-bench}"
mkdir -p "$SCRATCH"
out=$(mktemp -d -p "$SCRATCH")
trap 'rm -rf "$out"' EXIT

go build -o "$out/kiln" ./cmd/kiln
go build -o "$out/weightspub" ./bench/weightspub
read -r ref files bytes < <("$out/weightspub" -layer "$LAYER" "$IMAGE" "$REPO:latest")
echo "artifact: $ref ($files files, $bytes bytes); best of $RUNS runs" >&2
blobs=$(crane manifest "$ref" | python3 -c 'import json,sys; [print(l["digest"]) for l in json.load(sys.stdin)["layers"] if "cncf.model" in l["mediaType"]]')

best() { sort -n | head -1; }
t_kiln=$(for i in $(seq "$RUNS"); do
	rm -rf "$out/vol"; sync
	/usr/bin/time -f '%e' -o "$out/t" "$out/kiln" weights pull "$ref" --into "$out/vol" --progress none >/dev/null
	cat "$out/t"
done | best)
"$out/kiln" weights verify "$out/vol" >&2
t_crane=$(for i in $(seq "$RUNS"); do
	rm -rf "$out/crane"; mkdir -p "$out/crane"; sync
	/usr/bin/time -f '%e' -o "$out/t" sh -c 'for b in '"$(echo $blobs)"'; do crane blob "'"$REPO"'@$b" > "'"$out/crane"'/${b#sha256:}"; done'
	cat "$out/t"
done | best)
# crane does not fsync; kiln does before each rename (a volume must survive
# a crash). The same blobs through crane followed by sync, for a like-for-like.
t_cranesync=$(for i in $(seq "$RUNS"); do
	rm -rf "$out/crane"; mkdir -p "$out/crane"; sync
	/usr/bin/time -f '%e' -o "$out/t" sh -c 'for b in '"$(echo $blobs)"'; do crane blob "'"$REPO"'@$b" > "'"$out/crane"'/${b#sha256:}"; done; sync'
	cat "$out/t"
done | best)
awk -v b="$bytes" -v k="$t_kiln" -v c="$t_crane" -v cs="$t_cranesync" 'BEGIN {
	printf "%-28s %8s %10s\n", "tool", "seconds", "MB/s"
	printf "%-28s %8.2f %10.1f\n", "kiln weights pull", k, b/1e6/k
	printf "%-28s %8.2f %10.1f\n", "crane blob (same blobs)", c, b/1e6/c
	printf "%-28s %8.2f %10.1f\n", "crane blob + sync", cs, b/1e6/cs
	printf "throughput ratio kiln/crane: %.2f (kiln/crane+sync: %.2f)\n", c/k, cs/k
}'
