#!/usr/bin/env bash
# bench/warm.sh [IMAGE]: kiln warm against containerd's own client (ctr),
# crane and skopeo on one image from the local registry, gzip and zstd
# variants, with and without unpack, into equivalent targets; and the
# machine's limits measured in the same run (loopback read of the largest
# blob, sha256 and gzip/zstd decode throughput). Prints a table of seconds,
# MB/s and ratios. Each containerd run starts from an empty root.
#
# Default image: the CUDA runtime base (~1 GB). The 7 GiB naive app image
# (127.0.0.1:5000/kiln/naive-app:cu124) works too, given ~25 GB of scratch.
# REPEAT=N runs every row N times and keeps the best (default 1).
# --unpack runs twice: with the default (overlayfs layers applied in
# parallel) and with --unpack-concurrency 1 (one at a time, each on its
# committed parent); both are compared with min(decode, disk write+fsync)
# and their per-layer traces printed.
#
# Limits: besides loopback read and the machine's best sha256 (openssl with
# SHA extensions), two figures bound a warm into containerd whatever the
# client does: the daemon's own sha256 (it verifies every blob; its Go
# toolchain decides whether SHA instructions are used; bench/ctrhash times
# it on the largest blob) and the disk's write rate with fsync (containerd
# fsyncs each blob at commit).
#
# A second daemon: CONTAINERD=/path/to/containerd CTR=/path/to/ctr, or
# CONTAINERD2=1 (the containerd 2.x that scripts/containerd2.sh builds at
# the version go.mod pins), runs every containerd row and the daemon-sha256
# limit again against that daemon in the same run (config version 3 for a
# 2.x daemon). The first daemon is the containerd and ctr on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
IMG=${1:-127.0.0.1:5000/nvidia/cuda:12.4.1-runtime-debian13}
REG=${IMG%%/*}
REPO_TAG=${IMG#*/}
ZIMG="$REG/kiln-warm-bench/${REPO_TAG//\//-}"  # zstd copy lives in our own repo
ZIMG="${ZIMG%:*}:${IMG##*:}-zstd"
WORK=${KILN_BENCH_DIR:-/var/tmp/kiln-warm-bench}
CTR_PID=""
# Daemons: d1 is containerd/ctr on PATH; d2 the optional second one.
DAEMONS=d1
BIN_d1=$(command -v containerd)
CTR_d1=$(command -v ctr)
if [ "${CONTAINERD2:-}" = 1 ] && [ -z "${CONTAINERD:-}" ]; then
	D2=$(bash scripts/containerd2.sh path)
	CONTAINERD=$D2/containerd
	CTR=$D2/ctr
fi
if [ -n "${CONTAINERD:-}" ]; then
	DAEMONS="d1 d2"
	BIN_d2=$CONTAINERD
	CTR_d2=${CTR:-$(dirname "$CONTAINERD")/ctr}
fi
# daemon_version BIN → e.g. v1.6.20 (the version word of `containerd --version`).
daemon_version() { "$1" --version | grep -o ' v\?[0-9][0-9.]*[^ ]*' | head -1 | tr -d ' '; }
for d in $DAEMONS; do
	bin=BIN_$d
	eval "VER_$d=$(daemon_version "${!bin}")"
done

cleanup() {
	ctrd_stop
	rm -rf "$WORK"
}
trap cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK"
KILN=$WORK/kiln
go build -o "$KILN" ./cmd/kiln
go build -o "$WORK/ctrhash" ./bench/ctrhash

