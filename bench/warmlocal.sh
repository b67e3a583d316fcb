#!/usr/bin/env bash
# bench/warmlocal.sh [IMAGE]: a spot host relaunched with a persistent
# volume that holds an image cache (an OCI layout kiln warm filled from
# the registry once): how fast does the new host's containerd get the
# image, unpacked and ready to run, from that volume?
#   ctr import   tar of the layout piped into `ctr images import` (which
#                unpacks), containerd's own way to load a local image
#   kiln warm    kiln warm oci:CACHE --target containerd --unpack
# Same content, same empty containerd root and cold page cache for each
# row; the registry is not used after the cache is filled. Prints seconds
# and the ratio ctr/kiln. REPEAT=N keeps the best of N runs per row.
# Default image: the CUDA 12.4 runtime base from the local registry.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
IMG=${1:-127.0.0.1:5000/nvidia/cuda:12.4.1-runtime-debian13}
W=${KILN_BENCH_DIR:-/var/tmp/kiln-warmlocal-bench}
REPEAT=${REPEAT:-1}
. bench/lib/containerd.sh
trap 'ctrd_stop; rm -rf "$W"' EXIT
rm -rf "$W" && mkdir -p "$W"
CGO_ENABLED=0 go build -o "$W/kiln" ./cmd/kiln
CACHE=$W/cache
"$W/kiln" warm "$IMG" --target "oci:$CACHE" --compression gzip --insecure-registry "${IMG%%/*}" --progress none >/dev/null
bytes=$(du -sb "$CACHE/blobs" | cut -f1)

row() { # row NAME CMD...: best wall time of REPEAT runs, each from an empty root
	local name=$1 best="" t0 t1 s
	shift
	for _ in $(seq "$REPEAT"); do
		ctrd_start
		drop_caches
		t0=$(now)
		"$@" >"$W/$name.log" 2>&1 || { cat "$W/$name.log"; exit 1; }
		t1=$(now)
		CTR images check | grep -q complete || { echo "$name: image not complete"; CTR images check; exit 1; }
		CTR run --rm "$IMG" "kiln-bench-$name" /bin/true
		ctrd_stop
		s=$(echo "$t1 - $t0" | bc -l)
		if [ -z "$best" ] || [ "$(echo "$s < $best" | bc -l)" = 1 ]; then best=$s; fi
	done
	eval "T_${name//-/_}=$best"
}
ctr_import() { tar -C "$CACHE" --exclude=./.kiln-partial -cf - . | CTR images import --snapshotter overlayfs -; }
kiln_warm() { "$W/kiln" warm "oci:$CACHE" --target "containerd:$W/c/c.sock" --namespace default --unpack --progress none; }
row ctr-import ctr_import
row kiln-warm kiln_warm

printf '\nimage %s, %s MB of blobs in the cache (gzip), containerd %s, best of %s\n\n' "$IMG" "$((bytes / 1000000))" "$(containerd --version | awk '{print $3}')" "$REPEAT"
printf '%-34s %8s %9s\n' "from the persistent volume" seconds "MB/s"
printf '%-34s %8.1f %9.0f\n' "tar | ctr images import (unpacks)" "$T_ctr_import" "$(echo "$bytes / 1000000 / $T_ctr_import" | bc -l)"
printf '%-34s %8.1f %9.0f\n' "kiln warm oci: --unpack" "$T_kiln_warm" "$(echo "$bytes / 1000000 / $T_kiln_warm" | bc -l)"
printf '\nkiln warm is %.2fx ctr import\n' "$(echo "$T_ctr_import / $T_kiln_warm" | bc -l)"
