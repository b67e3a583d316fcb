#!/usr/bin/env bash
# bench/erofs.sh: the compression inside kiln's native EROFS layers
# (layers/erofs), measured on one real layer: for none, lz4, lz4hc, zstd
# and lzma, the image's size, the time mkfs.erofs takes to write it, the
# CPU seconds to decode every block of it (fsck.erofs --extract with no
# directory reads and decompresses all file data in user space, with the
# LZ4/zstd/LZMA decoders the kernel's are ports of), and the wall time to
# read every file of the mounted image (as containerd mounts it: from the
# file, else through a loop device) with the page cache dropped (the
# kernel decompressing as a container reads), and that read again with
# the image file itself already cached (the kernel's decompression alone,
# no disk). Prints a Markdown table (docs/erofs.md).
#
#   bash bench/erofs.sh LAYOUT_DIR [TAG]   (root; the image's largest layer)
#   bash bench/erofs.sh BLOB               (a layer blob: gzip, zstd or tar)
#   RUNS=3 (decode and read runs, the least kept), COMPRESSIONS="none lz4 ..."
set -euo pipefail
cd "$(dirname "$0")/.."
W=${KILN_BENCH_DIR:-/var/tmp/kiln-erofs-bench}
RUNS=${RUNS:-3}
COMPRESSIONS=${COMPRESSIONS:-none lz4 lz4hc zstd lzma}
. bench/lib/containerd.sh
mkdir -p "$W/mnt"
trap 'umount "$W/mnt" 2>/dev/null || true; rm -rf "$W"' EXIT
src=${1:?usage: bench/erofs.sh LAYOUT_DIR [TAG] | BLOB}
if [ -d "$src" ]; then
	blob=$(python3 - "$src" "${2:-}" <<'PY'
import json, sys, os
d, tag = sys.argv[1], sys.argv[2]
idx = json.load(open(os.path.join(d, "index.json")))
ms = [m for m in idx["manifests"] if not tag or m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
m = json.load(open(os.path.join(d, "blobs", *ms[0]["digest"].split(":"))))
l = max(m["layers"], key=lambda l: l["size"])
print(os.path.join(d, "blobs", *l["digest"].split(":")))
PY
)
else
	blob=$src
fi
case $(head -c4 "$blob" | od -An -tx1 | tr -d ' ') in
28b52ffd) zstd -dc "$blob" >"$W/layer.tar" ;;
1f8b*) gzip -dc "$blob" >"$W/layer.tar" ;;
*) cp "$blob" "$W/layer.tar" ;;
esac
tarsize=$(stat -c %s "$W/layer.tar")
files=$(tar -tf "$W/layer.tar" | wc -l)
echo "layer $(basename "$blob"): $((tarsize >> 20)) MiB of tar, $files entries; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
secs() { python3 -c 'import sys; print(f"{float(sys.argv[1]):.2f}")' "$1"; }
printf '| compression | image MiB | vs tar | mkfs s | decode CPU s | decode MiB/s | cold read s | kernel decode s |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|\n'
for c in $COMPRESSIONS; do
	z=()
	[ "$c" = none ] || z=("-z$c" -C 65536)
	img="$W/$c.erofs"
	t0=$(now)
	mkfs.erofs --tar=f --aufs --quiet -Enoinline_data -b4096 -T0 --mkfs-time \
		-U 6ba7b811-9dad-11d1-80b4-00c04fd430c8 "${z[@]}" "$img" <"$W/layer.tar"
	t1=$(now)
	size=$(stat -c %s "$img")
	# User + system CPU of a full decode (fsck.erofs reads every block),
	# and the cold read of the mounted image: the least of $RUNS runs
	# each, since other work on the machine only ever adds time.
	cpu=999999 read=999999 kread=999999
	for _ in $(seq "$RUNS"); do
		drop_caches
		/usr/bin/time -o "$W/time" -f "%U %S" fsck.erofs --extract -d0 "$img" >/dev/null 2>&1
		cpu=$(awk -v m="$cpu" '{s=$1+$2; print (s<m)?s:m}' "$W/time")
		drop_caches
		# A file-backed mount where the kernel has it (6.12+), else a loop
		# device: what containerd's EROFS mount handler does.
		mount -t erofs -o ro "$img" "$W/mnt" 2>/dev/null || mount -t erofs -o ro,loop "$img" "$W/mnt"
		t2=$(now)
		find "$W/mnt" -type f -print0 | xargs -0 -r cat >/dev/null
		t3=$(now)
		umount "$W/mnt"
		read=$(python3 -c 'import sys; print(min(float(sys.argv[1]), float(sys.argv[3]) - float(sys.argv[2])))' "$read" "$t2" "$t3")
		# The kernel's decode alone: the image file already in the page
		# cache (no disk), the files' own pages dropped.
		drop_caches
		cat "$img" >/dev/null
		mount -t erofs -o ro "$img" "$W/mnt" 2>/dev/null || mount -t erofs -o ro,loop "$img" "$W/mnt"
		t4=$(now)
		find "$W/mnt" -type f -print0 | xargs -0 -r cat >/dev/null
		t5=$(now)
		umount "$W/mnt"
		kread=$(python3 -c 'import sys; print(min(float(sys.argv[1]), float(sys.argv[3]) - float(sys.argv[2])))' "$kread" "$t4" "$t5")
	done
	python3 - "$c" "$size" "$tarsize" "$t0" "$t1" "$cpu" "$read" "$kread" <<'PY'
import sys
c, size, tar, t0, t1, cpu, read, kread = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:])
rate = tar / 2**20 / cpu if cpu > 0 else float("inf")
print(f"| {c} | {size/2**20:,.0f} | {size/tar:.3f} | {t1-t0:.1f} | {cpu:.2f} | {rate:,.0f} | {read:.1f} | {kread:.2f} |")
PY
	rm -f "$img"
done