ctrd_stop() {
	if [ -n "$CTR_PID" ]; then
		kill "$CTR_PID" 2>/dev/null || true
		wait "$CTR_PID" 2>/dev/null || true
		CTR_PID=""
	fi
	grep -o " $WORK/ctrd/[^ ]*" /proc/self/mounts 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$WORK/ctrd"
}
# ctrd_start D: a fresh containerd D (d1, d2), empty root, own socket; sets
# CTR to its ctr.
ctrd_start() {
	local d=${1:-d1} bin ver cfgv=2 disabled='"io.containerd.grpc.v1.cri"'
	bin=BIN_$d
	ver=VER_$d
	CTR=CTR_$d
	CTR=${!CTR}
	ctrd_stop
	mkdir -p "$WORK/ctrd"
	# containerd 2.x: config version 3; CRI is split into several plugins.
	case ${!ver} in
	v1.* | 1.*) ;;
	*)
		cfgv=3
		disabled='"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"'
		;;
	esac
	cat >"$WORK/ctrd/config.toml" <<TOML
version = $cfgv
root = "$WORK/ctrd/root"
state = "$WORK/ctrd/state"
disabled_plugins = [$disabled]
[grpc]
  address = "$WORK/ctrd/c.sock"
[ttrpc]
  address = "$WORK/ctrd/c.sock.ttrpc"
TOML
	# Its own shim first in PATH (a 2.x daemon cannot drive Debian's 1.6 shim).
	PATH="$(dirname "${!bin}"):$PATH" "${!bin}" --config "$WORK/ctrd/config.toml" >"$WORK/ctrd-$d.log" 2>&1 &
	CTR_PID=$!
	for _ in $(seq 100); do [ -S "$WORK/ctrd/c.sock" ] && return; sleep 0.1; done
	echo "containerd did not start" >&2
	exit 1
}
SOCK=$WORK/ctrd/c.sock

now() { date +%s.%N; }
# timed NAME CMD...: runs CMD after dropping the page cache's dirty data,
# records seconds in $WORK/t.NAME.
timed() {
	local name=$1
	shift
	sync
	local s e
	s=$(now)
	"$@" >"$WORK/out.$name" 2>&1 || {
		echo "FAILED: $name: $*" >&2
		tail -5 "$WORK/out.$name" >&2
		echo "nan" >"$WORK/t.$name"
		return 0
	}
	e=$(now)
	local el
	el=$(echo "$e - $s" | bc -l)
	# Best of REPEAT: keep the smallest.
	if [ -f "$WORK/t.$name" ] && [ "$(cat "$WORK/t.$name")" != nan ] && [ "$(echo "$(cat "$WORK/t.$name") < $el" | bc -l)" = 1 ]; then
		return 0
	fi
	echo "$el" >"$WORK/t.$name"
}
REPEAT=${REPEAT:-1}
t() { cat "$WORK/t.$1"; }

