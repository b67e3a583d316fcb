#!/usr/bin/env bash
# Benchmark: `kiln weights pull` against `crane blob` on the same blobs.
#   bash bench/weights.sh [IMAGE] [REPO]
# Publishes the fixture app image's 300 MB safetensors (layer 6 of app.tar, appsrc)
# as a weights artifact in the local registry (bench/weightspub: no image
# rewrite), then pulls it RUNS times with each tool into fresh directories
# on the same disk and prints the best time, MB/s and the kiln/crane
# throughput ratios, next to the machine's limits measured in the same run:
# reading the blob over loopback (curl to /dev/null) and Go's sha256 over it
# from the page cache (bench/hashrate).
# kiln verifies each file, fdatasyncs, renames and writes the marker; crane
# blob streams the blob (digest-verified) to a file and does not sync.
# KILN_ARGS adds flags to the default kiln run (e.g. "--requests 4").
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:/usr/local/go/bin:$PATH"
FIX="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
IMAGE="${1:-docker-archive:$FIX/app.tar}"
# docker save output is written on demand (8.2 GB): scripts/fixtures.sh archive.
[[ -n ${1:-} || -f $FIX/app.tar ]] || bash scripts/fixtures.sh archive
REPO="${2:-127.0.0.1:5000/kiln-weights/bench}"
LAYER="${LAYER:-6}"
RUNS="${RUNS:-3}"
KILN_ARGS="${KILN_ARGS:-}"
SCRATCH="${SCRATCH:-/var/tmp/kiln-weights-bench}"
mkdir -p "$SCRATCH"
out=$(mktemp -d -p "$SCRATCH")
trap 'rm -rf "$out"' EXIT

go build -o "$out/kiln" ./cmd/kiln
go build -o "$out/weightspub" ./bench/weightspub
go build -o "$out/hashrate" ./bench/hashrate
read -r ref files bytes < <("$out/weightspub" -layer "$LAYER" "$IMAGE" "$REPO:latest")
echo "artifact: $ref ($files files, $bytes bytes); best of $RUNS runs; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
blobs=$(crane manifest "$ref" | python3 -c 'import json,sys; [print(l["digest"]) for l in json.load(sys.stdin)["layers"] if "cncf.model" in l["mediaType"]]')

best() { sort -n | head -1; }
# once NAME CMD...: one timed run into a fresh $out/dst, appended to $out/NAME.
once() {
	local name=$1
	shift
	rm -rf "$out/dst"; mkdir -p "$out/dst"; sync
	/usr/bin/time -f '%e' -o "$out/t" "$@" >/dev/null
	cat "$out/t" >>"$out/times.$name"
}
crane_blobs='for b in '"$(echo $blobs)"'; do crane blob "'"$REPO"'@$b" > "'"$out"'/dst/${b#sha256:}"; done'

# The tools take turns within each round, so that a machine whose load
# drifts (a shared one) weighs on all of them alike.
for i in $(seq "$RUNS"); do
	once kiln "$out/kiln" weights pull "$ref" --into "$out/dst/vol" --progress none $KILN_ARGS
	[ "$i" = 1 ] && "$out/kiln" weights verify "$out/dst/vol" >&2
	once kiln1 "$out/kiln" weights pull "$ref" --into "$out/dst/vol" --progress none --chunk-size 0
	once crane sh -c "$crane_blobs"
	# crane does not fsync; kiln does before each rename (a volume must
	# survive a crash). The same blobs through crane followed by sync, for
	# a like-for-like.
	once cranesync sh -c "$crane_blobs; sync"
done
t_kiln=$(best <"$out/times.kiln")
t_kiln1=$(best <"$out/times.kiln1")
t_crane=$(best <"$out/times.crane")
t_cranesync=$(best <"$out/times.cranesync")

# Machine limits, in the same run: the blobs over loopback into /dev/null,
# and sha256 over them from the page cache (crane's copies are there).
t_loop=NaN
host=${REPO%%/*}
case "$host" in
127.0.0.1:* | localhost:*)
	if command -v curl >/dev/null; then
		path=${REPO#*/}
		t_loop=$(for i in $(seq "$RUNS"); do
			s=0
			for b in $blobs; do
				s=$(awk -v s="$s" -v t="$(curl -sf -o /dev/null -w '%{time_total}' "http://$host/v2/$path/blobs/$b")" 'BEGIN{print s+t}')
			done
			echo "$s"
		done | best)
	fi
	;;
esac
sh -c "$crane_blobs"
t_sha=0
for b in $blobs; do
	read -r s _ < <("$out/hashrate" -n "$RUNS" "$out/dst/${b#sha256:}")
	t_sha=$(awk -v a="$t_sha" -v s="$s" 'BEGIN{print a+s}')
done

awk -v b="$bytes" -v k="$t_kiln" -v k1="$t_kiln1" -v c="$t_crane" -v cs="$t_cranesync" -v l="$t_loop" -v h="$t_sha" -v ka="$KILN_ARGS" 'BEGIN {
	printf "%-36s %8s %10s\n", "tool", "seconds", "MB/s"
	printf "%-36s %8.2f %10.1f\n", "kiln weights pull " ka, k, b/1e6/k
	printf "%-36s %8.2f %10.1f\n", "kiln weights pull --chunk-size 0", k1, b/1e6/k1
	printf "%-36s %8.2f %10.1f\n", "crane blob (same blobs)", c, b/1e6/c
	printf "%-36s %8.2f %10.1f\n", "crane blob + sync", cs, b/1e6/cs
	if (l == "NaN") printf "%-36s %8s %10s\n", "limit: loopback read (curl)", "-", "-"
	else printf "%-36s %8.2f %10.1f\n", "limit: loopback read (curl)", l, b/1e6/l
	printf "%-36s %8.2f %10.1f\n", "limit: sha256 (Go, page cache)", h, b/1e6/h
	printf "throughput ratio kiln/crane: %.2f (kiln/crane+sync: %.2f; one connection: %.2f / %.2f)\n", c/k, cs/k, c/k1, cs/k1
}'
