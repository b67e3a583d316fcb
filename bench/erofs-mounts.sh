#!/usr/bin/env bash
# bench/erofs-mounts.sh [REF-erofs]: a start on EROFS layers by hand, no
# container runtime: the image's native EROFS layers (default: the
# coldstart bench's slim image, made by kiln slim --format erofs) mounted
# through a loop device (as containerd 2.4.2's EROFS snapshotter mounts
# them: ro,loop), a loop with direct I/O, or file-backed; overlaid
# (read-only; RW=1: with a writable upper), the page cache dropped, and the
# probe (import torch, libtorch_cuda) run in a chroot, printing its own CPU
# seconds. MODES="loop file loopdio" picks the ways. Root; Linux 6.12+ for
# file-backed EROFS mounts. Compare with bench/coldstart.sh's warm-start
# row, the same probe through ctr run --snapshotter erofs.
set -euo pipefail
export PATH="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin:$PATH"
REF=${1:-127.0.0.1:5000/kiln-cold/app:slim-erofs}
E=${KILN_BENCH_DIR:-/var/tmp/kiln-erofs-mounts}
mkdir -p $E/blobs
# Whatever happens, nothing is left mounted or attached, and the blobs go
# (KEEP=1 keeps them for a rerun).
cleanup() {
	umount $E/root 2>/dev/null || true
	umount $E/m* 2>/dev/null || true
	for f in $E/blobs/*; do
		losetup -j "$f" 2>/dev/null | cut -d: -f1 | xargs -r -n1 losetup -d 2>/dev/null || true
	done
	[ "${KEEP:-}" ] || rm -rf $E
}
trap cleanup EXIT
man=$(crane manifest --insecure $REF)
mapfile -t L < <(echo "$man" | python3 -c 'import json,sys; [print(l["digest"]) for l in json.load(sys.stdin)["layers"]]')
echo "layers: ${#L[@]}"
for d in "${L[@]}"; do [ -s $E/blobs/${d#sha256:} ] || crane blob --insecure "${REF%:*}@$d" > $E/blobs/${d#sha256:}; done
PROBE='import ctypes, resource, torch; ctypes.CDLL("libtorch_cuda.so.2.6"); r=resource.getrusage(resource.RUSAGE_SELF); print("probe CPU s %.1f" % (r.ru_utime + r.ru_stime))'
run() { # run MODE: mount every layer MODE-wise, overlay them, run the probe, tear down
	local mode=$1 i=0 lower="" devs=()
	for d in "${L[@]}"; do
		local f=$E/blobs/${d#sha256:} m=$E/m$i
		mkdir -p $m
		case $mode in
		file) mount -t erofs -o ro $f $m ;;
		loop) dev=$(losetup -f --show -r $f); devs+=($dev); mount -t erofs -o ro $dev $m ;;
		loopdio) dev=$(losetup -f --show -r --direct-io=on $f); devs+=($dev); mount -t erofs -o ro $dev $m ;;
		esac
		lower="$m${lower:+:$lower}"
		i=$((i+1))
	done
	mkdir -p $E/root
	if [ "${RW:-}" ]; then
		rm -rf $E/upper $E/work && mkdir -p $E/upper $E/work
		mount -t overlay overlay -o lowerdir=$lower,upperdir=$E/upper,workdir=$E/work $E/root
	else
		mount -t overlay overlay -o ro,lowerdir=$lower $E/root
	fi
	sync; echo 3 >/proc/sys/vm/drop_caches
	local t0=$(date +%s.%N)
	local out=$(PROBE="$PROBE" R=$E/root unshare -m -p -f sh -c 'mount --bind /dev $R/dev && mount -t proc proc $R/proc && exec chroot $R /usr/bin/python3 -c "$PROBE"' 2>&1 | tail -1)
	local t1=$(date +%s.%N)
	echo "$mode: $out, wall $(python3 -c "print(round($t1-$t0,1))") s"
	umount $E/root
	for ((j=0;j<i;j++)); do umount $E/m$j; done
	for dev in "${devs[@]}"; do losetup -d $dev 2>/dev/null || true; done
}
for mode in ${MODES:-loop file loopdio}; do run $mode; done
if [ "${RW:-}" ]; then
	echo "upper after the run: $(du -sh $E/upper | cut -f1), $(find $E/upper -name '*.pyc' | wc -l) pyc files"
fi