# The zstd variant, once (kiln convert, no daemon).
ZR=${ZIMG#*/}
if ! curl -fsS -o /dev/null -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/${ZR%:*}/manifests/${ZIMG##*:}"; then
	echo "converting $IMG to zstd: $ZIMG"
	"$KILN" convert "$IMG" --to "$ZIMG" --compression zstd --progress none | tail -4
fi

manifest() {
	curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' "http://$REG/v2/$1/manifests/$2"
}
size_of() { # REF → compressed bytes of its layers
	local r=${1#*/}
	manifest "${r%:*}" "${r##*:}" | python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))'
}
largest() { # REF → digest of its largest layer
	local r=${1#*/}
	manifest "${r%:*}" "${r##*:}" | python3 -c 'import json,sys; print(max(json.load(sys.stdin)["layers"], key=lambda l: l["size"])["digest"])'
}
GZ_BYTES=$(size_of "$IMG")
ZS_BYTES=$(size_of "$ZIMG")

# --- machine limits, measured now -------------------------------------------
R=${IMG#*/}
GZ_BLOB=$(largest "$IMG")
ZS_BLOB=$(largest "$ZIMG")
timed loop curl -fsS -o /dev/null "http://$REG/v2/${R%:*}/blobs/$GZ_BLOB"
curl -fsS -o "$WORK/blob.gz" "http://$REG/v2/${R%:*}/blobs/$GZ_BLOB"
curl -fsS -o "$WORK/blob.zst" "http://$REG/v2/${ZR%:*}/blobs/$ZS_BLOB"
LB=$(stat -c %s "$WORK/blob.gz")
LZ=$(stat -c %s "$WORK/blob.zst")
cat "$WORK/blob.gz" >/dev/null
# openssl uses the CPU's SHA extensions, as Go's crypto/sha256 (kiln,
# containerd) does; coreutils' sha256sum may not.
timed sha openssl dgst -sha256 "$WORK/blob.gz"
timed gunzip sh -c "gzip -dc '$WORK/blob.gz' >/dev/null"
timed unzstd sh -c "zstd -dc '$WORK/blob.zst' >/dev/null"
timed disk dd if="$WORK/blob.gz" of="$WORK/blob.copy" bs=1M conv=fsync status=none
rm -f "$WORK/blob.copy"
# Many small files: GNU tar extracting the image's first (OS base) layer,
# no fsync. Creating inodes, not bytes, bounds such a layer; on ext4
# without a journal (this VM's disk) each new inode also skips the ones
# deleted in the last minute (find_inode_bit → recently_deleted), so
# this figure swings with what was just deleted on the disk.
FIRST=$(manifest "${R%:*}" "${R##*:}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
curl -fsS -o "$WORK/first.gz" "http://$REG/v2/${R%:*}/blobs/$FIRST"
FIRST_FILES=$(tar -tzf "$WORK/first.gz" | wc -l)
mkdir -p "$WORK/untar"
timed untar tar -xzf "$WORK/first.gz" -C "$WORK/untar"
rm -rf "$WORK/untar" "$WORK/first.gz"
for d in $DAEMONS; do
	ctrd_start "$d"
	"$WORK/ctrhash" "$SOCK" "$WORK/ctrd/root/io.containerd.content.v1.content" "$WORK/blob.gz" >"$WORK/out.ctrhash-$d"
	eval "CTRHASH_$d=$(sed -n 's/.*: \([0-9.]*\) MB\/s/\1/p' "$WORK/out.ctrhash-$d")"
	ctrd_stop
done
rm -f "$WORK/blob.gz" "$WORK/blob.zst"
mbs() { echo "$1 / $2 / 1000000" | bc -l; }

# --- runs -------------------------------------------------------------------
run_variant() { # LABEL REF
	local v=$1 ref=$2 d
	for d in $DAEMONS; do
		ctrd_start "$d"
		timed "kiln-ctr-$v-$d" "$KILN" warm "$ref" --target "containerd:$SOCK" --compression gzip --progress none
		ctrd_start "$d"
		timed "kiln-grpc-$v-$d" "$KILN" warm "$ref" --target "containerd:$SOCK" --compression gzip --ingest grpc --progress none
		ctrd_start "$d"
		timed "ctr-fetch-$v-$d" "$CTR" -a "$SOCK" content fetch --plain-http "$ref"
		ctrd_start "$d"
		timed "kiln-unpack1-$v-$d" "$KILN" warm "$ref" --target "containerd:$SOCK" --compression gzip --unpack --unpack-concurrency 1 --progress plain
		ctrd_start "$d"
		timed "kiln-unpack-$v-$d" "$KILN" warm "$ref" --target "containerd:$SOCK" --compression gzip --unpack --progress plain
		ctrd_start "$d"
		timed "ctr-pull-$v-$d" "$CTR" -a "$SOCK" images pull --plain-http "$ref"
		ctrd_stop
	done
	rm -rf "$WORK/oci"
	timed "kiln-oci-$v" "$KILN" warm "$ref" --target "oci:$WORK/oci" --compression gzip --progress none
	rm -rf "$WORK/oci"
	timed "crane-$v" crane pull --insecure --format oci "$ref" "$WORK/oci"
	rm -rf "$WORK/oci"
	timed "skopeo-$v" skopeo copy -q --src-tls-verify=false "docker://$ref" "oci:$WORK/oci"
	rm -rf "$WORK/oci"
}
for _ in $(seq "$REPEAT"); do
	run_variant gzip "$IMG"
	run_variant zstd "$ZIMG"
done

ratio() { echo "$(t "$2") / $(t "$1")" | bc -l; }
pct() { echo "100 * $1 / $2" | bc -l; } # PART WHOLE → percent
printf '\nkiln warm benchmark: %s (gzip %d MB, zstd %d MB), %s CPUs\n\n' "$IMG" $((GZ_BYTES / 1000000)) $((ZS_BYTES / 1000000)) "$(nproc)"
printf 'machine limits (same run, one %d MB blob):\n' $((LB / 1000000))
printf '  loopback read  %7.0f MB/s\n' "$(mbs "$LB" "$(t loop)")"
printf '  sha256         %7.0f MB/s\n' "$(mbs "$LB" "$(t sha)")"
printf '  gzip decode    %7.0f MB/s (compressed bytes)\n' "$(mbs "$LB" "$(t gunzip)")"
printf '  zstd decode    %7.0f MB/s (compressed bytes)\n' "$(mbs "$LZ" "$(t unzstd)")"
printf '  disk write+fsync %5.0f MB/s\n' "$(mbs "$LB" "$(t disk)")"
printf '  untar first layer %5.2f s (%d entries, tar -xz, no fsync)\n' "$(t untar)" "$FIRST_FILES"
for d in $DAEMONS; do
	h=CTRHASH_$d
	ver=VER_$d
	printf '  containerd %s sha256 %4.0f MB/s (the daemon re-hashing an ingest)\n' "${!ver}" "${!h}"
done
LIMIT=$(echo "a=$(mbs "$LB" "$(t loop)"); b=$(mbs "$LB" "$(t sha)"); if (a<b) a else b" | bc -l)
printf '\nlimit = min(loopback, sha256) = %.0f MB/s\n' "$LIMIT"
for d in $DAEMONS; do
	bin=BIN_$d
	ver=VER_$d
	h=CTRHASH_$d
	CLIMIT=$(echo "a=$LIMIT; b=${!h}; c=$(mbs "$LB" "$(t disk)"); if (b<a) a=b; if (c<a) a=c; a" | bc -l)
	printf '\n== containerd %s (%s) ==\n' "${!ver}" "${!bin}"
	printf '%-8s %-26s %8s %8s %6s %s\n' variant "run" seconds "MB/s" "%limit" "kiln is"
	for v in gzip zstd; do
		B=$GZ_BYTES
		[ $v = zstd ] && B=$ZS_BYTES
		for pair in "kiln-ctr:" "kiln-grpc:" "ctr-fetch:kiln-ctr" "kiln-unpack:" "kiln-unpack1:kiln-unpack" "ctr-pull:kiln-unpack"; do
			run=${pair%%:*}
			base=${pair#*:}
			cmp=""
			[ -n "$base" ] && cmp=$(printf '%.2fx faster' "$(ratio "$base-$v-$d" "$run-$v-$d")")
			printf '%-8s %-26s %8.2f %8.0f %5.0f%% %s\n' "$v" "$run" "$(t "$run-$v-$d")" "$(mbs "$B" "$(t "$run-$v-$d")")" \
				"$(pct "$(mbs "$B" "$(t "$run-$v-$d")")" "$LIMIT")" "$cmp"
		done
	done
	printf 'what kiln warm does by default (takes the zstd variant) vs ctr on the gzip image:\n'
	printf '  fetch only:  kiln %.2fs vs ctr content fetch %.2fs: %.2fx\n' "$(t "kiln-ctr-zstd-$d")" "$(t "ctr-fetch-gzip-$d")" "$(ratio "kiln-ctr-zstd-$d" "ctr-fetch-gzip-$d")"
	printf '  with unpack: kiln %.2fs vs ctr images pull %.2fs: %.2fx\n' "$(t "kiln-unpack-zstd-$d")" "$(t "ctr-pull-gzip-$d")" "$(ratio "kiln-unpack-zstd-$d" "ctr-pull-gzip-$d")"
	printf 'fetch vs min(loopback, sha256) = %.0f MB/s: kiln %.0f%% (gzip), %.0f%% (zstd); ctr content fetch %.0f%% (gzip), %.0f%% (zstd)\n' \
		"$LIMIT" "$(pct "$(mbs "$GZ_BYTES" "$(t "kiln-ctr-gzip-$d")")" "$LIMIT")" "$(pct "$(mbs "$ZS_BYTES" "$(t "kiln-ctr-zstd-$d")")" "$LIMIT")" \
		"$(pct "$(mbs "$GZ_BYTES" "$(t "ctr-fetch-gzip-$d")")" "$LIMIT")" "$(pct "$(mbs "$ZS_BYTES" "$(t "ctr-fetch-zstd-$d")")" "$LIMIT")"
	# The unpack target: min(that compression's decode, disk write+fsync).
	for v in gzip zstd; do
		B=$GZ_BYTES dec=gunzip
		[ $v = zstd ] && B=$ZS_BYTES dec=unzstd
		LD=$LB
		[ $v = zstd ] && LD=$LZ
		UL=$(echo "a=$(mbs "$LD" "$(t $dec)"); b=$(mbs "$LB" "$(t disk)"); if (a<b) a else b" | bc -l)
		printf 'unpack (%s) vs min(decode, disk) = %.0f MB/s: kiln %.0f%% (%.0f MB/s), one layer at a time %.0f%%, ctr images pull %.0f%%\n' "$v" "$UL" \
			"$(pct "$(mbs "$B" "$(t "kiln-unpack-$v-$d")")" "$UL")" "$(mbs "$B" "$(t "kiln-unpack-$v-$d")")" \
			"$(pct "$(mbs "$B" "$(t "kiln-unpack1-$v-$d")")" "$UL")" "$(pct "$(mbs "$B" "$(t "ctr-pull-$v-$d")")" "$UL")"
		for run in kiln-unpack1 kiln-unpack; do
			grep -h 'kiln: unpack: ' "$WORK/out.$run-$v-$d" | sed "s/^kiln: unpack: /  $run $v: /; s/sha256:\([0-9a-f]\{12\}\)[0-9a-f]*/\1/"
		done
	done
	printf 'fetch vs the containerd-bound limit min(loopback, sha256, this containerd sha256, disk) = %.0f MB/s: kiln %.0f%% (gzip), %.0f%% (zstd)\n' \
		"$CLIMIT" "$(pct "$(mbs "$GZ_BYTES" "$(t "kiln-ctr-gzip-$d")")" "$CLIMIT")" "$(pct "$(mbs "$ZS_BYTES" "$(t "kiln-ctr-zstd-$d")")" "$CLIMIT")"
done
printf '\n== no daemon (oci:DIR) ==\n'
printf '%-8s %-26s %8s %8s %6s %s\n' variant "run" seconds "MB/s" "%limit" "kiln is"
for v in gzip zstd; do
	B=$GZ_BYTES
	[ $v = zstd ] && B=$ZS_BYTES
	for pair in "kiln-oci:" "crane:kiln-oci" "skopeo:kiln-oci"; do
		run=${pair%%:*}
		base=${pair#*:}
		cmp=""
		[ -n "$base" ] && cmp=$(printf '%.2fx faster' "$(ratio "$base-$v" "$run-$v")")
		printf '%-8s %-26s %8.2f %8.0f %5.0f%% %s\n' "$v" "$run" "$(t "$run-$v")" "$(mbs "$B" "$(t "$run-$v")")" "$(pct "$(mbs "$B" "$(t "$run-$v")")" "$LIMIT")" "$cmp"
	done
done
